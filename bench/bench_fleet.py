"""Fleet scale: `stallscope fleet run` on a simulated fleet with `--engine local` and with `--engine ray`, side by
side in one run on the same machine, then the rollup (`stallscope fleet report`) and what the lake costs.

Builds (once) a simulated fleet with `stallscope fleet simulate` (32 replicas by default in three pools, odd ones
stalling on long prompts, a few traced so that they get a recommendation), then runs, as child processes one
after the other on the same fleet:
  - `stallscope fleet run SOURCE --out LAKE_local --engine local` (every shard in the one process, in order),
  - `stallscope fleet run SOURCE --out LAKE_ray --engine ray` (one Ray task per shard on a local Ray, all cores),
  - `stallscope fleet report LAKE_ray` (the rollup and its pages), and the same build in-process, timed.
Wall time and CPU seconds of each child's whole process tree (sampled with psutil, because Ray's workers are not
children the driver waits for; wait4's own account when it is larger); per-shard cost (median and p90 of wall,
CPU and each stage) and each worker's peak RSS (its own getrusage) from the lake's `_shards` ledger; the lake's
bytes, a per-shard model (fixed bytes + bytes per request row, least squares over the shards) and its
extrapolation to one replica-day at the simulated request rate; and whether the two lakes hold the same rows.

    .venv/bin/python bench/bench_fleet.py [--replicas 32] [--duration 30] [--work bench/out/fleet] [--json F]

Timings compare only within one run: on a shared machine read the ratio and the CPU seconds.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
STALLSCOPE = str(BIN / "stallscope")


class TreeSampler(threading.Thread):
    """Polls a process and all its descendants: each process's latest CPU time and its peak RSS."""

    def __init__(self, pid: int, every_s: float = 0.1):
        super().__init__(daemon=True)
        import psutil

        self.psutil = psutil
        self.root = psutil.Process(pid)
        self.every_s = every_s
        self.cpu: dict[int, float] = {}
        self.rss: dict[int, int] = {}
        self.cmd: dict[int, str] = {}
        self.stop = threading.Event()

    def _poll(self) -> None:
        ps = self.psutil
        try:
            procs = [self.root] + self.root.children(recursive=True)
        except ps.Error:
            return
        for p in procs:
            try:
                with p.oneshot():
                    t = p.cpu_times()
                    self.cpu[p.pid] = max(self.cpu.get(p.pid, 0.0), t.user + t.system)
                    self.rss[p.pid] = max(self.rss.get(p.pid, 0), p.memory_info().rss)
                    if p.pid not in self.cmd:
                        self.cmd[p.pid] = " ".join(p.cmdline()[:3])[:120] or p.name()
            except ps.Error:
                continue

    def run(self) -> None:
        while not self.stop.is_set():
            self._poll()
            self.stop.wait(self.every_s)


