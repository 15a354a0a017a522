"""The incident's workload from a vLLM server log alone (no benchmark file): arrivals, prompt and output lengths.

A 2026 INFO log prints `Received request` lines without the prompt, so the prompt lengths are rebuilt from the
Iteration lines' context counts. vLLM's chunked scheduler admits waiting requests first come, first served and
cuts a prompt only where the step's token budget runs out, so the context requests of one step are a contiguous
run of the admission order: the first may continue a prompt cut in the step before, the last is cut (and continues
in the next step) exactly when the step used the whole budget. Counting the requests each step completes places
every request's chunks; a step with one context request gives that request its tokens exactly, a step with several
gives their total only, split evenly (the log does not say more). Output lengths are the requests' `max_tokens`
when the Iteration lines' generated tokens (one per generation request per step, plus one first token per
request) add up to their sum: the requests ran to their limit, as a benchmark with ignore_eos does. Every inferred
part is named in the notes and in `workload_basis`.
"""
from __future__ import annotations

import numpy as np

from .observe import WorkloadObs

# The generated-token total must match Σ max_tokens this closely for max_tokens to stand for the output lengths.
OUTPUT_MATCH = 0.02


def _sequence(con):
    """The Iteration-line steps of the log's busiest EngineCore sequence, in order; None when several EngineCores
    share the requests (data parallelism: which engine took which request is not in the log)."""
    cores = con.execute("""SELECT count(DISTINCT (source_id, coalesce(engine_core, ''))) FROM engine_steps
                           WHERE NOT coalesce(dummy, false)""").fetchall()[0][0]
    if cores != 1:
        return None
    return con.execute("""
        WITH s AS (SELECT source_id, sequence, count(*) AS n FROM engine_steps GROUP BY ALL ORDER BY n DESC LIMIT 1)
        SELECT e.start_ns, e.end_ns, e.ctx_reqs, e.ctx_tokens, e.gen_reqs, e.gen_tokens FROM engine_steps e JOIN s
        USING (source_id, sequence) WHERE NOT coalesce(e.dummy, false) AND e.ctx_reqs >= 0 AND e.ctx_tokens >= 0
        AND e.gen_tokens >= 0 AND e.start_ns IS NOT NULL ORDER BY e.line_no""").fetchnumpy()


def split_context(ctx_reqs, ctx_tokens, gen_tokens, budget: int, n_requests: int, with_steps: bool = False):
    """(prompt length per request in admission order, exact flag per request, requests the steps completed); with
    `with_steps` also (each request's first context step, -1 for none; whether each step used the whole budget)."""
    n = np.asarray(ctx_reqs, np.int64)
    c = np.asarray(ctx_tokens, np.int64)
    cut = ((c + np.asarray(gen_tokens, np.int64)) >= budget) & (n > 0)
    done = n - cut
    head = np.concatenate([[0], np.cumsum(done)[:-1]])        # admission index of each step's first context request
    slot_req = np.repeat(head, n) + (np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n))
    slot_tok = np.repeat(c / np.maximum(n, 1), n)
    slot_shared = np.repeat(n > 1, n)
    m = max(n_requests, int(slot_req.max()) + 1 if len(slot_req) else 0)
    prompt = np.bincount(slot_req, weights=slot_tok, minlength=m)
    exact = np.bincount(slot_req, weights=slot_shared, minlength=m) == 0
    if not with_steps:
        return prompt, exact, int(done.sum())
    first = np.full(m, -1, np.int64)
    req, at = np.unique(slot_req, return_index=True)
    first[req] = np.repeat(np.arange(len(n)), n)[at]
    return prompt, exact, int(done.sum()), first, cut


