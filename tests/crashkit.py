"""Shared by the crash tests (test_crash_ingest.py, test_crash_samples.py): run an ingest that crashes at a named or
numbered point (`STALLSCOPE_CRASH_AT`), run it again, and compare what the store then gives with a clean ingest's."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import duckdb
from stallscope.faults import CRASH_EXIT

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"
INCIDENT = SAMPLES / "chunked-8192-tpot-violations"
SLO = "ttft=5s,tpot=50ms"  # the incident's own (its README): about half its goodput is lost to interference


def _run(*args, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stallscope.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def _ingest(inputs: Path, db: Path, **env) -> subprocess.CompletedProcess:
    return _run("ingest", inputs, "--db", db, env=env)


def _state(db: Path) -> dict:
    """What a user gets from the store: the analysis numbers, and each source with its clock."""
    out = db.with_suffix(".analysis.json")
    r = _run("analyze", "--db", db, "--json", out, "--slo", SLO)
    assert r.returncode == 0, r.stderr
    a = json.loads(out.read_text())
    with duckdb.connect(str(db), read_only=True) as con:
        sources = con.execute("SELECT source_id, path, sha256, clock_method, clock_offset_ns, records_parsed "
                              "FROM sources ORDER BY source_id").fetchall()
        steps = con.execute("SELECT step, state FROM derived_steps ORDER BY step").fetchall()
    return {"goodput_rps": a["goodput_rps"], "goodput_lost_rps": a["goodput_lost_rps"],
            "interference_gpu_s": a.get("interference_gpu_s"), "spikes": a["spikes"], "sources": sources,
            "derived_steps": steps}


def _differ(a, b, where: str = "") -> str | None:
    """Where two states first differ, or None. Floats compare to 1e-9 relative: DuckDB's parallel sums add in
    no fixed order, so two clean ingests of the same files differ in the last digits of an overlap."""
    if isinstance(a, float) and isinstance(b, float):
        return None if math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9) else f"{where}: {a} != {b}"
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return f"{where}: keys {sorted(a)} != {sorted(b)}"
        return next((d for k in a if (d := _differ(a[k], b[k], f"{where}.{k}"))), None)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return f"{where}: {len(a)} items != {len(b)}"
        return next((d for i, (x, y) in enumerate(zip(a, b)) if (d := _differ(x, y, f"{where}[{i}]"))), None)
    return None if a == b else f"{where}: {a!r} != {b!r}"


# Columns that say when or how fast a load ran, not what it loaded.
_RUN_COLUMNS = {"sources": ("ingested_ns", "ingest_s"), "derived_steps": ("updated_ns",)}


def _tables(db: Path) -> dict:
    """Every canonical table's content: row count and an order-free sum of row hashes (the run's own timings left
    out). Equal tables give equal analyses (the analysis reads nothing else), at a fraction of an analysis' cost."""
    from stallscope.schema import TABLES

    out = {}
    with duckdb.connect(str(db), read_only=True) as con:
        for name in TABLES:
            drop = _RUN_COLUMNS.get(name)
            cols = f"* EXCLUDE ({', '.join(drop)})" if drop else "*"
            out[name] = con.execute(f"SELECT count(*), sum(hash(t)) FROM (SELECT {cols} FROM {name}) t").fetchall()[0]
    return out


def _points(inputs: Path, db: Path) -> list[str]:
    """Every crash point a clean ingest of `inputs` passes, in order."""
    log = db.with_suffix(".points")
    r = _ingest(inputs, db, STALLSCOPE_CRASH_LOG=str(log))
    assert r.returncode == 0, r.stderr
    return log.read_text().split()


def _crash_and_rerun(inputs: Path, db: Path, point: str, *, analyse: bool = True) -> dict:
    """The store after an ingest crashed at `point` and a second ingest: its analysis state (`_state`), or with
    analyse=False only its tables (`_tables`)."""
    crashed = _ingest(inputs, db, STALLSCOPE_CRASH_AT=point)
    assert crashed.returncode == CRASH_EXIT, (point, crashed.returncode, crashed.stderr)
    again = _ingest(inputs, db)
    assert again.returncode == 0, (point, again.stderr)
    return _state(db) if analyse else _tables(db)