def timed(cmd: list[str], label: str) -> dict:
    """Run one child; wall time, CPU seconds of its whole process tree, peak RSS of each of its processes."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler = TreeSampler(p.pid)
    sampler.start()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    sampler.stop.set()
    sampler.join()
    out, err = p.stdout.read(), p.stderr.read()
    rc = os.waitstatus_to_exitcode(status)
    if rc != 0:
        sys.stderr.write(f"{label} failed ({rc}):\n{out[-2000:]}\n{err[-3000:]}\n")
        raise SystemExit(2)
    # wait4 counts the driver and every descendant it reaped; the sampler also sees those it did not (Ray's)
    cpu_tree = sum(sampler.cpu.values())
    cpu_wait = ru.ru_utime + ru.ru_stime
    workers = {pid: rss for pid, rss in sampler.rss.items() if _is_worker(sampler.cmd.get(pid, ""), label)}
    return {"label": label, "wall_s": wall, "cpu_s": max(cpu_tree, cpu_wait), "processes": len(sampler.cpu),
            "driver_rss_mb": ru.ru_maxrss / 1024,
            "worker_peak_rss_mb": sorted((r / 2**20 for r in workers.values()), reverse=True),
            "stdout": out}


def _is_worker(cmdline: str, label: str) -> bool:
    if label.endswith("ray"):
        return "ray::" in cmdline or "default_worker" in cmdline
    return "stallscope" in cmdline  # the local engine runs every shard in the driver


def ledger(lake: Path) -> list[dict]:
    import duckdb

    rel = duckdb.connect().sql(f"SELECT * FROM read_parquet('{lake}/_shards/*/*.parquet')")
    return [dict(zip(rel.columns, r)) for r in rel.fetchall()]


def _q(vals, p: float):
    vals = sorted(v for v in vals if v is not None)
    if not vals:
        return float("nan")
    return vals[min(len(vals) - 1, int(round(p * (len(vals) - 1))))]


def shard_costs(rows: list[dict]) -> dict:
    """Median and p90 per-shard cost from the ledger: wall (start to end), its stages, and the worker's CPU."""
    done = [r for r in rows if r["status"] == "done"]
    cols = {"wall": [(r["finished_ns"] - r["started_ns"]) / 1e9 for r in done],
            "ingest": [r["ingest_s"] for r in done], "analyze": [r["analyze_s"] for r in done],
            "recommend": [r["recommend_s"] for r in done], "cpu": [r["cpu_s"] for r in done]}
    out = {"shards": len(rows), "done": len(done)}
    for k, v in cols.items():
        out[f"{k}_median_s"] = _q(v, 0.5)
        out[f"{k}_p90_s"] = _q(v, 0.9)
    # the workers' own getrusage peak, one value per worker process (host:pid)
    peak: dict[str, int] = {}
    for r in done:
        if r["worker_peak_rss_bytes"]:
            peak[r["worker"]] = max(peak.get(r["worker"], 0), r["worker_peak_rss_bytes"])
    out["workers"] = len(peak)
    out["worker_peak_rss_mb"] = sorted((v / 2**20 for v in peak.values()), reverse=True)
    return out


def lake_cost(lake: Path) -> dict:
    """Bytes of the lake, and a per-shard linear model (fixed bytes + bytes per request row) fitted over its
    shards, extrapolated to one replica-day at the simulated request rate."""
    import duckdb
    import numpy as np

    con = duckdb.connect()
    shards = con.execute(f"""
        SELECT g.pool, g.replica, g."window", g.duration_s, count(q.shard_id) AS rows
        FROM read_parquet('{lake}/goodput/*/*/*/*.parquet', hive_partitioning = true, hive_types_autocast = false) g
        LEFT JOIN read_parquet('{lake}/requests/*/*/*/*.parquet', hive_partitioning = true,
                               hive_types_autocast = false) q USING (shard_id)
        GROUP BY ALL""").fetchall()
    tables = [d for d in lake.iterdir() if d.is_dir() and not d.name.startswith("_")]
    sizes, reqs, secs = [], [], []
    for pool, replica, window, dur, rows in shards:
        part = f"pool={pool}/replica={replica}/window={window}"
        sizes.append(sum(f.stat().st_size for t in tables for f in (t / part).glob("*.parquet")))
        reqs.append(rows)
        secs.append(dur or 0.0)
    total = lake_bytes(lake)
    a = np.vstack([np.ones(len(reqs)), np.asarray(reqs, float)]).T
    (fixed, per_row), *_ = np.linalg.lstsq(a, np.asarray(sizes, float), rcond=None)
    rows_per_s = sum(reqs) / sum(secs) if sum(secs) else float("nan")  # request rows per replica-second
    per_day = {}
    for label, w in (("window_10m", 600.0), ("window_1h", 3600.0), ("window_1d", 86400.0)):
        per_day[label] = per_row * rows_per_s * 86400.0 + fixed * (86400.0 / w)
    return {"lake_bytes": total, "shards": len(shards), "shard_bytes_median": _q(sizes, 0.5),
            "fixed_bytes_per_shard": float(fixed), "bytes_per_request_row": float(per_row),
            "request_rows_per_replica_s": rows_per_s, "bytes_per_replica_day": per_day,
            "simulated_replica_s": sum(secs), "actual_bytes_per_simulated_replica_day":
                total / (sum(secs) / 86400.0) if sum(secs) else None}


