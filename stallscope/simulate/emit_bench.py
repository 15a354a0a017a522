"""Writes the `vllm bench serve --save-result --save-detailed` result JSON of a simulated run.

Key names and order follow `vllm/benchmarks/serve.py` (2025-2026: `date`, `endpoint_type`, `backend`, `label`,
`model_id`, ..., the per-request arrays, then the `*_ms` statistics); the arrays hold one entry per request in send
order. `start_times` are client `time.perf_counter()` values (arbitrary origin), `ttfts`/`itls`/`latencies` are
seconds, `date` is the local (here UTC) end-of-run time, `duration` the perf_counter span of the run. The
aggregates are computed the way vLLM's `calculate_metrics` computes them, including `request_goodput` for the
ttft/tpot/e2el SLOs given (vLLM's `--goodput` cannot take an ITL SLO).
"""
from __future__ import annotations

import json
from datetime import datetime, timezone

import numpy as np

from .runner import Run
from .text import words_for


def _pct(a: np.ndarray, p: float) -> float:
    return float(np.percentile(a, p)) if len(a) else 0.0


def build(run: Run, analysis) -> dict:
    wl = run.workload
    n = run.n
    ttft = analysis.ttft_s
    lat = analysis.latency_s
    g = analysis.g
    itl_all = analysis.itl_s
    # itls per request: the gap rows are grouped by request in token order.
    bounds = np.searchsorted(g["req"], np.arange(n + 1))
    itl_lists = [itl_all[bounds[i]:bounds[i + 1]].tolist() for i in range(n)]
    out = wl.output_len
    tpots = np.where(out > 1, (lat - ttft) / np.maximum(out - 1, 1), 0.0)
    duration = run.bench_end_ns / 1e9
    start_times = run.perf_origin_s + run.send_ns / 1e9
    slo = run.spec.slo
    keys = [k for k in ("ttft", "tpot", "e2el") if k in slo]
    goodput = None
    if keys:
        vals = {"ttft": ttft, "tpot": tpots, "e2el": lat}
        ok = np.logical_and.reduce([slo[k] / 1000.0 >= vals[k] for k in keys])
        goodput = float(ok.sum()) / duration
    # Peak output tokens per 1-s bucket and concurrent requests then (vLLM's max_output_tokens_per_s).
    tok_t = (run.sim.end_ns[run.tok_step] + run.d_out_ns[run.tok_req] - run.send_ns.min()) / 1e9
    t_min = float((run.send_ns - run.send_ns.min()).min()) / 1e9
    span = int(np.ceil((run.client_finish_ns.max() - run.send_ns.min()) / 1e9)) + 1
    per_s = np.bincount(np.clip(tok_t - t_min, 0, None).astype(np.int64), minlength=span)[:span]
    s0 = ((run.send_ns - run.send_ns.min()) / 1e9).astype(np.int64)
    s1 = ((run.client_finish_ns - run.send_ns.min()) / 1e9).astype(np.int64)
    diff = np.zeros(span + 2, dtype=np.int64)
    np.add.at(diff, s0, 1)
    np.add.at(diff, s1 + 1, -1)
    conc = np.cumsum(diff)[:span]
    max_tps = float(per_s.max()) if len(per_s) else 0.0
    max_conc = int(conc.max()) if len(conc) else 0
    date = datetime.fromtimestamp((run.epoch_start_ns + run.bench_end_ns) / 1e9, tz=timezone.utc)
    model = run.preset.model
    tot_in, tot_out = int(wl.prompt_len.sum()), int(out.sum())
    res: dict = {
        "date": date.strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": "vllm", "backend": "vllm", "label": None,
        "model_id": model, "tokenizer_id": model, "num_prompts": n,
        "request_rate": run.spec.rate if not run.spec.replay else "inf",
        "burstiness": run.spec.burstiness, "max_concurrency": None,
        "duration": duration, "completed": n, "failed": 0,
        "total_input_tokens": tot_in, "total_output_tokens": tot_out,
        "request_throughput": n / duration, "request_goodput": goodput,
        "output_throughput": tot_out / duration, "total_token_throughput": (tot_in + tot_out) / duration,
        "input_lens": wl.prompt_len.tolist(), "output_lens": out.tolist(),
        "ttfts": ttft.tolist(), "itls": itl_lists, "latencies": lat.tolist(),
        "start_times": start_times.tolist(),
        "generated_texts": words_for(run.spec.seed, out, salt=3),
        "errors": [""] * n,
        "max_output_tokens_per_s": max_tps, "max_concurrent_requests": max_conc,
    }
    res.update(latency_summary({"ttft": ttft, "tpot": tpots[out > 1], "itl": itl_all}))
    return res


def latency_summary(seconds: dict) -> dict:
    """vLLM's `mean/median/std/p99_{ttft,tpot,itl}_ms` fields from per-metric arrays in seconds (0 when empty)."""
    doc = {}
    for name, a in seconds.items():
        doc[f"mean_{name}_ms"] = float(np.mean(a) if len(a) else 0.0) * 1000
        doc[f"median_{name}_ms"] = float(np.median(a) if len(a) else 0.0) * 1000
        doc[f"std_{name}_ms"] = float(np.std(a) if len(a) else 0.0) * 1000
        doc[f"p99_{name}_ms"] = _pct(a, 99) * 1000
    return doc


def dumps(doc: dict) -> bytes:
    """Python's json.dump layout (", " and ": " separators), as vLLM writes it."""
    return json.dumps(doc).encode()
