"""The metrics views over windows, judged against the simulator's truth: an incident exported as vLLM's Prometheus
would hold it (a query_range matrix, stallscope/simulate/emit_metrics.py) gives p99 estimates inside the bucket of the
true p99, SLO shares equal to the true ones at a bucket edge, and goodput bounds that hold the true goodput and are
exactly the Fréchet bounds of the histograms; counter resets count the new value as the increase."""
from __future__ import annotations

import json

import numpy as np
import pytest

import stallscope
from stallscope import sqlviews
from stallscope.simulate import emit_metrics
from stallscope.simulate.runner import RunSpec, execute

INTERVAL_S = 10.0


@pytest.fixture(scope="module")
def incident(tmp_path_factory):
    """A run with long prompts stalling decodes, its export, and a store holding it."""
    run = execute(RunSpec(rate=5.0, duration_s=60.0, incident="long-prompts:count=4,tokens=8192,at=20,spacing=8",
                          seed=3))
    d = tmp_path_factory.mktemp("metrics")
    path = d / "prometheus_query_range.json"
    path.write_bytes(emit_metrics.query_range(run, INTERVAL_S))
    s = stallscope.open(":memory:")
    r = s.ingest([path])[0]
    assert r.ok, r.message
    return run, s


def _views(s, **slo):
    sqlviews.install(s.con, report=False, **slo)
    return s.con


def _truth_windows(run):
    """Per scrape window (by end instant, relative ns): the true observations of each histogram."""
    at = emit_metrics.scrape_times(run, INTERVAL_S)
    obs = emit_metrics.observations(run)
    out = {}
    for name, (t, v) in obs.items():
        k = np.searchsorted(at, t, side="left")  # window k = (at[k-1], at[k]]
        out[name] = {int(at[i]): v[k == i] for i in range(1, len(at))}
    return at, out


def test_itl_p99_lies_in_the_bucket_of_the_true_p99(incident):
    run, s = incident
    con = _views(s, itl_ms=200)
    rows = con.execute("SELECT end_ns, itl_count, itl_p99_ms, itl_p99_lo_ms, itl_p99_hi_ms FROM metric_windows "
                       "ORDER BY end_ns").fetchall()
    _, truth = _truth_windows(run)
    itl = truth["vllm:inter_token_latency_seconds"]
    checked = 0
    for end_ns, n, est, lo, hi in rows:
        v = np.sort(itl[end_ns - run.epoch_start_ns]) * 1000
        assert n == len(v)
        if not len(v):
            assert est is None
            continue
        p99 = v[int(np.ceil(0.99 * len(v))) - 1]  # nearest rank: the observation the bucket counts reach
        assert lo < p99 <= hi + 1e-9, (end_ns, p99, lo, hi)
        assert lo <= est <= hi
        checked += 1
    assert checked >= 5
    # The incident's long prompts show as an ITL tail well above the calm windows'.
    p99s = [r[2] for r in rows if r[2] is not None]
    assert max(p99s) > 2 * min(p99s)


def test_slo_shares_are_exact_at_a_bucket_edge_and_bounded_between_edges(incident):
    run, s = incident
    _, truth = _truth_windows(run)
    ttft = truth["vllm:time_to_first_token_seconds"]
    for ms, exact in ((500.0, True), (400.0, False)):  # 0.5 s is an edge; 0.4 s lies in (0.25, 0.5]
        con = _views(s, ttft_ms=ms)
        rows = con.execute("SELECT end_ns, ttft_ok_lo, ttft_ok_hi FROM metric_windows WHERE ttft_count > 0").fetchall()
        assert rows
        for end_ns, lo, hi in rows:
            true = int((ttft[end_ns - run.epoch_start_ns] <= ms / 1000).sum())
            assert lo <= true <= hi
            if exact:
                assert lo == hi == true


@pytest.mark.parametrize("slo", [dict(ttft_ms=500.0, tpot_ms=50.0), dict(ttft_ms=300.0, tpot_ms=40.0),
                                 dict(ttft_ms=250.0, tpot_ms=100.0)])
def test_goodput_bounds_hold_the_truth_and_are_the_frechet_bounds(incident, slo):
    run, s = incident
    con = _views(s, **slo)
    (lo, hi, n, a_lo, a_hi, b_lo, b_hi), = con.execute(
        "SELECT good_lo, good_hi, finished, ttft_ok_lo, ttft_ok_hi, tpot_ok_lo, tpot_ok_hi FROM metric_goodput"
    ).fetchall()
    obs = emit_metrics.observations(run)
    ttft, tpot = obs["vllm:time_to_first_token_seconds"][1], obs["vllm:request_time_per_output_token_seconds"][1]
    a, b = ttft <= slo["ttft_ms"] / 1000, tpot <= slo["tpot_ms"] / 1000
    good = int((a & b).sum())
    assert n == run.n
    assert a_lo <= a.sum() <= a_hi and b_lo <= b.sum() <= b_hi
    assert lo <= good <= hi
    # Exactly Fréchet's bounds of these counts: never tighter, never looser.
    assert (lo, hi) == (max(0, a_lo + b_lo - n), min(a_hi, b_hi))
    assert hi - lo < n  # and they say something


