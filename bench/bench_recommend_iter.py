"""Recommendation speed from vLLM's Iteration lines alone (issue 21 item 9), as a ratio to one `analyze` of the
same store: target under 3 minutes on 2 cores for a 1-hour, ~70k-request incident.

The incident is what `stallscope simulate --iteration-log --rate 20 --duration 3600` writes (a 2026-style vLLM log with one
Iteration line per step, Received lines without the prompt, and its benchmark file), made once under --work
(default /tmp/stallscope_iter_bench; never committed) and ingested into a store there. `analyze` and `recommend`
then each run as a child process on that store; wall and child CPU seconds are printed, and the ratio last.
The machine may be shared: read CPU seconds next to wall time.

    .venv/bin/python bench/bench_recommend_iter.py [--duration 3600] [--rate 20] [--replays 1]
"""
from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from pathlib import Path

SLO = "ttft=5s,itl=200ms"


def _child(args: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run(args, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        sys.exit(f"{' '.join(args[:3])} failed: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=3600)
    ap.add_argument("--rate", type=float, default=20)
    ap.add_argument("--replays", type=int, default=1)
    ap.add_argument("--slo", default=SLO)
    ap.add_argument("--work", type=Path, default=Path("/tmp/stallscope_iter_bench"))
    a = ap.parse_args()
    exe = str(Path(sys.executable).with_name("stallscope"))
    d = a.work / f"r{a.rate:g}_d{a.duration:g}"
    log, bench, db = d / "vllm_server.log", d / "bench_serve.json", d / "store.duckdb"
    if not log.exists():
        # In-process rather than `stallscope simulate`: an hour of Kineto trace would be gigabytes, and only the
        # log (with its Iteration lines) and the benchmark file are under test.
        from stallscope.simulate import artifacts
        from stallscope.simulate.runner import RunSpec, execute

        t = time.perf_counter()
        run = execute(RunSpec(rate=a.rate, duration_s=a.duration, iteration_log=True, seed=0))
        artifacts.write_all(run, d, only=("vllm", "bench"))
        print(f"simulate: {len(run.workload):,} requests, {len(run.sim.end_ns):,} steps, "
              f"{time.perf_counter() - t:.1f} s wall")
    if not db.exists():
        w, c = _child([exe, "ingest", str(log), str(bench), "--db", str(db)])
        print(f"ingest: {w:.1f} s wall, {c:.1f} s CPU")
    wa, ca = _child([exe, "analyze", "--db", str(db), "--slo", a.slo])
    print(f"analyze: {wa:.1f} s wall, {ca:.1f} s CPU")
    wr, cr = _child([exe, "recommend", "--db", str(db), "--slo", a.slo, "--replays", str(a.replays),
                     "--json", str(d / "rec.json")])
    print(f"recommend (iteration lines): {wr:.1f} s wall, {cr:.1f} s CPU")
    print(f"recommend/analyze: {wr / wa:.2f} (wall), {cr / max(ca, 1e-9):.2f} (CPU); target: recommend < 180 s")


if __name__ == "__main__":
    main()
