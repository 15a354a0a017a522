"""Log inputs built to cross the parsers' edges, for bench/compare_ingest.py and the fast-path tests: cuts of the
bench files (mid-record starts, several frames) as they are and behind wrapper prefixes, a TGI mix with lines built
to look like the fast layouts without being them, and an SGLang mix whose batch and access lines come behind every
wrapper prefix (Ray actor with and without ip and with Ray's stripped trailing `,`, compose, kubectl, journald, ANSI,
Ray's dedup marker)."""
from __future__ import annotations

import os
import random
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAL = Path(os.environ.get("STALLSCOPE_REAL", ROOT.parent / "shared" / "real"))

# A wrapper prefix per engine as its deployments write it (Ray actor, docker compose).
CUT_PREFIXES = {
    "vllm": [b"(RayWorkerWrapper pid=1273) ", b"vllm-leader-1  | "],
    "tgi": [b"(TgiActor pid=41820) ", b"tgi-1  | "],
    "sglang": [b"(SGLangEngine pid=41820) ", b"sglang-1  | "],
}


def cuts(engine: str, big: Path, mb: float, work: Path) -> list[Path]:
    """`mb` MB cut from the middle of `big` at line edges (the first record may be a continuation, frames start
    mid-stream), as it is and behind each of the engine's CUT_PREFIXES."""
    with open(big, "rb") as f:
        f.seek(min(37_000_123, max(0, big.stat().st_size - int(mb * 1e6))))
        data = f.read(int(mb * 1e6))
    data = data[data.find(b"\n") + 1: data.rfind(b"\n") + 1]
    out = [work / f"{engine}_cut.log"]
    out[0].write_bytes(data)
    for i, prefix in enumerate(CUT_PREFIXES[engine]):
        p = work / f"{engine}_cut_prefixed{i}.log"
        p.write_bytes(b"".join(prefix + ln for ln in data.splitlines(keepends=True)))
        out.append(p)
    return out