def _matrix(series):
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": m, "values": [[t, str(v)] for t, v in vals]} for m, vals in series]}})


def test_a_counter_reset_counts_the_new_value_as_the_increase(tmp_path):
    t0 = 1_750_000_000
    base = {"engine": "0", "instance": "a:8000", "model_name": "m"}
    prompt = [(t0, 100), (t0 + 15, 400), (t0 + 30, 50), (t0 + 45, 250)]  # restarted between 15 and 30
    p = tmp_path / "reset.json"
    p.write_text(_matrix([({"__name__": "vllm:prompt_tokens_total", **base}, prompt),
                          ({"__name__": "vllm:prompt_tokens_total", **base, "engine": "1"},
                           [(t0, 0), (t0 + 15, 10), (t0 + 30, 20), (t0 + 45, 30)])]))
    s = stallscope.open(":memory:")
    assert s.ingest([p])[0].ok
    con = _views(s)
    got = con.execute("SELECT replica, increase, reset FROM metric_counter_rates ORDER BY replica, end_ns").fetchall()
    assert got == [("a:8000/0/", 300.0, False), ("a:8000/0/", 50.0, True), ("a:8000/0/", 200.0, False),
                   ("a:8000/1/", 10.0, False), ("a:8000/1/", 10.0, False), ("a:8000/1/", 10.0, False)]
    merged = con.execute("SELECT prompt_tokens_per_s FROM metric_timeline(0) ORDER BY start_ns").fetchall()
    assert [round(r[0] * 15) for r in merged] == [310, 60, 210]


def test_sglang_and_tgi_names_map_to_the_same_concepts(tmp_path):
    t0 = 1_750_000_000
    les = ["0.05", "0.1", "+Inf"]
    ser = []
    for name, lab in (("sglang:inter_token_latency_seconds", {"tp_rank": "0", "dp_rank": "1"}),
                      ("tgi_request_mean_time_per_token_duration", {"instance": "tgi:80"})):
        for le, counts in zip(les, ([0, 90], [0, 99], [0, 100])):
            ser.append(({"__name__": name + "_bucket", "le": le, **lab}, list(zip((t0, t0 + 15), counts))))
    p = tmp_path / "mixed.json"
    p.write_text(_matrix(ser))
    s = stallscope.open(":memory:")
    assert s.ingest([p])[0].ok
    con = _views(s)
    rows = dict(con.execute("SELECT replica, coalesce(itl_p99_hi_ms, tpot_p99_hi_ms) FROM metric_windows").fetchall())
    assert rows == {"//1": 100.0, "tgi:80//": 100.0}  # the 99th of 100 lies in (0.05, 0.1]


def test_analyze_json_metrics_bound_the_true_goodput(incident):
    from stallscope.analyze import Options, analyze, parse_slo
    run, s = incident
    doc = analyze(s.con, Options(slo=parse_slo("ttft=500ms,tpot=50ms,itl=200ms"), report_views=False))
    m = doc["metrics"]
    obs = emit_metrics.observations(run)
    good = int(((obs["vllm:time_to_first_token_seconds"][1] <= 0.5)
                & (obs["vllm:request_time_per_output_token_seconds"][1] <= 0.05)).sum())
    dur = (m["window_end_ns"] - m["window_start_ns"]) / 1e9
    lo, hi = m["goodput_rps_bounds"]
    assert lo <= good / dur <= hi
    assert m["attainment_bounds"][0] <= good / run.n <= m["attainment_bounds"][1]
    _, truth = _truth_windows(run)
    itl = truth["vllm:inter_token_latency_seconds"]
    edges = (0.0, *emit_metrics.ITL_BUCKETS, float("inf"))
    for w in m["windows"]:
        v = np.sort(itl[w["end_ns"] - run.epoch_start_ns])
        if len(v):
            p99 = v[int(np.ceil(0.99 * len(v))) - 1]
            k = np.searchsorted(edges, p99, side="left")  # p99 in (edges[k-1], edges[k]]
            assert edges[k - 1] * 1000 <= w["itl_p99_ms"] <= edges[k] * 1000
    assert m["interference"] and m["interference"][0]["itl_rise"] > 1


def test_analysis_of_a_store_without_metrics_has_no_metrics_key(tmp_path):
    from stallscope.analyze import Options, analyze
    s = stallscope.open(":memory:")
    assert "metrics" not in analyze(s.con, Options(report_views=False))


def test_report_draws_the_metrics_timeline_from_the_view(incident, tmp_path):
    from stallscope.analyze import Options, analyze, parse_slo
    from stallscope.report import figures as F
    from stallscope.report.build import build
    _, s = incident
    doc = analyze(s.con, Options(slo=parse_slo("ttft=500ms,tpot=50ms,itl=200ms")))
    fig = F.metrics_timeline(s, doc)
    line = next(ln for ax in fig.axes for ln in ax.get_lines() if ln.get_gid() == "itl_p99")
    want = [w["itl_p99_ms"] for w in doc["metrics"]["windows"]]
    assert np.allclose(line.get_ydata(), want, equal_nan=True)
    rep = build(s, doc, tmp_path / "rep")
    md = (tmp_path / "rep" / "report.md").read_text()
    assert rep.files["metrics_timeline"].exists() and "## From metrics" in md and "metric_interference" in md
