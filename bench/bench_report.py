"""Report speed: `stallscope report` on a 1-hour, ~70k-request store must finish in under 60 s on 2 cores.

Builds (once) a simulated hour with `stallscope simulate` and ingests its benchmark file and server log (and, with
--with-trace, its GPU trace) into a store; then times, side by side in one run, as child processes:
  - `stallscope analyze --db` (what the report must add little to),
  - `stallscope report --db` (analysis + figures + pages),
  - the figure a user would otherwise draw: every streamed-chunk gap fetched as numpy and scattered with matplotlib.
Prints wall time, CPU time (user + system of the child) and peak RSS of each, and the ratios.

    .venv/bin/python bench/bench_report.py [--rate 20] [--duration 3600] [--work bench/out/report] [--limit 60]
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from childtime import timed_child

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

NAIVE = r"""
import sys, duckdb, matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
con = duckdb.connect(sys.argv[1], read_only=True)
d = con.sql("SELECT g.gap_ns, g.end_ns FROM token_gaps g JOIN requests r "
            "USING (source_id, request_id) WHERE r.kind = 'client' AND g.end_ns IS NOT NULL").fetchnumpy()
fig, ax = plt.subplots(figsize=(10, 4.8), dpi=100)
ax.scatter((d["end_ns"] - d["end_ns"].min()) / 1e9, d["gap_ns"] / 1e6, s=2, alpha=0.25)
ax.set_yscale("log")
fig.savefig(sys.argv[2])
print(len(d["gap_ns"]))
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--duration", type=float, default=3600.0)
    ap.add_argument("--prompt-len", default="256:0.6")
    ap.add_argument("--output-len", default="128:0.5")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--work", type=Path, default=ROOT / "bench" / "out" / "report")
    ap.add_argument("--slo", default="ttft=2s,tpot=50ms,itl=200ms")
    ap.add_argument("--with-trace", action="store_true", help="Also ingest the run's GPU trace.")
    ap.add_argument("--run", type=Path, help="Use this `stallscope simulate` output instead of simulating.")
    ap.add_argument("--limit", type=float, default=60.0, help="Fail (exit 1) when the report takes longer (wall s).")
    a = ap.parse_args(argv)
    ss = str(BIN / "stallscope")
    run = a.run or a.work / f"run-{a.rate:g}rps-{a.duration:g}s-seed{a.seed}"
    a.work.mkdir(parents=True, exist_ok=True)
    db = a.work / f"{run.name}{'-trace' if a.with_trace else ''}.duckdb"
    if not (run / "bench_serve.json.gz").exists() and not (run / "bench_serve.json").exists():
        run.mkdir(parents=True, exist_ok=True)
        print(f"simulating {a.rate:g} req/s for {a.duration:g} s into {run} ...", flush=True)
        timed_child([ss, "simulate", "--out", str(run), "--rate", str(a.rate), "--duration", str(a.duration),
               "--prompt-len", a.prompt_len, "--output-len", a.output_len, "--incident", "long-prompts",
               "--trace-layers", "1", "--seed", str(a.seed)], "simulate")
    if not db.exists():
        inputs = [p for p in sorted(run.iterdir())
                  if p.name.startswith(("bench_serve", "vllm_server")) or (a.with_trace and "trace" in p.name)]
        ing = timed_child([ss, "ingest", *map(str, inputs), "--db", str(db)], "ingest")
        print(f"ingest (not timed below): {ing['wall_s']:.1f} s wall, {ing['cpu_s']:.1f} s CPU", flush=True)
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    n_req = con.execute("SELECT count(*) FROM requests WHERE kind = 'client'").fetchone()[0]
    n_gaps = con.execute("SELECT count(*) FROM token_gaps").fetchone()[0]
    n_steps = con.execute("SELECT count(*) FROM steps").fetchone()[0]
    con.close()
    print(f"store: {n_req:,} client requests, {n_gaps:,} token gaps, {n_steps:,} traced steps")
    rows = [
        timed_child([ss, "analyze", "--db", str(db), "--slo", a.slo, "--json", str(a.work / "analysis.json")], "analyze"),
        timed_child([ss, "report", "--db", str(db), "--slo", a.slo, "--out", str(a.work / "report")], "report"),
        timed_child([sys.executable, "-c", NAIVE, str(db), str(a.work / "naive.png")], "numpy + scatter of every gap"),
    ]
    base = rows[0]
    print(f"\n{'':34}{'wall s':>9}{'CPU s':>9}{'peak RSS MB':>13}{'wall / analyze':>16}")
    for r in rows:
        print(f"{r['label']:34}{r['wall_s']:9.1f}{r['cpu_s']:9.1f}{r['rss_mb']:13,.0f}{r['wall_s'] / base['wall_s']:16.2f}")
    rep = rows[1]
    print(f"\nreport writes {', '.join(sorted(p.name for p in (a.work / 'report').iterdir()))}")
    print(f"report on {n_req:,} requests: {rep['wall_s']:.1f} s wall (limit {a.limit:g} s); "
          f"machine load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (shared: compare CPU s)")
    if rep["wall_s"] > a.limit:
        print(f"FAIL: {rep['wall_s']:.1f} s > {a.limit:g} s", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
