"""Engine steps rebuilt from a benchmark's token stream, when the store has no trace and no vLLM Iteration lines.

The view `recommend_client_steps` reads the step ends, durations and decode compositions from the clusters of chunk
arrivals (see its header). This module says first whether the stream can be read as steps at all (`unreadable`),
then places the prefill chunks the stream does not show (`place_prefill`): vLLM's chunked scheduler serves the
waiting prompts first come, first served, each step filling the budget left after its decodes, so the prefill side
is one FIFO queue drained at `budget - decodes` tokens per step. Its cumulative output is the classic queue
formula Q(k) = R(k) + min_{m<=k}(A(m) - R(m)) (A: prompt tokens arrived before step k starts, R: cumulative room),
then held between the bounds each request's first token sets (a request's last chunk ran in the step its first
token ended). Vectorised throughout: a 1-hour benchmark holds millions of chunks.
"""
from __future__ import annotations

import numpy as np

from .fit import Observations

# Below this share of clusters read as single steps, the stream is not taken as step evidence.
MIN_UNAMBIGUOUS = 0.5
# Room given to a step after a gap in the decode stream: hidden prefill-only steps may lie inside it.
_OPEN_ROOM = 10**10
DEFAULT_BUDGET = 2048   # vLLM V1's OpenAI-server default max_num_batched_tokens (before the >= 70 GiB defaults)


def has_stream(con) -> bool:
    return bool(con.execute("""SELECT count(*) FROM token_gaps g JOIN requests r USING (source_id, request_id)
                               WHERE r.kind = 'client' AND g.end_ns IS NOT NULL""").fetchall()[0][0])


def unreadable(con, eng) -> str | None:
    """Why the client's chunks cannot be read as engine steps, in the words of the evidence; None when they can."""
    cfg = {k: (v, n) for k, v, n in con.execute(
        "SELECT key, any_value(value), max(value_num) FROM engine_config GROUP BY key").fetchall()}
    num = lambda k: cfg[k][1] if k in cfg and cfg[k][1] is not None else None  # noqa: E731
    txt = lambda k: str(cfg[k][0]) if k in cfg and cfg[k][0] is not None else ""  # noqa: E731
    pp = num("pipeline_parallel_size")
    if pp and pp > 1:
        return (f"the server log says pipeline_parallel_size={int(pp)}: pipeline stages interleave {int(pp)} "
                "micro-batches, so the token arrivals of concurrent streams cluster at micro-batch ends, not at "
                "engine steps, and a step's duration and composition cannot be read from them")
    steps = num("num_scheduler_steps")
    if steps and steps > 1:
        return (f"the server log says num_scheduler_steps={int(steps)} (multi-step scheduling): each streamed chunk "
                f"carries up to {int(steps)} tokens, so a chunk arrival is not one engine step")
    spec = txt("speculative_config")
    if spec and spec.lower() not in ("none", "null", "{}"):
        return ("the server log shows speculative decoding (speculative_config set): a chunk carries the accepted "
                "draft tokens of a step, so chunk counts and arrivals are not one token per step")
    row = con.execute("""
        WITH c AS (SELECT r.source_id, r.request_id, r.output_tokens, count(g.gap_index) + 1 AS chunks,
                          max(coalesce(g.tokens_in_chunk, 1)) AS most
                   FROM requests r LEFT JOIN token_gaps g USING (source_id, request_id)
                   WHERE r.kind = 'client' AND coalesce(r.status, 'ok') = 'ok' AND r.output_tokens > 1
                   GROUP BY ALL)
        SELECT count(*), count(*) FILTER (WHERE chunks > output_tokens), count(*) FILTER (WHERE chunks < output_tokens
               OR most > 1) FROM c""").fetchall()[0]
    n, extra, fewer = (int(x or 0) for x in row)
    if n and extra > 0.1 * n:
        return (f"{extra} of {n} benchmark requests have one chunk more than output tokens: the server sends an "
                "empty first chunk, so the recorded first-token times are too early (the real first-token wait sits "
                "in the first inter-chunk gap) and the first-token arrivals do not mark prefill steps")
    if n and fewer > 0.1 * n:
        return (f"{fewer} of {n} benchmark requests got fewer chunks than output tokens (multi-token chunks: "
                "multi-step scheduling or speculative decoding): a chunk arrival is not one engine step")
    return None


