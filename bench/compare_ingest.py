"""Do two checkouts write the same store? Ingest the same logs with each one's venv and compare every table.

Each table of the two stores is compared with DuckDB `EXCEPT ALL` both ways (same rows, same values, any order),
`sources` without the columns that record when and how fast (ingested_ns, ingest_s). Inputs: every real vLLM,
TGI and SGLang log under ../shared/real, plus a few MB cut from each bench file (when present) as is and with a Ray
actor prefix on every line, so the frame edges and the wrapper path are crossed too.

    .venv/bin/python bench/compare_ingest.py --ref /work/main/.venv [--bench-dir /tmp/stallscope-bench] [--mb 6]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]
REAL = Path(os.environ.get("STALLSCOPE_REAL", ROOT.parent / "shared" / "real"))
VOLATILE = {"sources": {"ingested_ns", "ingest_s"}}
RAY = {"vllm": b"(RayWorkerWrapper pid=1273) ", "tgi": b"(TgiActor pid=41820) ", "sglang": b"(SGLangEngine pid=41820) "}


def inputs(bench_dir: Path, mb: float, work: Path) -> list[Path]:
    files = sorted(p for e in ("vllm", "tgi", "sglang") for p in (REAL / e).glob("*.log"))
    for engine in ("vllm", "tgi", "sglang"):
        big = bench_dir / f"{engine}_200MB.log"
        if not big.exists():
            continue
        with open(big, "rb") as f:
            f.seek(37_000_123)  # mid-file: the cut falls inside a record and frames start mid-stream
            data = f.read(int(mb * 1e6))
        data = data[data.find(b"\n") + 1: data.rfind(b"\n") + 1]
        cut = work / f"{engine}_cut.log"
        cut.write_bytes(data)
        ray = work / f"{engine}_ray.log"
        ray.write_bytes(b"".join(RAY[engine] + ln for ln in data.splitlines(keepends=True)))
        files += [cut, ray]
    return files


def ingest(venv: Path, files: list[Path], db: Path) -> None:
    db.unlink(missing_ok=True)
    r = subprocess.run([str(venv / "bin" / "stallscope"), "ingest", *map(str, files), "--db", str(db), "--year", "2025"],
                       capture_output=True, text=True)
    if r.returncode not in (0, 1) or "Traceback" in r.stderr:
        sys.exit(f"{venv}: ingest crashed ({r.returncode}):\n{r.stderr[-2000:]}")


def compare(a: Path, b: Path) -> list[str]:
    con = duckdb.connect()
    con.execute(f"ATTACH '{a}' AS a (READ_ONLY)")
    con.execute(f"ATTACH '{b}' AS b (READ_ONLY)")
    tables = [r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = 'a' ORDER BY 1").fetchall()]
    diffs = []
    for t in tables:
        cols = [r[0] for r in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE database_name = 'a' AND table_name = ? ORDER BY column_index",
            [t]).fetchall()]
        keep = ", ".join(f'"{c}"' for c in cols if c not in VOLATILE.get(t, ()))
        na, nb = (con.execute(f"SELECT count(*) FROM {d}.{t}").fetchone()[0] for d in ("a", "b"))
        only_a = con.execute(f"SELECT count(*) FROM (SELECT {keep} FROM a.{t} EXCEPT ALL SELECT {keep} FROM b.{t})").fetchone()[0]
        only_b = con.execute(f"SELECT count(*) FROM (SELECT {keep} FROM b.{t} EXCEPT ALL SELECT {keep} FROM a.{t})").fetchone()[0]
        status = "same" if only_a == only_b == 0 and na == nb else "DIFFERENT"
        print(f"{t:>16}: {na:8d} rows vs {nb:8d}; only in ref {only_a}, only in new {only_b}  {status}")
        if status != "same":
            diffs.append(t)
    return diffs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", type=Path, default=Path("/work/main/.venv"), help="venv of the reference checkout")
    ap.add_argument("--new", type=Path, default=ROOT / ".venv", help="venv of the checkout under test")
    ap.add_argument("--bench-dir", type=Path, default=Path(tempfile.gettempdir()) / "stallscope-bench")
    ap.add_argument("--mb", type=float, default=6, help="MB cut from each bench file (default 6)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="compare-ingest-") as tmp:
        work = Path(tmp)
        files = inputs(a.bench_dir, a.mb, work)
        print(f"{len(files)} inputs")
        ingest(a.ref, files, work / "ref.duckdb")
        ingest(a.new, files, work / "new.duckdb")
        diffs = compare(work / "ref.duckdb", work / "new.duckdb")
    if diffs:
        sys.exit(f"tables that differ: {', '.join(diffs)}")
    print("every table identical")


if __name__ == "__main__":
    main()
