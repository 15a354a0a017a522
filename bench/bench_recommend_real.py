"""Proof on a real engine (issue 21 item 8): recommend the budget from one CPU capture's server log (its Iteration
lines) and benchmark file only (no trace), then capture the same workload and seed at every budget of a grid and
print the recommended budget's measured goodput over the best's as the last line (`recommended/best goodput: R`).

The engine is `stallscope capture` (a small real transformer on torch CPU, one thread, no profiler): ~3 ms a
decode-only step, ~0.17 ms per prefill token. Workload: long-ish prompts near the engine's prefill capacity
(prompts 384:0.5, outputs 48:0.4, 9 req/s, max 16 running) judged by TTFT <= 1 s and every gap <= 80 ms. Small
budgets lose TTFT (decodes take most of each step's budget and prompts queue: at 32 the engine saturates), large
ones lose the gap bound (each mixed step carries up to a budget of prompt: at 512 the steps reach ~90 ms). Goodput
= requests meeting the SLO / (first send to last finish). Runs take about 40 s each (30 s of arrivals plus
drain); the full grid (8 budgets plus the first capture) about 6-7 minutes on a quiet 2-core machine. Measured
2026-12-02 (quiet): recommended 256 from the 256 capture's Iteration lines; grid 32: 5.47, 64: 8.60, 128: 8.54,
256: 8.58, 512: 6.48, 1024: 3.05, 2048: 2.82, 4096: 5.37 req/s; R = 0.997.

    .venv/bin/python bench/bench_recommend_real.py              # full grid
    .venv/bin/python bench/bench_recommend_real.py --quick      # smoke: 6-s runs, 3 budgets
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

GRID = (32, 64, 128, 256, 512, 1024, 2048, 4096)
SLO = "ttft=1s,itl=80ms"


def measured_goodput(res, slo: dict) -> float:
    """Good requests per second of a capture, judged on its own token times (the client's view)."""
    reqs = res.engine.requests
    good = 0
    for r in reqs:
        if not r.finish_ns or not r.token_ns:
            continue
        t = np.asarray(r.token_ns, dtype=np.int64)
        ok = True
        if "ttft_ms" in slo:
            ok &= (t[0] - r.send_ns) / 1e6 <= slo["ttft_ms"]
        if "itl_ms" in slo and len(t) > 1:
            ok &= float(np.diff(t).max()) / 1e6 <= slo["itl_ms"]
        if "tpot_ms" in slo and len(t) > 1:
            ok &= (t[-1] - t[0]) / 1e6 / (len(t) - 1) <= slo["tpot_ms"]
        good += bool(ok)
    t0 = min(r.send_ns for r in reqs)
    t1 = max((r.finish_ns for r in reqs if r.finish_ns), default=t0 + 1)
    return good / ((t1 - t0) / 1e9)


def main() -> None:
    from stallscope.analyze import parse_slo
    from stallscope.capture.runner import CaptureSpec, capture
    import stallscope
    from stallscope.recommend import Options, recommend

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke setting: 6-s runs, three budgets")
    ap.add_argument("--budget", type=int, default=256, help="budget of the capture the recommendation reads")
    ap.add_argument("--slo", default=SLO)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    grid = (64, 256, 1024) if a.quick else GRID
    base = dict(duration_s=6.0 if a.quick else 30.0, rate=9.0, prompt_len="384:0.5", output_len="48:0.4",
                incident=None, max_num_seqs=16, seed=a.seed, trace=False, drain_s=30.0)
    out = a.out or Path(tempfile.mkdtemp(prefix="stallscope_real_"))
    slo = parse_slo(a.slo)
    sd = {k: v for k, v in slo.as_dict().items() if k in ("ttft_ms", "itl_ms", "tpot_ms")}
    t = time.perf_counter()
    res = capture(CaptureSpec(budget=a.budget, **base), out / f"observed_{a.budget}")
    s = stallscope.open(":memory:")
    s.ingest([res.files["vllm"], res.files["bench"]])
    # The tiny model's KV geometry (capture defaults: 2 layers, 2 KV heads, head dim 64, float32) for placement.
    rec = recommend(s.con, Options(slo=slo, replays=1, budgets=grid, model_config="2,2,64,4"))
    C = rec["chunk_tokens"]
    print(f"observed capture at {a.budget}: {len(res.engine.steps)} steps, {time.perf_counter() - t:.0f} s; "
          f"recommendation: {rec['setting']} (evidence {rec['evidence']}, {rec['evidence_steps']} steps)"
          + (f"; missing: {rec['missing_evidence']}" if rec["missing_evidence"] else ""))
    measured = {}
    for b in sorted(set(grid) | ({C} if C else set())):
        r = capture(CaptureSpec(budget=b, **base), out / f"grid_{b}")
        measured[b] = measured_goodput(r, sd)
        print(f"budget {b:>5}: measured goodput {measured[b]:.3f} req/s")
    if C is None:
        r = capture(CaptureSpec(policy="unchunked", budget=None, **base), out / "grid_unchunked")
        measured[None] = measured_goodput(r, sd)
        print(f"unchunked: measured goodput {measured[None]:.3f} req/s")
    best = max(measured.values())
    (out / "result.json").write_text(json.dumps({"recommended": C, "measured": {str(k): v for k, v in measured.items()},
                                                 "recommendation": rec}, default=str))
    print(f"recommended/best goodput: {measured[C] / best if best > 0 else float('nan'):.3f}")


if __name__ == "__main__":
    main()
