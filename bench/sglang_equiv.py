"""Equivalence check of two stallscope checkouts on SGLang logs: every canonical table identical, row for row.

Ingests each real SGLang log (alone, and all of them into one store, where the time-only logs take their date from
another source), plus a few-MB bench-style file in which the batch and access lines come behind every wrapper
prefix (Ray actor with and without ip and with Ray's stripped trailing `,`, compose, kubectl, journald, ANSI, Ray's
dedup marker), once with the reference checkout's venv and once with this one's, then compares every table of the
two stores with DuckDB (`EXCEPT ALL` both ways, and row counts). Only `sources.ingested_ns` and `sources.ingest_s`
(when and how long) may differ.

    .venv/bin/python bench/sglang_equiv.py [--ref /work/main] [--keep DIR]
"""
from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]
REAL = Path(os.environ.get("STALLSCOPE_REAL", ROOT.parent / "shared" / "real")) / "sglang"
VOLATILE = {"sources": {"ingested_ns", "ingest_s"}}

_BODY = re.compile(rb"\] (?:Prefill|Decode) batch[.,]|\] INFO: +\S+ - \"")
_WRAPS = [
    lambda ln, i: b"(SGLangEngine pid=41820) " + ln,
    lambda ln, i: b"(SGLangEngine pid=41820, ip=10.0.0.7) " + (ln[:-1] if ln.endswith(b", ") else ln),
    lambda ln, i: b"sglang-1  | " + ln,
    lambda ln, i: b"[pod/sglang-0/server] " + ln,
    lambda ln, i: b"Sep  1 10:00:00 node7 sglang[1201]: " + ln,
    lambda ln, i: b"\x1b[36m(SGLangEngine pid=7)\x1b[0m " + ln,
    lambda ln, i: ln + b" [repeated 3x across cluster]",
    lambda ln, i: b"(EngineCore pid=1) (SGLangEngine pid=2) " + ln,
]


def bench_style(out: Path, target: int = 3_000_000, seed: int = 14) -> Path:
    """The bench's SGLang mix (real dated logs once, then their batch and access lines many times), in runs of 200
    lines where every line of a run has one wrapper variant (or none), to about `target` bytes."""
    dated = re.compile(rb"(?m)^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
    files = sorted(p for p in REAL.glob("*.log") if dated.search(p.read_bytes()))
    mix = b"".join(b if b.endswith(b"\n") else b + b"\n" for b in (p.read_bytes() for p in files))
    body = [ln for ln in mix.split(b"\n") if _BODY.search(ln)]
    rng = random.Random(seed)
    parts, size, k = [mix], len(mix), 0
    while size < target:
        run = [body[(k + j) % len(body)] for j in range(200)]
        k += 200
        w = rng.randrange(len(_WRAPS) + 2)
        if w < len(_WRAPS):
            run = [_WRAPS[w](ln, j) for j, ln in enumerate(run)]
        chunk = b"\n".join(run) + b"\n"
        parts.append(chunk)
        size += len(chunk)
    out.write_bytes(b"".join(parts))
    return out


def ingest(venv_root: Path, db: Path, files: list[Path]) -> None:
    exe = venv_root / ".venv" / "bin" / "stallscope"
    env = dict(os.environ, STALLSCOPE_REAL=str(REAL.parent))
    r = subprocess.run([str(exe), "ingest", *map(str, files), "--db", str(db), "--year", "2025"],
                       capture_output=True, text=True, cwd=venv_root, env=env)
    if r.returncode not in (0, 1):
        raise SystemExit(f"{exe} failed on {files}:\n{r.stderr[-2000:]}")


def compare(a: Path, b: Path) -> list[str]:
    """Differences between the stores `a` (reference) and `b`: one line per table that differs."""
    con = duckdb.connect()
    con.execute(f"ATTACH '{a}' AS a (READ_ONLY)")
    con.execute(f"ATTACH '{b}' AS b (READ_ONLY)")
    tabs = lambda db: {r[0] for r in con.execute(  # noqa: E731
        "SELECT table_name FROM information_schema.tables WHERE table_catalog = ? AND table_type = 'BASE TABLE'",
        [db]).fetchall()}
    ta, tb = tabs("a"), tabs("b")
    diffs = [f"tables only in one store: {sorted(ta ^ tb)}"] if ta != tb else []
    for t in sorted(ta & tb):
        cols = [r[0] for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_catalog = 'a' AND table_name = ? "
            "ORDER BY ordinal_position", [t]).fetchall() if r[0] not in VOLATILE.get(t, set())]
        sel = ", ".join(f'"{c}"' for c in cols)
        na = con.execute(f"SELECT count(*) FROM a.{t}").fetchone()[0]
        nb = con.execute(f"SELECT count(*) FROM b.{t}").fetchone()[0]
        only_a = con.execute(f"SELECT count(*) FROM (SELECT {sel} FROM a.{t} EXCEPT ALL SELECT {sel} FROM b.{t})"
                             ).fetchone()[0]
        only_b = con.execute(f"SELECT count(*) FROM (SELECT {sel} FROM b.{t} EXCEPT ALL SELECT {sel} FROM a.{t})"
                             ).fetchone()[0]
        if na != nb or only_a or only_b:
            ex = con.execute(f"SELECT {sel} FROM a.{t} EXCEPT ALL SELECT {sel} FROM b.{t} LIMIT 2").fetchall()
            diffs.append(f"{t}: {na} vs {nb} rows, {only_a} only in ref, {only_b} only in this; e.g. {ex}")
    con.close()
    return diffs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", type=Path, default=Path("/work/main"), help="reference checkout with its .venv")
    ap.add_argument("--keep", type=Path, help="directory for the stores (default: a temporary one)")
    ap.add_argument("--mb", type=float, default=3.0, help="size of the bench-style file")
    args = ap.parse_args()
    d = args.keep or Path(tempfile.mkdtemp(prefix="sglang-equiv-"))
    d.mkdir(parents=True, exist_ok=True)
    real = sorted(REAL.glob("*.log"))
    bench = bench_style(d / "bench_style_sglang.log", int(args.mb * 1e6))
    cases = [(p.name, [p]) for p in real] + [("all real logs in one store", real), (bench.name, [bench])]
    bad = 0
    for name, files in cases:
        dbs = []
        for tag, root in (("ref", args.ref), ("this", ROOT)):
            db = d / f"{tag}.duckdb"
            for p in (db, Path(str(db) + ".wal")):
                p.unlink(missing_ok=True)
            ingest(root, db, files)
            dbs.append(db)
        diffs = compare(*dbs)
        bad += bool(diffs)
        print(("DIFF " if diffs else "same ") + name)
        for x in diffs:
            print("   ", x[:1500])
    print(f"{len(cases) - bad}/{len(cases)} cases identical")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
