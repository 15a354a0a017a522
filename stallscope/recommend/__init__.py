"""What to change: the chunked-prefill budget that maximises goodput for the user's SLO, and one pool or two.

`recommend(con, options)` fits the step-time model on the store's observed steps (fit.py), replays the incident's
workload through the engine simulator at every tile-aligned budget and unchunked (replay.py), picks the budget and
cross-checks it with the closed-form rule (choose.py), and compares aggregated with disaggregated serving
(placement.py). The result is the `"recommendation"` object of docs/analysis-json.md.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from stallscope.errors import StallscopeError

ENGINE_POLICY_NAMES = {"chunked": "chunked", "v0": "prefill_first", "sglang": "sglang_prefill_only"}
# How far the stated goodput band is widened around the point goodput, by the kind of step evidence the fit used.
# A trace's steps carry their own windows and (with detailed annotations) each step's KV read and prefill
# attention work. vLLM's iteration lines give the same composition counts and the wait for each step's output,
# but no KV read (unless a benchmark file is aligned), no prefill attention work, and the host time between
# steps is inferred from the 1-s stamps: the replay's coefficient draws do not see those gaps, so each side of
# the band is stretched by half again.
# SGLang's batch lines time 40-forward decode means and prefill forwards only through 2-decimal throughputs and
# differences (stallscope/recommend/observe.py sglang_observations): each side twice as wide.
EVIDENCE_BAND = {"trace": 1.0, "iteration_log": 1.5, "sglang_log": 2.0, "client_stream": 1.5}


@dataclass
class Options:
    slo: object = None                  # stallscope.analyze.Slo
    attainment: float = 0.9
    gpus: int | None = None             # GPUs of the deployment to place (default: two replicas' worth)
    kv_link: str | None = None
    model_config: str | None = None
    replays: int = 3                    # replays per budget: the point model plus coefficient draws
    seed: int = 0
    budgets: tuple = ()                 # override the grid (tests)
    on_progress: object = None          # callable(done, total)
    prepared: bool = False              # the analysis views are already installed and materialised


def _slo_dict(slo) -> dict:
    d = slo.as_dict() if slo is not None else {}
    return {k: v for k, v in d.items() if k in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms")}


def check_slo(slo) -> dict:
    d = _slo_dict(slo)
    if not d:
        raise StallscopeError("the SLO has no latency term: give --slo with at least one of ttft, tpot, itl, e2el "
                              "(e.g. --slo ttft=1s,itl=100ms)")
    return d


def recommend_or_why(con, opts: Options) -> dict:
    """The recommendation, or, when the SLO has no latency term for the replay to judge, the recommendation object
    with no setting and that reason as its missing evidence (a report answers by default and must not fail on it)."""
    from . import observe

    if not _slo_dict(opts.slo):
        out = _empty(observe.engine(con))
        out["missing_evidence"] = ["an SLO with a latency term to judge each budget by: give --slo with at least one "
                                   "of ttft, tpot, itl, e2el (e.g. --slo ttft=1s,itl=100ms)"]
        return _clean(out)
    return recommend(con, opts)


def recommend(con, opts: Options) -> dict:
    from . import choose, observe, placement, replay
    from .fit import FitError, fit

    slo = check_slo(opts.slo)
    n_req = con.execute("SELECT count(*) FROM requests").fetchall()[0][0]
    n_steps = con.execute("SELECT count(*) FROM steps").fetchall()[0][0]
    n_iter = con.execute("SELECT count(*) FROM engine_steps WHERE NOT coalesce(dummy, false)").fetchall()[0][0]
    if not n_req and not n_steps and not n_iter and _has_metrics(con):
        return _from_metrics(con, opts)
    if not n_req and not n_steps and not n_iter:
        raise StallscopeError("the store is empty: ingest a profiler trace, server log or benchmark file first "
                              "(stallscope ingest FILE... --db DB)")
    if not opts.prepared:
        _prepare(con, opts.slo)
    eng = observe.engine(con)
    missing: list[str] = []
    notes: list[str] = []
    out = _empty(eng)

    obs, info = observe.step_observations(con)
    model = None
    if n_steps == 0 and n_iter and len(obs) == 0:
        missing.append(f"engine step durations: the {n_iter} vLLM iteration lines carry no step with tokens and a "
                       "positive elapsed time")
    elif n_steps == 0 and not n_iter and len(obs) == 0:
        batches = con.execute("SELECT count(*) FROM engine_batches").fetchall()[0][0]
        if batches:
            missing.append(f"engine step durations: none of the {batches} SGLang batch lines times a step (a decode "
                           "interval without prefill lines, or two prefill lines with prefill work waiting, each "
                           "with its throughput field); add a profiler trace (SGLang step markers) of the same load")
        else:
            obs, info, why = _client_stream_steps(con, eng)
            if why is None:
                try:
                    model = fit(obs, seed=opts.seed)
                    info["residual_mape"] = model.mape
                except FitError as e:
                    missing.append(f"enough steps read from the client token stream: {e}")
            else:
                missing.append("engine steps: the store has no profiler trace and no vLLM iteration lines (no "
                               "per-step durations and batch composition)" + (f", and the benchmark's token stream "
                               f"cannot serve instead: {why}" if why else "") + "; serve with vLLM >= 0.11 and "
                               "--enable-logging-iteration-details, or capture a trace with torch.profiler around "
                               "the engine's execute_model (vLLM VLLM_TORCH_PROFILER_DIR) while serving the same "
                               "load")
    elif len(obs) == 0:
        missing.append(f"per-step batch composition: the {n_steps} traced steps carry no prefill/decode token "
                       "counts (vLLM execute_context_N(T)_generation_M(G) annotations, SGLang step markers); "
                       "profile a build that records them")
    else:
        try:
            model = fit(obs, seed=opts.seed)
        except FitError as e:
            missing.append(f"enough composed steps: {e}")
    wl_obs = observe.workload(con)
    why_wl = None
    if wl_obs is None and n_iter:
        from .log_workload import from_iteration_lines

        wl_obs, basis, why_wl = from_iteration_lines(con, eng.budget)
        if basis:
            out["workload_basis"] = basis
    if wl_obs is None:
        missing.append(_missing_workload(con, why_wl))
    elif wl_obs.missing_output:
        missing.append(f"output lengths of {wl_obs.missing_output} of {len(wl_obs.arrival_ns)} requests (the server "
                       "log does not print them): add the benchmark file of the same run")
    if model is not None:
        out["model"] = _model_dict(model, info)
        out["evidence"], out["evidence_steps"] = info.get("evidence"), model.steps_used
        if info.get("evidence") == "client_stream":
            out["evidence_quality"] = _stream_quality(info, model)
    if missing:
        out["missing_evidence"] = missing
        return _clean(out)

    from stallscope.simulate.workload import Workload

    wl = Workload(wl_obs.arrival_ns - wl_obs.arrival_ns[0], wl_obs.prompt_len, wl_obs.output_len,
                  np.zeros(len(wl_obs.arrival_ns), bool), {"requests": len(wl_obs.arrival_ns)})
    notes += wl_obs.notes
    need = int((wl.prompt_len + wl.output_len).max())
    kv_cap = eng.kv_cache_tokens
    if kv_cap is None:
        kv_cap = max(2_000_000, need)
        notes.append("the KV-cache capacity is not in the store: the replay assumes no preemption")
    kv_cap = max(kv_cap, need)
    sem = replay.Semantics(policy=eng.policy if eng.policy != "v0" else "chunked", max_num_seqs=eng.max_num_seqs,
                           kv_cache_tokens=kv_cap, mixed_chunk=eng.mixed_chunk,
                           unchunked_policy="v0" if eng.policy == "v0" else "chunked")
    budgets = replay.grid(sem, wl, opts.budgets or replay.BUDGETS)
    host = info.get("host_gap_ms", (0.3, 0.56))
    presets = replay.presets_for(model, replays=opts.replays, kv_cache_tokens=kv_cap,
                                 max_model_len=max(need + 1, 32768), host_gap_ms=host, seed=opts.seed)
    # SGLang without mixed chunking: when a per-token SLO is set, also replay with --enable-mixed-chunk (decodes
    # advance inside prefill forwards) and keep it only if it serves more.
    try_mixed = sem.policy == "sglang" and not sem.mixed_chunk and "itl_ms" in slo
    total = len(budgets) * len(presets) * (2 if try_mixed else 1)
    done = [0]

    def tick():
        done[0] += 1
        if opts.on_progress:
            opts.on_progress(done[0], total)

    results = replay.sweep(presets, sem, wl, slo, budgets, seed=opts.seed, on_step=tick)
    i, ties = choose.pick(results)
    mixed_wins = False
    if try_mixed:
        from dataclasses import replace as _replace

        sem_m = _replace(sem, mixed_chunk=True)
        res_m = replay.sweep(presets, sem_m, wl, slo, budgets, seed=opts.seed, on_step=tick)
        j, ties_m = choose.pick(res_m)
        if res_m[j].goodput_rps > results[i].goodput_rps * (1 + choose.NOISE_FLOOR) and \
                res_m[j].lo > results[i].hi:
            mixed_wins = True
            notes.append(f"--enable-mixed-chunk replayed: {res_m[j].goodput_rps:.2f} req/s against "
                         f"{results[i].goodput_rps:.2f} without it")
            results, i, ties, sem = res_m, j, ties_m, sem_m
    best = results[i]
    C = best.chunk_tokens

    # Closed form at the observed p90 decode batch and its KV read.
    dec = obs.decode_seqs[np.isfinite(obs.decode_seqs) & (obs.decode_seqs > 0)]
    B90 = float(np.quantile(dec, 0.9)) if len(dec) else 1.0
    kvr = obs.kv_read[np.isfinite(obs.kv_read) & (obs.decode_seqs > 0)]
    kv90 = float(np.quantile(kvr, 0.9)) if len(kvr) else B90 * float(np.median(wl.prompt_len + wl.output_len / 2))
    dur_s = max(float(wl.arrival_ns[-1] - wl.arrival_ns[0]) / 1e9, 1e-9)
    rate = len(wl) / dur_s
    p = wl.prompt_len.astype(float)
    cf = choose.closed_form(model, budgets=budgets, B90=B90, kv90=kv90, prompts=p,
                            osl_median=float(np.median(wl.output_len)), rate_rps=rate, slo=slo,
                            prefill_only=sem.policy == "sglang" and not sem.mixed_chunk)
    agree, why = choose.agreement(C, cf, budgets)
    cf_row = next(r for r in cf["rows"] if r["chunk_tokens"] == C)

    meets = best.attainment >= opts.attainment
    load_for_target = None
    if not meets:
        load_for_target = _load_for_target(presets[0], sem, wl, slo, C, opts.attainment, rate, opts.seed)

    # Placement: per-GPU goodput of one pool at the chosen budget against the best prefill:decode split.
    G = max(eng.gpus, 1)
    gpus_total = opts.gpus or 2 * G
    if opts.gpus is None:
        notes.append(f"placement compares {gpus_total} GPUs (two replicas of {G}); give --gpus for your fleet")
    instances = max(gpus_total // G, 1)
    kvb, kv_src = placement.kv_bytes_per_token(opts.model_config, eng.model)
    bw, link_src = placement.link_gbps(opts.kv_link)
    fl = placement.Fluid(model.predict, model.q99_decode, model.q99_mixed, G,
                         prefill_only_budget=sem.policy == "sglang" and not sem.mixed_chunk)
    pw = placement.Workload(rate, float(p.mean()), float(wl.output_len.mean()), float(np.quantile(p, 0.9)))
    ps = placement.Slo(slo.get("ttft_ms"), slo.get("tpot_ms"), slo.get("itl_ms"))
    agg_C = C if C is not None else int(max(16384, wl.prompt_len.max() + sem.max_num_seqs))
    cmp = placement.compare(fl, pw, ps, instances=instances, budgets=[agg_C], kv_bytes=kvb, link_gbps_=bw)
    if kvb is None:
        missing.append(kv_src)
        place, margin, place_why = None, None, "KV transfer cost unknown"
    elif instances < 2:
        place, margin, place_why = "aggregated", None, f"{gpus_total} GPUs hold one replica of {G}: nothing to split"
    else:
        place, margin, place_why = placement.decide(cmp["aggregated"], cmp["disaggregated"])
    dis = cmp["disaggregated"]

    p50, p90, p99 = np.quantile(p, [0.5, 0.9, 0.99])
    out.update({
        "setting": choose.setting(eng.engine, eng.policy, C, longest_prompt=int(wl.prompt_len.max()),
                                  prompt_p50=p50, prompt_p99=p99, prompt_p90=p90, itl_binds=mixed_wins,
                                  max_num_seqs=sem.max_num_seqs),
        "chunk_tokens": C,
        "predicted_p99_itl_ms": best.p99_itl_ms, "predicted_mean_tpot_ms": best.mean_tpot_ms,
        "predicted_p90_ttft_ms": best.p90_ttft_ms,
        "goodput_rps": best.goodput_rps,
        "goodput_band_rps": _band(best.goodput_rps, best.lo, best.hi, _widen(out)),
        "attainment": best.attainment, "meets_attainment": meets, "load_for_target_rps": load_for_target,
        "ttft_cost_ms": cf_row.get("ttft_ms"),
        "placement": place, "prefill_decode_split": list(dis.split) if (place and dis) else None,
        "placement_margin": margin, "placement_reason": place_why,
        "placement_detail": {
            "gpus": gpus_total, "gpus_per_instance": G,
            "aggregated_per_gpu_rps": cmp["aggregated"].per_gpu_rps, "aggregated_binding": cmp["aggregated"].binding,
            "disaggregated_per_gpu_rps": dis.per_gpu_rps if dis else None,
            "disaggregated_binding": dis.binding if dis else None,
            "kv_bytes_per_token": kvb, "kv_bytes_basis": kv_src if kvb else None, "kv_link": link_src},
        "goodput_by_chunk": [r.row() for r in results],
        "ties": [results[k].chunk_tokens for k in ties],
        "closed_form": {"chunk_tokens": cf["chunk_tokens"] if cf["chunk_tokens"] != "none" else None,
                        "agrees": agree, "why": why, "decode_batch_p90": B90, "t_dec_ms": cf["t_dec_ms"],
                        "rows": cf["rows"]},
        "replay": {"requests": len(wl), "rate_rps": rate, "replays_per_budget": len(presets),
                   "semantics": sem.policy, "mixed_chunk": sem.mixed_chunk, "max_num_seqs": sem.max_num_seqs, "kv_cache_tokens": kv_cap},
        "missing_evidence": missing,
        "notes": notes,
    })
    if not meets:
        notes.append(f"no budget reaches the {opts.attainment:.0%} attainment target at {rate:.2f} req/s (best: "
                     f"{best.attainment:.0%} at {choose._name(C)})"
                     + (f"; {choose._name(C)} reaches it at {load_for_target:.2f} req/s" if load_for_target else "")
                     + "; see placement")
    return _clean(out)


def _has_metrics(con) -> bool:
    return bool(con.execute("SELECT EXISTS (SELECT 1 FROM metric_samples)").fetchall()[0][0])


def _from_metrics(con, opts: Options) -> dict:
    """Only Prometheus metrics in the store: the coarse fixed + per-token model of metrics_model.py."""
    from . import metrics_model
    if not opts.prepared:
        _prepare(con, opts.slo)
    return _clean(metrics_model.recommend(con, _slo_dict(opts.slo)))


def _missing_workload(con, why_not_rebuilt: str | None = None) -> str:
    """Why the store gives no workload to replay, in the words of what it does hold."""
    n_blind = con.execute("""SELECT count(*) FROM requests WHERE kind = 'server' AND arrival_ns IS NOT NULL
                             AND prompt_tokens IS NULL""").fetchall()[0][0]
    if n_blind:
        return (f"the workload's prompt lengths: the server log's {n_blind} request lines carry no prompt (vLLM >= "
                "0.10 prints it only at DEBUG) and the store has no benchmark file"
                + (f"; the prompts cannot be rebuilt from vLLM's iteration lines: {why_not_rebuilt}" if why_not_rebuilt
                   else "") + ": add the benchmark file of the same run (vllm bench serve --save-result "
                "--save-detailed), or serve with --enable-logging-iteration-details")
    return ("the workload: no requests with arrival times and prompt lengths (a benchmark file from vllm bench serve "
            "--save-result --save-detailed, or a server log with request lines)")


def _client_stream_steps(con, eng):
    """(observations, facts, None) from the benchmark's token stream, or (None, {}, why not); why is "" when the
    store has no token stream at all."""
    from . import client_stream

    if not client_stream.has_stream(con):
        return None, {}, ""
    return client_stream.step_observations(con, eng)


def _stream_quality(info: dict, model) -> dict:
    """How well the client token stream read as steps: the recommendation's `evidence_quality`."""
    q = {"steps_read": info["steps_read"], "unambiguous_share": info["unambiguous_share"],
         "prefill_placement_exact_share": info["prefill_placement_exact_share"],
         "residual_mape": model.mape, "budget_used": info["budget_used"], "cache_basis": info.get("cache_basis")}
    if "budget_assumed" in info:
        q["budget_assumed"] = info["budget_assumed"]
    return q


