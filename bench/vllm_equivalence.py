"""Checks that a change to the vLLM log parser lands exactly the same rows: every real vLLM log (and bench-style slices)
ingested by a reference checkout and by this one, every table compared with DuckDB (`EXCEPT ALL` both ways).

The reference is another checkout's editable install (default: /work/main's venv); both run from the work directory so
neither picks up the other's sources from the current directory. Bench slices are cut from
the 200 MB bench file at line boundaries: a 4 MB one (one frame), the same with a docker-compose prefix on every
line, and a 40 MB one (three frames, so records carried across frame edges are covered).

    .venv/bin/python bench/vllm_equivalence.py [--ref-python /work/main/.venv/bin/python]
        [--bench /tmp/stallscope-bench/vllm_200MB.log] [--work /tmp/bench-v/eq] [--no-slices]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]
REAL = Path(os.environ.get("STALLSCOPE_REAL", ROOT.parent / "shared" / "real")) / "vllm"
# Columns that say when or how long an ingest ran, not what it read.
VOLATILE = {"source_id", "ingested_ns", "ingest_s", "path", "mtime_ns"}


def real_logs() -> list[Path]:
    return sorted(p for p in REAL.rglob("*.log") if p.is_file())


def _slice(src: Path, nbytes: int) -> bytes:
    with open(src, "rb") as f:
        data = f.read(nbytes)
    return data[: data.rfind(b"\n") + 1]


def bench_slices(bench: Path, work: Path) -> list[Path]:
    out = []
    small = _slice(bench, 4 << 20)
    p = work / "slice_4MB.log"
    p.write_bytes(small)
    out.append(p)
    p = work / "slice_4MB_compose.log"
    p.write_bytes(b"".join(b"vllm-leader-1  | " + line + b"\n" for line in small.split(b"\n")[:-1]))
    out.append(p)
    p = work / "slice_40MB.log"
    p.write_bytes(_slice(bench, 40 << 20))
    out.append(p)
    return out


# What the user is told besides the tables: each file's status, message and notes.
_INGEST = """
import json, sys
from pathlib import Path
from stallscope.ingest import ingest_paths
from stallscope.parsers import Options
from stallscope.store import Store
with Store(sys.argv[2]) as store:
    rep = ingest_paths(store, [Path(sys.argv[1])], options=Options(year=2025))
print(json.dumps([[r.status, r.message, r.notes] for r in rep] + [rep.notes]))
"""


def _canon(said: str) -> str:
    """The noise note lists kinds by count; kinds with equal counts may come in either order."""
    def fix(note: str) -> str:
        if not note.startswith("skipped as noise: "):
            return note
        items = note[len("skipped as noise: "):].split(", ")
        return "skipped as noise: " + ", ".join(sorted(items))
    return json.dumps([[st, msg, [fix(n) for n in notes]] for st, msg, notes in json.loads(said)[:-1]]
                      + json.loads(said)[-1:])


def ingest(python: str, file: Path, db: Path) -> str:
    for suffix in ("", ".wal"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([python, "-c", _INGEST, str(file), str(db)], env=env, cwd=db.parent, capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise SystemExit(f"ingest of {file} with {python} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return r.stdout.strip().splitlines()[-1]


def compare(a: Path, b: Path) -> list[str]:
    """Differences between the two stores, table by table (rows matched by the source's path, not its id)."""
    con = duckdb.connect()
    con.execute(f"ATTACH '{a}' AS a (READ_ONLY)")
    con.execute(f"ATTACH '{b}' AS b (READ_ONLY)")
    tables = [r[0] for r in con.execute(
        "SELECT DISTINCT table_name FROM information_schema.columns WHERE table_catalog = 'a' AND column_name = 'source_id' "
        "ORDER BY 1").fetchall()]
    problems = []
    for t in tables:
        cols = [r[0] for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_catalog = 'a' AND table_name = ? "
            "ORDER BY ordinal_position", [t]).fetchall()]
        keep = ", ".join(f'x."{c}"' for c in cols if c not in VOLATILE)
        q = lambda db: (f"SELECT s.path, {keep} FROM {db}.{t} x JOIN {db}.sources s USING (source_id)"  # noqa: E731
                        if t != "sources" else f"SELECT x.path, {keep} FROM {db}.{t} x")
        n_a = con.execute(f"SELECT count(*) FROM a.{t}").fetchone()[0]
        n_b = con.execute(f"SELECT count(*) FROM b.{t}").fetchone()[0]
        only_a = con.execute(f"SELECT count(*) FROM ({q('a')} EXCEPT ALL {q('b')})").fetchone()[0]
        only_b = con.execute(f"SELECT count(*) FROM ({q('b')} EXCEPT ALL {q('a')})").fetchone()[0]
        status = "same" if (n_a == n_b and only_a == 0 and only_b == 0) else "DIFFERENT"
        if n_a == n_b == 0:
            continue
        print(f"  {t:<22} {n_a:>9,} rows  ref-only {only_a:>6,}  new-only {only_b:>6,}  {status}")
        if status != "same":
            sample = con.execute(f"SELECT * FROM ({q('a')} EXCEPT ALL {q('b')}) LIMIT 3").fetchall()
            sample += con.execute(f"SELECT * FROM ({q('b')} EXCEPT ALL {q('a')}) LIMIT 3").fetchall()
            problems.append(f"{t}: {n_a} vs {n_b} rows, {only_a} only in ref, {only_b} only in new; e.g. "
                            + "; ".join(repr(s)[:300] for s in sample))
    return problems


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref-python", default="/work/main/.venv/bin/python")
    ap.add_argument("--bench", default="/tmp/stallscope-bench/vllm_200MB.log")
    ap.add_argument("--work", default="/tmp/bench-v/eq")
    ap.add_argument("--no-slices", action="store_true")
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    files = real_logs()
    if not a.no_slices and Path(a.bench).exists():
        files += bench_slices(Path(a.bench), work)
    problems = []
    for f in files:
        print(f"{f.name} ({f.stat().st_size / 1e6:.1f} MB)")
        ra, rb = work / "ref.duckdb", work / "new.duckdb"
        said_a = _canon(ingest(a.ref_python, f, ra))
        said_b = _canon(ingest(sys.executable, f, rb))
        print(f"  {'status and notes':<22} {'same' if said_a == said_b else 'DIFFERENT'}")
        if said_a != said_b:
            problems.append(f"{f.name}: what ingest said differs:\n  ref {said_a[:600]}\n  new {said_b[:600]}")
        problems += [f"{f.name}: {p}" for p in compare(ra, rb)]
    print()
    if problems:
        print("DIFFERENT:\n" + "\n".join(problems))
        return 1
    print(f"all {len(files)} inputs: every table identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
