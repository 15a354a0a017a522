"""Analysis cost as the incident grows: `analyze`, `recommend` and `report` on 5-, 15- and 60-minute stores at 20 req/s.

Each size is simulated (`stallscope simulate`, the long-prompts incident, as bench/bench_report.py does) and its
benchmark file and server log ingested ONCE into --work; later runs reuse the stores. Then, per size:
  - `stallscope analyze --db`, `stallscope recommend --db` and `stallscope report --db`, each a child process timed
    alone: wall, CPU (user + system of the child) and peak RSS;
  - every analysis view's own time (each materialised after the views it reads), from DuckDB's profiler (the
    fast paths of stallscope.fastviews run outside DuckDB: their wall time);
  - the floor: the bare goodput SQL a user would write over `token_gaps` (per-request TTFT and mean TPOT, one
    GROUP BY), also a child process.
Prints the table, the growth exponent k between sizes (time ~ gaps^k: 1 is linear, 2 quadratic) and each
command's ratio to the floor. --long adds a 4-hour store, analysed with DuckDB's memory_limit at --memory-limit
(spilling to disk rather than failing). The machine may be shared: compare CPU seconds, and back to back.

    .venv/bin/python bench/bench_scale.py [--minutes 5,15,60] [--long] [--work bench/out/scale] [--max-exponent 1.2]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

from childtime import timed_child

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

FLOOR = r"""
import sys, duckdb
con = duckdb.connect(sys.argv[1], read_only=True)
print(con.sql('''
    SELECT count(*) FILTER (WHERE ttft_ns <= 2e9 AND tpot_ns <= 50e6) AS good, count(*) AS total FROM (
        SELECT g.source_id, g.request_id, any_value(r.ttft_ns) AS ttft_ns, avg(g.gap_ns) AS tpot_ns
        FROM token_gaps g JOIN requests r USING (source_id, request_id)
        GROUP BY g.source_id, g.request_id)''').fetchall())
"""

# The incident of every size (bench/bench_report.py's): RunSpec fields, which `stallscope simulate` takes as --options.
INCIDENT = {"prompt_len": "256:0.6", "output_len": "128:0.5", "incident": "long-prompts", "trace_layers": 1}

LONG_SIM = r"""
import json, sys
from pathlib import Path
from stallscope.simulate import artifacts
from stallscope.simulate.runner import RunSpec, execute
run = execute(RunSpec(**json.loads(sys.argv[2])))
artifacts.write_all(run, Path(sys.argv[1]), only=("vllm", "bench"))
"""

# Per-view times: install the views, then materialise them in the analysis' order, each statement profiled.
VIEWS = r"""
import json, sys, time, duckdb
from stallscope import analyze, sqlviews
from stallscope.fastviews import FAST
con = duckdb.connect(sys.argv[1], read_only=True)
opts = analyze.Options(slo=analyze.parse_slo(sys.argv[2]), report_views=False)
sqlviews.install(con, report=False, **opts.slo.__dict__, spike_k=opts.spike_k,
                 baseline_window_s=opts.baseline_window_s, baseline_steps=opts.baseline_steps)
con.execute("PRAGMA enable_profiling = 'no_output'")
out = {}
for name in analyze._MATERIALISE:
    t0 = time.perf_counter()
    sqlviews.materialise(con, [name])
    wall = time.perf_counter() - t0
    if name in FAST:
        out[name] = wall
    else:
        prof = json.loads(con.get_profiling_information(format="json"))
        out[name] = prof.get("latency", prof.get("operator_timing", wall))
