"""Read what the recommendation needs from a prepared store: observed steps, the workload, the engine's settings."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .fit import Observations

# Share of decode steps whose client-rebuilt decode count must match the trace's for the rebuilt KV read to be used.
KV_AGREEMENT = 0.8


def step_observations(con) -> tuple[Observations, dict]:
    """Observed steps (view recommend_step_obs) and facts about them (host gaps, bases, counts); without any, the
    steps SGLang's batch lines time (`sglang_observations`)."""
    cols = con.sql("SELECT * FROM recommend_step_obs ORDER BY source_id, step_index").fetchnumpy()
    n = len(cols["step_ms"])
    if n == 0:
        sgl = sglang_observations(con)
        if sgl is not None:
            return sgl
    f = lambda k: np.asarray(np.ma.filled(cols[k].astype(float), np.nan), dtype=float) if n else np.zeros(0)  # noqa: E731
    dec, kv, att = f("decode_seqs"), f("kv_tokens_read"), f("attention_units")
    notes = {}
    info: dict = {"steps": n}
    kv_basis = np.asarray(np.ma.filled(cols["kv_basis"], None), dtype=object) if n else np.zeros(0, object)
    if n:
        client = kv_basis == "client_tokens"
        if client.any():
            act = f("active_decodes")[client]
            agree = float(np.mean(np.abs(act - dec[client]) <= np.maximum(1, 0.05 * dec[client])))
            info["kv_client_agreement"] = agree
            if agree < KV_AGREEMENT:
                kv = np.where(client, np.nan, kv)
                notes["per_kv_token_ms"] = (
                    f"the trace carries no per-step KV read and the client token stream does not line up with its "
                    f"decode counts ({agree:.0%} of steps agree): align a benchmark file to the trace, or profile "
                    f"with detailed step annotations")
        logged = (np.asarray(cols["evidence"]).astype(str) == "iteration_log").all()
        if not np.isfinite(kv[dec > 0]).any() and "per_kv_token_ms" not in notes:
            notes["per_kv_token_ms"] = (
                "no KV-read evidence: vLLM's iteration lines give no per-step KV length and no benchmark file with "
                "token timings is aligned to the log" if logged else
                "no KV-read evidence: the trace annotations carry no per-step Σkv and no benchmark file with token "
                "timings is aligned to the trace")
        if not np.isfinite(att).any():
            notes["per_attention_unit_ms"] = (
                "no prefill chunk contexts: vLLM's iteration lines give each step's context tokens, not the context "
                "each chunk attends to" if logged else
                "no prefill chunk contexts: the annotations carry no Σq·kv and no benchmark requests could be "
                "matched to the prefill steps")
        gaps = f("host_gap_ms")
        gaps = gaps[np.isfinite(gaps) & (gaps >= 0)]
        if len(gaps):
            lo, hi = np.quantile(gaps, [0.05, 0.95])
            info["host_gap_ms"] = (float(lo), float(max(hi, lo)))
        info["kv_basis"] = {str(k): int(v) for k, v in zip(*np.unique(kv_basis.astype(str), return_counts=True))}
        comp = np.asarray(cols["composition_basis"]).astype(str)
        info["composition_basis"] = {str(k): int(v) for k, v in zip(*np.unique(comp, return_counts=True))}
        info["evidence"] = str(cols["evidence"][0])
    obs = Observations(step_ms=f("step_ms"), decode_seqs=dec, tokens=f("tokens"), kv_read=kv, attn_units=att,
                       has_prefill=f("prefill_tokens") > 0 if n else np.zeros(0, bool), notes=notes)
    return obs, info


# SGLang's default --decode-log-interval: one Decode batch line every this many decode forwards.
DECODE_LOG_INTERVAL = 40


