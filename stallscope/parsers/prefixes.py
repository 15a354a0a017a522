"""Wrapper prefixes as data: what log collectors put in front of an engine's own line, stripped before any engine pattern.

A server log rarely reaches stallscope as the engine wrote it. Ray prints every actor's line behind
`(Name pid=N, ip=A) ` (and vLLM does the same for its own child processes), docker compose behind `service  | `,
`kubectl logs --prefix` behind `[pod/NAME/CONTAINER] `, `journalctl` behind `Mon DD HH:MM:SS host unit[pid]: `,
`docker logs --timestamps` behind an RFC 3339 nanosecond stamp, CloudWatch and syslog exports behind the collector's
ISO time with its offset (and the escape byte printed as `#033`), terminals add ANSI colour, and Ray folds lines
repeated on several workers into one with a `[repeated Nx across cluster]` marker. This module is the one table of them; every log parser (vLLM, TGI, SGLang)
applies `WRAPS` at the start of each physical line before its own patterns, so a new wrapper is one entry here.

Each `Wrapper` is a `Pattern` (regex + sample lines with the fields they must give) plus how it is used:

- `kind="prefix"`: matched at the line start, any number of times and in any order (`(EngineCore_0 pid=1) (Ray…)`
  nests; a compose service in front of a Ray actor prefix is common). The wrapper text becomes the record's
  `process` (`names()`), without volatile parts (journald's time): lines of one wrapped stream keep one name.
- `kind="anywhere"`: ANSI escape codes, removed from the whole line first.
- `kind="suffix"`: Ray's dedup marker. **Counted, not expanded.** Ray masks the numbers of lines it compares
  (ray-project/ray#45485: "numbers are canonicalised"), so the N-1 folded lines may hold other numbers than the
  one printed; copying it N times would invent data. The marker (and Ray's advice text after it) is cut off the
  message, the record is kept once, and the parser reports how many lines Ray folded (`dedup_count`).

Timestamps inside wrappers (journald's `Apr 14 16:15:00`) are not used: the engine's own timestamp is finer and
carries the date the engine printed; a wrapper's clock is the collector's, not the engine's.
"""
from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from .patterns import Pattern, Sample

_V = "../shared/real/vllm/"
_T = "../shared/real/tgi/"
_F800 = _V + "v0_0.8.3_ray_tp4pp2_llama70b_full_server_log_800req_llmk8s.log"
_FDS = _V + "v0_0.8.3_ray_deepseekv25_tp8pp2_startup_and_2req_llmk8s.log"
_FANSI = _V + "v1_0.10.1.1_ray_tp4_gptoss120b_startup_ansi_dennislee22.log"
_FWRAP = _V + "v1_0.10.1.1_mp_tp2_qwen7b_startup_hardwrapped_dennislee22.log"
_XLS154 = _V + "excerpts/v1_0.9.x_intel_fork_compose_prefixed_runtime_worker_death_traceback_llmscaler154.log"
_X28910 = _V + "excerpts/v1_0.11.x_enginecore_dp0_startup_traceback_logged_then_raw_issue28910.log"
_TCOMPOSE = _T + "tgi_neuron_v2backend_compose_prefixed_issue3248.log"

MONTHS = "Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec"


@dataclass(frozen=True)
class Wrapper:
    """One wrapper format: its pattern (with samples), where it applies, and the `name` group naming the stream."""

    pattern: Pattern
    kind: str  # prefix | anywhere | suffix

    @property
    def name(self) -> str:
        return self.pattern.name

    @property
    def regex(self) -> str:
        return self.pattern.regex


