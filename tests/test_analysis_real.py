"""Stall forensics on real data: vLLM goodput parity, step-level spikes on real traces, inferred attribution."""
from __future__ import annotations

import json

import orjson
import pytest

import stallscope
from stallscope import sqlviews
from stallscope.analyze import Options, Slo, analyze, parse_slo
from stallscope.errors import StallscopeError
from conftest import real
from helpers import cli

BENCH = [f"vllm/bench_serving_0.8.3_llama70b_tp4pp2_sharegpt_qps_{q}_llmk8s.json" for q in ("01", "04", "16", "inf")]
LOG = "vllm/v0_0.8.3_ray_tp4pp2_llama70b_full_server_log_800req_llmk8s.log"


def vllm_goodput(d: dict, slo: dict[str, float]) -> tuple[int, float]:
    """vLLM's own algorithm (benchmark_serving.py calculate_metrics), applied to a result file as written.

    Successful requests only; TPOT = (latency - ttft) / (output_len - 1), 0 when output_len <= 1; a request
    is good when every configured SLO (ms, divided by 1000) is >= the metric in seconds. The 0.8.3 files have
    no `latencies`, so latency is ttft + sum(itls), which is what vLLM measures (the last chunk's time)."""
    ttfts, tpots, e2els = [], [], []
    for i, ttft in enumerate(d["ttfts"]):
        if d.get("errors") and d["errors"][i]:
            continue
        lat = d["latencies"][i] if "latencies" in d else ttft + sum(d["itls"][i])
        n = d["output_lens"][i]
        ttfts.append(ttft)
        tpots.append((lat - ttft) / (n - 1) if n > 1 else 0)
        e2els.append(lat)
    metrics, slos = [], []
    for key, values in (("ttft", ttfts), ("tpot", tpots), ("e2el", e2els)):
        if key in slo:
            metrics.append(values)
            slos.append(slo[key] / 1000)
    good = sum(1 for req in zip(*metrics) if all(s >= r for s, r in zip(slos, req)))
    return good, good / d["duration"]


@pytest.fixture(scope="module")
def bench_store():
    s = stallscope.open(":memory:")
    rep = s.ingest([real(b) for b in BENCH])
    assert all(r.ok for r in rep)
    return s


@pytest.mark.parametrize("slo", [
    {"ttft": 500}, {"ttft": 1000, "tpot": 60, "e2el": 20000},
    # the same check under more SLO sets: the full suite only
    *(pytest.param(slo, marks=pytest.mark.slow) for slo in (
        {"tpot": 50}, {"ttft": 2000, "tpot": 100}, {"tpot": 40}, {"ttft": 250, "tpot": 30}, {"e2el": 15000},
        {"ttft": 8000, "tpot": 75})),
])
def test_goodput_equals_vllm_on_each_real_file(bench_store, slo):
    s = bench_store
    sqlviews.install(s.con, ttft_ms=slo.get("ttft"), tpot_ms=slo.get("tpot"), e2el_ms=slo.get("e2el"))
    got = s.sql("SELECT s.path, g.good, g.goodput_rps FROM goodput_runs g JOIN sources s USING (source_id)")
    assert got.height == 4
    for path, good, goodput in got.iter_rows():
        d = orjson.loads(open(path, "rb").read())
        want_good, want_goodput = vllm_goodput(d, slo)
        assert good == want_good, (path, slo)
        assert goodput == pytest.approx(want_goodput, rel=1e-12)


def test_mean_tpot_hides_a_stall_that_the_itl_slo_catches(bench_store):
    s = bench_store
    sqlviews.install(s.con, tpot_ms=100, itl_ms=200)
    row = s.sql("""SELECT count(*) FROM request_verdicts v JOIN request_metrics m USING (source_id, run_line, request_id)
                   WHERE v.ok_tpot AND NOT v.ok_itl""").item()
    assert row > 0  # requests whose mean TPOT passes though one gap exceeds the ITL SLO
    bad = s.sql("SELECT count(*) FROM request_verdicts WHERE ok_itl AND ok_tpot AND NOT good").item()
    assert bad == 0


@pytest.mark.parametrize("name,steps,ratio", [
    ("vllm_h100_tp4_llama_isl1000_osl10_c32.pt.trace.json.gz", 10, (4.4, 5.0)),
    ("vllm_mi300x_tp4_llama_isl1000_osl10_c32.pt.trace.json.gz", 10, (3.3, 3.8)),
])
def test_trace_alone_gives_one_step_level_spike(name, steps, ratio):
    s = stallscope.open(":memory:")
    s.ingest(real(f"traces/{name}"))
    r = analyze(s.con)
    assert len(r["spikes"]) == 1
    sp = r["spikes"][0]
    assert sp["level"] == "step" and sp["step_index"] == 0 and sp["request_id"] is None
    assert ratio[0] < sp["gap_ms"] / sp["baseline_ms"] < ratio[1]
    # The trace does not say how many decodes the step held: null, not a guess.
    assert sp["stalled_decodes"] is None and sp["evidence"] == "steps" and sp["culprits"] == []
    assert r["schema"] == "stallscope.analysis/1"


