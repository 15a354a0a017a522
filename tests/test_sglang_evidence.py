"""Recommending the chunk budget from SGLang's scheduler batch lines (no profiler trace), against known truth.

The incident is simulated with `--policy sglang` (an SGLang 0.5.10 scheduler log: a Prefill batch line per prefill
forward, a Decode batch line every 40 decode forwards, 1-s stamps) plus its benchmark file; the store gets those two
files only. The recommended budget is then run on the true engine next to every other budget.
"""
from __future__ import annotations

import numpy as np
import pytest

from helpers import true_goodput
import stallscope
from stallscope.analyze import parse_slo
from stallscope.recommend import Options, observe, recommend
from stallscope.simulate import artifacts
from stallscope.simulate.runner import RunSpec, execute

# Truth tests of a recommendation path (the true engine re-run at budgets): the whole suite (make test) runs them,
# the everyday tier does not.
pytestmark = pytest.mark.slow

SPEC = dict(policy="sglang", duration_s=180, rate=2.5, prompt_len="2500:0.5", output_len="128:0.4", seed=2)


@pytest.fixture(scope="module")
def incident(tmp_path_factory):
    run = execute(RunSpec(**SPEC))
    files = artifacts.write_all(run, tmp_path_factory.mktemp("sglang_incident"), only=("sglang", "bench"))
    s = stallscope.open(":memory:")
    s.ingest([files["sglang"], files["bench"]])
    return run, s


@pytest.mark.slow
def test_budget_from_sglang_lines_holds_on_the_true_engine(incident):
    run, s = incident
    assert s.sql("SELECT count(*) FROM steps").item() == 0
    optima = set()
    # A relaxed TTFT with a loose per-token bound (optimum 2048) and a mean TPOT alone (optimum 8192 or unchunked).
    for text in ("ttft=1s,itl=2s", "tpot=40ms"):
        slo = parse_slo(text)
        rec = recommend(s.con, Options(slo=slo, replays=1))
        assert rec["evidence"] == "sglang_log" and rec["evidence_steps"] >= 80, rec.get("missing_evidence")
        assert rec["setting"].startswith("--chunked-prefill-size") or rec["chunk_tokens"] is None, rec["setting"]
        true = true_goodput(run, {k: v for k, v in slo.as_dict().items() if k in ("ttft_ms", "itl_ms", "tpot_ms")},
                            "sglang")
        best = max(true, key=true.get)
        optima.add(best)
        assert true[rec["chunk_tokens"]] >= 0.9 * true[best], (text, rec["chunk_tokens"], true)
        lo, hi = rec["goodput_band_rps"]
        assert lo <= rec["goodput_rps"] <= hi
    assert len(optima) == 2, optima


def test_the_lines_give_decode_and_prefill_steps_near_the_true_model(incident):
    run, s = incident
    from stallscope.recommend import _prepare
    from stallscope.recommend.fit import fit

    _prepare(s.con, parse_slo("tpot=40ms"))
    obs, info = observe.step_observations(s.con)
    assert info["evidence"] == "sglang_log" and info["host_gap_ms"] == (0.0, 0.0)
    basis = info["composition_basis"]
    assert basis["sglang_decode_interval"] >= 10 and basis["sglang_interval_rest"] >= 50, basis
    m = fit(obs)
    p = run.preset
    # Per prefill token and per KV token read: within 15 % of the engine's own coefficients.
    assert m.coefficients()["per_prefill_token_ms"] == pytest.approx(p.b1.value, rel=0.15)
    assert m.coefficients()["per_kv_token_ms"] == pytest.approx(p.b2.value, rel=0.15)
    # A decode-only step of the observed median batch: within 10 % of the truth plus its host gap.
    dec = obs.has_prefill == 0
    B, kv = float(np.median(obs.decode_seqs[dec])), float(np.median(obs.kv_read[dec]))
    truth = p.b0.value + p.b1.value * 256 + p.b2.value * kv + p.b4.value * B + np.mean(p.host_gap_ms)
    assert m.predict(B, kv, 0.0, B) == pytest.approx(truth, rel=0.1)


def test_without_timing_fields_the_lines_say_why():
    s = stallscope.open(":memory:")
    s.con.execute("""INSERT INTO engine_batches (source_id, line_no, kind, new_seqs, new_tokens, cached_tokens,
                     running_reqs, queued_reqs) VALUES (1, 1, 'prefill', 1, 100, 0, 0, 0)""")
    s.con.execute("""INSERT INTO requests (source_id, request_id, kind, arrival_ns, prompt_tokens, output_tokens)
                     VALUES (1, 'a', 'server', 1, 100, 10)""")
    rec = recommend(s.con, Options(slo=parse_slo("tpot=40ms"), replays=1))
    assert rec["chunk_tokens"] is None and rec["evidence_steps"] == 0
    assert any("SGLang batch lines times a step" in m for m in rec["missing_evidence"]), rec["missing_evidence"]