ANSI = Wrapper(Pattern(
    "ansi", r"(?:\x1b|#033)\[[0-9;?]*[A-Za-z]",
    (Sample("\x1b[1;36m(APIServer pid=1009)\x1b[0;0m INFO 09-10 23:26:12 [api_server.py:1805] vLLM API server "
            "version 0.10.1.1", {}, _FANSI),
     Sample("\x1b[36m(RayWorkerWrapper pid=329, ip=10.244.1.18)\x1b[0m INFO 04-14 16:08:21 [utils.py:990] Found "
            "nccl from library libnccl.so.2", {}, _F800),
     # rsyslog (and CloudWatch agents reading its files) prints the escape byte as the text `#033`: built from the
     # first line of tgi_v3.0_text_connected_and_chat_completions_success_2024-12-10.log with the colours TGI's
     # tracing-subscriber prints (dim time, green level, dim target), escaped so.
     Sample("#033[2m2024-12-10T21:49:50.317182Z#033[0m #033[32m INFO#033[0m #033[2mtext_generation_router::server"
            "#033[0m#033[2m:#033[0m #033[2mrouter/src/server.rs#033[0m#033[2m:#033[0m#033[2m2402:#033[0m Connected",
            {})),
    doc="ANSI colour / cursor codes anywhere in a line (vLLM's and Ray's coloured prefixes, TGI's coloured levels, "
        "compose's coloured service names), also with the escape byte printed as `#033` (rsyslog's escaping of "
        "control characters, kept by CloudWatch and syslog exports); removed from the whole line before anything "
        "else."), "anywhere")
# What a line holding an ANSI code contains (a cheap test before the removal runs).
ANSI_MARK = r"\x1b|#033\["

RAY = Wrapper(Pattern(
    "ray_actor",
    r"\((?P<name>(?:[^()]*? )?pid=\d+(?:, ip=[0-9A-Fa-f.:]+)?)\) ?",
    (Sample("(RayWorkerWrapper pid=631, ip=10.244.1.107) INFO 04-20 16:47:23 [utils.py:990] Found nccl from library",
            {"name": "RayWorkerWrapper pid=631, ip=10.244.1.107"}, _FDS),
     Sample("(pid=632, ip=10.244.1.107) INFO 04-20 16:47:14 [__init__.py:239] Automatically detected platform cuda.",
            {"name": "pid=632, ip=10.244.1.107"}, _FDS),
     Sample("(EngineCore_DP0 pid=33630) ERROR 11-18 14:16:34 [core.py:708] Exception: WorkerProc initialization failed",
            {"name": "EngineCore_DP0 pid=33630"}, _X28910),
     Sample("(VllmWorker TP0 pid=3974) INFO 09-03 02:12:00 [shm_broadcast.py:289] vLLM message queue",
            {"name": "VllmWorker TP0 pid=3974"}, _FWRAP),
     # SGLang run as a Ray actor (RL frameworks: verl, OpenRLHF); the name is the actor class.
     Sample("(SGLangEngine pid=41820) [2025-09-01 10:00:00 DP1 TP0] Decode batch, #running-req: 3",
            {"name": "SGLangEngine pid=41820"})),
    doc="Ray's per-actor prefix `(Name pid=N[, ip=A]) ` (Ray's log monitor), also vLLM's own child-process prefix "
        "(`decorate_logs`): the same shape. Nested prefixes repeat it: "
        "`(EngineCore_0 pid=1159) (RayWorkerWrapper pid=1273) `."), "prefix")

COMPOSE = Wrapper(Pattern(
    "docker_compose",
    r"(?:\[(?P<bname>[^\]\s]+)\]|(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]*))[ \t]+\|(?: |$)",
    (Sample("eap-llm-server-on-arc  | ERROR 11-08 11:01:29 [multiproc_executor.py:135] Worker proc VllmWorker-3 died",
            {"name": "eap-llm-server-on-arc"}, _XLS154),
     Sample("tgi-3-1         |     generations, batch = self.generator.prefill(request.batch)", {"name": "tgi-3-1"},
            _TCOMPOSE),
     # The bracketed form some compose front ends print (from tgi-sglang-formats.md §1.2).
     Sample("[text-generation-inference] | 2024-12-10T21:50:03.478010Z  INFO text_generation_router::server: "
            "router/src/server.rs:1797: Connected", {"bname": "text-generation-inference"}),
     # A blank line of the service: compose prints the bar and nothing after it.
     Sample("vllm-1  |", {"name": "vllm-1"})),
    doc="docker compose (`docker compose up` / `logs`): the service name padded to a common width, then `| `."),
    "prefix")

