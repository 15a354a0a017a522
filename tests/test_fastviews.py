"""The scale paths of the analysis equal their plain SQL: the window median's fast path, the bucketed interval joins."""
from __future__ import annotations

import numpy as np
import pytest

import stallscope
from stallscope import sqlviews
from stallscope.fastviews import FAST, kth_smallest, window_median
from helpers import cli


def test_kth_smallest_is_the_sorted_ranges_kth():
    rng = np.random.default_rng(7)
    v = rng.integers(-50, 400, 3000)          # many ties, negatives
    lo = rng.integers(0, 2999, 2000)
    hi = lo + 1 + rng.integers(0, 3000 - lo)
    k = (rng.random(2000) * (hi - lo)).astype(np.int64)
    want = np.array([np.sort(v[a:b])[c] for a, b, c in zip(lo, hi, k)])
    assert np.array_equal(kth_smallest(v, lo, hi, k), want)
    assert kth_smallest(np.array([5]), np.array([0]), np.array([1]), np.array([0])).tolist() == [5]


def test_window_median_is_the_range_frame_median():
    part = np.repeat([0, 1], [400, 300])
    t = np.random.default_rng(1).integers(0, 5000, 700)
    t = np.concatenate([np.sort(t[:400]), np.sort(t[400:])])   # ties in time included
    v = np.random.default_rng(2).integers(1, 10**9, 700)
    got = window_median(part, t, v, 250)
    for i in range(700):
        m = (part == part[i]) & (np.abs(t - t[i]) <= 250)
        assert got[i] == np.median(v[m]), i


@pytest.fixture(scope="module")
def sim_store(tmp_path_factory):
    """Two simulated benchmark runs (no trace: the inferred attribution) in one store."""
    s = stallscope.open(":memory:")
    for seed in ("11", "12"):
        d = tmp_path_factory.mktemp(f"sim{seed}")
        res = cli("simulate", "--out", d, "--rate", "6", "--duration", "40", "--seed", seed,
                  "--incident", "long-prompts:count=3,tokens=8192,at=10,spacing=8")
        assert res.returncode == 0, res.stderr
        rep = s.ingest([p for p in d.iterdir() if p.name.startswith("bench_serve")])
        assert all(r.ok for r in rep), [r.message for r in rep]
    yield s
    s.close()


@pytest.mark.parametrize("window_s", [30.0, 0.5])
def test_client_gap_median_fast_path_equals_its_sql(sim_store, window_s):
    con = sim_store.con
    sqlviews.install(con, report=False, baseline_window_s=window_s)
    sqlviews.materialise(con, ["client_gaps"])
    assert FAST["client_gap_median"](con, "fast_median")
    n = con.execute("SELECT count(*) FROM client_gap_median").fetchall()[0][0]
    assert n > 1000 and con.execute("SELECT count(DISTINCT source_id) FROM client_gap_median").fetchall()[0][0] == 2
    for a, b in (("client_gap_median", "fast_median"), ("fast_median", "client_gap_median")):
        assert con.execute(f"SELECT count(*) FROM (SELECT * FROM {a} EXCEPT ALL SELECT * FROM {b})").fetchall()[0][0] == 0
    assert con.execute("SELECT count(*) FROM fast_median").fetchall()[0][0] == n


