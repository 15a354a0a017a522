"""The what-if replay's pieces: per-request metrics without materialising tokens equal the token-by-token ones
(preemption included), the verdicts are analyze's SQL, and residual-drawn step times."""
from __future__ import annotations

import numpy as np
import pytest

from stallscope.recommend import replay as R
from stallscope.simulate.engine import EngineConfig, simulate
from stallscope.simulate.stepmodel import get_preset, noise_factors
from stallscope.simulate.workload import Incident, LengthDist, synthesize

P8 = get_preset("llama8b-h100")


def _wl(seed=3):
    rng = np.random.default_rng(seed)
    return synthesize(rng, rate=12, duration_s=20, prompt=LengthDist(1024, 0.8, 2, 12000),
                      output=LengthDist(256, 0.6, 1, 3000), incident=Incident.parse("long-prompts"))


@pytest.mark.parametrize("policy,budget,kv", [("chunked", 512, None), ("chunked", 2048, 60000), ("v0", 16384, 60000),
                                              ("sglang", 2048, 60000)])
def test_piecewise_metrics_equal_the_token_by_token_ones(policy, budget, kv):
    wl = _wl()
    sim = simulate(wl, P8, EngineConfig(policy, budget, kv_cache_tokens=kv), 0)
    if kv:
        assert sim.preemptions.sum() > 0          # the KV-limited runs exercise re-prefills
    m = R.metrics(sim, wl)
    first, finish, mx, gaps = R.metrics_by_token(sim, wl)
    assert np.array_equal(m.first_ns, first) and np.array_equal(m.finish_ns, finish)
    assert np.array_equal(m.max_gap_ns, mx)
    assert m.gap_weights.sum() == len(gaps)
    assert R._weighted_quantile(m.gap_values_ns, m.gap_weights, 0.99) == pytest.approx(np.quantile(gaps, 0.99))


def test_verdicts_are_analyzes_sql_and_match_the_definitions():
    wl = _wl()
    sim = simulate(wl, P8, EngineConfig("chunked", 2048), 0)
    m = R.metrics(sim, wl)
    slo = {"ttft_ms": 300.0, "itl_ms": 80.0, "tpot_ms": 20.0}
    good, total, dur = R.Judge(slo).judge([m])[0]
    out = m.output_len
    ttft = (m.first_ns - m.arrival_ns) / 1e6
    tpot = np.where(out > 1, (m.finish_ns - m.first_ns) / np.maximum(out - 1, 1), 0) / 1e6
    ok = (ttft <= 300) & (tpot <= 20) & np.where(m.max_gap_ns >= 0, m.max_gap_ns / 1e6 <= 80, out <= 1)
    assert total == len(wl) and good == int(ok.sum()) and 0 < good < total
    assert dur == pytest.approx((m.finish_ns.max() - m.arrival_ns.min()) / 1e9)


def test_replay_noise_is_drawn_from_the_fit_residuals():
    ratios = np.array([0.9, 1.0, 1.2])
    p = R.preset_from_model([5.0, 0.01, 3e-5, 0.06, 1.6e-6], 256, kv_cache_tokens=10**6, max_model_len=32768,
                            residual_ratios=ratios)
    draw = noise_factors(np.random.default_rng(0), 1000, p)
    assert set(np.unique(draw)) == set(ratios)
    plain = noise_factors(np.random.default_rng(0), 1000, P8)      # presets without residuals: lognormal as before
    assert len(np.unique(plain)) == 1000
