"""Attribution on a traced run whose truth is known by construction (the attribution bench's store, small)."""
from __future__ import annotations

import importlib.util

import pytest

import stallscope
from stallscope.analyze import Options, Slo, analyze
from conftest import ROOT


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("bench_attribution", ROOT / "bench" / "bench_attribution.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    db = tmp_path_factory.mktemp("attr") / "a.duckdb"
    mod.build(db, steps=330, kps=20, reqs=30, out=30)
    s = stallscope.open(db, read_only=True)
    return s, analyze(s.con, Options(slo=Slo(itl_ms=100, tpot_ms=40)))


def test_every_mixed_step_gap_is_a_spike_and_no_decode_gap_is(run):
    s, r = run
    spikes = r["spikes"]
    assert {x["level"] for x in spikes} == {"request"} and {x["evidence"] for x in spikes} == {"kernels"}
    # Each request decodes through 30 steps, 3 of them mixed (150 ms vs 25 ms): 3 spikes per request.
    assert len(spikes) == 30 * 3
    assert all(x["step_index"] % 10 == 5 for x in spikes)
    assert all(x["rule"] == "itl_slo+relative" for x in spikes)
    assert all(abs(x["baseline_ms"] - 25.3) < 0.5 for x in spikes)


def test_culprit_is_the_request_the_mixed_step_prefilled(run):
    s, r = run
    named = [x for x in r["spikes"] if x["culprits"]]
    # Mixed steps after the last request's prefill carry no request: their spikes name nobody.
    assert len(named) == sum(1 for x in r["spikes"] if (x["step_index"] - 5) // 10 < 30)
    for x in named:
        assert [c["request_id"] for c in x["culprits"]] == [str((x["step_index"] - 5) // 10)]
        assert x["culprits"][0]["prompt_tokens"] == 2048
        # 2048 of the step's 2148 tokens are prefill: that share of the 150 ms step is prefill time.
        assert x["prefill_overlap_ms"] == pytest.approx(150 * 2048 / 2148, rel=0.01)
        assert x["culprits"][0]["overlap_ms"] == pytest.approx(x["prefill_overlap_ms"], rel=0.01)
        assert x["stalled_decodes"] == 100


def test_goodput_and_its_counterfactual(run):
    s, r = run
    # Mean TPOT with 3 stalls in 30 gaps is ~37.6 ms < 40 ms, but every request has a 150 ms gap > 100 ms ITL SLO.
    assert r["requests"]["total"] == 30 and r["requests"]["good"] == 0
    # Removing the prefill excess brings every spike down to the decode baseline: all requests become good.
    assert r["requests"]["good_counterfactual"] == 30
    assert r["goodput_lost_rps"] == pytest.approx(30 / r["window"]["duration_s"])
