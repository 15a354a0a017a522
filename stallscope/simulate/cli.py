"""The `stallscope simulate` command: run the engine simulator and write every artifact plus truth.json."""
from __future__ import annotations

import time
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from .. import cliopts

from stallscope.errors import StallscopeError


class Policy(str, Enum):
    chunked = "chunked"
    v0 = "v0"
    sglang = "sglang"


class Backend(str, Enum):
    fa3 = "fa3"
    flashinfer = "flashinfer"
    v0_flash = "v0-flash"


class Annotation(str, Enum):
    basic = "basic"
    detailed = "detailed"


def simulate_cmd(
    out: Path = typer.Option(..., "--out", "-o", help="Directory to write the artifacts into."),
    profile: str = typer.Option("llama70b-h100-tp4", help="Hardware/model preset of the step-time model."),
    policy: Policy = typer.Option(Policy.chunked, help="chunked (vLLM V1 / Sarathi), v0 (prefill-first, unchunked), "
                                                       "sglang (prefill forwards without decodes)."),
    budget: Optional[int] = typer.Option(None, callback=cliopts.positive,
                                         help="Token budget: max_num_batched_tokens (chunked, v0) or "
                                              "chunked_prefill_size (sglang). Default 2048 / 32768 / 8192."),
    rate: float = typer.Option(4.0, callback=cliopts.positive, help="Request rate (req/s)."),
    duration: float = typer.Option(120.0, callback=cliopts.positive,
                                   help="Seconds during which requests arrive (the run lasts until all "
                                        "finish)."),
    burstiness: float = typer.Option(1.0, callback=cliopts.positive,
                                     help="Gamma shape of inter-arrival gaps (1 = Poisson), as vllm bench "
                                          "serve."),
    prompt_len: str = typer.Option("512:0.6", help="Prompt tokens: MEAN (fixed) or MEAN:SIGMA (lognormal)."),
    output_len: str = typer.Option("256:0.4", help="Output tokens: MEAN or MEAN:SIGMA."),
    incident: Optional[str] = typer.Option(None, help="long-prompts[:count=4,tokens=8192,at=S,spacing=S], "
                                                      "burst[:count=64,at=S] or none."),
    seed: int = typer.Option(0, help="Seed of every random choice (same seed, same bytes)."),
    max_num_seqs: int = typer.Option(256, callback=cliopts.positive, help="Maximum running requests."),
    kv_cache_tokens: Optional[int] = typer.Option(None, callback=cliopts.positive,
                                                  help="KV-cache capacity in tokens (default: the preset's)."),
    mixed_chunk: bool = typer.Option(False, "--mixed-chunk", help="sglang: decodes ride along in prefill forwards."),
    slo: Optional[str] = typer.Option(None, help="SLOs judged in truth.json, e.g. ttft=500ms,tpot=50ms,itl=200ms."),
    attention_backend: Optional[Backend] = typer.Option(None, help="Kernel names in the trace (default per policy)."),
    trace_layers: int = typer.Option(2, callback=cliopts.positive,
                                     help="Layer groups emitted per step in the trace (each stands for n/L "
                                          "layers)."),
    trace_annotation: Annotation = typer.Option(Annotation.basic, help="Per-step annotation: basic "
                                                "execute_context_..(tokens) or detailed (sq/sk sums)."),
    replay: Optional[Path] = typer.Option(None, help="Replay arrivals and lengths from a stallscope store."),
    start: str = typer.Option("2025-04-01T16:00:00Z", help="Wall-clock time of the benchmark start (UTC)."),
    spike_k: float = typer.Option(3.0, callback=cliopts.spike_k,
                                  help="Relative spike rule of truth.json: gap > k x predicted decode step."),
    shared_prefix: Optional[str] = typer.Option(None, help="FRACTION:TOKENS: that share of the requests starts with "
                                                             "one common prefix of TOKENS tokens, e.g. 0.7:1536."),
    prefix_caching: Optional[bool] = typer.Option(None, "--prefix-caching/--no-prefix-caching",
                                                  help="Serve the shared prefix from the KV cache (vLLM: 16-token "
                                                       "blocks; sglang: radix, per token). Default: on with "
                                                       "--shared-prefix."),
    iteration_log: bool = typer.Option(False, "--iteration-log", help="chunked: write the vLLM log as a 2026 server "
                                       "(v0.12, --enable-logging-iteration-details) does: one Iteration(i) line per "
                                       "engine step with its true composition and elapsed time, Received lines "
                                       "without the prompt."),
    gzip_kinds: Optional[str] = typer.Option(None, "--gzip", help="Artifacts to gzip: a comma list of bench, vllm, "
                                                                  "tgi, sglang, truth, or all."),
    metrics: bool = typer.Option(False, "--metrics", help="Also write what Prometheus would hold for the vLLM server "
                                 "(default buckets, a scrape every --metrics-interval s) as a query_range matrix."),
    metrics_interval: float = typer.Option(10.0, help="Seconds between two scrapes of --metrics."),
    otel: bool = typer.Option(False, "--otel", help="Also write vLLM's llm_request OpenTelemetry spans (OTLP/JSON, "
                                                    "one Collector file-exporter line per second of finishes)."),
):
    """Simulate an LLM engine run and write its trace, benchmark JSON, server logs and ground truth."""
    from rich.console import Console
    from rich.table import Table

    from . import artifacts, truth
    from .runner import RunSpec, execute, parse_slo

    con = Console()
    spec = RunSpec(profile=profile, policy=policy.value, budget=budget, rate=rate, duration_s=duration,
                   burstiness=burstiness, prompt_len=prompt_len, output_len=output_len, incident=incident, seed=seed,
                   max_num_seqs=max_num_seqs, kv_cache_tokens=kv_cache_tokens, mixed_chunk=mixed_chunk,
                   slo=parse_slo(slo), start=start, attention_backend=attention_backend.value if attention_backend
                   else None, trace_layers=trace_layers, trace_annotation=trace_annotation.value,
                   replay=str(replay) if replay else None, spike_k=spike_k, shared_prefix=shared_prefix,
                   prefix_caching=prefix_caching, iteration_log=iteration_log)
    if iteration_log and spec.policy != "chunked":
        raise StallscopeError("--iteration-log needs --policy chunked (the vLLM V1 engine writes the Iteration lines)")
    t0 = time.perf_counter()
    run = execute(spec)
    t_sim = time.perf_counter() - t0
    a = truth.Analysis(run)
    compress = _kinds(gzip_kinds)
    if out.exists() and not out.is_dir():
        raise StallscopeError(f"--out {out} exists and is not a directory")
    if metrics_interval <= 0:
        raise StallscopeError("--metrics-interval must be positive")
    extras = tuple(k for k, on in (("metrics", metrics), ("otel", otel)) if on)
    written = artifacts.write_all(run, out, compress=compress, analysis=a, extras=extras,
                                  metrics_interval_s=metrics_interval)
    s = a.summary()
    tbl = Table(title=f"simulate: {spec.profile}, {spec.policy} budget {spec.resolved_budget()}, seed {seed}")
    tbl.add_column("quantity")
    tbl.add_column("value", justify="right")
    kinds = ", ".join(f"{k} {v:,}" for k, v in s["steps_by_kind"].items())
    rows = [("requests", f"{s['requests']:,}"), ("steps", f"{s['steps']:,} ({kinds})"),
            ("simulated", f"{s['duration_s']:.1f} s in {t_sim:.2f} s"),
            ("median decode gap", f"{s['median_decode_gap_ms']:.1f} ms"), ("max gap", f"{s['max_gap_ms']:.1f} ms"),
            ("spikes (truth)", f"{s['spikes']:,} ({s['spikes_ambiguous']:,} within 10% of a threshold)"),
            ("preemptions", f"{s['preemptions']:,}")]
    if "cached_tokens" in s:
        rows.append(("prefix-cache hits", f"{s['cached_tokens']:,} prompt tokens "
                                          f"({s['prefix_cache_hit_rate'] * 100:.1f} % of {s['prompt_tokens']:,})"))
    if spec.slo:
        rows += [("good requests", f"{s['good']:,} of {s['requests']:,}"), ("goodput", f"{s['goodput_rps']:.3f} req/s"),
                 ("goodput lost to prefill", f"{s['goodput_lost_rps']:.3f} req/s ({s['requests_lost']} requests)")]
    for r in rows:
        tbl.add_row(*r)
    con.print(tbl)
    for kind, path in written.items():
        con.print(f"{kind:>6}  {path}  ({path.stat().st_size / 1e6:.2f} MB)", highlight=False)


def _kinds(text: str | None) -> tuple[str, ...]:
    text_kinds = ("bench", "vllm", "tgi", "sglang", "truth", "metrics", "otel")
    if not text:
        return ()
    if text.strip() == "all":
        return text_kinds
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    bad = [k for k in kinds if k not in text_kinds]
    if bad:
        raise StallscopeError(f"--gzip: unknown artifact {bad[0]!r}; use {', '.join(text_kinds)} or all "
                              "(the trace is always gzipped)")
    return kinds