def load(con, run: tuple[int, int] | None = None) -> tuple[dict, dict]:
    """(clusters of the largest run, that run's requests in send order with their first-token cluster)."""
    from stallscope import sqlviews

    # Computed once (two windows over every token arrival: ~15 s and 2 GB of sorting for an hour at 20 req/s),
    # read twice below; a cluster per engine step is a few hundred thousand rows at most.
    sqlviews.materialise(con, ["recommend_client_steps"])
    try:
        if run is None:
            r = con.execute("""SELECT source_id, run_line FROM recommend_client_steps GROUP BY ALL
                               ORDER BY count(*) DESC, source_id, run_line LIMIT 1""").fetchall()
            if not r:
                return {}, {}
            run = r[0]
        st = con.execute("""SELECT * FROM recommend_client_steps WHERE source_id = ? AND run_line = ?
                            ORDER BY step_index""", list(run)).fetchnumpy()
    finally:
        sqlviews.release(con, "recommend_client_steps")
    # Prompt tokens served by the prefix cache, where the analysis inferred them (it needs steps; else none).
    has_cache_view = con.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = 'request_cached_tokens'"
                                 ).fetchall()[0][0]
    cache = ("SELECT source_id, request_id, any_value(cached_tokens) AS cached_tokens FROM request_cached_tokens "
             "GROUP BY ALL" if has_cache_view else
             "SELECT NULL::INTEGER AS source_id, NULL::VARCHAR AS request_id, 0 AS cached_tokens LIMIT 0")
    rq = con.execute(f"""
        WITH c AS ({cache})
        SELECT r.arrival_ns, r.first_token_ns, r.finish_ns, r.prompt_tokens,
               coalesce(c.cached_tokens, 0) AS cached_tokens
        FROM requests r LEFT JOIN c ON c.source_id = r.source_id AND c.request_id = r.request_id
        WHERE r.kind = 'client' AND r.source_id = ? AND r.line_no = ? AND coalesce(r.status, 'ok') = 'ok'
          AND r.first_token_ns IS NOT NULL AND r.arrival_ns IS NOT NULL AND r.finish_ns IS NOT NULL
          AND r.prompt_tokens > 0
        ORDER BY r.arrival_ns, r.request_index""", list(run)).fetchnumpy()
    return st, rq


def _log_hit_rate(con) -> float | None:
    """The server log's prefix-cache hit rate over the run (the median of its stats lines while serving), 0..1;
    None when no log reports one above 0. Without steps, the store says no more about which prompts hit the cache."""
    v = con.execute("""SELECT median(prefix_cache_hit_rate_pct) FROM engine_stats
                       WHERE prefix_cache_hit_rate_pct > 0""").fetchall()[0][0]
    return float(v) / 100 if v else None


def _filled(a, fill=0.0) -> np.ndarray:
    return np.asarray(np.ma.filled(a, fill) if np.ma.isMaskedArray(a) else a, dtype=float)


