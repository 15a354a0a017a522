"""Shared fixtures: where the real samples are, and stores built from them once per session."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REAL = Path(os.environ.get("STALLSCOPE_REAL", ROOT.parent / "shared" / "real"))
TRACES = REAL / "traces"


def real(rel: str) -> Path:
    """A file under ../shared/real/; its absence is a failure, not a skip (CI must have the fixtures)."""
    p = REAL / rel
    if not p.exists():
        if os.environ.get("STALLSCOPE_ALLOW_NO_REAL"):
            pytest.skip(f"real sample {p} not present")
        pytest.fail(f"real sample {p} missing: tests read ../shared/real/ (set STALLSCOPE_REAL to its path)")
    return p


@pytest.fixture(scope="session")
def traces_store(tmp_path_factory):
    """Every real GPU trace ingested into one store."""
    import stallscope

    db = tmp_path_factory.mktemp("traces") / "t.duckdb"
    s = stallscope.open(db)
    report = s.ingest(real("traces"))
    assert all(r.ok for r in report), [r.message for r in report if not r.ok]
    yield s
    s.close()


def source_id(store, name_part: str) -> int:
    rows = store.sql("SELECT source_id FROM sources WHERE path LIKE ?", [f"%{name_part}%"]).to_series().to_list()
    assert len(rows) == 1, (name_part, rows)
    return rows[0]


# The files whose tests run longest go first: `-n 2 --dist loadfile --no-loadscope-reorder` (the Makefile) hands files
# out in collection order, and a long file started last leaves one worker alone at the end (the crash tests' 17 points
# alone are minutes of ingests, so they are a file of their own, beside the incident's every-point test on the other
# worker). Without --no-loadscope-reorder xdist orders the files by test count and this order is lost.
LONG_FILES = ("test_crash_samples.py", "test_crash_ingest.py", "test_capture.py", "test_fleet.py", "test_report.py")


def pytest_collection_modifyitems(config, items):
    first = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: first.get(item.path.name, len(first)))