print(json.dumps(out))
"""


def make_store(ss: str, work: Path, minutes: float, a) -> Path:
    """Simulate and ingest one size once; later runs reuse it."""
    dur = int(minutes * 60)
    run = work / f"run-{a.rate:g}rps-{dur}s-seed{a.seed}"
    db = work / f"{run.name}.duckdb"
    if not any((run / n).exists() for n in ("bench_serve.json", "bench_serve.json.gz")):
        run.mkdir(parents=True, exist_ok=True)
        print(f"simulating {a.rate:g} req/s for {dur} s into {run} ...", flush=True)
        if minutes <= 60:
            opts = [x for k, v in INCIDENT.items() for x in (f"--{k.replace('_', '-')}", str(v))]
            timed_child([ss, "simulate", "--out", str(run), "--rate", str(a.rate), "--duration", str(dur), *opts,
                         "--seed", str(a.seed)], "simulate")
        else:
            # `stallscope simulate` also writes the trace and truth.json (an hour took 8.5 GB): only the benchmark
            # file and the server log are ingested, so the same run is simulated in a child that writes those two.
            spec = {**INCIDENT, "rate": a.rate, "duration_s": dur, "seed": a.seed}
            timed_child([sys.executable, "-c", LONG_SIM, str(run), json.dumps(spec)], "simulate")
    if not db.exists():
        inputs = [p for p in sorted(run.iterdir()) if p.name.startswith(("bench_serve", "vllm_server"))]
        ing = timed_child([ss, "ingest", *map(str, inputs), "--db", str(db)], "ingest")
        print(f"ingest of {minutes:g} min (not timed below): {ing['wall_s']:.1f} s wall, {ing['cpu_s']:.1f} s CPU",
              flush=True)
    return db


def measure(ss: str, db: Path, work: Path, a, memory_limit: str | None) -> dict:
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    gaps = con.execute("SELECT count(*) FROM token_gaps").fetchall()[0][0]
    reqs = con.execute("SELECT count(*) FROM requests WHERE kind = 'client'").fetchall()[0][0]
    con.close()
    mem = ["--memory-limit", memory_limit] if memory_limit else []
    out = work / f"{db.stem}-out"
    out.mkdir(exist_ok=True)
    rows = {
        "floor": timed_child([sys.executable, "-c", FLOOR, str(db)], "bare goodput SQL"),
        "analyze": timed_child([ss, "analyze", "--db", str(db), "--slo", a.slo, "--json", str(out / "analysis.json"),
                                *mem], "analyze"),
    }
    if not memory_limit:
        rows["recommend"] = timed_child([ss, "recommend", "--db", str(db), "--slo", a.slo], "recommend")
        rows["report"] = timed_child([ss, "report", "--db", str(db), "--slo", a.slo, "--out", str(out / "report")],
                                     "report")
    views = json.loads(timed_child([sys.executable, "-c", VIEWS, str(db), a.slo], "views")["stdout"]
                       .strip().splitlines()[-1]) if a.views and not memory_limit else {}
    return {"gaps": gaps, "requests": reqs, "rows": rows, "views": views}


def exponent(t1: float, t2: float, n1: int, n2: int) -> float | None:
    if t1 <= 0 or t2 <= 0 or n1 == n2:
        return None
    return math.log(t2 / t1) / math.log(n2 / n1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", default="5,15,60", help="Incident lengths, minutes (comma list).")
    ap.add_argument("--long", action="store_true", help="Also a 240-minute store, analysed under --memory-limit.")
    ap.add_argument("--memory-limit", default="2GB", help="DuckDB memory_limit for the --long analysis.")
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--slo", default="ttft=2s,tpot=50ms,itl=200ms")
    ap.add_argument("--work", type=Path, default=ROOT / "bench" / "out" / "scale")
    ap.add_argument("--no-views", dest="views", action="store_false", help="Skip the per-view profile.")
    ap.add_argument("--max-exponent", type=float, default=1.2, help="Fail (exit 1) when a command's CPU time grows "
                                                                    "faster than gaps^k between the last two sizes.")
    a = ap.parse_args(argv)
    ss = str(BIN / "stallscope")
    a.work.mkdir(parents=True, exist_ok=True)
    sizes = [float(m) for m in a.minutes.split(",")]
    results = {}
    for m in sizes:
        db = make_store(ss, a.work, m, a)
        results[m] = measure(ss, db, a.work, a, None)
        print(f"{m:g} min measured", flush=True)
    long = None
    if a.long:
        db = make_store(ss, a.work, 240, a)
        long = measure(ss, db, a.work, a, a.memory_limit)

    cmds = ["floor", "analyze", "recommend", "report"]
    print(f"\n{'size':>8}{'gaps':>12}{'requests':>10}  {'command':12}{'wall s':>9}{'CPU s':>9}{'peak RSS MB':>13}"
          f"{'CPU / floor':>13}")
    for m, r in results.items():
        floor = r["rows"]["floor"]["cpu_s"]
        for c in cmds:
            x = r["rows"][c]
            print(f"{m:>6g} m{r['gaps']:>12,}{r['requests']:>10,}  {c:12}{x['wall_s']:9.1f}{x['cpu_s']:9.1f}"
                  f"{x['rss_mb']:13,.0f}{x['cpu_s'] / floor:13.1f}")
    if a.views:
        names = list(next(iter(results.values()))["views"])
        print(f"\nview times, s (DuckDB profiler; fast paths: wall)\n{'view':30}" +
              "".join(f"{f'{m:g} min':>10}" for m in results))
        for n in names:
            print(f"{n:30}" + "".join(f"{r['views'].get(n, float('nan')):10.2f}" for r in results.values()))
    print("\ngrowth exponent k (CPU s ~ gaps^k) between sizes")
    worst = {}
    pairs = list(zip(sizes[:-1], sizes[1:]))
    for c in cmds:
        ks = []
        for m1, m2 in pairs:
            r1, r2 = results[m1], results[m2]
            ks.append(exponent(r1["rows"][c]["cpu_s"], r2["rows"][c]["cpu_s"], r1["gaps"], r2["gaps"]))
        worst[c] = ks[-1] if ks else None
        print(f"  {c:12}" + "  ".join(f"{m1:g}->{m2:g} min: {k:.2f}" if k is not None else f"{m1:g}->{m2:g}: -"
                                      for (m1, m2), k in zip(pairs, ks)))
    if long:
        x = long["rows"]["analyze"]
        print(f"\n240 min ({long['gaps']:,} gaps), memory_limit {a.memory_limit}: analyze {x['wall_s']:.1f} s wall, "
              f"{x['cpu_s']:.1f} s CPU, peak RSS {x['rss_mb']:,.0f} MB: ok")
    print(f"\nmachine load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (shared: compare CPU s)")
    bad = [c for c, k in worst.items() if c != "floor" and k is not None and k > a.max_exponent]
    if bad:
        print(f"FAIL: growth exponent above {a.max_exponent:g} for {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