def lake_bytes(lake: Path) -> int:
    return sum(f.stat().st_size for f in lake.rglob("*.parquet") if "_staging" not in f.parts)


def same_rows(a: Path, b: Path) -> dict[str, bool]:
    """Whether the two lakes hold the same rows in every result table (`ORDER BY ALL` equality as EXCEPT ALL)."""
    import duckdb

    con = duckdb.connect()
    same = {}
    for table in ("goodput", "spikes", "culprits", "requests", "recommendations", "sources", "rejects"):
        q = ("SELECT * FROM read_parquet('{}/" + table + "/*/*/*/*.parquet', hive_partitioning = true, "
             "hive_types_autocast = false)")
        diff = con.execute(f"SELECT count(*) FROM (({q.format(a)} EXCEPT ALL {q.format(b)}) UNION ALL "
                           f"({q.format(b)} EXCEPT ALL {q.format(a)}))").fetchall()[0][0]
        same[table] = diff == 0
    return same


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replicas", type=int, default=32)
    ap.add_argument("--duration", type=float, default=30.0, help="Seconds of arrivals per replica run.")
    ap.add_argument("--rate", type=float, default=4.0, help="Requests per second per replica.")
    ap.add_argument("--traced", type=int, default=4, help="Replicas with a GPU trace (they get a recommendation).")
    ap.add_argument("--slo", default="ttft=2s,itl=200ms")
    ap.add_argument("--num-cpus", type=int, default=None, help="CPUs of the local Ray (default: all).")
    ap.add_argument("--work", type=Path, default=ROOT / "bench" / "out" / "fleet")
    ap.add_argument("--fresh", action="store_true", help="Simulate the fleet again even if it exists.")
    ap.add_argument("--json", type=Path, help="Also write the numbers here.")
    args = ap.parse_args(argv)

    work = args.work
    source = work / f"source-{args.replicas}x{args.duration:g}s"
    if args.fresh and source.exists():
        shutil.rmtree(source)
    if not source.exists():
        work.mkdir(parents=True, exist_ok=True)
        sim = timed([STALLSCOPE, "fleet", "simulate", "--out", str(source), "--replicas", str(args.replicas),
                     "--duration", str(args.duration), "--rate", str(args.rate), "--traced", str(args.traced)],
                    "simulate")
        print(f"simulated: {sim['stdout'].strip()} in {sim['wall_s']:.1f} s", flush=True)
    load0 = os.getloadavg()[0]
    runs = {}
    for engine in ("local", "ray"):
        lake = work / f"lake-{engine}"
        shutil.rmtree(lake, ignore_errors=True)
        cmd = [STALLSCOPE, "fleet", "run", str(source), "--out", str(lake), "--engine", engine, "--slo", args.slo]
        if engine == "ray" and args.num_cpus:
            cmd += ["--num-cpus", str(args.num_cpus)]
        runs[engine] = timed(cmd, f"fleet run --engine {engine}")
        runs[engine]["lake"] = lake
        runs[engine]["ledger"] = shard_costs(ledger(lake))
        print(f"{engine}: {runs[engine]['wall_s']:.1f} s wall, {runs[engine]['cpu_s']:.1f} s CPU "
              f"({runs[engine]['stdout'].strip()})", flush=True)
    lake = runs["ray"]["lake"]
    rep = timed([STALLSCOPE, "fleet", "report", str(lake), "--out", str(work / "report")], "fleet report")
    from stallscope.fleet.report import build

    t0, c0 = time.perf_counter(), time.process_time()
    built = build(lake, work / "report-inproc")
    build_s, build_cpu = time.perf_counter() - t0, time.process_time() - c0
    cost = lake_cost(lake)
    load1 = os.getloadavg()[0]
    loc, ray = runs["local"], runs["ray"]
    res = {
        "replicas": args.replicas, "duration_s": args.duration, "rate_rps": args.rate, "cores": os.cpu_count(),
        "load_avg_1m": [load0, load1],
        "local": {"wall_s": loc["wall_s"], "cpu_s": loc["cpu_s"], "per_shard": loc["ledger"]},
        "ray": {"wall_s": ray["wall_s"], "cpu_s": ray["cpu_s"], "per_shard": ray["ledger"],
                "processes": ray["processes"], "sampled_worker_peak_rss_mb": ray["worker_peak_rss_mb"]},
        "ray_speedup_wall": loc["wall_s"] / ray["wall_s"],
        "rollup_s": built.fleet["rollup_s"], "report_build_s": build_s, "report_build_cpu_s": build_cpu,
        "report_cli_wall_s": rep["wall_s"], "report_cli_cpu_s": rep["cpu_s"],
        "lake": cost, "lakes_identical": same_rows(loc["lake"], ray["lake"]),
    }
    lp, rp = loc["ledger"], ray["ledger"]
    print(f"\nfleet of {args.replicas} replicas x {args.duration:g} s at {args.rate:g} req/s, {os.cpu_count()} cores, "
          f"1-min load {load0:.2f} before / {load1:.2f} after (shared machine: compare the ratio and CPU seconds)")
    print(f"  local: {loc['wall_s']:7.1f} s wall {loc['cpu_s']:7.1f} s CPU   1 worker, peak RSS "
          f"{', '.join(f'{v:.0f}' for v in lp['worker_peak_rss_mb'])} MB")
    print(f"  ray:   {ray['wall_s']:7.1f} s wall {ray['cpu_s']:7.1f} s CPU   {rp['workers']} workers, peak RSS "
          f"{', '.join(f'{v:.0f}' for v in rp['worker_peak_rss_mb'])} MB (each worker's own getrusage)")
    print(f"  speed-up of ray over local (wall): {res['ray_speedup_wall']:.2f}x")
    for name, c in (("local", lp), ("ray", rp)):
        print(f"  per shard ({name}): wall median {c['wall_median_s']:.2f} s p90 {c['wall_p90_s']:.2f} s; CPU median "
              f"{c['cpu_median_s']:.2f} s p90 {c['cpu_p90_s']:.2f} s (ingest {c['ingest_median_s']:.2f}, analyze "
              f"{c['analyze_median_s']:.2f}, recommend {c['recommend_median_s']:.2f} s median)")
    print(f"  rollup (SQL over the lake): {res['rollup_s']:.2f} s; report build {build_s:.2f} s ({build_cpu:.2f} s "
          f"CPU); `stallscope fleet report` {rep['wall_s']:.1f} s wall {rep['cpu_s']:.1f} s CPU")
    d = cost["bytes_per_replica_day"]
    print(f"  lake: {cost['lake_bytes'] / 1e6:.2f} MB for {cost['shards']} shards ({cost['simulated_replica_s']:.0f} "
          f"replica-seconds judged); per shard {cost['fixed_bytes_per_shard'] / 1e3:.1f} kB fixed + "
          f"{cost['bytes_per_request_row']:.0f} B per request row ({cost['request_rows_per_replica_s']:.2f} rows/s)")
    print(f"  per replica-day at this rate: {d['window_10m'] / 1e6:.1f} MB (--window 10m), "
          f"{d['window_1h'] / 1e6:.1f} MB (1h), {d['window_1d'] / 1e6:.1f} MB (1d); 200 replicas x 7 days with "
          f"--window 1h: {d['window_1h'] * 1400 / 1e9:.2f} GB")
    print(f"  lakes identical (local vs ray, EXCEPT ALL both ways): {res['lakes_identical']}")
    if args.json:
        args.json.write_text(json.dumps(res, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
