"""The engine simulator: step-time model against the note's figures, scheduler invariants per policy, preemption,
the physics the issue asks for, the noise bound, and the ground-truth quantities (gaps, spikes, blame, goodput)."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from conftest import ROOT
from stallscope.errors import StallscopeError
from stallscope.simulate import truth
from stallscope.simulate.engine import KIND_DECODE, KIND_MIXED, KIND_PREFILL, EngineConfig, simulate
from stallscope.simulate.runner import RunSpec, execute, parse_slo
from stallscope.simulate.stepmodel import PRESETS, get_preset, noise_factors
from stallscope.simulate.workload import Incident, LengthDist, synthesize

P70 = get_preset("llama70b-h100-tp4")
P8 = get_preset("llama8b-h100")


def _scenarios():
    spec = importlib.util.spec_from_file_location("sample_build", ROOT / "sample_traces" / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# -- step model ---------------------------------------------------------------------------------------------------
def test_70b_preset_reproduces_the_notes_worked_example():
    """goodput-and-chunking.md §3.6/§6: t_dec(B=64, ctx 2048) ~ 26 ms, 8k unchunked prefill ~ 602 ms,
    C=512 mixed (64 decodes + 448 prefill at context 4096) ~ 47.7 ms, C=2048 ~ 158.4 ms, 4k prefill ~ 0.29 s."""
    dec = P70.decode_only_ms(64, 64 * 2048)
    assert dec == pytest.approx(26.0, rel=0.08)
    assert P70.predict_ms(8192, 0, 8192 * 4096, 0) == pytest.approx(602, rel=0.03)
    assert P70.predict_ms(4096, 0, 4096 * 2048, 0) == pytest.approx(287, rel=0.05)
    for c_budget, ref in ((512, 47.7), (2048, 158.4), (1024, 88.8)):
        c = c_budget - 64
        t = P70.predict_ms(c_budget, 64 * 2048, c * (4096 + c / 2), 64)
        assert t == pytest.approx(ref, rel=0.06), c_budget
    # "about 1.8x the decode step" at budget 512
    assert P70.predict_ms(512, 64 * 2048, 448 * (4096 + 224), 64) / dec == pytest.approx(1.8, abs=0.1)


def test_8b_preset_reproduces_the_notes_figures():
    """§6 "7-8B TP1 H100": 8k unchunked ~ 0.2 s; decode B=64 ~ 8 ms at ctx 512 and ~13 ms at 2k (within 25 %)."""
    assert P8.predict_ms(8192, 0, 8192 * 4096, 0) == pytest.approx(200, rel=0.06)
    assert P8.decode_only_ms(64, 64 * 512) == pytest.approx(8, rel=0.4)
    assert P8.decode_only_ms(64, 64 * 2048) == pytest.approx(13, rel=0.25)


def test_every_coefficient_names_its_source():
    for p in PRESETS.values():
        d = p.describe()["coefficients"]
        assert set(d) == {"b0", "b1", "b2", "b3", "b4", "sigma"}
        for k, c in d.items():
            assert c["value"] > 0 and len(c["source"]) > 40, (p.name, k)


def test_tile_quantisation_at_256():
    base = P70.predict_ms(256, 0, 0, 0)
    assert P70.predict_ms(1, 0, 0, 0) == base
    assert P70.predict_ms(257, 0, 0, 0) - base == pytest.approx(P70.b1.value * 256)
    assert P70.predict_ms(512, 0, 0, 0) == P70.predict_ms(257, 0, 0, 0)
    assert P70.predict_scalar(257, 0, 0, 0) == pytest.approx(float(P70.predict_ms(257, 0, 0, 0)))


def test_noise_is_lognormal_with_the_stated_sigma_and_bound():
    z = np.log(noise_factors(np.random.default_rng(3), 200_000, P70))
    lo, hi = P70.noise_bound
    assert np.log(lo) <= z.min() and z.max() <= np.log(hi)
    assert z.std() == pytest.approx(P70.sigma.value, rel=0.03)
    assert abs(z.mean()) < 1e-3


# -- workload -------------------------------------------------------------------------------------------------------
def test_workload_rate_lengths_and_incident():
    rng = np.random.default_rng(1)
    wl = synthesize(rng, rate=10, duration_s=200, prompt=LengthDist.parse("400:0.5"), output=LengthDist.parse("100"),
                    incident=Incident.parse("long-prompts:count=3,tokens=8192,at=50,spacing=1"))
    normal = ~wl.incident
    assert normal.sum() == pytest.approx(2000, rel=0.06)
    assert wl.prompt_len[normal].mean() == pytest.approx(400, rel=0.05)
    assert (wl.output_len == 100).all()
    assert np.all(np.diff(wl.arrival_ns) >= 0)
    inc_t = wl.arrival_ns[wl.incident] / 1e9
    assert inc_t.tolist() == pytest.approx([50.0, 51.0, 52.0]) and (wl.prompt_len[wl.incident] == 8192).all()
    bursty = synthesize(np.random.default_rng(1), rate=10, duration_s=200, burstiness=0.25,
                        prompt=LengthDist.parse("400"), output=LengthDist.parse("100"))
    cv = lambda w: np.diff(w.arrival_ns).std() / np.diff(w.arrival_ns).mean()  # noqa: E731
    assert cv(wl.__class__(wl.arrival_ns[normal], wl.prompt_len[normal], wl.output_len[normal],
                           wl.incident[normal])) == pytest.approx(1.0, abs=0.1)
    assert cv(bursty) == pytest.approx(2.0, abs=0.3)  # gamma shape 0.25: CV = 1/sqrt(0.25)


def test_burst_incident_and_replay_from_a_store(tmp_path):
    import stallscope
    from stallscope.simulate import artifacts
    from stallscope.simulate.workload import from_store

    wl = synthesize(np.random.default_rng(2), rate=1, duration_s=60, prompt=LengthDist.parse("300"),
                    output=LengthDist.parse("50"), incident=Incident.parse("burst:count=20,at=30"))
    assert wl.incident.sum() == 20 and (wl.arrival_ns[wl.incident] == 30_000_000_000).all()
    # replay: the benchmark file of one run, ingested, drives a second run with the same arrivals and lengths
    run = _run("chunked", 2048, dur=10, incident=None)
    out = artifacts.write_all(run, tmp_path / "a", only=("bench",))
    db = tmp_path / "s.duckdb"
    with stallscope.open(db) as st:
        assert all(r.ok for r in st.ingest([out["bench"]]))
    back = from_store(str(db))
    assert back.prompt_len.tolist() == run.workload.prompt_len.tolist()
    assert back.output_len.tolist() == run.workload.output_len.tolist()
    rel = run.send_ns - run.send_ns[0]
    assert np.abs((back.arrival_ns - back.arrival_ns[0]) - rel).max() < 1_000   # to the us of the JSON floats
    rerun = execute(RunSpec(policy="v0", budget=16384, replay=str(db), seed=1))
    assert rerun.n == run.n and rerun.workload.prompt_len.tolist() == run.workload.prompt_len.tolist()


@pytest.mark.slow
def test_cli_errors_are_one_line(tmp_path):
    from helpers import cli

    r = cli("simulate", "--out", tmp_path / "x", "--slo", "ttft=fast")
    assert r.returncode == 1 and r.stderr.strip().startswith("error: bad SLO") and "Traceback" not in r.stderr
    r = cli("simulate", "--out", tmp_path / "x", "--profile", "gpt5-tpu")
    assert r.returncode == 1 and "unknown profile" in r.stderr
    r = cli("simulate", "--out", tmp_path / "x", "--policy", "v0", "--budget", "4096", "--incident", "long-prompts")
    assert r.returncode == 1 and "longest prompt" in r.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("text", ["long-prompts:count=x", "storm", "burst:speed=3"])
def test_bad_incident_is_one_clear_error(text):
    with pytest.raises(StallscopeError):
        Incident.parse(text)


def test_slo_parsing():
    assert parse_slo("ttft=500ms,tpot=50ms,itl=0.2s") == {"ttft": 500.0, "tpot": 50.0, "itl": 200.0}
    assert parse_slo("e2el=3s") == {"e2el": 3000.0}
    with pytest.raises(StallscopeError):
        parse_slo("ttft=fast")


# -- engine invariants ----------------------------------------------------------------------------------------------
def _run(policy, budget, mixed=False, kv=None, rate=3.0, dur=30.0, prompt="600:0.8", out="300:0.4", seed=3,
         incident="long-prompts:count=2,tokens=8192,at=10,spacing=2"):
    spec = RunSpec(policy=policy, budget=budget, rate=rate, duration_s=dur, prompt_len=prompt, output_len=out,
                   incident=incident, seed=seed, mixed_chunk=mixed, kv_cache_tokens=kv,
                   slo=parse_slo("ttft=3s,tpot=60ms,itl=250ms"))
    return execute(spec)


@pytest.mark.parametrize("policy,budget,mixed", [("chunked", 512, False), ("chunked", 2048, False),
                                                 ("v0", 16384, False), ("sglang", 2048, False),
                                                 ("sglang", 2048, True)])
def test_scheduler_invariants(policy, budget, mixed):
    run = _run(policy, budget, mixed)
    sim, wl = run.sim, run.workload
    # steps are ordered, disjoint, separated by the host gap
    gap = sim.start_ns[1:] - sim.end_ns[:-1]
    assert (gap >= int(P70.host_gap_ms[0] * 1e6) - 1).all()
    # every request emits exactly its output length; chunks cover exactly its prompt
    assert np.bincount(run.tok_req, minlength=run.n).tolist() == wl.output_len.tolist()
    per_req = np.bincount(sim.ch_req, weights=sim.ch_tokens, minlength=run.n)
    assert per_req.tolist() == wl.prompt_len.astype(float).tolist()  # no preemption here
    assert sim.preemptions.sum() == 0
    assert (sim.n_running <= 256).all() and (sim.kv_used <= P70.kv_cache_tokens).all()
    has_pf = sim.prefill_tokens > 0
    if policy == "chunked":
        assert (sim.prefill_tokens + sim.n_decode <= budget).all()
        assert (sim.n_decode == sim.decoders).all()           # every decode rides in every step
    elif policy == "v0":
        assert (sim.n_decode[has_pf] == 0).all()             # prefill-only steps stall the decodes
        assert (sim.kind != KIND_MIXED).all()
        assert sim.decoders[has_pf].max() > 0
    else:
        assert (sim.prefill_tokens <= budget).all()
        if mixed:
            assert (sim.n_decode == sim.decoders).all()
        else:
            assert (sim.n_decode[has_pf] == 0).all()
    # kinds agree with the composition
    assert ((sim.kind == KIND_DECODE) == (~has_pf & (sim.n_decode > 0))).all()
    assert ((sim.kind == KIND_PREFILL) == (has_pf & (sim.n_decode == 0))).all()
    # FCFS admission: first chunks in arrival order
    first = np.full(run.n, np.iinfo(np.int64).max)
    np.minimum.at(first, sim.ch_req, sim.ch_step)
    assert np.all(np.diff(first) >= 0)
    # prefills never start before the request arrived; decode tokens come after the first token
    assert (sim.start_ns[first] >= wl.arrival_ns).all()
    assert (run.first_token_ns > wl.arrival_ns).all()


def test_simulated_step_times_stay_within_the_stated_noise():
    run = _run("chunked", 2048)
    sim = run.sim
    ratio = (sim.end_ns - sim.start_ns) / (sim.pred_ms * 1e6)
    lo, hi = P70.noise_bound
    assert ratio.min() >= lo * (1 - 1e-6) and ratio.max() <= hi * (1 + 1e-6)
    assert np.log(ratio).std() == pytest.approx(P70.sigma.value, rel=0.15)
    # the predicted time is the preset's model applied to the recorded composition
    tok = sim.prefill_tokens + sim.n_decode
    assert np.allclose(sim.pred_ms, P70.predict_ms(tok, sim.kv_read, sim.attn_work, sim.n_decode))


def test_kv_pressure_preempts_and_recomputes():
    run = _run("chunked", 2048, kv=60_000, rate=4.0, out="600:0.3")
    sim, wl = run.sim, run.workload
    assert sim.preemptions.sum() > 0
    assert (sim.kv_used <= 60_000).all()
    assert np.bincount(run.tok_req, minlength=run.n).tolist() == wl.output_len.tolist()
    # a recompute re-prefills prompt + the tokens emitted before the preemption
    rec = sim.ch_recompute.astype(bool)
    assert rec.any()
    a = truth.Analysis(run)
    causes = a.g["cause"][a.g["spike"]]
    assert (causes == 2).any()                                # spikes labelled preemption
    # A request preempted while decoding re-prefills prompt + the k+1 tokens it had emitted, inside its gap k.
    own = np.nonzero(a.g["own"] > 0)[0]
    assert len(own) > 0
    for gi in own[:20]:
        r, k = a.g["req"][gi], a.g["index"][gi]
        inside = (sim.ch_req == r) & (sim.ch_step > a.g["s_prev"][gi]) & (sim.ch_step <= a.g["s_next"][gi])
        assert sim.ch_recompute[inside].all()
        assert sim.ch_tokens[inside].sum() == wl.prompt_len[r] + k + 1


def test_bad_configurations_are_refused():
    wl = synthesize(np.random.default_rng(0), rate=1, duration_s=5, prompt=LengthDist.parse("9000"),
                    output=LengthDist.parse("10"))
    with pytest.raises(StallscopeError, match="longest prompt"):
        simulate(wl, P70, EngineConfig("v0", 8192), 0)
    with pytest.raises(StallscopeError, match="max-num-seqs"):
        simulate(wl, P70, EngineConfig("chunked", 128, max_num_seqs=256), 0)
    with pytest.raises(StallscopeError, match="KV cache"):
        simulate(wl, P70, EngineConfig("chunked", 2048, kv_cache_tokens=5000), 0)


def test_same_seed_same_run_and_another_seed_differs():
    a, b, c = _run("chunked", 2048, seed=9), _run("chunked", 2048, seed=9), _run("chunked", 2048, seed=10)
    assert np.array_equal(a.sim.end_ns, b.sim.end_ns) and a.request_ids == b.request_ids
    assert len(a.sim.end_ns) != len(c.sim.end_ns) or not np.array_equal(a.sim.end_ns, c.sim.end_ns)


# -- physics the issue asks for -----------------------------------------------------------------------------------
def test_unchunked_8k_prefill_gap_and_budget_512_bound():
    build = _scenarios()
    spec = build.spec_of("unchunked-long-prompt-stall")
    run = execute(spec)
    a = truth.Analysis(run)
    g, sim = a.g, run.sim
    med = np.median(g["gap_ms"])
    big = np.unique(sim.ch_step[run.workload.prompt_len[sim.ch_req] >= 8192])
    assert len(big) == 4 and (sim.kind[big] == KIND_PREFILL).all()
    assert sim.decoders[big].min() >= 60                      # "8k prompts stalling 64 running decodes"
    for s in big:
        inside = (g["s_prev"] < s) & (g["s_next"] >= s)
        assert inside.sum() == sim.decoders[s]                # every stalled decode has one gap spanning it
        assert g["gap_ms"][inside].min() >= 5 * med           # >= 5x the median decode gap
        assert g["gap_ms"][inside].min() > 550 and med < 30   # ~600 ms against ~26 ms
    # The same workload at budget 512: the worst gap is one mixed step at <= 512 tokens plus the host gap.
    spec.policy, spec.budget = "chunked", 512
    run5 = execute(spec)
    a5 = truth.Analysis(run5)
    s5 = run5.sim
    assert (s5.prefill_tokens + s5.n_decode <= 512).all()
    bound = s5.pred_ms.max() * P70.noise_bound[1] + P70.host_gap_ms[1]
    worst = a5.g["gap_ms"].max()
    assert worst <= bound
    med5 = np.median(a5.g["gap_ms"])
    assert 1.5 <= worst / med5 <= 2.2                         # "about 1.8x the decode step"


# -- ground truth ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def v0_truth():
    run = _run("v0", 16384, rate=2.5, out="400:0.3", dur=40)
    a = truth.Analysis(run)
    doc = truth.build(run, a)
    return run, a, doc


def test_truth_gap_table_rebuilds_from_the_document(v0_truth, tmp_path):
    run, a, doc = v0_truth
    p = truth.write(doc, tmp_path / "truth.json")
    back = truth.load(p)
    gf = truth.gaps_frame(back)
    assert gf.height == len(a.g["gap_ms"]) == int((run.workload.output_len - 1).sum())
    assert gf["gap_ms"].to_numpy().tolist() == pytest.approx(a.g["gap_ms"].tolist(), abs=1e-6)
    assert gf["prefill_tokens"].to_list() == a.g["prefill_tokens"].tolist()
    assert back["requests"]["ttft_s"] == a.ttft_s.tolist()   # exact floats, as in the benchmark file


def test_truth_spikes_blame_and_culprits_are_consistent(v0_truth):
    run, a, doc = v0_truth
    sp, cu = doc["spikes"], doc["culprits"]
    n = len(sp["request"])
    assert n == int(a.g["spike"].sum()) > 0
    gap, tdec, blame, exc = (np.asarray(sp[k]) for k in ("gap_ms", "pred_decode_ms", "blame_ms", "excess_ms"))
    assert (blame <= exc + 1e-9).all() and (gap - blame >= tdec - 1e-9).all()
    assert (np.where(np.asarray(sp["rule"]) == "slo", gap > 250, gap > 3 * tdec)).all()
    # culprit overlaps add up to the blame; rank 0 is the top culprit
    tot = np.bincount(cu["spike"], weights=cu["overlap_ms"], minlength=n)
    assert np.allclose(tot, blame, atol=1e-6)
    r0 = np.asarray(cu["rank"]) == 0
    assert (np.asarray(sp["top_culprit"])[np.asarray(cu["spike"])[r0]] == np.asarray(cu["request"])[r0]).all()
    assert (np.asarray(cu["request"]) != np.asarray(sp["request"])[cu["spike"]]).all()
    # in V0 every spike is caused by prefill-only steps of other requests
    assert set(sp["cause"]) == {"prefill"}


def test_truth_goodput_and_counterfactual(v0_truth):
    run, a, doc = v0_truth
    s = doc["summary"]
    req = doc["requests"]
    good = np.asarray(req["good"])
    assert s["good"] == good.sum()
    assert s["goodput_rps"] == pytest.approx(good.sum() / s["duration_s"])
    assert s["goodput_lost_rps"] == pytest.approx((s["good_counterfactual"] - s["good"]) / s["duration_s"])
    ttft, e2el, tpot, out = (np.asarray(req[k]) for k in ("ttft_s", "e2el_s", "tpot_s", "output_tokens"))
    assert np.allclose(tpot, np.where(out > 1, (e2el - ttft) / np.maximum(out - 1, 1), 0))
    cf = np.asarray(req["good_counterfactual"])
    assert (cf >= good).all()                                 # removing interference never hurts
    assert (np.asarray(req["itl_max_cf_s"]) <= np.asarray(req["itl_max_s"]) + 1e-12).all()
    assert s["requests_lost"] == int(cf.sum() - good.sum()) > 0