def sglang_observations(con) -> tuple[Observations, dict] | None:
    """Step observations from SGLang batch lines (view recommend_sglang_lines); None when the store has none.

    What the lines honestly give (../shared/notes/tgi-sglang-formats.md §2.2-§2.3):
    - decode: an interval between two decode lines with no prefill line inside ran `DECODE_LOG_INTERVAL` decode
      forwards and nothing else, so its mean step is running / gen_throughput (the batch taken as the mean of the
      two lines' `#running-req`, its KV read as the mean of their `#token`);
    - prefill, exact: a prefill forward followed by another with no decode forward between (prefill work was
      waiting, see the view) lasted `#new-token` of it over the next line's `input throughput`;
    - prefill, by difference: an interval holding k prefill lines lasted (decode tokens) / gen_throughput; less
      its decode forwards at the decode-only intervals' fitted step time, the rest is k prefill forwards, kept as
      one observation of their mean (tokens and attention work averaged; the tile staircase is smeared over the
      k chunks). Intervals with a prefill scheduled onto an empty batch are left out (the engine may have idled).
    Every time includes the host time between forwards (SGLang times lines on the wall clock), so the replay adds
    no host gap. Prefill attention work Σc·(k + c/2) is exact for one-request batches, else taken as if the
    batch's new and cached tokens were shared evenly."""
    from .fit import _irls

    if not con.execute("SELECT count(*) FROM engine_batches").fetchall()[0][0]:
        return None
    cols = con.sql("SELECT * FROM recommend_sglang_lines ORDER BY source_id, sched, line_no").fetchnumpy()
    num = lambda k: np.asarray(np.ma.filled(cols[k].astype(float), np.nan), dtype=float)  # noqa: E731
    kind = np.asarray(cols["kind"]).astype(str)
    src = np.asarray(cols["source_id"]).astype(np.int64)
    sched = np.asarray(cols["sched"]).astype(str)
    itv = np.asarray(cols["interval"]).astype(np.int64)
    run, prev_run, g = num("running_reqs"), num("prev_running"), num("gen_tps")
    kvt, prev_kv = num("kv_tokens"), num("prev_kv_tokens")
    new, cached, nseq, queued = num("new_tokens"), num("cached_tokens"), num("new_seqs"), num("queued_reqs")
    mixed_chunk = bool(con.execute("SELECT coalesce(max(value_num), 0) FROM engine_config "
                                   "WHERE key = 'enable_mixed_chunk'").fetchall()[0][0]) or (kind == "mixed").any()
    info: dict = {"steps": 0, "evidence": "sglang_log", "host_gap_ms": (0.0, 0.0)}
    is_dec = kind == "decode"
    is_pf = ~is_dec
    # Intervals: (source, scheduler, interval) keys; per interval the prefill lines it holds.
    key = np.char.add(np.char.add(src.astype(str), "|" + sched), np.char.add("|", itv.astype(str))) if len(kind) \
        else np.zeros(0, str)
    uk, inv = np.unique(key, return_inverse=True)
    n_pf = np.bincount(inv, weights=is_pf.astype(float), minlength=len(uk))
    idle = np.bincount(inv, weights=(is_pf & (np.nan_to_num(run, nan=0) <= 0)).astype(float), minlength=len(uk))
    pf_new = np.bincount(inv, weights=np.where(is_pf, np.nan_to_num(new), 0), minlength=len(uk))
    per_seq = np.maximum(np.nan_to_num(nseq, nan=1), 1)
    attn_line = np.where(is_pf, np.nan_to_num(new) * (np.nan_to_num(cached) + np.nan_to_num(new) / 2) / per_seq, 0)
    pf_attn = np.bincount(inv, weights=attn_line, minlength=len(uk))
    # Running-batch samples inside an interval (prefill lines' #running-req plus the batch they add) for the mean.
    b_after = np.where(is_pf, np.nan_to_num(run) + np.nan_to_num(nseq), 0)
    pf_b = np.bincount(inv, weights=b_after, minlength=len(uk))
    ok_dec = is_dec & (itv > 0) & np.isfinite(g) & (g > 0) & np.isfinite(run) & (run > 0) & np.isfinite(prev_run)
    clean = ok_dec & (n_pf[inv] == 0)
    B = (run + prev_run) / 2
    kv = np.where(np.isfinite(kvt) & np.isfinite(prev_kv), (kvt + prev_kv) / 2, np.nan)
    rows: list[tuple] = []   # (step_ms, decode_seqs, tokens, kv, attn, has_prefill, basis)
    d_ms = 1000 * B[clean] / g[clean]
    rows.append((d_ms, B[clean], B[clean], kv[clean], np.zeros(clean.sum()), np.zeros(clean.sum(), bool),
                 "sglang_decode_interval"))
    # Exact prefill forwards: the next prefill line follows with no decode forward between.
    nxt_tps, nxt_cached = num("next_input_tps"), num("next_cached")
    continues = np.isfinite(nxt_cached) & (nxt_cached >= np.nan_to_num(new)) & (nseq == 1) & \
        (nxt_cached == np.nan_to_num(cached) + np.nan_to_num(new))
    adj = is_pf & np.isfinite(nxt_tps) & (nxt_tps > 0) & (np.nan_to_num(new) > 0) & \
        ((np.nan_to_num(queued) > 0) | continues)
    p_dec = np.where(mixed_chunk, np.nan_to_num(run), 0.0)[adj] if len(adj) else np.zeros(0)
    rows.append((1000 * new[adj] / nxt_tps[adj], p_dec, new[adj] + p_dec, np.where(p_dec > 0, np.nan, 0.0),
                 attn_line[adj], np.ones(adj.sum(), bool), "sglang_prefill_gap"))
    # Prefill forwards by difference (not with mixed chunking: there decode lines count the prefill forwards too).
    mixed_iv = ok_dec & (n_pf[inv] > 0) & (idle[inv] == 0)
    if clean.sum() >= 10 and mixed_iv.any() and not mixed_chunk:
        Xd = np.column_stack([np.ones(clean.sum()), B[clean], np.nan_to_num(kv[clean])])
        coef, _, _ = _irls(Xd, d_ms, np.array([True, True, bool(np.isfinite(kv[clean]).all())]))
        ii = inv[mixed_iv]
        k = n_pf[ii]
        Bm = (run[mixed_iv] + prev_run[mixed_iv] + pf_b[ii]) / (2 + k)
        kvm = np.nan_to_num(kv[mixed_iv])
        total = 1000 * DECODE_LOG_INTERVAL * Bm / g[mixed_iv]
        rest = total - DECODE_LOG_INTERVAL * (coef[0] + coef[1] * Bm + coef[2] * kvm)
        keep = rest > 0
        t_pf = (rest / k)[keep]
        rows.append((t_pf, np.zeros(len(t_pf)), (pf_new[ii] / k)[keep], np.zeros(len(t_pf)),
                     (pf_attn[ii] / k)[keep], np.ones(len(t_pf), bool), "sglang_interval_rest"))
        info["sglang_intervals_left_out"] = int((~keep).sum() + (ok_dec & (idle[inv] > 0)).sum())
    cat = lambda j: np.concatenate([r[j] for r in rows]).astype(float)  # noqa: E731
    step_ms, dec, tok, kvr, att = (cat(j) for j in range(5))
    has_pf = np.concatenate([r[5] for r in rows]).astype(bool)
    info["steps"] = len(step_ms)
    info["composition_basis"] = {r[6]: len(r[0]) for r in rows if len(r[0])}
    info["kv_basis"] = {"sglang_token_count": int(np.isfinite(kvr[dec > 0]).sum()), "none": int((dec == 0).sum())}
    info["decode_forwards_per_line"] = DECODE_LOG_INTERVAL
    notes = {}
    if not np.isfinite(kvr[dec > 0]).any():
        notes["per_kv_token_ms"] = "no KV-read evidence: the SGLang decode lines carry no #token count"
    obs = Observations(step_ms=step_ms, decode_seqs=dec, tokens=tok, kv_read=kvr, attn_units=att,
                       has_prefill=has_pf, notes=notes)
    return (obs, info) if len(obs) else None


