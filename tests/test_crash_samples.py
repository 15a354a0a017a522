"""The whole of sample_traces/ crashed at 17 points of its ingest and ingested again gives the clean analysis (the
incident-by-incident crash tests: test_crash_ingest.py)."""
from __future__ import annotations

import pytest

from crashkit import SAMPLES, _crash_and_rerun, _differ, _points, _state, _tables


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
