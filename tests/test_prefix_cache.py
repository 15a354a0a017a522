"""Prefix caching: the simulator skips cached prompt tokens (vLLM whole 16-token blocks, SGLang radix per token), its
logs report hit rates from that state, and the analysis infers each request's cached prefix well enough to name
the request whose computed chunks stalled a gap."""
from __future__ import annotations

import numpy as np
import pytest

import stallscope
from stallscope.errors import StallscopeError
from stallscope.simulate import truth
from stallscope.simulate.engine import EngineConfig, simulate
from stallscope.simulate.runner import RunSpec, execute, parse_slo
from stallscope.simulate.stepmodel import get_preset
from stallscope.simulate.workload import LengthDist, SharedPrefix, synthesize
from stallscope.simulate import artifacts

PRESET = get_preset("llama70b-h100-tp4")


def _workload(frac=0.7, tokens=1500, seed=3, rate=3.0, duration=20.0):
    return synthesize(np.random.default_rng([seed, 1]), rate=rate, duration_s=duration,
                      prompt=LengthDist(512, 0.6, 2), output=LengthDist(128, 0.3),
                      shared_prefix=SharedPrefix(frac, tokens) if frac is not None else None)


def _first_episode(sim, n):
    """Per request: computed tokens, hit and first-chunk context of its first prefill (chunks up to the first
    completing one)."""
    req, tok, last = sim.ch_req, sim.ch_tokens, sim.ch_last.astype(bool)
    order = np.lexsort((sim.ch_step, req))
    req, tok, last, ctx = req[order], tok[order], last[order], sim.ch_ctx[order]
    hit = sim.ch_hit[order] if sim.ch_hit is not None else np.zeros(len(req), np.int64)
    first = np.concatenate([[True], req[1:] != req[:-1]])
    done_before = np.concatenate([[0], np.cumsum(last)[:-1]])
    grp_done = done_before - np.maximum.accumulate(np.where(first, done_before, 0))
    ep1 = grp_done == 0
    computed = np.bincount(req[ep1], weights=tok[ep1], minlength=n).astype(np.int64)
    return computed, hit[first], ctx[first]


@pytest.mark.parametrize("policy,block", [("chunked", 16), ("v0", 16), ("sglang", 1)])
def test_cached_tokens_are_skipped_at_admission(policy, block):
    wl = _workload()
    budget = {"chunked": 2048, "v0": 32768, "sglang": 8192}[policy]
    sim = simulate(wl, PRESET, EngineConfig(policy, budget, prefix_caching=True), seed=3)
    n = len(wl)
    computed, hit, ctx0 = _first_episode(sim, n)
    pre = wl.prefix_len
    assert (sim.cached_tokens == hit).all() and (ctx0 == hit).all()      # attention starts after the hit
    assert (computed == wl.prompt_len - sim.cached_tokens)[sim.preemptions == 0].all()
    assert (sim.cached_tokens % block == 0).all() and (sim.cached_tokens <= np.minimum(pre, wl.prompt_len - 1)).all()
    assert (sim.cached_tokens[pre == 0] == 0).all()
    shared = np.nonzero(pre > 0)[0]
    assert sim.cached_tokens[shared[0]] == 0                              # the first user computes the prefix
    want = 1500 - 1500 % block                                            # vLLM 1488 (93 blocks), SGLang 1500
    assert (sim.cached_tokens[shared[1:]] == want).mean() > 0.9
    # the budget counts computed tokens only, and the step's attention work covers the cached context
    assert (sim.prefill_tokens <= budget).all()
    work = np.bincount(sim.ch_step, weights=sim.ch_tokens * (sim.ch_ctx + sim.ch_tokens / 2), minlength=sim.n_steps)
    assert np.allclose(work, sim.attn_work)


def test_prefix_caching_off_changes_nothing():
    wl = _workload()
    base = simulate(wl, PRESET, EngineConfig("chunked", 2048), seed=3)
    off = simulate(wl, PRESET, EngineConfig("chunked", 2048, prefix_caching=False), seed=3)
    on = simulate(wl, PRESET, EngineConfig("chunked", 2048, prefix_caching=True), seed=3)
    assert base.ch_hit is None and base.cached_tokens is None
    for k in ("start_ns", "end_ns", "prefill_tokens", "ch_tokens", "ch_ctx"):
        assert np.array_equal(getattr(base, k), getattr(off, k))
    assert on.prefill_tokens.sum() == base.prefill_tokens.sum() - on.cached_tokens.sum()
    # the same seed draws the same requests with and without a prefix (it is drawn last)
    plain = _workload(frac=None)
    assert np.array_equal(plain.arrival_ns, wl.arrival_ns) and np.array_equal(plain.output_len, wl.output_len)
    assert np.array_equal(plain.prompt_len + wl.prefix_len, wl.prompt_len)
    with pytest.raises(StallscopeError):
        SharedPrefix.parse("0.7")
    with pytest.raises(StallscopeError):
        SharedPrefix.parse("1.5:100")


