"""The step-time model fit against engines whose true step model is known: the project's presets, and an engine
with constants (and a tile) of its own; and through the store, on a simulated incident's trace and benchmark."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from stallscope.recommend.fit import TERMS, FitError, Observations, fit
from stallscope.simulate.engine import EngineConfig, simulate
from stallscope.simulate.stepmodel import Coef, get_preset
from stallscope.simulate.workload import Incident, LengthDist, synthesize

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def _truth(p) -> np.ndarray:
    return np.array([p.b0.value, p.b4.value, p.b2.value, p.b1.value, p.b3.value])   # TERMS order


def _obs(sim) -> Observations:
    return Observations(step_ms=sim.step_ms, decode_seqs=sim.n_decode.astype(float),
                        tokens=(sim.prefill_tokens + sim.n_decode).astype(float), kv_read=sim.kv_read.astype(float),
                        attn_units=sim.attn_work.astype(float), has_prefill=sim.prefill_tokens > 0)


def _run(preset, policy, budget, rate=6.0, seed=1):
    rng = np.random.default_rng(seed)
    wl = synthesize(rng, rate=rate, duration_s=40, prompt=LengthDist(1024, 0.8, 2, 16000),
                    output=LengthDist(256, 0.5, 2, 4000), incident=Incident.parse("long-prompts"))
    return simulate(wl, preset, EngineConfig(policy, budget), seed)


# An engine that is not one of ours: other constants, a 128-token tile, 5 % noise.
OTHER = replace(get_preset("llama8b-h100"), name="other", b0=Coef(11.0, "ms", "test"), b1=Coef(0.031, "ms", "test"),
                b2=Coef(9.0e-5, "ms", "test"), b3=Coef(2.6e-6, "ms", "test"), b4=Coef(0.04, "ms", "test"),
                sigma=Coef(0.05, "log", "test"), tile=128)


@pytest.mark.parametrize("preset,policy,budget", [
    (get_preset("llama70b-h100-tp4"), "chunked", 2048),
    (get_preset("llama70b-h100-tp4"), "v0", 32768),
    (get_preset("llama8b-h100"), "chunked", 512),
    (get_preset("llama8b-h100"), "sglang", 4096),
    (OTHER, "chunked", 1024),
])
def test_identified_coefficients_within_10_percent_mape_and_band(preset, policy, budget):
    sim = _run(preset, policy, budget)
    m = fit(_obs(sim))
    truth = _truth(preset)
    ids = [j for j, t in enumerate(TERMS) if m.identified[t]["identified"]]
    assert {0, 3} <= set(ids) or len(ids) >= 2, m.identified     # the fixed and token terms are the big ones
    for j in ids:
        assert abs(m.coef[j] / truth[j] - 1) <= 0.10, (TERMS[j], m.coef[j], truth[j])
    for t, v in m.identified.items():
        assert v["identified"] or v["reason"], t                 # never silently unidentified
    assert m.mape < 0.05
    assert 0.97 <= m.p99_coverage <= 1.0
    assert m.tile == preset.tile                                 # learned from the data (256, or 128 for OTHER)


def test_a_constant_feature_is_reported_not_identified_with_its_reason():
    sim = _run(get_preset("llama70b-h100-tp4"), "chunked", 2048)
    o = _obs(sim)
    o.kv_read = np.full(len(o), np.nan)
    o.notes["per_kv_token_ms"] = "no KV-read evidence in this store"
    m = fit(o)
    assert m.identified["per_kv_token_ms"] == {"identified": False, "rse": None,
                                               "reason": "no KV-read evidence in this store"}
    o2 = _obs(sim)
    o2.attn_units = np.zeros(len(o2))
    m2 = fit(o2)
    assert not m2.identified["per_attention_unit_ms"]["identified"]
    assert "never varies" in m2.identified["per_attention_unit_ms"]["reason"]


def test_too_few_steps_is_a_fit_error_naming_the_need():
    sim = _run(get_preset("llama70b-h100-tp4"), "chunked", 2048)
    o = _obs(sim)
    short = Observations(*(np.asarray(getattr(o, k))[:10] for k in
                           ("step_ms", "decode_seqs", "tokens", "kv_read", "attn_units", "has_prefill")))
    with pytest.raises(FitError, match="at least 20"):
        fit(short)


@pytest.mark.parametrize("scenario,composition", [("chunked-2048-healthy", "annotation"),
                                                  ("unchunked-long-prompt-stall", "client_tokens")])
def test_fit_through_the_store_on_a_simulated_incident(scenario, composition):
    """The product path: trace + benchmark + log of a bundled incident. The chunked one has basic annotations (the
    KV read is rebuilt from the client token stream, the attention work from the prefill replay); the V0 one has
    none (the whole composition comes from the client stream and the prefill replay)."""
    import stallscope
    from stallscope.analyze import Options, parse_slo, prepare
    from stallscope.recommend import observe
    from stallscope.simulate import truth as T

    d = ROOT / "sample_traces" / scenario
    doc = T.load(d / "truth.json")
    c = doc["preset"]["coefficients"]
    truth = np.array([c["b0"]["value"], c["b4"]["value"], c["b2"]["value"], c["b1"]["value"], c["b3"]["value"]])
    s = stallscope.open(":memory:")
    s.ingest([d / "trace.pt.trace.json.gz", d / "bench_serve.json.gz", d / "vllm_server.log.gz"])
    prepare(s.con, Options(slo=parse_slo("ttft=1s,itl=60ms")))
    obs, info = observe.step_observations(s.con)
    assert info["kv_client_agreement"] >= 0.95
    assert info["composition_basis"] == {composition: len(obs)}
    m = fit(obs)
    ids = [j for j, t in enumerate(TERMS) if m.identified[t]["identified"]]
    assert ids, m.identified
    for j in ids:
        assert abs(m.coef[j] / truth[j] - 1) <= 0.10, (TERMS[j], m.coef[j], truth[j])
    assert m.mape < 0.05 and 0.97 <= m.p99_coverage <= 1.0
