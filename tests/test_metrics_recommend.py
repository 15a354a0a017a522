"""A coarse budget from Prometheus metrics alone: the fixed + per-token step model over scrape windows, judged
against the simulator's own steps, and the precise missing evidence when a metric or the SLO is absent."""
from __future__ import annotations

import json

import numpy as np
import pytest

import stallscope
from stallscope.analyze import parse_slo
from stallscope.recommend import Options, recommend
from stallscope.simulate import emit_metrics
from stallscope.simulate.runner import RunSpec, execute

# Truth tests of a recommendation path (the true engine re-run at budgets): the whole suite (make test) runs them,
# the everyday tier does not.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def metrics_store(tmp_path_factory):
    run = execute(RunSpec(rate=5.0, duration_s=50.0, prompt_len="1024:0.9", seed=11,
                          incident="long-prompts:count=5,tokens=6000,at=8,spacing=8"))
    path = tmp_path_factory.mktemp("mrec") / "prom.json"
    path.write_bytes(emit_metrics.query_range(run, 5.0))
    s = stallscope.open(":memory:")
    assert s.ingest([path])[0].ok
    return run, s, path


def test_the_step_model_from_metrics_matches_the_simulated_steps(metrics_store):
    run, s, _ = metrics_store
    rec = recommend(s.con, Options(slo=parse_slo("itl=100ms")))
    assert rec["evidence"] == "metrics" and not rec["missing_evidence"]
    sim = run.sim
    tokens = (sim.n_decode + sim.prefill_tokens).astype(float)
    busy = (sim.n_decode > 0)
    slope, fixed = np.polyfit(tokens[busy], sim.step_ms[busy], 1)
    m = rec["model"]
    assert m["per_token_ms"] == pytest.approx(slope, rel=0.5)
    # The recommended budget's predicted full step fits the SLO, one more tile would not.
    assert rec["predicted_step_ms"] <= 100.0
    assert m["fixed_ms"] + m["per_token_ms"] * (rec["chunk_tokens"] + 256) > 100.0 or rec["chunk_tokens"] == 16384
    lo, hi = rec["chunk_tokens_band"]
    assert lo <= rec["chunk_tokens"] <= hi


def test_a_looser_slo_allows_a_larger_budget(metrics_store):
    _, s, _ = metrics_store
    a = recommend(s.con, Options(slo=parse_slo("itl=80ms")))["chunk_tokens"]
    b = recommend(s.con, Options(slo=parse_slo("itl=150ms")))["chunk_tokens"]
    assert a < b


def test_missing_metrics_and_slo_are_named(metrics_store, tmp_path):
    _, _, path = metrics_store
    doc = json.loads(path.read_text())
    doc["data"]["result"] = [r for r in doc["data"]["result"]
                             if not r["metric"]["__name__"].startswith("vllm:iteration_tokens_total")]
    p = tmp_path / "no_iter.json"
    p.write_text(json.dumps(doc))
    s = stallscope.open(":memory:")
    assert s.ingest([p])[0].ok
    rec = recommend(s.con, Options(slo=parse_slo("itl=100ms")))
    assert rec["setting"] is None and "vllm:iteration_tokens_total" in rec["missing_evidence"][0]
    rec = recommend(s.con, Options(slo=parse_slo("ttft=1s")))
    assert any("per-token SLO" in m for m in rec["missing_evidence"])