# Lines built to look like the Success layout but not be it (or to hold timing-like text before it).
TRICKY = [
    # a stop string holding timing fields before the real ones
    '2024-02-14T06:49:52.000001Z  INFO generate{parameters=GenerateParameters { best_of: None, max_new_tokens: '
    'Some(14), stop: ["queue_time=\\"5ms\\"", "seed=\\"Some(7)\\""], seed: None } total_time="611.286748ms" '
    'validation_time="754.5µs" queue_time="127.337µs" inference_time="610.405028ms" time_per_token="43.600359ms" '
    'seed="None"}: text_generation_router::server: router/src/server.rs:299: Success',
    # a stop string holding `} total_time=` itself
    '2024-02-14T06:49:52.000011Z  INFO generate{parameters=GenerateParameters { best_of: None, max_new_tokens: '
    'Some(9), stop: ["} total_time=\\"1ms\\" x"], seed: None } total_time="611.286748ms" '
    'validation_time="754.5µs" queue_time="127.337µs" inference_time="610.405028ms" time_per_token="43.600359ms" '
    'seed="None"}: text_generation_router::server: router/src/server.rs:299: Success',
    # a stop string that reads as another handler span (P_REQSPAN's last match names the endpoint)
    '2024-02-14T06:49:52.000016Z  INFO generate{parameters=GenerateParameters { best_of: None, max_new_tokens: '
    'Some(9), stop: ["x:evil{total_time=1", "y:bad{parameters=2"], seed: None } total_time="611.286748ms" '
    'validation_time="754.5µs" queue_time="127.337µs" inference_time="610.405028ms" time_per_token="43.600359ms" '
    'seed="None"}: text_generation_router::server: router/src/server.rs:299: Success',
    # an outer span holding timing fields before the Success layout
    '2024-02-14T06:49:52.000007Z  INFO outer{queue_time="5ms" seed="Some(7)"}:generate{parameters=GenerateParameters '
    '{ best_of: None, max_new_tokens: Some(14), seed: None } total_time="611.286748ms" validation_time="754.5µs" '
    'queue_time="127.337µs" inference_time="610.405028ms" time_per_token="43.600359ms" seed="None"}: '
    'text_generation_router::server: router/src/server.rs:299: Success',
    # no word boundary before total_time
    '2024-02-14T06:49:52.000002Z  INFO chat_completions{xtotal_time="735.200735ms" validation_time="955.594µs" '
    'queue_time="73.176µs" inference_time="734.172108ms" time_per_token="36.708605ms" seed="None"}: '
    'text_generation_router::server: router/src/server.rs:622: Success',
    # every unit, a whole-second value, a seed beyond u64
    '2024-02-14T06:49:52.000003Z  INFO chat_completions{total_time="4s" validation_time="12ns" queue_time="9us" '
    'inference_time="3.9μs" time_per_token="1.5s" seed="Some(99999999999999999999999)"}: '
    'text_generation_router::server: router/src/server.rs:622: Success',
    # a field after seed
    '2024-02-14T06:49:52.000004Z  INFO chat_completions{total_time="735.2ms" validation_time="955.594µs" '
    'queue_time="73.176µs" inference_time="734.172108ms" time_per_token="36.708605ms" seed="None" x="1"}: '
    'text_generation_router::server: router/src/server.rs:622: Success',
    # a non-ASCII digit in a value
    '2024-02-14T06:49:52.000005Z  INFO chat_completions{total_time="٣ms" validation_time="955.594µs" '
    'queue_time="73.176µs" inference_time="734.172108ms" time_per_token="36.708605ms" seed="None"}: '
    'text_generation_router::server: router/src/server.rs:622: Success',
    # fields out of order, a missing field, an empty value, a unit TGI never prints
    '2024-02-14T06:49:52.000008Z  INFO chat_completions{validation_time="955.594µs" total_time="735.2ms" '
    'queue_time="73.176µs" inference_time="734.172108ms" time_per_token="36.708605ms" seed="None"}: '
    'text_generation_router::server: router/src/server.rs:622: Success',
    '2024-02-14T06:49:52.000009Z  INFO chat_completions{total_time="735.2ms" validation_time="" '
    'queue_time="73.176µs" inference_time="734.172108ms" seed="None"}: '
    'text_generation_router::server: router/src/server.rs:622: Success',
    '2024-02-14T06:49:52.000010Z  INFO chat_completions{total_time="735.2min" validation_time="1.5.5ms" '
    'queue_time="-73µs" inference_time="734.172108ms" time_per_token="36.708605ms" seed="Some(-1)"}: '
    'text_generation_router::server: router/src/server.rs:622: Success',
    # Success with a message after it, a Success of another target, a Success at another level, a radix look-alike
    '2024-02-14T06:49:52.000012Z  INFO chat_completions{total_time="735.2ms" validation_time="955.594µs" '
    'queue_time="73.176µs" inference_time="734.172108ms" time_per_token="36.708605ms" seed="None"}: '
    'text_generation_router::server: router/src/server.rs:622: Success!',
    '2024-02-14T06:49:52.000013Z  WARN chat_completions{total_time="735.2ms" validation_time="955.594µs" '
    'queue_time="73.176µs" inference_time="734.172108ms" time_per_token="36.708605ms" seed="None"}: '
    'text_generation_router_v3::server: Success',
    '2024-02-14T06:49:52.000014Z ERROR text_generation_router::server: router/src/server.rs:622: Success',
    '2025-05-26T10:46:35.221389Z  INFO text_generation_router_v3::radix: backends/v3/src/radix.rs:108: Prefix 580 '
    '- Suffix 1023 more',
    '2025-05-26T10:46:35.221390Z  INFO text_generation_router_v3::radix: Prefix 99999999999999999999 - Suffix 1',
    '2025-13-26T10:46:35.221390Z  INFO text_generation_router_v3::radix: backends/v3/src/radix.rs:108: Prefix 5 - '
    'Suffix 1',
    # a time in non-ASCII digits (TS_RX's \d matches them; the time does not parse)
    '٢٠٢٤-02-14T06:49:52.000015Z  INFO chat_completions{total_time="735.2ms" validation_time="955.594µs" '
    'queue_time="73.176µs" inference_time="734.172108ms" time_per_token="36.708605ms" seed="None"}: '
    'text_generation_router::server: router/src/server.rs:622: Success',
    '٢٠٢٥-05-26T10:46:35.221391Z  INFO text_generation_router_v3::radix: backends/v3/src/radix.rs:108: Prefix 7 - '
    'Suffix 8',
    # a continuation line right after a Success and after a radix line (each starts a record of its own)
    '    at a continuation line after a one-line record',
    '{"timestamp":"2024-02-14T06:49:52.000006Z","level":"INFO","message":"Success","target":'
    '"text_generation_router::server","span":{"total_time":"4.065504959s","validation_time":"1ms","queue_time":"2ms",'
    '"inference_time":"4s","time_per_token":"40ms","seed":"None","name":"generate"},"spans":[{"name":"generate"}]}',
]
TGI_PREFIXES = [b"tgi-1  | ", b"(Router pid=7) ", b"[pod/tgi-0/router] ", b"Dec  1 12:00:00 node7 tgi[1201]: ",
            b"(A pid=1) (RayWorkerWrapper pid=2, ip=10.0.0.1) ", b"[text-generation-inference] | "]