def _widen(out: dict) -> float:
    """The band's stretch for the evidence used. For the client stream it grows as fewer clusters read as single
    steps and as the fit's held-out error grows: x1.5 (as for iteration lines: no host gap, no attention work of
    its own) times (2 - unambiguous share) times (1 + MAPE)."""
    ev = out.get("evidence")
    if ev == "client_stream":
        q = out.get("evidence_quality") or {}
        return EVIDENCE_BAND[ev] * (2 - float(q.get("unambiguous_share") or 0)) * (1 + float(q.get("residual_mape")
                                                                                             or 0))
    return EVIDENCE_BAND.get(ev, 1.0)


def _band(point: float, lo: float, hi: float, widen: float) -> list[float]:
    """The replay's goodput band around `point`, each side stretched by `widen` (EVIDENCE_BAND), never below 0."""
    return [max(0.0, point - widen * (point - lo)), point + widen * (hi - point)]


def _clean(v):
    """Plain JSON values: numpy scalars to Python, non-finite floats to None (JSON has no Infinity)."""
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(v) if np.isfinite(v) else None
    if isinstance(v, np.bool_):
        return bool(v)
    return v


def _prepare(con, slo) -> None:
    """Install the analyses and compute only what the recommendation reads. The prefill replay (prefill_parts, the
    costly part of an analysis) is needed only when some step's prefill composition is not in the trace itself."""
    from stallscope import sqlviews

    sqlviews.install(con, report=False, **slo.__dict__)
    need_parts = con.execute("""SELECT count(*) FROM steps WHERE ctx_sum_qkv IS NULL
                                AND (ctx_tokens IS NULL OR ctx_tokens > 0 OR gen_reqs IS NULL)""").fetchall()[0][0]
    if need_parts:
        sqlviews.materialise(con, ("step_phase", "client_gaps", "request_metrics", "prefill_parts"))
    else:
        # Every step carries its own Σq·kv: the replay's chunk assignment would be joined and then never used.
        con.execute("CREATE OR REPLACE TEMP TABLE _m_prefill_parts AS SELECT * FROM prefill_parts LIMIT 0")
        con.execute("CREATE OR REPLACE TEMP VIEW prefill_parts AS SELECT * FROM _m_prefill_parts")
        sqlviews.materialise(con, ("step_phase",))