@dataclass
class WorkloadObs:
    arrival_ns: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray
    kind: str
    runs: int
    missing_output: int = 0
    notes: list = field(default_factory=list)


def workload(con) -> WorkloadObs | None:
    """The judged runs' requests (view recommend_workload), the largest run first; None when there are none."""
    rows = con.sql("""SELECT source_id, run_line, kind, arrival_ns, prompt_tokens, output_tokens FROM recommend_workload
                      ORDER BY source_id, run_line, rank_in_run""").fetchnumpy()
    if len(rows["arrival_ns"]) == 0:
        return None
    src = np.asarray(rows["source_id"], dtype=np.int64) * (1 << 40) + np.asarray(np.ma.filled(rows["run_line"], 0), dtype=np.int64)
    keys, counts = np.unique(src, return_counts=True)
    # Replay the largest run: runs at different rates (a sweep of benchmark files) are different workloads.
    pick = src == keys[np.argmax(counts)]
    out = rows["output_tokens"]
    o = np.asarray(np.ma.filled(out, 0), dtype=np.int64)[pick]
    a = np.asarray(rows["arrival_ns"], dtype=np.int64)[pick]
    p = np.asarray(rows["prompt_tokens"], dtype=np.int64)[pick]
    order = np.argsort(a, kind="stable")
    wl = WorkloadObs(a[order], p[order], o[order], str(rows["kind"][0]), len(keys), int((o <= 0).sum()))
    if len(keys) > 1:
        wl.notes.append(f"{len(keys)} runs in the store: replaying the largest ({int(pick.sum())} requests)")
    return wl