def _run(tmp_path, policy, **kw):
    spec = RunSpec(policy=policy, budget={"chunked": 2048, "v0": 32768, "sglang": 8192}[policy], rate=3.0,
                   duration_s=20.0, seed=5, shared_prefix="0.6:1500", slo=parse_slo("ttft=2s,tpot=50ms,itl=200ms"),
                   trace_layers=1, **kw)
    run = execute(spec)
    written = artifacts.write_all(run, tmp_path)
    return run, written


def test_logs_report_the_engine_state(tmp_path):
    run, written = _run(tmp_path / "v1", "chunked")
    sim = run.sim
    s = stallscope.open(":memory:")
    s.ingest([written["vllm"]])
    rows = s.sql("SELECT ts_ns, prefix_cache_hit_rate_pct FROM engine_stats ORDER BY ts_ns").to_numpy()
    assert len(rows) >= 2 and rows[-1, 1] > 30
    # V1: hits over queried prompt tokens of the admissions scheduled before each line (fewer than 1000 here)
    adm = sim.ch_ctx == sim.ch_hit
    day = 86_400 * 10**9   # the V1 line has no year: compare times of day (the run starts at 16:00)
    t_adm = run.wall(sim.start_ns[sim.ch_step[adm]]) % day
    for ts, pct in rows:
        ts = int(ts) % day
        m = t_adm <= ts + 999_999_999           # the log's second resolution
        m_lo = t_adm <= ts
        want_hi = sim.ch_hit[adm][m].sum() / run.workload.prompt_len[sim.ch_req[adm][m]].sum() * 100
        want_lo = sim.ch_hit[adm][m_lo].sum() / max(run.workload.prompt_len[sim.ch_req[adm][m_lo]].sum(), 1) * 100
        assert min(want_lo, want_hi) - 0.051 <= pct <= max(want_lo, want_hi) + 0.051
    # the prompts that share the prefix share their first token ids: whole blocks of it, except the first one
    shared = s.sql("SELECT request_id, shared_prefix_tokens FROM requests").to_numpy()
    by_id = dict(shared)
    pre = run.workload.prefix_len
    got = np.array([by_id[r] for r in run.request_ids])
    first = np.nonzero(pre > 0)[0][0]
    assert got[first] == 0 and (got[pre == 0] == 0).all()
    assert (got[(pre > 0) & (np.arange(run.n) != first)] == 1488).all()
    s.close()

    run, written = _run(tmp_path / "v0", "v0")
    text = written["vllm"].read_text()
    assert "enable_prefix_caching=True" in text and "Prefix cache hit rate: GPU: " in text
    s = stallscope.open(":memory:")
    s.ingest([written["vllm"]])
    assert s.sql("SELECT max(prefix_cache_hit_rate_pct) FROM engine_stats").item() > 30
    s.close()

    run, written = _run(tmp_path / "sgl", "sglang")
    s = stallscope.open(":memory:")
    s.ingest([written["sglang"]])
    got = s.sql("SELECT cached_tokens FROM engine_batches WHERE kind = 'prefill' ORDER BY line_no"
                ).to_series().to_numpy()
    sim = run.sim
    pf = np.nonzero(sim.prefill_tokens > 0)[0]
    want = np.bincount(sim.ch_step, weights=sim.ch_ctx, minlength=sim.n_steps)[pf]  # hits + own earlier chunks
    assert np.array_equal(got, want) and sim.ch_hit.sum() > 0
    s.close()


def test_truth_names_culprits_by_computed_work(tmp_path):
    run, written = _run(tmp_path, "chunked")
    doc = truth.load(written["truth"])
    req = doc["requests"]
    assert req["cached_tokens"] == run.sim.cached_tokens.tolist()
    assert doc["summary"]["cached_tokens"] == int(run.sim.cached_tokens.sum())
    ch = doc["prefill_chunks"]
    tok, ctx = np.asarray(ch["tokens"], float), np.asarray(ch["context_before"], float)
    w = PRESET.b1.value * tok + PRESET.b3.value * tok * (ctx + tok / 2)
    x = np.asarray(ch["interference_ms"])
    step = np.asarray(ch["step"])
    # within a step, interference is shared in proportion to the marginal cost of the computed chunks
    for s_ in np.unique(step[np.asarray(ch["cached"]) > 0])[:20]:
        m = step == s_
        if x[m].sum() > 0:
            assert np.allclose(x[m] / x[m].sum(), w[m] / w[m].sum(), atol=1e-6)