KUBECTL = Wrapper(Pattern(
    "kubectl_prefix",
    r"\[(?P<name>pod/[^/\]\s]+/[^\]\s]+)\] ",
    # kubectl's prefix is `[pod/<pod>/<container>] ` (kubectl logs --prefix, `-l app=…` over several pods); built
    # from a real line of the 800-request log behind the pod name its Ray lines report.
    (Sample("[pod/vllm-llama-70b-0/vllm] INFO 04-14 16:15:00 [metrics.py:488] Avg prompt throughput: 9.0 tokens/s",
            {"name": "pod/vllm-llama-70b-0/vllm"}),
     Sample("[pod/sglang-0/server] [2025-05-14 09:31:43] INFO:     127.0.0.1:20504 - \"POST /v1/completions HTTP/1.1\" "
            "200 OK", {"name": "pod/sglang-0/server"})),
    doc="`kubectl logs --prefix` (also `kubectl logs -l … --prefix`, `stern`-like use): `[pod/NAME/CONTAINER] `."),
    "prefix")

JOURNALD = Wrapper(Pattern(
    "journald_short",
    r"(?:" + MONTHS + r") [ 0-3]?\d \d\d:\d\d:\d\d (?P<name>[^\s\[\]:]+ [^\s\[\]:]+(?:\[\d+\])?): ",
    (Sample("Apr 14 16:15:00 gpu-node-3 vllm[48211]: INFO 04-14 16:15:00 [metrics.py:488] Avg prompt throughput",
            {"name": "gpu-node-3 vllm[48211]"}),
     Sample("Sep  1 10:00:00 node7 docker/3b7f8c1a2d4e[1201]: [2025-09-01 10:00:00 TP0] Prefill batch, #new-seq: 1",
            {"name": "node7 docker/3b7f8c1a2d4e[1201]"}),
     Sample("Dec 10 21:50:03 tgi-host text-generation-launcher: 2024-12-10T21:50:03.478010Z  INFO "
            "text_generation_router::server: router/src/server.rs:1797: Connected",
            {"name": "tgi-host text-generation-launcher"})),
    doc="`journalctl` default `short` output (systemd units, docker's journald log driver): `Mon DD HH:MM:SS host "
        "identifier[pid]: ` (the day space-padded below 10, `[pid]` absent for some identifiers). The time is the "
        "journal's and is not used."), "prefix")

JOURNALD_ISO = Wrapper(Pattern(
    "journald_short_iso",
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?[+-]\d\d:?\d\d (?P<name>[^\s\[\]:]+ [^\s\[\]:]+(?:\[\d+\])?): ",
    (Sample("2025-04-14T16:15:00+0000 gpu-node-3 vllm[48211]: INFO 04-14 16:15:00 [metrics.py:488] Avg prompt",
            {"name": "gpu-node-3 vllm[48211]"}),
     Sample("2025-04-14T16:15:00+00:00 gpu-node-3 vllm[48211]: INFO 04-14 16:15:00 [metrics.py:488] Avg prompt",
            {"name": "gpu-node-3 vllm[48211]"})),
    doc="`journalctl -o short-iso` (zone offset, never `Z`: a TGI timestamp ends in `Z` and is no wrapper)."),
    "prefix")