@dataclass
class EngineObs:
    engine: str                   # vllm | sglang | tgi | unknown
    version: str | None
    policy: str                   # chunked | v0 | sglang (simulator policies)
    budget: int | None            # the current token budget in the engine's own knob
    max_num_seqs: int
    kv_cache_tokens: int | None
    model: str | None
    gpus: int
    mixed_chunk: bool = False
    basis: list = field(default_factory=list)


def engine(con) -> EngineObs:
    """The engine the evidence comes from, its policy and its settings. The engine is read from the evidence first
    (trace step markers, SGLang batch lines, then the server logs present: a store may hold a vLLM log and a TGI
    router's log of the same requests), and only that engine's logs give the settings."""
    markers = dict(con.execute("SELECT marker, count(*) FROM steps GROUP BY marker").fetchall())
    name, skip = _engine_name(con, markers)
    cfg = {k: (v, num) for k, v, num in con.execute(
        "SELECT key, any_value(value), max(value_num) FROM engine_config WHERE NOT list_contains(?, source_id) "
        "GROUP BY key", [skip]).fetchall()}
    num = lambda k: cfg[k][1] if k in cfg and cfg[k][1] is not None else None  # noqa: E731
    txt = lambda k: cfg[k][0] if k in cfg else None  # noqa: E731
    basis = []
    version = txt("vllm_version") or txt("engine_version")
    if name == "unknown" and (version or con.execute("SELECT count(*) FROM engine_stats").fetchall()[0][0]):
        name = "vllm"
    phases = _step_phases(con)
    mixed = bool(phases.get("mixed"))
    prefill_first = bool(phases.get("prefill_between_decodes"))
    if name == "sglang":
        policy, budget = "sglang", num("chunked_prefill_size")
        mixed_chunk = bool(num("enable_mixed_chunk") or 0)
    elif name == "tgi":
        policy, budget, mixed_chunk = "chunked", num("max_batch_prefill_tokens"), False
    else:
        chunked = num("enable_chunked_prefill")
        v1 = bool(version) and _ver(version) >= (0, 10)
        if mixed:
            policy = "chunked"
            basis.append(f"{phases['mixed']} mixed prefill+decode steps in the trace")
        elif prefill_first:
            policy = "v0"
            basis.append(f"{phases['prefill_between_decodes']} prefill-only steps between decode steps in the "
                         "trace: decodes waited while a prompt was prefilled (prefill-first)")
        elif chunked == 1 or v1:
            policy = "chunked"
            basis.append("chunked prefill enabled in the server log" if chunked == 1 else f"vLLM {version} (V1)")
        else:
            policy = "v0"
            basis.append("vLLM V0 without chunked prefill" + (f" ({version})" if version else ""))
        budget, mixed_chunk = num("max_num_batched_tokens"), False
    seqs = num("max_num_seqs")
    gpus = 1
    for k in ("tensor_parallel_size", "pipeline_parallel_size"):
        gpus *= int(num(k) or 1)
    if gpus == 1:
        ws = con.execute("SELECT max(world_size) FROM trace_meta").fetchall()[0][0]
        gpus = int(ws) if ws else 1
    model = txt("model") or txt("served_model_name")
    if model is None:
        row = con.execute("SELECT any_value(value) FROM engine_config WHERE key IN ('model_id', 'model_name')").fetchall()
        model = row[0][0] if row and row[0][0] else None
    return EngineObs(engine=name, version=version, policy=policy, budget=int(budget) if budget else None,
                     max_num_seqs=int(seqs) if seqs else 256, kv_cache_tokens=int(num("kv_cache_tokens"))
                     if num("kv_cache_tokens") else None, model=model, gpus=gpus, mixed_chunk=mixed_chunk, basis=basis)