def place_prefill(end_ns, decode_seqs, continuing, arrival_ns, first_token_ns, computed, cached, budget: int,
                  finish_ns=None, max_num_seqs: int | None = None):
    """Prefill tokens and attention units Σ c·(k + c/2) per cluster, and the share of requests whose last chunk the
    FIFO queue alone puts in the step their first token ended (before the first-token bounds are applied).

    With `finish_ns` and `max_num_seqs`, a prompt becomes available to the queue only once a running slot is free:
    before step k at most (requests finished before it) + max_num_seqs requests were admitted, in FCFS order."""
    K = len(end_ns)
    end_ns = np.asarray(end_ns, dtype=np.int64)
    P = np.asarray(computed, dtype=np.int64)
    D = np.cumsum(P)                                      # cumulative prompt tokens, admission order
    f = np.clip(np.searchsorted(end_ns, np.asarray(first_token_ns, np.int64), side="left"), 0, K - 1)
    room = np.where(np.asarray(continuing) > 0, np.maximum(budget - np.asarray(decode_seqs, np.int64), 0),
                    _OPEN_ROOM).astype(np.int64)
    # Prompts that arrived before step k started (the previous step's end).
    start = np.concatenate([[np.iinfo(np.int64).min], end_ns[:-1]])
    A = np.concatenate([[0], D])[np.searchsorted(np.asarray(arrival_ns, np.int64), start, side="left")]
    if finish_ns is not None and max_num_seqs:
        left = np.sort(np.asarray(finish_ns, np.int64))
        admitted = np.minimum(np.searchsorted(left, start, side="right") + int(max_num_seqs), len(D))
        A = np.minimum(A, np.concatenate([[0], D])[admitted])
    R = np.cumsum(room)
    Q = R + np.minimum.accumulate(A - R)
    exact = float(np.mean(np.searchsorted(Q, D, side="left") == f)) if len(D) else 0.0
    lb = np.zeros(K, dtype=np.int64)
    np.maximum.at(lb, f, D)
    lb = np.maximum.accumulate(lb)
    ub = np.full(K, D[-1] if len(D) else 0, dtype=np.int64)
    later = f > 0
    np.minimum.at(ub, f[later] - 1, D[later] - 1)
    ub = np.minimum.accumulate(ub[::-1])[::-1]
    Q = np.maximum.accumulate(np.clip(Q, lb, np.maximum(ub, lb)))
    prefill = np.diff(np.concatenate([[0], Q]))
    return prefill, _attention_between(Q, D, P, np.asarray(cached, np.int64)), exact


def _attention_between(Q, D, P, h) -> np.ndarray:
    """Σ c·(k + c/2) of the prefill tokens between consecutive cumulative positions Q (k counts cached tokens)."""
    def G(X):
        X = np.asarray(X, dtype=np.float64)
        j = np.clip(np.searchsorted(D, X, side="left"), 0, len(D) - 1)   # request holding position X
        before = np.concatenate([[0.0], D[:-1]]).astype(float)
        full = np.concatenate([[0.0], np.cumsum(h * P + P.astype(float) ** 2 / 2)])
        x = np.clip(X - before[j], 0, P[j])
        return full[j] + h[j] * x + x * x / 2
    if not len(D):
        return np.zeros(len(Q))
    g = G(Q)
    return np.diff(np.concatenate([[0.0], g]))


