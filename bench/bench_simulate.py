"""Simulator speed: one simulated hour at 20 requests/s (72,000 requests) must run in <= 60 s on 2 cores.

Times the engine (every step scheduled and timed) plus the vectorised reconstruction of every token's emission
step, and prints wall time, steps/s, tokens and peak RSS. Emission of artifacts is not part of the timing; pass
--with-truth to also time the ground-truth analysis (gaps, spikes, goodput) of the same run.

    .venv/bin/python bench/bench_simulate.py [--profile llama70b-h100-tp4] [--rate 20] [--duration 3600]
"""
from __future__ import annotations

import argparse
import resource
import sys
import time

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="llama70b-h100-tp4")
    ap.add_argument("--policy", default="chunked")
    ap.add_argument("--budget", type=int, default=2048)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--duration", type=float, default=3600.0)
    ap.add_argument("--prompt-len", default="256:0.6")
    ap.add_argument("--output-len", default="128:0.5")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--limit", type=float, default=60.0, help="Fail (exit 1) above this many seconds.")
    ap.add_argument("--with-truth", action="store_true")
    a = ap.parse_args(argv)

    from stallscope.simulate.engine import EngineConfig, simulate
    from stallscope.simulate.stepmodel import get_preset
    from stallscope.simulate.workload import LengthDist, synthesize

    preset = get_preset(a.profile)
    t0 = time.perf_counter()
    wl = synthesize(np.random.default_rng([a.seed, 1]), rate=a.rate, duration_s=a.duration,
                    prompt=LengthDist.parse(a.prompt_len, lo=2), output=LengthDist.parse(a.output_len))
    t1 = time.perf_counter()
    res = simulate(wl, preset, EngineConfig(a.policy, a.budget), seed=a.seed)
    t2 = time.perf_counter()
    req, idx, step = res.token_steps()
    token_ns = res.end_ns[step]  # every token's emission time, on the engine clock
    t3 = time.perf_counter()
    total = t3 - t0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    kinds = np.bincount(res.kind, minlength=3)
    print(f"profile {a.profile}, policy {a.policy}, budget {a.budget}, {a.rate:g} req/s for {a.duration:g} s")
    print(f"requests           {len(wl):,}  (prompt {a.prompt_len}, output {a.output_len})")
    print(f"simulated span     {res.end_ns[-1] / 1e9:,.1f} s")
    print(f"steps              {res.n_steps:,}  (decode {kinds[0]:,}, prefill {kinds[1]:,}, mixed {kinds[2]:,})")
    print(f"tokens             {len(token_ns):,}")
    print(f"workload           {t1 - t0:6.2f} s")
    print(f"engine             {t2 - t1:6.2f} s  ({res.n_steps / (t2 - t1):,.0f} steps/s)")
    print(f"token times        {t3 - t2:6.2f} s")
    print(f"wall total         {total:6.2f} s  (limit {a.limit:g} s)")
    if a.with_truth:
        from stallscope.simulate.runner import RunSpec, execute
        from stallscope.simulate.truth import Analysis

        t4 = time.perf_counter()
        run = execute(RunSpec(profile=a.profile, policy=a.policy, budget=a.budget, rate=a.rate,
                              duration_s=a.duration, prompt_len=a.prompt_len, output_len=a.output_len, seed=a.seed))
        an = Analysis(run)
        s = an.summary()
        print(f"run + truth        {time.perf_counter() - t4:6.2f} s  ({s['gaps']:,} gaps, {s['spikes']:,} spikes)")
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS           {rss_mb:,.0f} MB")
    if total > a.limit:
        print(f"FAIL: {total:.1f} s > {a.limit:g} s", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