def from_iteration_lines(con, budget: int | None) -> tuple[WorkloadObs | None, dict, str | None]:
    """(the workload, its basis, None) or (None, {}, why not)."""
    rq = con.execute("""SELECT arrival_ns, max_tokens FROM requests WHERE kind = 'server' AND arrival_ns IS NOT NULL
                        ORDER BY arrival_ns, request_index""").fetchnumpy()
    N = len(rq["arrival_ns"])
    if not N:
        return None, {}, "no request lines with arrival times"
    st = _sequence(con)
    if st is None:
        return None, {}, ("several EngineCore processes (data parallelism) print Iteration lines and the log does "
                          "not say which engine served which request")
    if not len(st["ctx_reqs"]):
        return None, {}, "no Iteration lines with a composition"
    if not budget:
        return None, {}, ("the token budget (max_num_batched_tokens) is not in the log, so the steps whose prompts "
                          "were cut by it cannot be told from those that completed")
    prompt, exact, done, first, cut = split_context(st["ctx_reqs"], st["ctx_tokens"], st["gen_tokens"], budget, N,
                                                    with_steps=True)
    notes = []
    if done != N:
        notes.append(f"the Iteration lines complete {done} prefills for {N} request lines: the prompts are assigned "
                     "in arrival order up to the shorter of the two")
    k = min(N, len(prompt))
    prompt = np.rint(prompt[:k]).astype(np.int64)
    arrival = _arrivals(np.asarray(rq["arrival_ns"], np.int64)[:k], first[:k], cut,
                        np.asarray(st["start_ns"], np.int64))
    mt = np.asarray(np.ma.filled(rq["max_tokens"], 0), np.int64)[:k]
    generated = int(np.asarray(st["gen_tokens"], np.int64).sum()) + done
    basis = {"arrivals": "request lines (1-s stamps), placed before the step that ran their first chunk",
             "prompt_lengths": "Iteration lines, FCFS within the token budget",
             "prompt_lengths_exact_share": float(exact[:k].mean()) if k else 0.0,
             "output_lengths": None, "requests": k}
    if mt.sum() > 0 and (mt > 0).all() and abs(generated - mt.sum()) <= OUTPUT_MATCH * mt.sum():
        output = mt
        basis["output_lengths"] = "max_tokens (the generated tokens of the Iteration lines add up to their sum)"
    else:
        # The generation counts give the total only: scale the limits to it (or spread it evenly without them).
        scale = generated / mt.sum() if mt.sum() > 0 else 0.0
        output = np.maximum(np.rint(mt * scale), 1).astype(np.int64) if scale else \
            np.full(k, max(generated // max(k, 1), 1), np.int64)
        basis["output_lengths"] = ("the Iteration lines' generated-token total, spread over the requests in "
                                   "proportion to max_tokens" if scale else
                                   "the Iteration lines' generated-token total, spread evenly")
    ok = prompt > 0
    notes.append(f"workload from the server log alone ({k} requests): arrivals from the request lines' 1-s stamps, "
                 f"narrowed by the step that ran each first chunk; "
                 f"prompt lengths inferred from the Iteration lines' context tokens in FCFS admission order "
                 f"({basis['prompt_lengths_exact_share']:.0%} exact, the rest share a step with other prompts and "
                 f"are split evenly); output lengths from {basis['output_lengths']}")
    wl = WorkloadObs(arrival[ok], prompt[ok], output[ok], "server", 1, 0, notes)
    return wl, basis, None


def _arrivals(stamp_ns: np.ndarray, first_step=None, cut=None, step_start=None) -> np.ndarray:
    """Arrivals stamped to the second, placed inside their second. A request's first prefill chunk ran in step
    `first_step`, so it arrived before that step started; and when the step before did not use the whole budget,
    the scheduler had room for it there, so it arrived after that step started. The midpoint of what remains of the
    second is taken; without such bounds (or when they contradict the stamp) requests stamped in the same second are
    spread evenly through it in log order (a burst of one second would otherwise reach the replay as one instant)."""
    if not len(stamp_ns):
        return stamp_ns
    _, at, counts = np.unique(stamp_ns, return_index=True, return_counts=True)
    rank = np.arange(len(stamp_ns)) - np.repeat(at, counts)
    spread = stamp_ns + ((rank + 0.5) / np.repeat(counts, counts) * 1e9).astype(np.int64)
    if first_step is None or step_start is None or not len(step_start):
        return spread
    f = np.asarray(first_step, np.int64)
    has = f >= 0
    lo, hi = stamp_ns.copy(), stamp_ns + 1_000_000_000
    fk = np.clip(f, 0, len(step_start) - 1)
    hi = np.where(has, np.minimum(hi, step_start[fk]), hi)
    prev = np.clip(fk - 1, 0, len(step_start) - 1)
    room_before = has & (f > 0) & ~np.asarray(cut, bool)[prev]
    lo = np.where(room_before, np.maximum(lo, step_start[prev]), lo)
    bounded = lo <= hi
    out = np.where(bounded, (lo + hi) // 2, spread)
    # Keep the log's order (FCFS admission follows it).
    return np.maximum.accumulate(out)
