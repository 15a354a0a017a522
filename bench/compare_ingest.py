"""Do two checkouts write the same store? Ingest the same logs with each one's Python and compare every table.

The check behind every speed change of a log parser. Each side ingests the same files into its own DuckDB file, in
its own process, with its own checkout's `.venv` (run from `/`, so neither picks up the other's sources). Every
table is then compared with DuckDB, `EXCEPT ALL` both ways (same rows, same values, any order; no canonical table
has an order), with `source_id` replaced by the source's file name; `sources` without the columns that say when,
how fast or by which parser version it was read. What ingest told the user is compared too: each file's status,
message and notes.

Inputs (`--engines`, default all three): every real log of the engine under ../shared/real; `--mb` MB cut from
the middle of its bench file (when present) as it is and behind a Ray and a compose prefix; and the edge-crossing
mixes of bench/logvariants.py (TGI: lines built to look like the fast layouts; SGLang: batch and access lines behind
every wrapper prefix). `--each` also ingests every input alone, in a store of its own; `--frame-bytes` puts many
frame edges inside records.

    .venv/bin/python bench/compare_ingest.py [--ref /work/main] [--engines tgi] [--mb 6] [--each] [--frame-bytes N]

Exit status 0 when every case is identical, 1 otherwise (the differing rows are printed, a few per table).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parent))
import logvariants as V  # noqa: E402

ROOT = V.ROOT
# Columns of `sources` that say when, how fast or by which parser version a file was read, not what it held.
SOURCES_VOLATILE = ("source_id", "path", "ingested_ns", "ingest_s", "parser_version")


def _worker(db: str, files: list[str]) -> None:
    import stallscope
    from stallscope.parsers import Options

    if os.environ.get("COMPARE_FRAME_BYTES"):  # small frames: many frame edges inside records
        import stallscope.parsers.logrecords as lr
        lr.FRAME_BYTES = int(os.environ["COMPARE_FRAME_BYTES"])
    with stallscope.open(db) as s:
        report = s.ingest([Path(f) for f in files], options=Options(year=2025))
        said = {Path(r.path).name: [r.status, r.message, [_canon(n) for n in r.notes]] for r in report}
    print(json.dumps({"said": said, "notes": list(report.notes), "code": stallscope.__file__}))


def _canon(note: str) -> str:
    """The noise note lists kinds by count; kinds with equal counts may come in either order."""
    head = "skipped as noise: "
    return head + ", ".join(sorted(note[len(head):].split(", "))) if note.startswith(head) else note


def run_side(python: str, db: Path, files: list[Path]) -> dict:
    for p in (db, Path(str(db) + ".wal")):
        p.unlink(missing_ok=True)
    t0 = time.perf_counter()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([python, __file__, "--worker", str(db), *map(str, files)], capture_output=True, text=True,
                       cwd="/", env=env)
    if r.returncode:
        raise SystemExit(f"{python} failed:\n{r.stderr[-3000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out["seconds"] = time.perf_counter() - t0
    return out


def compare(a: Path, b: Path) -> list[str]:
    """One line per table that differs between the stores `a` (reference) and `b`."""
    con = duckdb.connect()
    con.execute(f"ATTACH '{a}' AS a (READ_ONLY)")
    con.execute(f"ATTACH '{b}' AS b (READ_ONLY)")

    def columns(db: str, t: str) -> list[str]:
        return [r[0] for r in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE database_name = ? AND table_name = ? "
            "ORDER BY column_index", [db, t]).fetchall()]

    tables = {d: {r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = ?", [d]).fetchall()} for d in "ab"}
    problems = [f"tables only in one store: {sorted(tables['a'] ^ tables['b'])}"] if tables["a"] != tables["b"] else []
    for t in sorted(tables["a"] & tables["b"]):
        cols = columns("a", t)
        if cols != columns("b", t):
            problems.append(f"{t}: columns differ: {cols} vs {columns('b', t)}")
            continue
        if t == "sources":
            keep = ", ".join(f'"{c}"' for c in cols if c not in SOURCES_VOLATILE)
            q = {d: f"SELECT regexp_extract(path, '[^/]*$') AS file, {keep} FROM {d}.sources" for d in "ab"}
        elif "source_id" in cols:
            q = {d: f"SELECT regexp_extract(s.path, '[^/]*$') AS file, x.* EXCLUDE (source_id) FROM {d}.{t} x "
                    f"LEFT JOIN {d}.sources s USING (source_id)" for d in "ab"}
        else:
            q = {d: f"SELECT * FROM {d}.{t}" for d in "ab"}
        n = {d: con.execute(f"SELECT count(*) FROM ({q[d]})").fetchone()[0] for d in "ab"}
        bad = False
        for x, y in (("a", "b"), ("b", "a")):
            diff = con.execute(f"SELECT * FROM ({q[x]}) EXCEPT ALL SELECT * FROM ({q[y]}) LIMIT 3").fetchall()
            if diff:
                bad = True
                problems.append(f"{t}: rows only in {'the reference' if x == 'a' else 'this checkout'} "
                                f"({n['a']} vs {n['b']} rows); e.g. {[str(r)[:500] for r in diff]}")
        if n["a"] or n["b"]:
            print(f"    {t:<16} {n['a']:>9} rows  {'DIFFERENT' if bad else 'same'}")
    con.close()
    return problems


def inputs(engines: list[str], bench_dir: Path, mb: float, variant_mb: float, work: Path) -> list[Path]:
    files = []
    for e in engines:
        files += sorted((V.REAL / e).glob("*.log"))
        big = bench_dir / f"{e}_200MB.log"
        if mb > 0 and big.exists():
            files += V.cuts(e, big, mb, work)
    if variant_mb > 0 and "tgi" in engines:
        files.append(V.tgi_bench_style(work / "tgi_bench_style.log", variant_mb))
    if variant_mb > 0 and "sglang" in engines:
        files.append(V.sglang_bench_style(work / "sglang_bench_style.log", int(variant_mb * 1e6)))
    return files


def check(case: str, ref_py: str, new_py: str, files: list[Path], work: Path) -> list[str]:
    ra = run_side(ref_py, work / "ref.duckdb", files)
    rb = run_side(new_py, work / "new.duckdb", files)
    print(f"  {case}: {len(files)} file(s); reference {ra['seconds']:.1f} s, this checkout {rb['seconds']:.1f} s")
    problems = compare(work / "ref.duckdb", work / "new.duckdb")
    for name in sorted(set(ra["said"]) | set(rb["said"])):
        if ra["said"].get(name) != rb["said"].get(name):
            problems.append(f"what ingest said of {name} differs: {ra['said'].get(name)} vs {rb['said'].get(name)}")
    if ra["notes"] != rb["notes"]:
        problems.append(f"the run's notes differ: {ra['notes']} vs {rb['notes']}")
    return [f"{case}: {p}" for p in problems]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", type=Path, default=Path("/work/main"), help="the reference checkout (its .venv)")
    ap.add_argument("--new", type=Path, default=ROOT, help="the checkout under test (default: this one)")
    ap.add_argument("--engines", default="vllm,tgi,sglang")
    ap.add_argument("--bench-dir", type=Path, default=Path(tempfile.gettempdir()) / "stallscope-bench")
    ap.add_argument("--mb", type=float, default=6, help="MB cut from each bench file (default 6; 0: none)")
    ap.add_argument("--variant-mb", type=float, default=3, help="size of the TGI and SGLang mixes (default 3 MB)")
    ap.add_argument("--each", action="store_true", help="also every input alone, in a store of its own")
    ap.add_argument("--frame-bytes", type=int, default=0, help="frame size for both sides (e.g. 40000)")
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        _worker(a.worker[0], a.worker[1:])
        return
    if a.frame_bytes:
        os.environ["COMPARE_FRAME_BYTES"] = str(a.frame_bytes)
    ref_py, new_py = (str(p / ".venv" / "bin" / "python") for p in (a.ref, a.new))
    with tempfile.TemporaryDirectory(prefix="compare-ingest-") as tmp:
        work = Path(tmp)
        files = inputs(a.engines.split(","), a.bench_dir, a.mb, a.variant_mb, work)
        cases = [("all inputs in one store", files)] + ([(f.name, [f]) for f in files] if a.each else [])
        problems = []
        for case, fs in cases:
            problems += check(case, ref_py, new_py, fs, work)
    for p in problems:
        print("DIFF", p)
    print(f"{len(cases)} case(s): " + ("every table identical" if not problems else f"{len(problems)} difference(s)"))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