def test_bucketed_pairs_equal_the_plain_interval_join():
    """Random spikes and prefill windows over two runs, some spanning hours, some reversed: every overlapping pair
    of different requests once, as the plain join finds them."""
    con = stallscope.open(":memory:").con
    sqlviews.install(con, report=False)
    rng = np.random.default_rng(5)
    S = 1_000_000_000

    def rows(n, span):
        start = 1_700_000_000 * S + rng.integers(0, 600 * S, n)
        length = rng.integers(1, span, n)
        length[:3] = [5000 * S, -2 * S, 7200 * S]  # beyond the bucketed span; reversed
        return start, start + length

    ss, se = rows(400, 3 * S)
    ws, we = rows(300, 10 * S)
    con.execute("CREATE TEMP TABLE t_spikes AS SELECT * FROM (SELECT unnest(range(1, 401)) AS spike_id, "
                "'request' AS level, unnest(?) AS source_id, 1::BIGINT AS run_line, "
                "unnest(?)::VARCHAR AS request_id, unnest(?) AS start_ns, unnest(?) AS end_ns)",
                [rng.integers(1, 3, 400).tolist(), rng.integers(0, 50, 400).tolist(), ss.tolist(), se.tolist()])
    con.execute("ALTER TABLE t_spikes ADD COLUMN gap_ns BIGINT DEFAULT 0")
    con.execute("CREATE TEMP TABLE t_windows AS SELECT unnest(?) AS source_id, 1::BIGINT AS run_line, "
                "unnest(?)::VARCHAR AS request_id, 'r' AS report_id, 10 AS prompt_tokens, "
                "unnest(?) AS window_start_ns, unnest(?) AS window_end_ns",
                [rng.integers(1, 3, 300).tolist(), rng.integers(0, 50, 300).tolist(), ws.tolist(), we.tolist()])
    con.execute("CREATE OR REPLACE TEMP VIEW spikes AS SELECT * FROM t_spikes")
    con.execute("CREATE OR REPLACE TEMP VIEW request_prefill_windows AS SELECT * FROM t_windows")
    con.execute(sqlviews.all_queries()["spike_prefill_window_pairs"].sql)
    plain = """SELECT s.spike_id, w.request_id, w.window_start_ns, w.window_end_ns FROM t_spikes s
               JOIN t_windows w ON w.source_id = s.source_id AND w.run_line = s.run_line
                AND w.window_start_ns < s.end_ns AND w.window_end_ns > s.start_ns AND w.request_id <> s.request_id"""
    fast = "SELECT spike_id, request_id, window_start_ns, window_end_ns FROM spike_prefill_window_pairs"
    n = con.execute(f"SELECT count(*) FROM ({plain})").fetchall()[0][0]
    assert n > 500
    assert con.execute(f"SELECT count(*) FROM ({fast})").fetchall()[0][0] == n
    assert con.execute(f"SELECT count(*) FROM ({plain} EXCEPT ALL {fast})").fetchall()[0][0] == 0


def test_stalled_decodes_count_the_requests_decoding_throughout(sim_store):
    from stallscope.analyze import Options, prepare

    con = sim_store.con
    prepare(con, Options(report_views=False))
    bad = con.execute("""
        WITH plain AS (
            SELECT s.spike_id, count(m.request_id) AS n FROM spikes s LEFT JOIN request_metrics m
              ON m.source_id = s.source_id AND m.run_line = s.run_line
             AND m.first_token_ns <= s.start_ns AND m.finish_ns >= s.end_ns
            WHERE s.level = 'request' GROUP BY s.spike_id)
        SELECT count(*), count(*) FILTER (WHERE coalesce(a.stalled_decodes, 0) <> p.n), max(p.n)
        FROM plain p JOIN spike_attribution a USING (spike_id)""").fetchall()[0]
    assert bad[0] > 20 and bad[1] == 0 and bad[2] > 1, bad


def test_the_window_medians_are_freed_once_the_baselines_hold_them(sim_store):
    """After an analysis nothing holds the 9M-row median table of an hour, and the view still answers."""
    from stallscope import analyze

    con = sim_store.con
    analyze.prepare(con, analyze.Options(report_views=False))
    tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall()}
    assert "_m_spikes" in tables and not {"_m_client_gap_median", "_m_gap_baseline"} & tables
    n = con.execute("SELECT count(*) FROM client_gaps").fetchall()[0][0]
    assert n > 1000 and con.execute("SELECT count(*) FROM client_gap_median").fetchall()[0][0] == n
