"""An ingest killed at any point (a deterministic crash hook, `STALLSCOPE_CRASH_AT`, not timing luck) and run
again gives the store and the analysis of a clean ingest: derived steps (clock alignment) left unfinished by the
crash are run by the next ingest even though every file is then unchanged."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

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


@pytest.fixture(scope="module")
def incident(tmp_path_factory):
    """(crash points of a clean ingest of one incident, the state of that clean store)."""
    db = tmp_path_factory.mktemp("clean") / "clean.duckdb"
    points = _points(INCIDENT, db)
    return points, _state(db)


def _crash_and_rerun(inputs: Path, db: Path, point: str, *, analyse: bool = True) -> dict:
    """The store after an ingest crashed at `point` and a second ingest: its analysis state (`_state`), or with
    analyse=False only its tables (`_tables`)."""
    crashed = _ingest(inputs, db, STALLSCOPE_CRASH_AT=point)
    assert crashed.returncode == CRASH_EXIT, (point, crashed.returncode, crashed.stderr)
    again = _ingest(inputs, db)
    assert again.returncode == 0, (point, again.stderr)
    return _state(db) if analyse else _tables(db)


def test_the_clean_run_passes_the_points_that_matter(incident):
    points, clean = incident
    assert points[0] == "ingest.file1.start" and points[-1] == "derive.clock_alignment.committed"
    assert "ingest.loaded" in points and "ingest.file4.before_commit" in points
    assert clean["derived_steps"] == [("clock_alignment", "done")]
    assert "matched_trace_steps" in {s[3] for s in clean["sources"]}  # the benchmark is on the trace's clock
    assert clean["goodput_lost_rps"] > 0 and clean["spikes"]


def test_a_crash_between_loading_and_alignment_is_completed_by_the_next_ingest(tmp_path, incident):
    """The reported case: every file in, the benchmark still on its fallback clock; the re-run used to say
    `unchanged` for every file and never align, and the analysis lost all its interference."""
    _, clean = incident
    db = tmp_path / "s.duckdb"
    crashed = _ingest(INCIDENT, db, STALLSCOPE_CRASH_AT="derive.clock_alignment.before_commit")
    assert crashed.returncode == CRASH_EXIT
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT state FROM derived_steps").fetchall() == [("pending",)]
        assert "bench_date_minus_duration" in {r[0] for r in con.execute("SELECT clock_method FROM sources")
                                               .fetchall()}
    again = _ingest(INCIDENT, db)
    assert again.returncode == 0 and again.stdout.count("unchanged") == 4
    assert _differ(_state(db), clean) is None


def test_a_crash_inside_a_load_leaves_no_trace_of_it(tmp_path, incident):
    _, clean = incident
    assert _differ(_crash_and_rerun(INCIDENT, tmp_path / "s.duckdb", "ingest.file2.before_commit"), clean) is None


@pytest.mark.slow
def test_a_crash_at_every_point_of_one_incident_gives_the_clean_store(tmp_path, incident):
    """Every point, compared table by table with the clean store (equal tables give the equal analysis that the
    17-point test below checks in full)."""
    points, _ = incident
    clean_db = tmp_path / "clean.duckdb"
    assert _points(INCIDENT, clean_db) == points
    clean = _tables(clean_db)
    assert clean["derived_steps"][0] == 1 and clean["token_gaps"][0] > 0
    for i, point in enumerate(points):
        db = tmp_path / f"s{i}.duckdb"
        assert _crash_and_rerun(INCIDENT, db, point, analyse=False) == clean, point
        db.unlink()


@pytest.mark.slow
def test_a_crash_at_17_points_of_the_sample_ingest_gives_the_clean_analysis(tmp_path):
    """The whole of sample_traces/ (3 incidents, 12 inputs): 17 points spread evenly over its run, numbered
    (the N-th point reached) so they cover the loads and the alignment alike. At every point the re-run store's
    tables equal the clean store's, so its analysis does too; the analysis itself (goodput, lost goodput, spikes)
    is compared in full at the first point, at the first one after every file loaded (alignment pending or done)
    and at the last (an analysis of the three incidents costs about as much as the two ingests)."""
    clean_db = tmp_path / "clean.duckdb"
    points = _points(SAMPLES, clean_db)
    clean, clean_tables = _state(clean_db), _tables(clean_db)
    picks = sorted({round(i * (len(points) - 1) / 16) for i in range(17)})
    assert len(picks) == 17 and points[picks[-1]] == "derive.clock_alignment.committed"
    loaded = points.index("ingest.loaded")
    picks_analysed = {picks[0], min(p for p in picks if p >= loaded), picks[-1]}
    for n in picks:
        db = tmp_path / f"s{n}.duckdb"
        assert _crash_and_rerun(SAMPLES, db, str(n + 1), analyse=False) == clean_tables, points[n]
        if n in picks_analysed:
            assert _differ(_state(db), clean) is None, points[n]
        db.unlink()