DOCKER_TS = Wrapper(Pattern(
    "docker_timestamps",
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{7,9}Z(?: |$)",
    # Built from real lines behind the stamp `docker logs --timestamps` prints: RFC 3339 in UTC with nanoseconds
    # (docker's fixed 9 digits; `kubectl logs --timestamps` prints the same, trailing zeros trimmed), one space,
    # the line. An engine's own stamp never has 7-9 digits (TGI prints 6, then two spaces). The lines, in order:
    # vllm/excerpts/v1_2026_apiserver_loggers259_prefill_saturated_pr37307.log (line 1, cut short),
    # vllm/v0_0.8.3_ray_tp4pp2_llama70b_full_server_log_800req_llmk8s.log (line 862),
    # tgi/tgi_v3.0_text_connected_and_chat_completions_success_2024-12-10.log (line 1).
    (Sample("2026-03-17T15:38:10.271265228Z (APIServer pid=11574) INFO 03-17 15:38:10 [loggers.py:259] Engine 000: "
            "Avg prompt throughput: 23998.2 tokens/s", {}),
     Sample('2025-04-14T16:21:03.40313107Z INFO:     10.244.1.14:60090 - "POST /v1/completions HTTP/1.1" 200 OK', {}),
     Sample("2024-12-10T21:49:50.317311029Z 2024-12-10T21:49:50.317182Z  INFO text_generation_router::server: "
            "router/src/server.rs:2402: Connected", {}),
     # An empty line of the container: the stamp and its space (or nothing after it once a tool strips the end).
     Sample("2026-03-17T15:38:10.271265228Z ", {})),
    doc="`docker logs --timestamps` (also `kubectl logs --timestamps`): `2026-05-12T07:41:29.271265228Z ` before "
        "the line. The time is the runtime's, not the engine's, and is not used."), "prefix")

CLOUDWATCH = Wrapper(Pattern(
    "collector_iso_offset",
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?[+-]\d\d:?\d\d(?:\t| +)",
    # Built from real lines the way a CloudWatch export or a syslog file of the container shows them: the
    # collector's local time with its offset, blanks, the line (its escape bytes as `#033`). The lines: line 1 of
    # tgi/tgi_v3.0_text_connected_and_chat_completions_success_2024-12-10.log (coloured as TGI colours it), line 1
    # of vllm/excerpts/v1_2026_apiserver_loggers259_prefill_saturated_pr37307.log (cut short).
    (Sample("2024-12-10T22:49:50.318+01:00    #033[2m2024-12-10T21:49:50.317182Z#033[0m #033[32m INFO#033[0m "
            "#033[2mtext_generation_router::server#033[0m#033[2m:#033[0m router/src/server.rs:2402: Connected", {}),
     Sample("2026-03-17T16:38:10.271+01:00\t(APIServer pid=11574) INFO 03-17 15:38:10 [loggers.py:259] Engine 000: "
            "Avg prompt throughput: 23998.2 tokens/s", {}),
     Sample("2024-12-10T13:49:50-08:00 {\"timestamp\":\"2024-12-10T21:49:50.317182Z\",\"level\":\"INFO\"}", {})),
    doc="CloudWatch / syslog exports: the collector's ISO timestamp with a zone offset (never `Z`: a TGI stamp "
        "ends in `Z` and is the engine's own), then one tab or a run of spaces; records are often separated by "
        "blank lines, which every log parser skips. Behind spaces, a line's own leading blanks (a traceback's "
        "indent) cannot be told from the separator and go with it; behind a tab they are kept. A journald/rsyslog "
        "line (`host ident[pid]: ` after the time) is JOURNALD_ISO's."),
    "prefix")

RAY_DEDUP = Wrapper(Pattern(
    "ray_dedup",
    r" ?\[repeated (?P<n>\d+)x across cluster\](?P<advice> \(Ray deduplicates logs by default\..*)?\s*$",
    (Sample("(RayWorkerWrapper pid=631, ip=10.244.1.107) INFO 04-20 16:47:23 [utils.py:990] Found nccl from library "
            "libnccl.so.2 [repeated 14x across cluster]", {"n": "14", "advice": None}, _FDS),
     Sample("(pid=627, ip=10.244.1.107) INFO 04-20 16:47:14 [__init__.py:239] Automatically detected platform cuda. "
            "[repeated 8x across cluster] (Ray deduplicates logs by default. Set RAY_DEDUP_LOGS=0 to disable log "
            "deduplication, or see https://docs.ray.io/en/master/ray-observability/user-guides/configure-logging.html"
            "#log-deduplication for more options.)", {"n": "8"}, _FDS)),
    doc="Ray's dedup marker at the end of a line (the first time also Ray's advice text): the line stands for N "
        "lines of N workers; counted (`dedup_count`), not expanded (see the module docstring)."), "suffix")