def _empty(eng) -> dict:
    return {"engine": eng.engine, "setting": None, "chunk_tokens": None,
            "current_chunk_tokens": eng.budget if eng.policy != "v0" else None,
            "policy_observed": ENGINE_POLICY_NAMES.get(eng.policy, eng.policy)
            + ("_mixed_chunk" if eng.mixed_chunk else ""),
            "predicted_p99_itl_ms": None, "predicted_mean_tpot_ms": None, "predicted_p90_ttft_ms": None,
            "goodput_rps": None, "goodput_band_rps": None, "ttft_cost_ms": None, "placement": None,
            "prefill_decode_split": None, "placement_margin": None, "goodput_by_chunk": [], "model": None,
            "evidence": None, "evidence_steps": 0,
            "missing_evidence": []}


def _model_dict(m, info: dict) -> dict:
    return {"coefficients": m.coefficients(),
            "identified": {k: v["identified"] for k, v in m.identified.items()},
            "unidentified_reasons": {k: v["reason"] for k, v in m.identified.items() if not v["identified"]},
            "relative_standard_error": {k: v["rse"] for k, v in m.identified.items()},
            "tile_tokens": m.tile, "tile_basis": m.tile_basis,
            "p99_band": {"decode": m.q99_decode, "prefill": m.q99_mixed},
            "mape": m.mape, "p99_coverage": m.p99_coverage, "steps_used": m.steps_used,
            "kv_basis": info.get("kv_basis"), "composition_basis": info.get("composition_basis"),
            "host_gap_ms": list(info.get("host_gap_ms", (0.3, 0.56)))}


def _load_for_target(preset, sem, wl, slo, C, target, rate, seed) -> float | None:
    """The arrival rate at which budget C reaches the attainment target (bisection on a slowed-down replay)."""
    from . import replay

    judge = replay.Judge(slo)
    cfg = replay.config_for(sem, C, wl)

    def att(f):
        w = replay.rescale(wl, f)
        from stallscope.simulate.engine import simulate

        g, t, _ = judge.judge([replay.metrics(simulate(w, preset, cfg, seed), w)])[0]
        return g / t if t else 0.0

    lo, hi = 0.0, 1.0
    if att(0.02) < target:
        return None
    lo = 0.02
    for _ in range(7):
        mid = (lo + hi) / 2
        if att(mid) >= target:
            lo = mid
        else:
            hi = mid
    return lo * rate