def step_observations(con, eng) -> tuple[Observations | None, dict, str | None]:
    """(observations of the unambiguous steps, facts about them, None) or (None, facts, why not)."""
    why = unreadable(con, eng)
    if why:
        return None, {}, why
    if eng.engine == "unknown":
        return None, {}, ("no server log names the engine, its scheduler and its token budget: the token stream gives "
                          "the step ends, durations and decodes, but placing the prefill chunks needs them (add the "
                          "server log of the same run)")
    if eng.policy not in ("chunked", "v0"):
        return None, {}, (f"the engine runs {eng.policy!r} scheduling: the client stream's prefill placement follows "
                          "vLLM's schedulers only (chunked: decodes first, then prompts first come first served "
                          "within the token budget; V0 prefill-first: whole prompts in prefill-only steps)")
    st, rq = load(con)
    if not st or not len(st["end_ns"]):
        return None, {}, "the benchmark file has no per-chunk arrival times (vllm bench serve --save-detailed)"
    prompt = np.asarray(rq["prompt_tokens"], np.int64)
    cached = np.minimum(np.asarray(_filled(rq["cached_tokens"]), np.int64), prompt - 1)
    cache_basis = "request_cached_tokens" if (cached > 0).any() else "none"
    hit = _log_hit_rate(con)
    if cache_basis == "none" and hit:
        cached = np.minimum(np.floor(hit * prompt).astype(np.int64), prompt - 1)
        cache_basis = f"the server log's prefix-cache hit rate ({hit:.1%}), the same share of every prompt"
    if eng.policy == "v0":
        prefill_first = _prefill_first(st, rq, prompt - cached, cached)
        unamb = prefill_first[3]
    else:
        unamb = np.asarray(st["unambiguous"], bool)
    share = float(unamb.mean())
    info: dict = {"steps_read": int(len(unamb)), "unambiguous_share": share}
    if share < MIN_UNAMBIGUOUS:
        return None, info, (f"only {share:.0%} of the {len(unamb)} clusters of token arrivals read as single engine "
                            "steps (a request decoding in two consecutive clusters, every running request one "
                            "token in each): the stream's arrivals do not cluster at step ends (network or "
                            "proxy jitter larger than a step, or an engine that does not emit per step)")
    budget = eng.budget or DEFAULT_BUDGET
    if not eng.budget:
        info["budget_assumed"] = budget
    dec = np.asarray(st["decode_seqs"], np.int64)
    if eng.policy == "v0":
        prefill, attn, exact, m = prefill_first
    else:
        prefill, attn, exact = place_prefill(st["end_ns"], dec, st["continuing"], rq["arrival_ns"],
                                             rq["first_token_ns"], prompt - cached, cached, budget, rq["finish_ns"],
                                             eng.max_num_seqs)
        m = unamb
    info.update(prefill_placement_exact_share=exact, budget_used=int(budget), evidence="client_stream",
                host_gap_ms=(0.0, 0.0), kv_basis={"client_tokens": int(m.sum())},
                composition_basis={"client_stream": int(m.sum())}, cached_requests=int((cached > 0).sum()),
                cache_basis=cache_basis)
    obs = Observations(step_ms=_filled(st["step_ms"], np.nan)[m], decode_seqs=dec[m].astype(float),
                       tokens=(prefill + dec)[m].astype(float), kv_read=_filled(st["kv_tokens_read"], 0.0)[m],
                       attn_units=attn[m], has_prefill=prefill[m] > 0, notes={})
    return obs, info, None


def _prefill_first(st: dict, rq: dict, computed, cached):
    """vLLM V0 without chunking runs whole prompts in prefill-only steps that hand each its first token while the
    running decodes wait: a cluster of first tokens and no decodes is such a step, with those prompts as its tokens
    (exact), and when decodes were running across it the engine was busy, so its time since the previous cluster is
    one step. Decode clusters are read as in the view, without first tokens (a mixed cluster would be two steps).
    Returns (prefill, attention units, share of first tokens that arrived in decode-free clusters, steps to fit)."""
    K = len(st["end_ns"])
    f = np.clip(np.searchsorted(np.asarray(st["end_ns"], np.int64), np.asarray(rq["first_token_ns"], np.int64),
                                side="left"), 0, K - 1)
    P = np.asarray(computed, np.int64)
    prefill = np.bincount(f, weights=P, minlength=K).astype(np.int64)
    attn = np.bincount(f, weights=cached * P + P.astype(float) ** 2 / 2, minlength=K)
    dec, first = np.asarray(st["decode_seqs"], np.int64), np.asarray(st["first_tokens"], np.int64)
    ok_ms = np.isfinite(_filled(st["step_ms"], np.nan))
    pf = (first > 0) & (dec == 0) & (np.asarray(st["running"]) > 0) & (np.asarray(st["repeated"]) == 0) & ok_ms
    use = pf | (np.asarray(st["unambiguous"], bool) & (first == 0))
    exact = float(np.mean(dec[f] == 0)) if len(f) else 0.0
    return prefill, attn, exact, use