def _engine_name(con, markers: dict) -> tuple[str, list[int]]:
    """(engine, the sources whose logs belong to another engine). Step markers and SGLang batch lines name the
    engine that ran the steps; else a vLLM or SGLang server log outranks a TGI router log (it has the step-level
    evidence); else the one engine the logs name."""
    logged = {int(s): str(v).lower() for s, v in con.execute(
        "SELECT source_id, any_value(value) FROM engine_config WHERE key = 'engine' GROUP BY source_id").fetchall()}
    names = set(logged.values())
    if any(k.startswith("sglang") for k in markers) or con.execute(
            "SELECT count(*) FROM engine_batches").fetchall()[0][0]:
        name = "sglang"
    elif any(k.startswith("vllm") for k in markers) or "vllm" in names:
        name = "vllm"
    elif "sglang" in names:
        name = "sglang"
    elif "tgi" in names or con.execute("SELECT count(*) FROM requests WHERE engine = 'tgi'").fetchall()[0][0]:
        name = "tgi"
    elif len(names) == 1:
        name = names.pop()
    else:
        name = "unknown"
    return name, sorted(s for s, v in logged.items() if v != name)


def _step_phases(con) -> dict:
    """Counts of the traced steps by phase (`step_phase`: from the annotations, else the kernels), and of the
    prefill-only steps that ran between two decode steps of the same trace: decodes were running and waited, which
    only a prefill-first scheduler does."""
    if not con.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = 'step_phase'").fetchall()[0][0]:
        return dict(con.execute("SELECT phase, count(*) FROM steps GROUP BY phase").fetchall())
    rows = con.execute("""
        WITH w AS (SELECT source_id, step_index, phase FROM step_phase WHERE phase IN ('prefill', 'decode', 'mixed')),
        n AS (SELECT phase, lag(phase) OVER s AS prev, lead(phase) OVER s AS nxt FROM w
              WINDOW s AS (PARTITION BY source_id ORDER BY step_index))
        SELECT phase, count(*) FROM n GROUP BY phase
        UNION ALL
        SELECT 'prefill_between_decodes', count(*) FROM n WHERE phase = 'prefill' AND prev = 'decode' AND nxt = 'decode'
        """).fetchall()
    return {k: int(v) for k, v in rows if v}


def _ver(text: str) -> tuple[int, int]:
    import re

    m = re.match(r"v?(\d+)\.(\d+)", text)
    return (int(m[1]), int(m[2])) if m else (0, 0)