# Order matters where two prefixes start alike: JOURNALD_ISO before CLOUDWATCH (alternatives are tried in order).
WRAPPERS: tuple[Wrapper, ...] = (ANSI, RAY, COMPOSE, KUBECTL, JOURNALD, JOURNALD_ISO, DOCKER_TS, CLOUDWATCH, RAY_DEDUP)
PREFIXES = tuple(w for w in WRAPPERS if w.kind == "prefix")
PATTERNS = [w.pattern for w in WRAPPERS]


def _bare(rx: str) -> str:
    """The regex without its named groups (so it can be repeated and embedded in another pattern)."""
    import re
    return re.sub(r"\(\?P<[A-Za-z_]\w*>", "(?:", rx)


# One prefix element, and the whole run of them at a line start (no anchor: embed after `^`).
ONE = "(?:" + "|".join(_bare(w.regex) for w in PREFIXES) + ")"
WRAPS = ONE + "*"
ANSI_RX = ANSI.regex
DEDUP_RX = RAY_DEDUP.regex


def strip_ansi(e: pl.Expr) -> pl.Expr:
    return e.str.replace_all(ANSI_RX, "")


def split(e: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """(the wrapper run at the start of `e`, the rest): ANSI codes must already be gone."""
    w = e.str.extract("^(" + WRAPS + ")", 1)
    return w, e.str.slice(w.str.len_chars())


def _element_name(el: pl.Expr) -> pl.Expr:
    """The stream name of one prefix element: its `name` (or `bname`) group; journald's time is not part of it."""
    fields = []
    for w in PREFIXES:
        g = el.str.extract_groups("^(?:" + w.regex + ")")
        fields += [g.struct.field(n) for n in ("name", "bname") if f"(?P<{n}>" in w.regex]
    return pl.coalesce(fields)


def names(wrap: pl.Series) -> pl.Series:
    """`process` for each row of a column of wrapper runs: the elements' names joined with ` / `, NULL where there
    is no wrapper. Computed once per distinct value (a log has a handful; journald's time is not part of a name)."""
    u = wrap.drop_nulls().unique()
    if u.len() == 0:
        return pl.repeat(None, wrap.len(), dtype=pl.String, eager=True).alias("process")
    el = pl.element()
    named = pl.DataFrame({"u": u}).select(
        pl.col("u").str.extract_all(ONE).list.eval(_element_name(el)).list.join(" / ").alias("n"))["n"]
    named = pl.select(pl.when(named.str.len_bytes() > 0).then(named)).to_series()
    return wrap.replace_strict(u, named, default=None, return_dtype=pl.String).alias("process")


def dedup_count(e: pl.Expr) -> pl.Expr:
    """N of a `[repeated Nx across cluster]` marker (NULL without one)."""
    return e.str.extract(DEDUP_RX, 1).cast(pl.Int64, strict=False)


def strip_dedup(e: pl.Expr) -> pl.Expr:
    return e.str.replace(DEDUP_RX, "")


_UNWRAP_PY = None


def unwrap_text(text: str) -> str:
    """A decoded head of a file (sniffing) without ANSI codes and without the wrapper prefixes of each line."""
    global _UNWRAP_PY
    import re
    if _UNWRAP_PY is None:
        _UNWRAP_PY = (re.compile(ANSI_RX), re.compile("(?m)^" + WRAPS))
    ansi, wraps = _UNWRAP_PY
    return wraps.sub("", ansi.sub("", text))