@pytest.fixture(scope="module")
def matched_store():
    s = stallscope.open(":memory:")
    rep = s.ingest([real(LOG)] + [real(b) for b in BENCH])
    assert all(r.ok for r in rep), [r.message for r in rep]
    return s


def test_log_plus_bench_spikes_are_inferred_with_overlapping_culprits(matched_store):
    s = matched_store
    r = analyze(s.con, Options(slo=Slo(ttft_ms=2000, tpot_ms=100, itl_ms=200)))
    spikes = [x for x in r["spikes"] if x["level"] == "request"]
    assert len(spikes) > 100
    assert all(x["evidence"] == "inferred" for x in spikes)
    assert all(x["request_id"].startswith("cmpl-") for x in spikes)
    with_culprits = [x for x in spikes if x["culprits"]]
    assert len(with_culprits) > 0.5 * len(spikes)
    # A spike no other prefill overlaps is all "other": nothing is forced onto a prefill.
    for x in spikes:
        if not x["culprits"]:
            assert x["prefill_overlap_ms"] == 0 and x["other_ms"] == pytest.approx(x["excess_ms"])
    # Every named culprit's inferred prefill window overlaps the gap, and is never the stalled request itself.
    win = {w["report_id"]: (w["window_start_ns"], w["window_end_ns"])
           for w in s.sql("SELECT * FROM request_prefill_windows").iter_rows(named=True)}
    for x in with_culprits:
        for c in x["culprits"]:
            assert c["request_id"] != x["request_id"] and c["request_id"].startswith("cmpl-")
            lo, hi = win[c["request_id"]]
            assert lo < x["end_ns"] and hi > x["start_ns"]
            assert 0 < c["overlap_ms"] <= x["gap_ms"] + 1e-6
    assert r["requests"]["total"] == 800 and r["gpus"] == 8


def test_counterfactual_never_goes_below_the_decode_baseline(matched_store):
    s = matched_store
    analyze(s.con, Options(slo=Slo(itl_ms=200)))
    bad = s.sql("""SELECT count(*) FROM spikes s JOIN spike_attribution a USING (spike_id)
                   WHERE a.prefill_excess_ns > s.gap_ns - s.baseline_ns OR a.prefill_excess_ns < 0""").item()
    assert bad == 0
    worse = s.sql("SELECT count(*) FROM request_counterfactual WHERE good AND NOT good_cf").item()
    assert worse == 0


def test_slo_parsing():
    assert parse_slo("ttft=500ms,tpot=0.05s,itl=200").as_dict() == {"ttft_ms": 500, "tpot_ms": 50, "itl_ms": 200}
    assert parse_slo("e2el=10s").e2el_ms == 10000
    with pytest.raises(StallscopeError):
        parse_slo("ttft=fast")


def test_analyze_cli_from_files_to_json(tmp_path):
    out = tmp_path / "a.json"
    r = cli("analyze", real(BENCH[0]), "--slo", "ttft=2s,tpot=100ms", "--json", out)
    assert r.returncode == 0, r.stderr
    assert "goodput" in r.stdout
    d = json.loads(out.read_text())
    for key in ("schema", "window", "slo", "requests", "goodput_rps", "goodput_counterfactual_rps",
                "goodput_lost_rps", "spikes"):
        assert key in d
    assert set(d["window"]) >= {"start_ns", "end_ns", "duration_s"}
    assert set(d["requests"]) >= {"total", "good", "good_counterfactual"}
    bench = orjson.loads(real(BENCH[0]).read_bytes())
    assert d["goodput_rps"] == pytest.approx(vllm_goodput(bench, {"ttft": 2000, "tpot": 100})[1], rel=1e-12)
    for sp in d["spikes"]:
        assert set(sp) >= {"request_id", "token_index", "start_ns", "end_ns", "gap_ms", "rule", "prefill_overlap_ms",
                           "share", "stalled_decodes", "culprits", "evidence"}
    r = cli("analyze", real(BENCH[0]), "--slo", "ttft=fast")
    assert r.returncode == 1 and r.stderr.startswith("error: bad SLO") and r.stderr.count("\n") == 1
