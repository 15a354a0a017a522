"""Writes every artifact of a simulated run into one directory (the layout `stallscope simulate --out` produces).

    trace.pt.trace.json.gz   Kineto trace of the engine worker (rank 0)
    bench_serve.json         vllm bench serve --save-result --save-detailed
    vllm_server.log          vLLM V1 server log (policy chunked; with --iteration-log a 2026 one with per-step
                             Iteration lines) or V0 log (policy v0)
    sglang_scheduler.log     SGLang scheduler log (policy sglang)
    tgi_router.log           TGI router log (per-request Success records)
    truth.json               ground truth (see stallscope/simulate/truth.py and sample_traces/README.md)
    prometheus_query_range.json   with --metrics: vLLM's Prometheus metrics as a query_range matrix (emit_metrics)
    otel_spans.jsonl         with --otel: vLLM's llm_request spans as the Collector's file exporter writes them
Text artifacts can be gzip-compressed (`.gz` added), with a zero mtime and no file name in the header so that
the same run gives the same bytes.
"""
from __future__ import annotations

import gzip
from pathlib import Path

from . import emit_bench, emit_kineto, emit_logs, emit_metrics, emit_otel, truth
from .runner import Run

KINDS = ("trace", "bench", "vllm", "tgi", "sglang", "truth")
EXTRA_KINDS = ("metrics", "otel")  # written only when asked for (`simulate --metrics --otel`)


def _write(path: Path, data: bytes, compress: bool) -> Path:
    if compress:
        path = path.with_name(path.name + ".gz")
        with open(path, "wb") as f:
            with gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0, compresslevel=9) as gz:
                gz.write(data)
    else:
        path.write_bytes(data)
    return path


def write_all(run: Run, out: Path, *, only: tuple[str, ...] = KINDS, compress: tuple[str, ...] = (),
              analysis: truth.Analysis | None = None, extras: tuple[str, ...] = (),
              metrics_interval_s: float = 10.0) -> dict[str, Path]:
    """Write the selected artifacts (and the `extras` among EXTRA_KINDS); returns {kind: path}. `compress`
    names the kinds to gzip."""
    out.mkdir(parents=True, exist_ok=True)
    a = analysis or truth.Analysis(run)
    written: dict[str, Path] = {}
    policy = run.spec.policy
    if "trace" in only:
        p = out / "trace.pt.trace.json.gz"
        emit_kineto.write(run, p)
        written["trace"] = p
    if "bench" in only:
        written["bench"] = _write(out / "bench_serve.json", emit_bench.dumps(emit_bench.build(run, a)),
                                  "bench" in compress)
    if "vllm" in only and policy in ("chunked", "v0"):
        data = emit_logs.vllm_v1(run) if policy == "chunked" else emit_logs.vllm_v0(run)
        written["vllm"] = _write(out / "vllm_server.log", data, "vllm" in compress)
    if "sglang" in only and policy == "sglang":
        written["sglang"] = _write(out / "sglang_scheduler.log", emit_logs.sglang(run), "sglang" in compress)
    if "tgi" in only:
        written["tgi"] = _write(out / "tgi_router.log", emit_logs.tgi(run), "tgi" in compress)
    if "metrics" in extras:
        written["metrics"] = _write(out / "prometheus_query_range.json",
                                    emit_metrics.query_range(run, metrics_interval_s), "metrics" in compress)
    if "otel" in extras:
        written["otel"] = _write(out / "otel_spans.jsonl", emit_otel.jsonl(run), "otel" in compress)
    if "truth" in only:
        written["truth"] = _write(out / "truth.json", truth.dumps(truth.build(run, a)), "truth" in compress)
    return written
