"""Aggregated vs disaggregated: the published shape (arXiv 2508.01989, TaiChi) on the 70B H100 TP4 step model,
the KV-transfer arithmetic, and the inputs' one-line errors."""
from __future__ import annotations

import pytest

from stallscope.errors import StallscopeError
from stallscope.recommend import placement as PL
from stallscope.simulate.stepmodel import get_preset

P70 = get_preset("llama70b-h100-tp4")
BUDGETS = (256, 512, 768, 1024, 1536, 2048, 3072, 4096, 8192)


def _decide(w, slo, link="ib", instances=8):
    fluid = PL.Fluid(P70.predict_ms, 0.08, 0.08, P70.tp)
    kvb, _ = PL.kv_bytes_per_token(None, P70.model)
    bw, _ = PL.link_gbps(link)
    r = PL.compare(fluid, w, slo, instances=instances, budgets=BUDGETS, kv_bytes=kvb, link_gbps_=bw)
    return PL.decide(r["aggregated"], r["disaggregated"]), r


def test_tight_ttft_relaxed_tpot_recommends_aggregated():
    # Chat (note §4.5 row 1): ISL 1024, OSL 256, TTFT <= 0.6 s, TPOT <= 100 ms, ITL <= 200 ms.
    (place, margin, _), r = _decide(PL.Workload(1, 1024, 256, 1024), PL.Slo(600, 100, 200))
    assert place == "aggregated" and margin < -0.10, (margin, r["aggregated"], r["disaggregated"])


def test_strict_itl_relaxed_ttft_recommends_disaggregated():
    # Prefill-heavy, strict per-token SLO, relaxed TTFT: small chunks cap the pool's prefill rate.
    (place, margin, _), r = _decide(PL.Workload(1, 8192, 128, 8192), PL.Slo(10000, 40, 40))
    assert place == "disaggregated" and margin > 0.10, (margin, r["aggregated"], r["disaggregated"])
    x, y = r["disaggregated"].split
    assert x > y                                       # prefill-heavy: more prefill instances


def test_a_slow_kv_link_takes_the_tight_ttft_case_further_from_disaggregation():
    w, slo = PL.Workload(1, 1024, 256, 1024), PL.Slo(600, 100, 200)
    fast = _decide(w, slo, "nvlink")[1]["disaggregated"].per_gpu_rps
    slow = _decide(w, slo, "0.1")[1]["disaggregated"].per_gpu_rps    # 0.1 GB/s per GPU: 1.2 s per 1k prompt
    assert slow < fast


def test_kv_bytes_per_token_formula_and_sources():
    assert PL.kv_bytes_per_token(None, "meta-llama/Llama-3.3-70B-Instruct")[0] == 327_680     # note §6 K1
    assert PL.kv_bytes_per_token(None, "meta-llama/Llama-3.1-8B-Instruct")[0] == 131_072
    assert PL.kv_bytes_per_token("64,72,128,2", None)[0] == 2 * 64 * 72 * 128 * 2
    b, why = PL.kv_bytes_per_token(None, "acme/unknown-model")
    assert b is None and "--model-config" in why
    with pytest.raises(StallscopeError, match="--model-config"):
        PL.kv_bytes_per_token("gpt-99", None)
    with pytest.raises(StallscopeError, match="--kv-link"):
        PL.link_gbps("carrier-pigeon")
    assert PL.link_gbps("12.5")[0] == 12.5