def tgi_bench_style(path: Path, mb: float) -> Path:
    """The real text logs and their Success/radix lines many times (as bench_logs builds its TGI file), each line
    also behind ANSI colour, each wrapper prefix, a dedup marker and CRLF, plus the TRICKY lines."""
    mix = b"".join(p.read_bytes().rstrip(b"\n") + b"\n" for p in sorted((REAL / "tgi").glob("*_text_*.log")))
    all_lines = mix.split(b"\n")[:-1]
    body = [ln for ln in all_lines if re.search(rb": Success$|: Prefix \d+ - Suffix \d+$", ln)]
    tricky = [t.encode() for t in TRICKY]
    variants = []
    for i, ln in enumerate(body + tricky):
        variants.append(ln)
        variants.append(b"\x1b[32m" + ln[:28] + b"\x1b[0m" + ln[28:])  # ANSI colour inside the head
        variants.append(TGI_PREFIXES[i % len(TGI_PREFIXES)] + ln)
        variants.append(ln + b" [repeated 3x across cluster]")
        variants.append(ln + b"\r")
    wrapped = [TGI_PREFIXES[i % len(TGI_PREFIXES)] + ln for i, ln in enumerate(all_lines)]  # the whole mix behind prefixes
    block = mix + b"\n".join(variants * 10) + b"\n" + b"\n".join(wrapped) + b"\n" + b"\n".join(tricky) + b"\n"
    with open(path, "wb") as f:
        for _ in range(max(1, int(mb * 1e6 / len(block)))):
            f.write(block)
    return path


_SGLANG_BODY = re.compile(rb"\] (?:Prefill|Decode) batch[.,]|\] INFO: +\S+ - \"")
SGLANG_WRAPS = [
    lambda ln, i: b"(SGLangEngine pid=41820) " + ln,
    lambda ln, i: b"(SGLangEngine pid=41820, ip=10.0.0.7) " + (ln[:-1] if ln.endswith(b", ") else ln),
    lambda ln, i: b"sglang-1  | " + ln,
    lambda ln, i: b"[pod/sglang-0/server] " + ln,
    lambda ln, i: b"Sep  1 10:00:00 node7 sglang[1201]: " + ln,
    lambda ln, i: b"\x1b[36m(SGLangEngine pid=7)\x1b[0m " + ln,
    lambda ln, i: ln + b" [repeated 3x across cluster]",
    lambda ln, i: b"(EngineCore pid=1) (SGLangEngine pid=2) " + ln,
]


def sglang_bench_style(out: Path, target: int = 3_000_000, seed: int = 14) -> Path:
    """The bench's SGLang mix (real dated logs once, then their batch and access lines many times), in runs of 200
    lines where every line of a run has one wrapper variant (or none), to about `target` bytes."""
    dated = re.compile(rb"(?m)^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
    files = sorted(p for p in (REAL / "sglang").glob("*.log") if dated.search(p.read_bytes()))
    mix = b"".join(b if b.endswith(b"\n") else b + b"\n" for b in (p.read_bytes() for p in files))
    body = [ln for ln in mix.split(b"\n") if _SGLANG_BODY.search(ln)]
    rng = random.Random(seed)
    parts, size, k = [mix], len(mix), 0
    while size < target:
        run = [body[(k + j) % len(body)] for j in range(200)]
        k += 200
        w = rng.randrange(len(SGLANG_WRAPS) + 2)
        if w < len(SGLANG_WRAPS):
            run = [SGLANG_WRAPS[w](ln, j) for j, ln in enumerate(run)]
        chunk = b"\n".join(run) + b"\n"
        parts.append(chunk)
        size += len(chunk)
    out.write_bytes(b"".join(parts))
    return out


