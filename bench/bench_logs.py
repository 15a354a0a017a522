"""Speed of the vLLM, TGI and SGLang log ingest against a minimal Python line loop and this stack's floor, side by
side, in one run.

Three contenders. The loop is where a user's own script starts from: `for line in f: if rx.search(line): n += 1`,
counting the lines of the engine's main record kind and nothing else (no fields, no times, no store). stallscope does the whole
ingest (sniffing, wrapper prefixes, every record kind, times, rejects, the content hash, the DuckDB writes), so a
ratio near 1 means the full ingest costs about what merely finding the lines costs in Python. The floor
(`logfloor.py`) is the least work of the main kind in this project's stack: its lines found by literal tests and
their fields read by position with polars on both cores, inserted into DuckDB, without what a parser must also do
(every layout and record kind, prefixes, rejects, accounting, the hash, vLLM's block keys): a lower bound on
stallscope's cost for the file.

Inputs are the real samples repeated to the target size (cached in --dir): vLLM as in bench_vllm_log.py (the 0.8.3
800-request log re-timestamped per copy), TGI the real text router/launcher logs concatenated and then their Success
and radix lines 20 times more, SGLang the real scheduler logs with full dates concatenated and then their batch and
access lines 20 times more (a long-running server's log is mostly those), each template repeated to the size. Each contender runs in its own child process; CPU seconds (user +
system) and peak RSS come from `getrusage(RUSAGE_CHILDREN)` in a fresh intermediate process. The machine may be
shared: compare the ratios and the CPU seconds, which load moves less than wall time.

Peak RSS is the whole process's; a child that only imports stallscope and opens a store (the same run, the same
way) gives the fixed part, so `above base` is the part of the peak that reading the file adds.

    .venv/bin/python bench/bench_logs.py [--mb 200] [--engines vllm,tgi,sglang] [--dir /tmp/stallscope-bench]
    .venv/bin/python bench/bench_logs.py --mb 200,1000   # the 200 MB and the 1 GB files
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAL = Path(os.environ.get("STALLSCOPE_REAL", ROOT.parent / "shared" / "real"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

# What the minimal loop counts per engine (a plain `re.search` per line).
LOOP_RX = {
    "vllm": r"\] (?:Engine \d+: )?Avg prompt throughput: |\] Received request |\] (?:Added|Finished) request ",
    "tgi": r": Success$",
    "sglang": r"\] (?:Prefill|Decode) batch[.,]",
}
# Issue 14's floor for each engine's log ingest, wall MB/s on 2 cores.
TARGET_MBS = {"vllm": 200, "tgi": 100, "sglang": 100}
BODY_COPIES = 20
BODY_RX = {"tgi": rb": Success$|: Prefix \d+ - Suffix \d+$", "sglang": rb"\] (?:Prefill|Decode) batch[.,]|\] INFO: +\S+ - \""}
# The same counts from the store.
STORE_SQL = {
    "vllm": "SELECT (SELECT count(*) FROM engine_stats) + (SELECT count(*) FROM request_events)",
    "tgi": "SELECT count(*) FROM requests WHERE status = 'ok'",
    # read, or rejected with the reason (spliced tqdm lines of one sample)
    "sglang": "SELECT (SELECT count(*) FROM engine_batches) + (SELECT count(*) FROM rejects "
              "WHERE reason SIMILAR TO '(Prefill|Decode) batch.*')",
}


def _template(engine: str) -> bytes:
    if engine == "tgi":
        files = sorted(p for p in (REAL / "tgi").glob("*_text_*.log"))
    else:
        dated = re.compile(rb"(?m)^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
        files = sorted(p for p in (REAL / "sglang").glob("*.log") if dated.search(p.read_bytes()))
    parts = []
    for p in files:
        b = p.read_bytes()
        parts.append(b if b.endswith(b"\n") else b + b"\n")
    mix = b"".join(parts)
    # A long-running server's log is mostly its per-request / per-batch lines: the samples once, then their
    # record lines (Success and radix lines; batch and access lines) BODY_COPIES times more.
    body = re.compile(BODY_RX[engine])
    lines = [ln for ln in mix.split(b"\n") if body.search(ln)]
    return mix + b"\n".join(lines * BODY_COPIES) + b"\n"


def build(engine: str, target: int, d: Path) -> Path:
    out = d / f"{engine}_{target // 1_000_000}MB.log"
    if engine == "vllm":
        import bench_vllm_log
        return bench_vllm_log.build(target, out)
    data = _template(engine)
    copies = -(-target // len(data))
    if out.exists() and out.stat().st_size == copies * len(data):
        return out
    tmp = out.with_suffix(".part")
    with open(tmp, "wb") as f:
        for _ in range(copies):
            f.write(data)
    tmp.rename(out)
    return out


def loop_count(engine: str, path: str) -> int:
    rx = re.compile(LOOP_RX[engine])
    n = 0
    with open(path, encoding="utf-8", errors="replace", newline="\n") as f:
        for line in f:
            if rx.search(line.rstrip("\r\n")):
                n += 1
    return n


def _worker(which: str, engine: str, path: str, db: str) -> None:
    t0 = time.perf_counter()
    if which == "loop":
        n = loop_count(engine, path)
    elif which == "floor":  # the least work of the main kind in this stack (bench/logfloor.py)
        import logfloor
        n = logfloor.run(engine, path, db)
    elif which == "base":  # the fixed part of every ingest's peak: the imports and an open store
        import stallscope

        with stallscope.open(db):
            n = 0
    else:
        import stallscope
        from stallscope.parsers import Options

        with stallscope.open(db) as s:
            r = s.ingest([Path(path)], options=Options(year=2025))
            if not r.ok:
                raise SystemExit(f"ingest failed: {[x.message for x in r]}")
            n = s.con.execute(STORE_SQL[engine]).fetchone()[0]
    print(json.dumps({"seconds": time.perf_counter() - t0, "count": n}))


def measure(which: str, engine: str, path: Path, db: Path) -> dict:
    code = ("import json, resource, subprocess, sys\n"
            "r = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
            "sys.stderr.write(r.stderr)\n"
            "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
            "print(json.dumps({'rc': r.returncode, 'out': r.stdout.strip().splitlines()[-1] if r.stdout.strip() else '',"
            " 'maxrss_kb': u.ru_maxrss, 'cpu_s': u.ru_utime + u.ru_stime}))\n")
    for p in (db, Path(str(db) + ".wal")):
        p.unlink(missing_ok=True)
    res = subprocess.run([sys.executable, "-c", code, sys.executable, __file__, "--worker", which, engine, str(path),
                          str(db)], capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(res.stderr)
    outer = json.loads(res.stdout.strip().splitlines()[-1])
    if outer["rc"] != 0:
        raise SystemExit(f"{which} {engine} failed:\n{res.stderr}")
    inner = json.loads(outer["out"])
    for p in (db, Path(str(db) + ".wal")):
        p.unlink(missing_ok=True)
    return {"seconds": inner["seconds"], "cpu_s": outer["cpu_s"], "peak_rss_mb": outer["maxrss_kb"] / 1024,
            "count": inner["count"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", default="200", help="size of each generated log in MB, or several: 200,1000 (default 200)")
    ap.add_argument("--engines", default="vllm,tgi,sglang")
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "stallscope-bench"))
    ap.add_argument("--worker", nargs=4, metavar=("WHICH", "ENGINE", "PATH", "DB"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        _worker(*a.worker)
        return
    d = Path(a.dir)
    d.mkdir(parents=True, exist_ok=True)
    load0 = os.getloadavg()[0]
    base = measure("base", "", Path(os.devnull), d / "bench.duckdb")
    print(f"  base (import stallscope, open a store): peak RSS {base['peak_rss_mb']:.0f} MB, CPU {base['cpu_s']:.2f} s",
          flush=True)
    rows = []
    for mb in [int(x) for x in str(a.mb).split(",")]:
        for engine in a.engines.split(","):
            log = build(engine, mb * 1_000_000, d)
            size = log.stat().st_size / 1e6
            loop = measure("loop", engine, log, d / "bench.duckdb")
            floor = measure("floor", engine, log, d / "bench.duckdb")
            ours = measure("stallscope", engine, log, d / "bench.duckdb")
            rows.append((engine, size, loop, ours, log, floor))
            for name, r in (("loop", loop), ("floor", floor), ("stallscope", ours)):
                print(f"{engine:>6} {name:>10}: {r['seconds']:7.2f} s  {size / r['seconds']:7.1f} MB/s  CPU {r['cpu_s']:7.2f} s"
                      f" ({size / r['cpu_s']:6.1f} MB per CPU-s)  peak RSS {r['peak_rss_mb']:6.0f} MB "
                      f"({r['peak_rss_mb'] / size:.2f}x the file)  lines counted {r['count']}", flush=True)
    print(f"\n{'engine':>6} {'MB':>6} {'MB/s':>7} {'target':>6} {'MB/CPU-s':>8} {'RSS/file':>8} {'above base':>15} "
          f"{'loop MB/s':>9} {'loop MB/CPU-s':>13} {'wall vs loop':>12} {'CPU vs loop':>11} same "
          f"{'floor MB/s':>10} {'floor MB/CPU-s':>14} {'floor RSS/file':>14} {'wall vs floor':>13} {'CPU vs floor':>12}")
    for engine, size, loop, ours, _, floor in rows:
        extra = ours["peak_rss_mb"] - base["peak_rss_mb"]
        print(f"{engine:>6} {size:6.0f} {size / ours['seconds']:7.1f} {TARGET_MBS[engine]:6.0f} "
              f"{size / ours['cpu_s']:8.1f} {ours['peak_rss_mb'] / size:8.2f} {extra:6.0f} MB {extra / size:4.2f}x "
              f"{size / loop['seconds']:9.1f} {size / loop['cpu_s']:13.1f} {loop['seconds'] / ours['seconds']:12.2f} "
              f"{loop['cpu_s'] / ours['cpu_s']:11.2f} {str(loop['count'] == ours['count']):>4} "
              f"{size / floor['seconds']:10.1f} {size / floor['cpu_s']:14.1f} {floor['peak_rss_mb'] / size:14.2f} "
              f"{floor['seconds'] / ours['seconds']:13.2f} {floor['cpu_s'] / ours['cpu_s']:12.2f}")
    print(f"(MB/s: wall, whole process incl. interpreter start; target: issue 14's floor in wall MB/s on 2 cores; "
          f"RSS/file: the whole process's peak; above base: the peak less the {base['peak_rss_mb']:.0f} MB of the "
          "imports and an open store, per MB of file; 'vs loop' > 1: stallscope is faster than the Python line loop; floor: "
          "bench/logfloor.py, the main kind's lines read the cheapest way polars + DuckDB allow, less than a parser does: "
          "a target above the floor's MB/s is beyond this stack on this machine)")
    # The content hash is part of every ingest (sources.sha256, for idempotent re-ingest): is it the floor?
    import hashlib
    engine, size, log = rows[-1][0], rows[-1][1], rows[-1][4]
    c0, t0 = time.process_time(), time.perf_counter()
    with open(log, "rb") as f:
        hashlib.file_digest(f, "sha256")
    c1, t1 = time.process_time() - c0, time.perf_counter() - t0
    print(f"sha256 of {log.name}: {c1:.2f} CPU-s, {t1:.2f} s ({size / max(c1, 1e-9):.0f} MB per CPU-s; hashed on its "
          "own thread while the file is parsed)")
    print(f"load average {load0:.2f} at the start, {os.getloadavg()[0]:.2f} at the end, on {os.cpu_count()} cores "
          "(a shared machine: compare the CPU figures and the ratios)")


if __name__ == "__main__":
    main()
