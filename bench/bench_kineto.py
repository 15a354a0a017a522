"""Kineto-trace ingest speed and peak memory, side by side with what a user would otherwise run.

Methods, each in its own fresh subprocess (so peak RSS is that method's alone), timed around the work only
(imports, stallscope's parser modules included, happen before the clock starts):
  stallscope  `Store(db).ingest(trace)` into a DuckDB file, then `close()`: sha256, tables, CPU-GPU links, nesting,
              steps, commit and the final checkpoint (everything on disk)
  orjson+pd   `orjson.loads` + `pandas.DataFrame(traceEvents)` (no links, no args columns)
  json+pd     `json.load` + `pandas.DataFrame(traceEvents)`
  hta         HolisticTraceAnalysis `parse_trace_file` (its default parser: DataFrame, symbol table, correlation)

Inputs: the largest real trace in ../shared/real/traces/ (as shipped, gzip), and a synthetic trace of at least
500 MB raw JSON built by repeating that trace's events with shifted timestamps and ids (cached under bench/out/).

The baselines need pandas and HTA, which are not stallscope dependencies: they run in a separate virtualenv,
bench/.venv-bench, created on first use (`pip install HolisticTraceAnalysis "pandas<3" orjson`).

Each method's best of `--repeat` runs is shown (a single run for the slow baselines on inputs over 200 MB).
On small VMs the cost of a page fault varies several-fold from run to run (the system time of the same
~300k faults of a 558 MB ingest ranges 0.6-2 s while user time stays within 10%), so compare ratios from one
invocation, and repeat the invocation when a figure matters.

Usage: python bench/bench_kineto.py [--synthetic-mb 500] [--skip-synthetic] [--repeat 2]
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import venv
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
REAL = Path(os.environ.get("STALLSCOPE_REAL", ROOT.parent / "shared" / "real")) / "traces"
OUT = HERE / "out"
BENCH_VENV = HERE / ".venv-bench"

# Peak RSS from /proc/self/status VmHWM: ru_maxrss would inherit the parent's peak across fork+exec.
# CPU seconds (user + system, all threads) are printed after the peak: steadier than wall time on a VM.
_HWM = """
import resource as _r
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
def cpu():
    u = _r.getrusage(_r.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime
"""

WORKERS = {
    "stallscope": """
        import gc, sys, time, resource, tempfile, os
        import stallscope
        from stallscope.parsers import all_parsers
        all_parsers()  # imports happen before the clock starts, as they do for the other methods
        path = sys.argv[1]
        d = tempfile.mkdtemp()
        s = stallscope.open(os.path.join(d, "b.duckdb"))
        t, c = time.perf_counter(), cpu()
        r = s.ingest(path)
        s.close()  # the last checkpoint: everything on disk
        dt, dc = time.perf_counter() - t, cpu() - c
        assert r[0].ok, r[0].message
        s = stallscope.open(os.path.join(d, "b.duckdb"), read_only=True)
        rows = s.sql("SELECT count(*) FROM gpu_kernels").item()
        print(dt, hwm(), rows, dc)
    """,
    "orjson+pd": """
        import gc, gzip, sys, time, resource
        import orjson, pandas as pd
        path = sys.argv[1]
        t, c = time.perf_counter(), cpu()
        raw = open(path, "rb").read()
        if raw[:2] == b"\\x1f\\x8b":
            raw = gzip.decompress(raw)
        trace = orjson.loads(raw)
        df = pd.DataFrame(trace["traceEvents"])
        dt, dc = time.perf_counter() - t, cpu() - c
        print(dt, hwm(), int((df["cat"] == "kernel").sum()), dc)
    """,
    "json+pd": """
        import gzip, json, sys, time, resource
        import pandas as pd
        path = sys.argv[1]
        t, c = time.perf_counter(), cpu()
        opener = gzip.open if open(path, "rb").read(2) == b"\\x1f\\x8b" else open
        with opener(path, "rb") as f:
            trace = json.load(f)
        df = pd.DataFrame(trace["traceEvents"])
        dt, dc = time.perf_counter() - t, cpu() - c
        print(dt, hwm(), int((df["cat"] == "kernel").sum()), dc)
    """,
    "hta": """
        import sys, time, resource, warnings
        warnings.simplefilter("ignore")
        from hta.common.trace import parse_trace_file
        path = sys.argv[1]
        t, c = time.perf_counter(), cpu()
        meta, df, symbols = parse_trace_file(path)
        dt, dc = time.perf_counter() - t, cpu() - c
        kid = symbols.sym_index.get("kernel")
        print(dt, hwm(), int((df["cat"] == kid).sum()), dc)
    """,
}


def bench_python() -> Path:
    py = BENCH_VENV / "bin" / "python"
    if not py.exists():
        print(f"creating {BENCH_VENV} (HTA, pandas<3, orjson) ...", flush=True)
        venv.create(BENCH_VENV, with_pip=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "HolisticTraceAnalysis", "pandas<3", "orjson"],
                       check=True)
    return py


def run(method: str, path: Path, repeat: int) -> dict:
    py = sys.executable if method == "stallscope" else str(bench_python())
    best = None
    for _ in range(repeat):
        code = _HWM + textwrap.dedent(WORKERS[method])
        r = subprocess.run([py, "-c", code, str(path)], capture_output=True, text=True)
        if r.returncode != 0:
            return {"error": (r.stderr.strip().splitlines() or ["failed"])[-1]}
        dt, rss, kernels, cpu = r.stdout.split()[-4:]
        cur = {"s": float(dt), "rss": int(rss), "kernels": int(kernels), "cpu_s": float(cpu)}
        if best is None or cur["s"] < best["s"]:
            best = cur
    return best


def raw_size(path: Path) -> int:
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    if not gz:
        return path.stat().st_size
    n = 0
    with gzip.open(path, "rb") as f:
        while b := f.read(1 << 24):
            n += len(b)
    return n


def synthetic(src: Path, target_mb: int) -> Path:
    """Repeat the source trace's events with shifted timestamps and ids until the JSON is >= target_mb."""
    import orjson

    dst = OUT / f"synthetic_{target_mb}mb.json"
    if dst.exists() and dst.stat().st_size >= target_mb * 1_000_000:
        return dst
    OUT.mkdir(exist_ok=True)
    trace = orjson.loads(gzip.decompress(src.read_bytes()))
    events = trace.pop("traceEvents")
    xs = [e for e in events if e.get("ph") == "X"]
    span_us = max(e["ts"] + e.get("dur", 0) for e in xs) - min(e["ts"] for e in xs) + 1000.0
    id_keys = ("correlation", "External id", "Python id", "Python parent id", "Record function id", "Ev Idx")
    per_copy = len(orjson.dumps(events))
    copies = -(-target_mb * 1_000_000 // per_copy)
    print(f"building {dst.name}: {copies} copies of {len(events):,} events ...", flush=True)
    with open(dst, "wb") as f:
        head = orjson.dumps(trace)[:-1]
        f.write(head + b', "traceEvents": [\n')
        for c in range(copies):
            shift, idshift = c * span_us, c * 10_000_000
            out = []
            for e in events:
                if e.get("ph") == "M" and c:
                    continue
                e2 = dict(e)
                if "ts" in e2:
                    e2["ts"] = round(e2["ts"] + shift, 3)
                if "id" in e2 and isinstance(e2["id"], int):
                    e2["id"] += idshift
                a = e2.get("args")
                if a:
                    a = dict(a)
                    for k in id_keys:
                        if isinstance(a.get(k), int):
                            a[k] += idshift
                    e2["args"] = a
                out.append(orjson.dumps(e2))
            f.write((b",\n" if c else b"") + b",\n".join(out))
        f.write(b"\n]}\n")
    return dst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--synthetic-mb", type=int, default=500)
    ap.add_argument("--skip-synthetic", action="store_true")
    ap.add_argument("--skip-hta", action="store_true")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    largest = max(REAL.glob("*.json*"), key=raw_size)
    inputs = [largest]
    if not args.skip_synthetic:
        inputs.append(synthetic(largest, args.synthetic_mb))
    methods = ["stallscope", "orjson+pd", "json+pd"] + ([] if args.skip_hta else ["hta"])
    results = []
    for path in inputs:
        mb = raw_size(path) / 1e6
        print(f"\n{path.name}: {mb:.1f} MB raw JSON ({path.stat().st_size / 1e6:.1f} MB on disk)")
        print(f"  {'method':<11} {'seconds':>8} {'MB/s':>7} {'peak RSS':>9} {'RSS/raw':>8} {'kernels':>9} {'CPU s':>7}  vs stallscope")
        row = {}
        for m in methods:
            r = run(m, path, 1 if mb > 200 and m != "stallscope" else args.repeat)
            row[m] = r
            if "error" in r:
                print(f"  {m:<11} failed: {r['error']}")
                continue
            ratio = r["s"] / row["stallscope"]["s"] if "s" in row.get("stallscope", {}) else float("nan")
            print(f"  {m:<11} {r['s']:8.2f} {mb / r['s']:7.1f} {r['rss'] / 1e9:8.2f}G {r['rss'] / 1e6 / mb:8.2f}"
                  f" {r['kernels']:9,} {r['cpu_s']:7.2f}  {'' if m == 'stallscope' else f'{ratio:.1f}x slower'}")
        results.append({"input": path.name, "raw_mb": mb, "results": row})
    OUT.mkdir(exist_ok=True)
    (OUT / "bench_kineto.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
