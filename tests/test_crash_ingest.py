"""An ingest killed at any point (a deterministic crash hook, `STALLSCOPE_CRASH_AT`, not timing luck) and run
again gives the store and the analysis of a clean ingest: derived steps (clock alignment) left unfinished by the
crash are run by the next ingest even though every file is then unchanged. (The whole sample set at 17 points:
test_crash_samples.py, a file of its own so that the two long crash tests run on different workers.)"""
from __future__ import annotations

import duckdb
import pytest

from crashkit import INCIDENT, _crash_and_rerun, _differ, _ingest, _points, _state, _tables
from stallscope.faults import CRASH_EXIT


@pytest.fixture(scope="module")
def incident(tmp_path_factory):
    """(crash points of a clean ingest of one incident, the state of that clean store)."""
    db = tmp_path_factory.mktemp("clean") / "clean.duckdb"
    points = _points(INCIDENT, db)
    return points, _state(db)



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
