"""The recommended budget against physics: its goodput on the TRUE engine is within 5 % of the best budget of an
exhaustive true-engine sweep, for SLO pairs whose optima differ, including a workload whose curve has a cliff.

The recommendation sees only what an incident shows: the steps of one run at the current budget (2048), from which
it fits its own step model, and the workload. The true engine (the preset the incident was simulated with) is run
at every multiple of 256 up to 4096, the larger grid budgets and unchunked, and judged by the same verdict SQL.
"""
from __future__ import annotations

import numpy as np
import pytest

from stallscope.recommend import choose, replay
from stallscope.recommend.fit import Observations, fit
from stallscope.simulate.engine import EngineConfig, simulate
from stallscope.simulate.stepmodel import get_preset
from stallscope.simulate.workload import Incident, LengthDist, synthesize

pytestmark = pytest.mark.slow

EXHAUSTIVE = [256 * k for k in range(1, 17)] + [6144, 8192, 12288, 16384, None]


def _workload(rate, seed=1, incident="long-prompts"):
    rng = np.random.default_rng(seed)
    return synthesize(rng, rate=rate, duration_s=40, prompt=LengthDist(1024, 0.8, 2, 16000),
                      output=LengthDist(256, 0.5, 2, 4000), incident=Incident.parse(incident))


def _recommend(preset, wl, slo, current=2048):
    sim = simulate(wl, preset, EngineConfig("chunked", current), 11)
    obs = Observations(step_ms=sim.step_ms, decode_seqs=sim.n_decode.astype(float),
                       tokens=(sim.prefill_tokens + sim.n_decode).astype(float), kv_read=sim.kv_read.astype(float),
                       attn_units=sim.attn_work.astype(float), has_prefill=sim.prefill_tokens > 0)
    m = fit(obs)
    sem = replay.Semantics("chunked", kv_cache_tokens=preset.kv_cache_tokens)
    presets = replay.presets_for(m, replays=3, kv_cache_tokens=preset.kv_cache_tokens, max_model_len=32768,
                                 host_gap_ms=preset.host_gap_ms)
    res = replay.sweep(presets, sem, wl, slo, replay.grid(sem, wl))
    i, _ = choose.pick(res)
    return res[i].chunk_tokens, res


def _true(preset, wl, slo):
    sem = replay.Semantics("chunked", kv_cache_tokens=preset.kv_cache_tokens)
    res = replay.sweep([preset], sem, wl, slo, EXHAUSTIVE, seed=99)
    return {r.chunk_tokens: r.goodput_rps for r in res}


CASES = {
    # name: (preset, rate, slo)
    "cliff: 8B at 10 req/s, ttft 1 s, itl 60 ms": ("llama8b-h100", 10.0, {"ttft_ms": 1000, "itl_ms": 60}),
    "tight ITL, relaxed TTFT": ("llama70b-h100-tp4", 3.0, {"ttft_ms": 10000, "itl_ms": 60}),
    "relaxed ITL, tight TTFT": ("llama70b-h100-tp4", 3.0, {"ttft_ms": 400, "itl_ms": 1000}),
    "mean TPOT only": ("llama70b-h100-tp4", 3.0, {"tpot_ms": 30}),
}


@pytest.fixture(scope="module")
def outcomes():
    out = {}
    for name, (prof, rate, slo) in CASES.items():
        p = get_preset(prof)
        wl = _workload(rate)
        rec, _ = _recommend(p, wl, slo)
        out[name] = (rec, _true(p, wl, slo))
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_recommended_budget_true_goodput_within_5_percent_of_the_true_best(outcomes, name):
    rec, true = outcomes[name]
    best = max(true.values())
    assert best > 0, name
    assert true[rec] >= 0.95 * best, (name, rec, true[rec], best, true)


def test_the_cases_have_different_optima_and_one_has_a_cliff(outcomes):
    optima = set()
    for name, (_, true) in outcomes.items():
        best = max(true.values())
        optima.add(max((c for c, g in true.items() if g >= 0.999 * best), key=lambda c: c or 1 << 30))
    assert len(optima) >= 2, optima
    _, cliff = outcomes["cliff: 8B at 10 req/s, ttft 1 s, itl 60 ms"]
    seq = [cliff[c] for c in EXHAUSTIVE]
    drops = [a / b for a, b in zip(seq[1:], seq[:-1]) if b > 0]
    assert min(drops) < 0.5, seq       # somewhere one budget step loses more than half the goodput


def test_ties_go_to_the_largest_budget():
    mk = lambda c, g, lo, hi: replay.BudgetResult(c, g, lo, hi, 1.0, 0, 0, 0)  # noqa: E731
    res = [mk(512, 1.00, 0.99, 1.01), mk(1024, 0.995, 0.98, 1.0), mk(2048, 0.90, 0.89, 0.91), mk(None, 0.5, 0.5, 0.5)]
    i, ties = choose.pick(res)
    assert res[i].chunk_tokens == 1024 and {res[k].chunk_tokens for k in ties} == {512, 1024}
