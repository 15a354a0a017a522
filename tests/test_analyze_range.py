"""`stallscope analyze --since/--until` analyses one time range of a store; --memory-limit bounds DuckDB."""
from __future__ import annotations

import json

import duckdb
import pytest

from helpers import cli


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    d = tmp_path_factory.mktemp("sim")
    res = cli("simulate", "--out", d, "--rate", "6", "--duration", "40", "--seed", "21",
              "--incident", "long-prompts:count=3,tokens=8192,at=10,spacing=8")
    assert res.returncode == 0, res.stderr
    path = d / "store.duckdb"
    res = cli("ingest", *[p for p in sorted(d.iterdir()) if p.name.startswith(("bench_serve", "vllm_server"))],
              "--db", path)
    assert res.returncode == 0, res.stderr
    return path


def _analyze(db, tmp_path, *args):
    out = tmp_path / "a.json"
    res = cli("analyze", "--db", db, "--slo", "ttft=2s,itl=200ms", "--json", out, *args)
    assert res.returncode == 0, res.stderr
    return json.loads(out.read_text())


def test_since_until_analyse_the_requests_that_arrived_in_the_range(db, tmp_path):
    whole = _analyze(db, tmp_path)
    con = duckdb.connect(str(db), read_only=True)
    t0 = con.execute("SELECT min(arrival_ns) FROM requests").fetchall()[0][0]
    lo, hi = t0 + 10 * 10**9, t0 + 20 * 10**9
    want = con.execute(f"""SELECT count(*) FROM requests WHERE kind = 'client'
                           AND arrival_ns >= {lo} AND arrival_ns < {hi}""").fetchall()[0][0]
    con.close()
    part = _analyze(db, tmp_path, "--since", "10s", "--until", "20s")
    assert 0 < want < whole["requests"]["total"]
    assert part["requests"]["total"] == want
    assert part["spikes"] and all(s["start_ns"] >= lo for s in part["spikes"])
    assert len(part["spikes"]) < len(whole["spikes"])
    # The same range as ISO times.
    from datetime import datetime, timezone
    iso = lambda ns: datetime.fromtimestamp(ns / 1e9, timezone.utc).isoformat()  # noqa: E731
    same = _analyze(db, tmp_path, "--since", iso(lo), "--until", iso(hi))
    assert same["requests"] == part["requests"] and len(same["spikes"]) == len(part["spikes"])


def test_memory_limit_spills_instead_of_failing(db, tmp_path):
    assert _analyze(db, tmp_path, "--memory-limit", "200MB")["requests"]["total"] > 100


@pytest.mark.parametrize("args, words", [(["--since", "yesterday"], "bad time"),
                                          (["--memory-limit", "3XB"], "bad --memory-limit")])
def test_bad_range_or_limit_is_one_line(db, args, words):
    res = cli("analyze", "--db", db, *args)
    assert res.returncode != 0 and words in res.stderr and "Traceback" not in res.stderr, res.stderr


def test_analysis_memory_bounds_duckdb_by_default_and_spills_into_a_folder_of_its_own(tmp_path):
    import os

    from stallscope.ingest.memory import analysis_memory

    con = duckdb.connect(":memory:")
    own = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    analysis_memory(con, "none")
    assert con.execute("SELECT current_setting('memory_limit')").fetchone()[0] == own
    analysis_memory(con)
    limit = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    assert limit != own and limit.endswith(("GiB", "GB")) and 1.5 < float(limit.split()[0]) <= 2.0, limit
    spill = con.execute("SELECT current_setting('temp_directory')").fetchone()[0]
    other = duckdb.connect(":memory:")
    analysis_memory(other, "64MB")
    assert other.execute("SELECT current_setting('temp_directory')").fetchone()[0] != spill
    # Beyond the limit DuckDB spills there rather than failing.
    other.execute("CREATE TABLE t AS SELECT range AS a, (range % 977)::VARCHAR || 'padding-padding' AS s "
                  "FROM range(3000000)")
    assert other.execute("SELECT count(DISTINCT s), sum(a) FROM t").fetchone() == (977, 3000000 * 2999999 // 2)
    assert os.path.isdir(other.execute("SELECT current_setting('temp_directory')").fetchone()[0])


@pytest.mark.slow  # a report with its recommendation: the whole suite's tier
def test_report_and_recommend_take_the_memory_limit(db, tmp_path):
    res = cli("report", "--db", db, "--slo", "ttft=2s,itl=200ms", "--memory-limit", "300MB", "--out", tmp_path / "r")
    assert res.returncode == 0, res.stderr
    assert json.loads((tmp_path / "r" / "analysis.json").read_text())["recommendation"]["setting"]
    res = cli("recommend", "--db", db, "--slo", "ttft=2s,itl=200ms", "--memory-limit", "2XB")
    assert res.returncode != 0 and "bad --memory-limit" in res.stderr and "Traceback" not in res.stderr
