"""Clock alignment across sources: put benchmark (client-side) request times on the server's clock.

A benchmark run is a *unit*: (benchmark source, `line_no` of the run). Three anchors, best last:

1. `bench_date_minus_duration` (coarse, at parse time): vLLM writes `date` (client local time, floored to the
   second) when the run ends and `duration` (perf_counter span from the run start), so the run started at about
   date + 0.5 s - duration, read in the zone of `--tz`. Good to ±1 s plus the zone assumption.
2. `matched_server_log`: the run's requests are found among a server log's `Received request` rows (`requests`
   with kind 'server', an arrival and a prompt length): first the window of server rows whose prompt-length
   multiset matches the run (the coarse anchor, modulo whole 15-minute zone shifts, breaks ties between
   identical runs), then a one-to-one assignment inside it by (length, time order), robust to reordering
   within a second. With `start_times` (send instants in a perf_counter domain) one common offset is fitted
   by intersecting the per-request feasible intervals `[s - send, s + 1 s - send)` (s = the server's 1-s
   arrival); without them each send is placed inside its own 1-s arrival bucket, narrowed by the server's
   finish line (send >= finish - latency) and by the run start. Each matched row gets `server_request_id`.
3. `matched_trace_steps`: a profiler trace's clock is absolute; when steps (`steps.gpu_end_ns`, or
   `cpu_end_ns` in a trace without GPU work) overlap a
   run that has one common clock (send times), its offset is refined by sliding the client token arrivals
   (first tokens and ITL ends) over the step ends and keeping the shift with the smallest capped mean
   distance, searched within the prior's uncertainty. The shift absorbs the mean step-end-to-client delay.
   A run without send times is not refined: each request carries its own ±0.5 s placement, and a regular
   token train fits a regular step train at many shifts.
4. `matched_iteration_steps`: without a trace over the run, the same refinement against the ends of the steps
   a vLLM log's `Iteration(i)` lines give (`engine_steps`, on the log's clock, each placed inside its 1-s stamp:
   see stallscope/parsers/vllm_steps.py), so the client's tokens and the logged steps share one clock.

`sources.clock_offset_ns` is the offset added to the run's native times (perf_counter ns when the run has
`start_times`, else ns from the run start); `clock_residual_ns` the largest per-request residual; per-run
values also sit in `engine_config` rows with origin `bench_clock` (several runs per JSON Lines file).

Callable from other modules: the pure functions `run_start_anchor_ns`, `find_run_window`, `assign_in_window`,
`fit_common_offset`, `place_without_send_times`, `fit_offset_to_steps`, `match_run`; and over a store
`align_store(con, touched=None)` (what the ingest orchestrator runs after loading files), `refine_with_iteration_steps`
and `write_unit_clock`.
"""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from ..errors import InputError
from .runclock import (BENCH_DATE_REGEX, MAX_DURATION_S, SECOND, ZONE_STEP_NS, run_start_anchor_ns,  # noqa: F401
                       write_unit_clock)

BENCH_PARSER = "bench_json"

_UNKNOWN = np.iinfo(np.int64).min  # an arrival that stays NULL

__all__ = ["run_start_anchor_ns", "find_run_window", "assign_in_window", "fit_common_offset",
           "place_without_send_times", "fit_offset_to_steps", "match_run", "align_store", "write_unit_clock",
           "WindowMatch", "RunMatch", "StepFit"]


# The coarse anchor (`run_start_anchor_ns`) and `write_unit_clock` live in runclock, below the parsers: the
# benchmark parser writes a run's first clock with them while it loads.

# ==============================================================================================================
# pure functions over arrays
# ==============================================================================================================

@dataclass
class WindowMatch:
    """The server rows (indices into the arrays given) a run's requests are looked for in."""

    rows: np.ndarray  # indices of the window rows, in server order
    start_ns: int  # server second the window starts at
    score: int  # bench requests that have a same-length partner in the window
    extras: int  # window rows left over (warm-up request, other clients)
    zone_shift_ns: int | None  # whole quarter hours between the anchor and the server clock (None: no anchor)
    anchor_gap_ns: int | None  # window start - anchor - zone shift
    ties: int  # other windows exactly as good (0 = unambiguous)


def find_run_window(server_arrival_ns: np.ndarray, server_len: np.ndarray, bench_len: np.ndarray,
                    duration_ns: int | None, anchor_ns: int | None = None, *, slack_ns: int = 2 * SECOND,
                    usable: np.ndarray | None = None, min_share: float = 0.5, max_codes: int = 256,
                    shortlist: int = 256, max_anchor_gap_ns: int = 60 * SECOND) -> WindowMatch | None:
    """Find the window [t, t + duration + slack] of server rows whose prompt lengths best cover the run's.

    `server_arrival_ns` must be sorted. Score = sum over lengths of min(rows of that length in the window,
    requests of that length in the run): insensitive to reordering. With an anchor, only windows starting
    within `max_anchor_gap_ns` of it (modulo whole quarter hours: a client zone or log year assumed wrong)
    compete. Windows within 1% of the best score are ranked by closeness to the anchor (3-s buckets), then by
    fewest left-over rows (a warm-up request just before the run, other clients), then by smallest shift.
    """
    s = np.asarray(server_arrival_ns, dtype=np.int64)
    lens = np.asarray(server_len, dtype=np.int64)
    b = np.asarray(bench_len, dtype=np.int64)
    n = b.size
    if n == 0 or s.size == 0:
        return None
    ub, cnt_b = np.unique(b, return_counts=True)
    code = np.searchsorted(ub, lens)
    valid = (code < ub.size) & (ub[np.minimum(code, ub.size - 1)] == lens)
    if usable is not None:
        valid &= usable
    code = np.where(valid, code, -1)
    if not valid.any():
        return None
    span = (duration_ns if duration_ns is not None and duration_ns > 0 else 0) + slack_ns
    starts = np.unique(s[valid])
    if anchor_ns is not None:  # the run starts near its own date - duration, give or take whole quarter hours
        d = starts - anchor_ns
        starts = starts[np.abs(d - np.round(d / ZONE_STEP_NS).astype(np.int64) * ZONE_STEP_NS) <= max_anchor_gap_ns]
        if starts.size == 0:
            return None
    lo = np.searchsorted(s, starts, "left")
    hi = np.searchsorted(s, starts + span, "right")
    # Stage 1: the most frequent lengths only (bounded work on long logs); exact when the run has few lengths.
    top = np.argsort(-cnt_b, kind="stable")[:max_codes]
    by_code = np.argsort(code, kind="stable")  # row positions grouped by code, ascending within a code
    bounds = np.searchsorted(code[by_code], np.stack([top, top + 1]))
    s1 = np.zeros(starts.size, dtype=np.int64)
    for c, a, z in zip(top, bounds[0], bounds[1]):  # at most max_codes passes, each vectorised over all windows
        pos = by_code[a:z]
        s1 += np.minimum(np.searchsorted(pos, hi) - np.searchsorted(pos, lo), cnt_b[c])
    rest = int(n - cnt_b[top].sum())
    if rest:
        cand = np.flatnonzero(s1 + rest >= s1.max())
        cand = cand[np.argsort(-s1[cand], kind="stable")[:shortlist]]
        score = np.zeros(starts.size, dtype=np.int64) - 1
        for k in cand:  # bounded by `shortlist`
            cw = code[lo[k]:hi[k]]
            cw = cw[cw >= 0]
            score[k] = np.minimum(np.bincount(cw, minlength=ub.size), cnt_b).sum()
    else:
        score = s1
    best = int(score.max())
    if best < max(1, int(np.ceil(min_share * n))):
        return None
    tol = max(1, n // 100) if n >= 100 else 0
    top_k = np.flatnonzero(score >= best - tol)
    extras = (hi - lo)[top_k] - score[top_k]
    if anchor_ns is not None:
        delta = starts[top_k] - anchor_ns
        zone = np.round(delta / ZONE_STEP_NS).astype(np.int64) * ZONE_STEP_NS
        gap = delta - zone
        dist_bucket = np.abs(gap) // (3 * SECOND)
    else:
        zone = gap = np.zeros(top_k.size, dtype=np.int64)
        dist_bucket = np.zeros(top_k.size, dtype=np.int64)
    order = np.lexsort((starts[top_k], np.abs(zone), extras, -score[top_k], dist_bucket))
    k = order[0]
    ties = int(((dist_bucket == dist_bucket[k]) & (extras == extras[k]) & (score[top_k] == score[top_k][k])
                & (np.abs(zone) == np.abs(zone[k]))).sum() - 1)
    w = top_k[k]
    rows = np.arange(lo[w], hi[w])
    rows = rows[code[rows] >= 0]
    return WindowMatch(rows, int(starts[w]), int(score[w]), int(extras[k]),
                       int(zone[k]) if anchor_ns is not None else None,
                       int(gap[k]) if anchor_ns is not None else None, ties)


def assign_in_window(bench_len: np.ndarray, server_len: np.ndarray, server_arrival_ns: np.ndarray, *,
                     bench_send_ns: np.ndarray | None = None, bench_latency_ns: np.ndarray | None = None,
                     server_finish_ns: np.ndarray | None = None, bench_out_len: np.ndarray | None = None,
                     server_max_tokens: np.ndarray | None = None, resolution_ns: int = SECOND,
                     rounds: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """One-to-one pairs (bench index, server index) of equal prompt length.

    Bench index order is send order; server order is log order (arrival ties kept in that order). Lengths that
    occur once on both sides pair directly and give anchor times; every request gets an expected server
    arrival (from its send time when known, else interpolated between anchors by send order). Within a length,
    requests pair with server rows by arrival order (by rank when the counts agree, else by mutual nearest
    neighbours, which leaves warm-up requests and other clients' rows over). Then, among pairs of one length
    whose server rows arrived in the same second, the order is redone by finish time (server finish line vs
    send + latency) when every member has one: that separates same-length requests sent in the same second.
    Last, where such a cluster's output lengths are exactly its server rows' max_tokens (benchmarks that
    ignore EOS generate max_tokens each), requests pair by that value: a burst reaches the server in an order
    send times cannot tell. Missing latencies / finishes / lengths are given as negative values or NaN.
    """
    bl = np.asarray(bench_len, dtype=np.int64)
    sl = np.asarray(server_len, dtype=np.int64)
    sa = np.asarray(server_arrival_ns, dtype=np.int64)
    n, m = bl.size, sl.size
    if n == 0 or m == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    base = int(sa.min())
    half = resolution_ns / 2
    arr_s = (sa - base + half) / SECOND  # bucket centres, s from the window start
    sec = (sa - base) // resolution_ns
    fin_s = (_nullable(server_finish_ns, m) - base + half) / SECOND
    lat_s = _nullable(bench_latency_ns, n) / SECOND
    all_lens = np.unique(np.concatenate([bl, sl]))
    cb, cs = np.searchsorted(all_lens, bl), np.searchsorted(all_lens, sl)
    nb, ns_ = np.bincount(cb, minlength=all_lens.size), np.bincount(cs, minlength=all_lens.size)
    # Anchors: lengths that occur exactly once on each side.
    uniq_b = np.flatnonzero((nb[cb] == 1) & (ns_[cb] == 1))
    row_of = np.full(all_lens.size, -1)
    row_of[cs] = np.arange(m)  # unique lengths only are read back
    anchor_s = row_of[cb[uniq_b]]
    # Expected server arrival of every request (s from the window start).
    if bench_send_ns is not None:
        send_s = (np.asarray(bench_send_ns, dtype=np.int64) - int(np.min(bench_send_ns))) / SECOND
        o1 = float(np.median(arr_s[anchor_s] - send_s[uniq_b])) if uniq_b.size else float(arr_s.min() - send_s.min())
        expect = send_s + o1
    elif uniq_b.size:
        expect = np.interp(np.arange(n), uniq_b, arr_s[anchor_s])
    else:
        expect = np.full(n, float(arr_s.min()))
    bi_out, sj_out = [], []
    # Equal counts: rank pairing by arrival (ties: send order / log order).
    eq = nb == ns_
    ob = np.lexsort((np.arange(n), expect, cb))
    os_ = np.lexsort((np.arange(m), arr_s, cs))
    bi_out.append(ob[eq[cb[ob]]])
    sj_out.append(os_[eq[cs[os_]]])
    # Unequal counts: mutual nearest neighbours on (length, arrival), a bounded number of rounds.
    rem_b, rem_s = ob[~eq[cb[ob]]], os_[~eq[cs[os_]]]
    scale = float(max(np.ptp(expect), np.ptp(arr_s), 1.0)) * 4 + 10
    for _ in range(rounds):
        if rem_b.size == 0 or rem_s.size == 0:
            break
        vb = cb[rem_b] * scale + expect[rem_b]
        vs = cs[rem_s] * scale + arr_s[rem_s]
        nn_b = _nearest(vs, cs[rem_s], vb, cb[rem_b])
        nn_s = _nearest(vb, cb[rem_b], vs, cs[rem_s])
        k = np.flatnonzero(nn_b >= 0)
        mutual = k[nn_s[nn_b[k]] == k]
        if mutual.size == 0:
            break
        bi_out.append(rem_b[mutual])
        sj_out.append(rem_s[nn_b[mutual]])
        keep_b = np.ones(rem_b.size, bool)
        keep_b[mutual] = False
        keep_s = np.ones(rem_s.size, bool)
        keep_s[nn_b[mutual]] = False
        rem_b, rem_s = rem_b[keep_b], rem_s[keep_s]
    bi, sj = np.concatenate(bi_out).astype(np.int64), np.concatenate(sj_out).astype(np.int64)
    # Same length, same arrival second: re-pair by finish where every member of the cluster has one.
    cluster = cs[sj] * (int(sec.max()) + 1) + sec[sj]
    _, cid, csize = np.unique(cluster, return_inverse=True, return_counts=True)
    has = ~np.isnan(fin_s[sj]) & ~np.isnan(lat_s[bi])
    full = np.bincount(cid, weights=~has, minlength=csize.size) == 0
    redo = np.flatnonzero(full[cid] & (csize[cid] > 1))
    if redo.size:
        fb = expect[bi[redo]] + lat_s[bi[redo]]
        ob2 = redo[np.lexsort((bi[redo], fb, cid[redo]))]
        os2 = redo[np.lexsort((sj[redo], fin_s[sj[redo]], cid[redo]))]
        new_sj = sj.copy()
        new_sj[ob2] = sj[os2]
        sj = new_sj
        # Equal finish seconds do not separate requests: there send order follows log order again.
        fsec = np.floor(fin_s[sj[redo]])
        ob3 = redo[np.lexsort((bi[redo], fsec, cid[redo]))]
        os3 = redo[np.lexsort((sj[redo], fsec, cid[redo]))]
        new_sj = sj.copy()
        new_sj[ob3] = sj[os3]
        sj = new_sj
    if bench_out_len is not None and server_max_tokens is not None:
        sj = _pair_by_output_len(bi, sj, cid, csize, _nullable(bench_out_len, n), _nullable(server_max_tokens, m))
    return bi, sj


def _pair_by_output_len(bi, sj, cid, csize, out_len, max_tok) -> np.ndarray:
    """Within each same-length, same-second cluster whose output lengths equal its max_tokens as multisets,
    re-pair so each request meets the server row that asked for exactly its output length."""
    cand = np.flatnonzero((csize[cid] > 1) & ~np.isnan(out_len[bi]) & ~np.isnan(max_tok[sj]))
    if cand.size == 0:
        return sj
    ob = cand[np.lexsort((bi[cand], out_len[bi[cand]], cid[cand]))]
    os_ = cand[np.lexsort((sj[cand], max_tok[sj[cand]], cid[cand]))]
    same = out_len[bi[ob]] == max_tok[sj[os_]]
    # Only clusters wholly present and wholly equal qualify.
    present = np.bincount(cid[cand], minlength=csize.size) == csize
    bad = np.bincount(cid[ob], weights=~same, minlength=csize.size) > 0
    ok = present[cid[ob]] & ~bad[cid[ob]]
    new_sj = sj.copy()
    new_sj[ob[ok]] = sj[os_[ok]]
    return new_sj


def _nullable(a, size) -> np.ndarray:
    if a is None:
        return np.full(size, np.nan)
    a = np.asarray(a, dtype=np.float64)
    return np.where(a < 0, np.nan, a)


def _nearest(ref: np.ndarray, ref_code: np.ndarray, q: np.ndarray, q_code: np.ndarray) -> np.ndarray:
    """Index into `ref` of the nearest value with the same code for each query (-1 when none)."""
    order = np.argsort(ref, kind="stable")
    rs, rc = ref[order], ref_code[order]
    pos = np.searchsorted(rs, q)
    left, right = np.clip(pos - 1, 0, rs.size - 1), np.clip(pos, 0, rs.size - 1)
    dl = np.where((rc[left] == q_code) & (pos > 0), np.abs(q - rs[left]), np.inf)
    dr = np.where((rc[right] == q_code) & (pos < rs.size), np.abs(rs[right] - q), np.inf)
    pick = np.where(dr < dl, right, left)
    best = np.minimum(dl, dr)
    return np.where(np.isfinite(best), order[pick], -1)


def fit_common_offset(bench_send_ns: np.ndarray, server_arrival_ns: np.ndarray,
                      resolution_ns: int = SECOND) -> tuple[int, np.ndarray, np.ndarray]:
    """Offset O with send + O inside every server arrival bucket [s, s + resolution): (O, residuals, kept).

    The feasible intervals [s - send, s + res - send) are intersected (after dropping pairs more than 1.5
    buckets from the median); the midpoint is O, sub-second once a few dozen requests are matched. Residual =
    (send + O) - bucket centre, so |residual| <= res/2 when the model holds.
    """
    send = np.asarray(bench_send_ns, dtype=np.int64)
    s = np.asarray(server_arrival_ns, dtype=np.int64)
    lo = s - send
    mid = lo + resolution_ns // 2
    med = int(np.median(mid))
    kept = np.abs(mid - med) <= 1.5 * resolution_ns
    lo_k, hi_k = lo[kept].max(), (lo[kept] + resolution_ns).min()
    offset = int((lo_k + hi_k) // 2) if lo_k < hi_k else med
    residual = send + offset - (s + resolution_ns // 2)
    return offset, residual, kept


def place_without_send_times(server_arrival_ns: np.ndarray, bench_index: np.ndarray, *,
                             server_finish_ns: np.ndarray | None = None, latency_ns: np.ndarray | None = None,
                             duration_ns: int | None = None,
                             resolution_ns: int = SECOND) -> tuple[np.ndarray, int, np.ndarray]:
    """Send instants on the server clock for the matched requests of a run that recorded none.

    Returns (sends, run start, residuals).

    Each send lies in [s, s + res) (the 1-s Received bucket) and, when the server logged a finish f and the
    request succeeded with latency L, in [f - L, f + res - L); its estimate is the midpoint of the
    intersection (of the gap between the two windows when they conflict). The run start lies at request 0's
    send, before every send, and after max(send + L) - duration. Residual = placed send - bucket centre.
    """
    s = np.asarray(server_arrival_ns, dtype=np.int64)
    idx = np.asarray(bench_index)
    base = int(s.min())  # float arithmetic relative to the first bucket keeps ns precision
    lo = (s - base).astype(np.float64)
    hi = lo + resolution_ns
    fin = _nullable(server_finish_ns, s.size) - base
    lat = _nullable(latency_ns, s.size)
    ok = ~np.isnan(fin) & ~np.isnan(lat)
    lo = np.where(ok, np.maximum(lo, fin - lat), lo)
    hi = np.where(ok, np.minimum(hi, fin + resolution_ns - lat), hi)
    send = (lo + hi) / 2
    k0 = int(np.argmin(idx))
    run_lo = lo[k0] if idx[k0] == 0 else -np.inf
    if duration_ns is not None and ok.any():
        run_lo = max(run_lo, float(np.max(np.where(ok, np.minimum(lo, hi) + np.nan_to_num(lat), -np.inf)))
                     - duration_ns)
    run_hi = float(hi.min())
    if idx[k0] == 0:
        run_hi = min(run_hi, hi[k0])
    start = (run_lo + run_hi) / 2 if np.isfinite(run_lo) and run_lo < run_hi else float(send[k0])
    send = np.maximum(send, start)
    send_ns = np.round(send).astype(np.int64) + base
    return send_ns, int(round(start)) + base, send_ns - (s + resolution_ns // 2)


@dataclass
class StepFit:
    """The shift that best puts client token arrivals on trace step ends."""

    offset_ns: int  # shift to add to the token times (0 when not accepted)
    accepted: bool  # enough tokens inside the steps' span and a clear minimum
    residual_ns: int  # p90 |token - nearest step end| after the shift, tokens inside the span
    tokens: int  # tokens inside the steps' span at the chosen shift
    ratio: float  # best mean distance / best mean distance at least one cap away (lower = clearer)
    cap_ns: int = 0


def fit_offset_to_steps(token_ns: np.ndarray, step_end_ns: np.ndarray, search_ns: int, *,
                        cap_ns: int | None = None, coarse_step_ns: int | None = None, fine_step_ns: int = 10_000,
                        min_tokens: int = 20, max_ratio: float = 0.85, coarse_tokens: int = 2000,
                        fine_tokens: int = 200_000, budget: int = 2_000_000) -> StepFit:
    """Grid-search the shift in [-search, +search] minimising the mean of min(|token + shift - nearest step end|,
    cap) over the tokens that land inside the steps' span (cap = half the median step period, 1-50 ms).

    Vectorised: each chunk of candidate shifts is one (shifts x tokens) searchsorted against the sorted step
    ends, `budget` elements at a time (2M: 20M-element temporaries were mapped and unmapped per chunk, 3.1 s of
    system time in one bench + trace ingest against 0.6 s now, the same result). A coarse grid (about cap/8, on at
    most `coarse_tokens` evenly spaced tokens), then a 10-µs grid around the best on at most `fine_tokens` (every
    token of a run up to that size; an hour at 20 req/s streams 9M, and 401 shifts over all of them took ~10
    minutes), and the residual over every token at the chosen shift. Accepted when at least `min_tokens` tokens land in the span and the best
    cost is below `max_ratio` times the best cost at least one cap away: regular decode steps make a shift by
    one step period almost as good, and only prefills, batch changes and idle gaps break the tie. The shift
    absorbs the mean delay from a step's end to the client receiving its chunk.
    """
    e = np.unique(np.asarray(step_end_ns, dtype=np.int64))
    t = np.sort(np.asarray(token_ns, dtype=np.int64))
    none = StepFit(0, False, 0, 0, 1.0)
    if e.size < 3 or t.size == 0:
        return none
    t = t[(t >= e[0] - search_ns) & (t <= e[-1] + search_ns)]
    if t.size < min_tokens:
        return none
    period = float(np.median(np.diff(e)))
    cap = int(cap_ns or np.clip(period / 2, 1e6, 50e6))
    step = int(coarse_step_ns or max(100_000, min(1_000_000, cap // 8)))
    base = int(t[0])
    ef = (e - base).astype(np.float64)

    def cost(shifts: np.ndarray, tf: np.ndarray) -> np.ndarray:
        out = np.empty(shifts.size)
        chunk = max(1, budget // tf.size)
        for a in range(0, shifts.size, chunk):  # bounded by grid size / chunk
            x = tf[None, :] + shifts[a:a + chunk, None]
            pos = np.searchsorted(ef, x)
            d = np.minimum(np.abs(x - ef[np.clip(pos - 1, 0, ef.size - 1)]),
                           np.abs(ef[np.clip(pos, 0, ef.size - 1)] - x))
            np.minimum(d, cap, out=d)
            inside = (x >= ef[0] - cap) & (x <= ef[-1] + cap)
            count = inside.sum(axis=1)
            out[a:a + chunk] = np.where(count >= min(min_tokens, tf.size), np.where(inside, d, 0.0).sum(axis=1)
                                        / np.maximum(count, 1), cap)
        return out

    tf_all = (t - base).astype(np.float64)
    tf_coarse = tf_all[np.linspace(0, tf_all.size - 1, min(coarse_tokens, tf_all.size)).astype(np.int64)]
    grid = np.arange(-search_ns, search_ns + 1, step, dtype=np.float64)
    c = cost(grid, tf_coarse)
    k = int(np.argmin(c))
    far = np.abs(grid - grid[k]) > cap
    second = float(c[far].min()) if far.any() else float(cap)
    ratio = float(c[k] / second) if second > 0 else 1.0
    fine = grid[k] + np.arange(-2 * step, 2 * step + 1, fine_step_ns, dtype=np.float64)
    tf_fine = tf_all if tf_all.size <= fine_tokens else \
        tf_all[np.linspace(0, tf_all.size - 1, fine_tokens).astype(np.int64)]
    off = int(round(fine[int(np.argmin(cost(fine, tf_fine)))]))
    x = tf_all + off
    pos = np.searchsorted(ef, x)
    d = np.minimum(np.abs(x - ef[np.clip(pos - 1, 0, ef.size - 1)]), np.abs(ef[np.clip(pos, 0, ef.size - 1)] - x))
    inside = (x >= ef[0] - cap) & (x <= ef[-1] + cap)
    used = int(inside.sum())
    resid = int(round(float(np.quantile(d[inside], 0.9)))) if used else 0
    accepted = used >= min_tokens and ratio < max_ratio
    return StepFit(off if accepted else 0, accepted, resid, used, ratio, cap)


@dataclass
class RunMatch:
    """A run matched to one server source: which rows, the send instants on the server clock, the offset."""

    bench_idx: np.ndarray  # positions in the bench arrays
    server_idx: np.ndarray  # positions in the server arrays
    send_ns: np.ndarray  # per matched pair: send instant on the server clock
    offset_ns: int  # added to native times (perf_counter ns with send times, else ns from the run start)
    residual_ns: np.ndarray  # per matched pair
    window: WindowMatch
    dropped: int = 0  # pairs rejected as inconsistent
    notes: list[str] = field(default_factory=list)


def match_run(bench_len: np.ndarray, bench_ok: np.ndarray, bench_latency_ns: np.ndarray,
              bench_send_ns: np.ndarray | None, server_arrival_ns: np.ndarray, server_len: np.ndarray,
              server_finish_ns: np.ndarray | None, *, duration_ns: int | None, anchor_ns: int | None,
              usable: np.ndarray | None = None, resolution_ns: int = SECOND,
              bench_out_len: np.ndarray | None = None, server_max_tokens: np.ndarray | None = None) -> RunMatch | None:
    """Window search + assignment + offset, for one run against one server source (arrays sorted by arrival)."""
    sa = np.asarray(server_arrival_ns, dtype=np.int64)
    bl = np.asarray(bench_len, dtype=np.int64)
    win = find_run_window(sa, server_len, bl, duration_ns, anchor_ns, usable=usable)
    if win is None:
        return None
    rows = win.rows
    sf = None if server_finish_ns is None else np.asarray(server_finish_ns, dtype=np.float64)[rows]
    lat = np.where(np.asarray(bench_ok, bool), np.asarray(bench_latency_ns, dtype=np.float64), np.nan)
    mt = None if server_max_tokens is None else np.asarray(server_max_tokens, dtype=np.float64)[rows]
    bi, wj = assign_in_window(bl, np.asarray(server_len)[rows], sa[rows], bench_send_ns=bench_send_ns,
                              bench_latency_ns=lat, server_finish_ns=sf, bench_out_len=bench_out_len,
                              server_max_tokens=mt, resolution_ns=resolution_ns)
    sj = rows[wj]
    order = np.argsort(bi)
    bi, sj = bi[order], sj[order]
    if bench_send_ns is not None:
        send_native = np.asarray(bench_send_ns, dtype=np.int64)
        offset, resid, kept = fit_common_offset(send_native[bi], sa[sj], resolution_ns)
        send = send_native[bi] + offset
    else:
        fin = None if server_finish_ns is None else np.asarray(server_finish_ns, dtype=np.float64)[sj]
        send, offset, resid = place_without_send_times(sa[sj], bi, server_finish_ns=fin, latency_ns=lat[bi],
                                                       duration_ns=duration_ns, resolution_ns=resolution_ns)
        kept = np.abs(resid) <= 3 * resolution_ns
    dropped = int((~kept).sum())
    return RunMatch(bi[kept], sj[kept], send[kept], int(offset), resid[kept], win, dropped)


# ==============================================================================================================
# over a store
# ==============================================================================================================

@dataclass
class _Unit:
    source_id: int
    line_no: int
    path: str
    send_times: bool
    anchor_ns: int | None
    duration_ns: int | None
    offset_ns: int | None  # stored offset (what the current times carry)
    anchor_note: str | None = None


def _units(con) -> list[_Unit]:
    rows = con.execute(f"""
        SELECT c.source_id, c.line_no, any_value(s.path),
               max(CASE WHEN c.key = 'send_times' THEN c.value END),
               max(CASE WHEN c.key = 'run_start_anchor_ns' THEN c.value END),
               max(CASE WHEN c.key = 'duration' THEN c.value_num END),
               max(CASE WHEN c.key = 'clock_offset_ns' AND c.origin = 'bench_clock' THEN c.value END),
               max(CASE WHEN c.key = 'clock_anchor_note' THEN c.value END)
        FROM engine_config c JOIN sources s USING (source_id)
        WHERE s.parser = '{BENCH_PARSER}' AND c.origin IN ('bench_summary', 'bench_clock')
        GROUP BY c.source_id, c.line_no""").fetchall()
    out = [_Unit(int(r[0]), int(r[1]), r[2], r[3] == "start_times", None if r[4] is None else int(r[4]),
                 _duration_ns(r[5]), None if r[6] is None else int(r[6]), r[7])
           for r in rows]
    out.sort(key=lambda u: (u.anchor_ns is None, u.anchor_ns or 0, u.source_id, u.line_no))
    return out


def _duration_ns(seconds) -> int | None:
    """A run's `duration` in ns, None when it is not a usable number of seconds (NaN, infinite, negative, huge)."""
    if seconds is None or not np.isfinite(seconds) or not 0 <= seconds <= MAX_DURATION_S:
        return None
    return int(round(seconds * SECOND))


def relevant(con, touched: list[int]) -> bool:
    """Whether any of these sources is a benchmark, a server log with request rows, or a trace with steps."""
    if not touched:
        return False
    ids = ",".join(str(int(i)) for i in touched)
    return bool(con.execute(f"""
        SELECT (SELECT count(*) FROM sources WHERE source_id IN ({ids}) AND parser = '{BENCH_PARSER}')
             + (SELECT count(*) FROM requests WHERE source_id IN ({ids}) AND kind = 'server'
                  AND prompt_tokens IS NOT NULL AND arrival_ns IS NOT NULL)
             + (SELECT count(*) FROM steps WHERE source_id IN ({ids})
                  AND coalesce(gpu_end_ns, cpu_end_ns) IS NOT NULL)
             + (SELECT count(*) FROM engine_steps WHERE source_id IN ({ids}))""").fetchall()[0][0])


def _server_rows(con) -> pl.DataFrame:
    return con.sql("""
        WITH fin AS (SELECT source_id, request_id, min(ts_ns) AS ts FROM request_events
                     WHERE event = 'finished' GROUP BY ALL)
        SELECT r.source_id, r.request_id, r.request_index, r.arrival_ns, r.prompt_tokens,
               coalesce(r.finish_ns, fin.ts) AS finish_ns, r.max_tokens, s.path
        FROM requests r JOIN sources s USING (source_id)
        LEFT JOIN fin ON fin.source_id = r.source_id AND fin.request_id = r.request_id
        WHERE r.kind = 'server' AND r.arrival_ns IS NOT NULL AND r.prompt_tokens IS NOT NULL
        ORDER BY r.source_id, r.arrival_ns, r.request_index, r.line_no""").pl()


def align_store(con, touched: list[int] | None = None) -> list[str]:
    """Re-derive the clock of every benchmark run in the store (idempotent); returns one note per run aligned.

    With `touched` (source ids of the ingest call that just ran), nothing happens unless one of them is a
    benchmark, a server log with request rows, or a trace with steps.
    """
    if touched is not None and not relevant(con, touched):
        return []
    units = _units(con)
    if not units:
        return []
    server = _server_rows(con)
    claimed: dict[int, np.ndarray] = {}
    notes: list[str] = []
    for u in units:  # one per benchmark run in the store: a handful
        notes.append(_align_unit(con, u, server, claimed))
    _update_sources(con, sorted({u.source_id for u in units}))
    return [n for n in notes if n]


def _align_unit(con, u: _Unit, server: pl.DataFrame, claimed: dict[int, np.ndarray]) -> str:
    """Coarse anchor, then server-log match, then trace refinement; writes the run's times and clock rows."""
    b = con.sql("""SELECT request_index, request_id, prompt_tokens, status = 'ok' AS ok, e2e_latency_ns,
                          arrival_ns, output_tokens FROM requests WHERE source_id = ? AND line_no = ?
                   ORDER BY request_index""",
                params=[u.source_id, u.line_no]).pl()
    # Native send times (perf_counter ns) are what the stored arrivals carry minus the stored offset.
    native = None
    if u.send_times and u.offset_ns is not None and b.height and b["arrival_ns"].null_count() == 0:
        native = b["arrival_ns"].to_numpy().astype(np.int64) - u.offset_ns
    offset = u.anchor_ns if native is None or u.anchor_ns is None else u.anchor_ns - int(native.min())
    arrival = None if native is None or offset is None else native + offset
    method = "bench_date_minus_duration" if u.anchor_ns is not None else "bench_unanchored"
    residual, matched, server_sid = None, None, None
    server_ids = np.full(b.height, None, dtype=object)
    parts = [u.anchor_note] if u.anchor_note else []
    found = _best_server_match(u, b, native, server, claimed)
    if found is not None:
        server_sid, grp, rm = found
        ids = grp["request_id"].to_numpy()[rm.server_idx]
        claimed[server_sid] = np.concatenate([claimed.get(server_sid, np.empty(0, object)), ids])
        server_ids[rm.bench_idx] = ids
        matched = int(rm.bench_idx.size)
        method, offset = "matched_server_log", rm.offset_ns
        residual = int(np.abs(rm.residual_ns).max()) if matched else None
        if native is not None:
            arrival = native + offset
        else:
            arrival = np.full(b.height, _UNKNOWN, dtype=np.int64)
            arrival[rm.bench_idx] = rm.send_ns
        parts = [_server_note(u, b.height, native, grp, rm, server_sid, residual)]
    if native is not None and arrival is not None:
        # Trace refinement needs one common clock (send times); without them each request carries its own
        # ±0.5 s placement error, which a regular token train cannot resolve.
        fit = _refine_with_steps(con, u, b, arrival, method)
        refined = "matched_trace_steps"
        if fit is None:
            fit, refined = refine_with_iteration_steps(con, u, b, arrival, method), "matched_iteration_steps"
        if fit is not None:
            shift, resid_steps, text = fit
            parts.append(text)
            if resid_steps is not None:
                offset += shift
                arrival = native + offset
                method, residual = refined, resid_steps
    _write_times(con, u, b, arrival, server_ids)
    write_unit_clock(con, u.source_id, u.line_no, method=method, note="; ".join(parts) or "no anchor",
                     offset_ns=offset, residual_ns=residual, matched=matched, server_source_id=server_sid)
    if method in ("bench_date_minus_duration", "bench_unanchored"):
        return ""
    label = u.path.rsplit("/", 1)[-1] + (f" line {u.line_no}" if u.line_no != 1 else "")
    start = offset + int(native.min()) if native is not None else offset
    return (f"{label}: {method}" + (f", {matched}/{b.height} requests joined to server source {server_sid}"
                                    if matched else "")
            + f", run start {_fmt_ns(start)}, residual max {residual / 1e9:.3f} s")


def _best_server_match(u: _Unit, b: pl.DataFrame, native, server: pl.DataFrame, claimed):
    """(server source id, its rows, RunMatch) of the server log that covers most of the run, or None."""
    has_len = b["prompt_tokens"].is_not_null().to_numpy()
    if server.height == 0 or not has_len.any():
        return None
    pos = np.flatnonzero(has_len)
    best = None
    for (sid,), grp in server.group_by(["source_id"], maintain_order=True):  # per server log: a handful
        usable = None
        if sid in claimed:
            usable = ~np.isin(grp["request_id"].to_numpy(), claimed[sid])
        rm = match_run(b["prompt_tokens"].to_numpy()[pos], b["ok"].to_numpy()[pos],
                       b["e2e_latency_ns"].fill_null(-1).to_numpy()[pos], None if native is None else native[pos],
                       grp["arrival_ns"].to_numpy(), grp["prompt_tokens"].to_numpy(),
                       grp["finish_ns"].fill_null(-1).to_numpy(), duration_ns=u.duration_ns, anchor_ns=u.anchor_ns,
                       usable=usable,
                       bench_out_len=b["output_tokens"].cast(pl.Float64).fill_null(float("nan")).to_numpy()[pos],
                       server_max_tokens=grp["max_tokens"].cast(pl.Float64).fill_null(float("nan")).to_numpy())
        if rm is None:
            continue
        rm.bench_idx = pos[rm.bench_idx]
        key = (rm.bench_idx.size, -abs(rm.window.anchor_gap_ns or 0))
        if best is None or key > best[0]:
            best = (key, (int(sid), grp, rm))
    return None if best is None else best[1]


def _server_note(u: _Unit, n: int, native, grp: pl.DataFrame, rm: RunMatch, sid: int, residual: int | None) -> str:
    w = rm.window
    parts = [f"matched to server log {grp['path'][0].rsplit('/', 1)[-1]} (source {sid}): {rm.bench_idx.size}/{n} "
             f"requests by prompt length and order, window from {_fmt_ns(w.start_ns)}, {w.extras} server rows "
             f"left over" + (f", {w.ties} other windows as good" if w.ties else "")]
    if rm.dropped:
        parts.append(f"{rm.dropped} pairs dropped as inconsistent (>3 s)")
    if native is not None:
        parts.append(f"start_times: one offset fitted to the 1-s Received buckets; residual (send + offset - "
                     f"bucket centre) max {residual / 1e9:.3f} s")
        run_start = rm.offset_ns + int(native.min())
    else:
        fin = ~np.isnan(_nullable(grp["finish_ns"].fill_null(-1).to_numpy()[rm.server_idx], rm.server_idx.size))
        parts.append("no start_times: each send placed in its 1-s Received bucket"
                     + (" narrowed by the server's finish line minus the client latency" if fin.any() else "")
                     + f"; residual (placed send - bucket centre) max {residual / 1e9:.3f} s; run start "
                     f"{_fmt_ns(rm.offset_ns)}")
        run_start = rm.offset_ns
    if u.anchor_ns is not None:
        shift = w.zone_shift_ns or 0
        parts.append(f"server - client date anchor {(run_start - u.anchor_ns - shift) / 1e9:+.3f} s"
                     + (f" after a {shift / 3.6e12:+.2f} h shift (the zone or year assumed for one source is off)"
                        if shift else ""))
    return "; ".join(parts)


def _refine_with_steps(con, u: _Unit, b: pl.DataFrame, arrival: np.ndarray, prior: str):
    """(shift, residual, note) from matching token arrivals to trace step ends, or None when no trace covers
    the run or the fit is not clear."""
    tok = _client_token_times(con, u, b, arrival)
    if tok is None:
        return None
    # The prior's uncertainty: ±0.5 s buckets after a server-log match, ±1 s plus save delay from `date`.
    search = int(0.8 * SECOND) if prior == "matched_server_log" else int(2.5 * SECOND)
    # A step ends when its GPU work does; in a trace without GPU work (a CPU-only run), when its CPU window does.
    ends = con.execute("""SELECT coalesce(s.gpu_end_ns, s.cpu_end_ns) AS end_ns FROM steps s
                          WHERE (s.gpu_end_ns IS NOT NULL OR NOT EXISTS (
                                    SELECT 1 FROM steps g WHERE g.source_id = s.source_id AND g.gpu_end_ns IS NOT NULL))
                            AND coalesce(s.gpu_end_ns, s.cpu_end_ns) BETWEEN ? AND ?""",
                       [int(tok.min()) - search, int(tok.max()) + search]).fetchnumpy()["end_ns"]
    if ends.size < 3:
        return None
    fit = fit_offset_to_steps(tok, np.asarray(ends, dtype=np.int64), search)
    if not fit.accepted:
        return (0, None, f"a trace covers the run ({ends.size} step ends) but the token-to-step fit is not clear "
                f"({fit.tokens} tokens, ratio {fit.ratio:.2f}): kept {prior}")
    return (fit.offset_ns, fit.residual_ns,
            f"refined on {ends.size} trace step ends with {fit.tokens} token arrivals: shift {fit.offset_ns:+,} ns "
            f"(ratio {fit.ratio:.2f}), p90 distance to a step end {fit.residual_ns:,} ns (the shift includes the "
            f"mean step-end-to-client delay)")


def refine_with_iteration_steps(con, u: _Unit, b: pl.DataFrame, arrival: np.ndarray, prior: str):
    """(shift, residual, note) from matching token arrivals to the placed ends of a vLLM log's iteration steps
    (`engine_steps`, dummy steps left out), or None when none covers the run or the fit is not clear. The ends
    carry their own placement error (a few ms where steps run back to back), which the residual includes."""
    tok = _client_token_times(con, u, b, arrival)
    if tok is None:
        return None
    search = int(0.8 * SECOND) if prior == "matched_server_log" else int(2.5 * SECOND)
    ends = con.execute("""SELECT end_ns FROM engine_steps WHERE NOT coalesce(dummy, false) AND end_ns BETWEEN ? AND ?""",
                       [int(tok.min()) - search, int(tok.max()) + search]).fetchnumpy()["end_ns"]
    if ends.size < 3:
        return None
    # The placed ends scatter by a few ms around the true ones, which blurs the minimum against a shift by one
    # step period (simulated runs: ratio ~0.9 where the true ends give ~0.3, the minimum still within 0.5 ms of
    # the truth): accepted up to 0.95. A shift off by one period would move each step's KV read by one token per
    # decode, nothing the step-time fit can see.
    fit = fit_offset_to_steps(tok, np.asarray(ends, dtype=np.int64), search, max_ratio=0.95)
    if not fit.accepted:
        return (0, None, f"a vLLM log's iteration lines cover the run ({ends.size} steps) but the token-to-step fit "
                f"is not clear ({fit.tokens} tokens, ratio {fit.ratio:.2f}): kept {prior}")
    return (fit.offset_ns, fit.residual_ns,
            f"refined on {ends.size} iteration-line step ends with {fit.tokens} token arrivals: shift "
            f"{fit.offset_ns:+,} ns (ratio {fit.ratio:.2f}), p90 distance to a placed step end {fit.residual_ns:,} ns")


def _client_token_times(con, u: _Unit, b: pl.DataFrame, arrival: np.ndarray) -> np.ndarray | None:
    """Every client token arrival of the run (first tokens and ITL ends) with the run's sends at `arrival`."""
    toks = con.sql("""
        SELECT r.request_index, r.ttft_ns AS t FROM requests r
        WHERE r.source_id = ? AND r.line_no = ? AND r.ttft_ns IS NOT NULL
        UNION ALL
        SELECT r.request_index, r.ttft_ns + sum(g.gap_ns) OVER (PARTITION BY g.request_id ORDER BY g.gap_index)
        FROM token_gaps g JOIN requests r ON r.source_id = g.source_id AND r.request_id = g.request_id
        WHERE g.source_id = ? AND r.line_no = ?""", params=[u.source_id, u.line_no, u.source_id, u.line_no]).pl()
    if toks.height == 0:
        return None
    pos = np.searchsorted(b["request_index"].to_numpy(), toks["request_index"].to_numpy())
    return arrival[pos] + toks["t"].to_numpy().astype(np.int64)


def _write_times(con, u: _Unit, b: pl.DataFrame, arrival: np.ndarray | None, server_ids: np.ndarray) -> None:
    if arrival is None:
        arr = pl.Series("arrival_ns", [None] * b.height, dtype=pl.Int64)
    else:
        arr = pl.Series("arrival_ns", arrival, dtype=pl.Int64)
        arr = pl.select(pl.when(arr == _UNKNOWN).then(None).otherwise(arr).alias("arrival_ns")).to_series()
    upd = pl.DataFrame({"request_index": b["request_index"], "arrival_ns": arr,
                        "server_request_id": pl.Series(server_ids.tolist(), dtype=pl.String)})
    con.register("_align_upd", upd.to_arrow())
    try:
        con.execute("""
            UPDATE requests AS r SET arrival_ns = u.arrival_ns, first_token_ns = u.arrival_ns + r.ttft_ns,
                   finish_ns = u.arrival_ns + r.e2e_latency_ns, server_request_id = u.server_request_id
            FROM _align_upd u WHERE r.source_id = ? AND r.line_no = ? AND r.request_index = u.request_index""",
                    [u.source_id, u.line_no])
    finally:
        con.unregister("_align_upd")
    con.execute("""
        UPDATE token_gaps AS g SET end_ns = x.end_ns FROM (
            SELECT g.request_id, g.gap_index,
                   r.arrival_ns + r.ttft_ns + sum(g.gap_ns) OVER (PARTITION BY g.request_id ORDER BY g.gap_index)
                       AS end_ns
            FROM token_gaps g JOIN requests r ON r.source_id = g.source_id AND r.request_id = g.request_id
            WHERE g.source_id = ? AND r.line_no = ?) x
        WHERE g.source_id = ? AND g.request_id = x.request_id AND g.gap_index = x.gap_index""",
                [u.source_id, u.line_no, u.source_id])


def _update_sources(con, source_ids: list[int]) -> None:
    """Mirror the runs' clocks into `sources` (one run: its values; several: the first run's, the worst residual)."""
    for sid in source_ids:  # benchmark files in the store: a handful
        rows = con.execute("""
            SELECT line_no, max(CASE WHEN key = 'clock_method' THEN value END),
                   max(CASE WHEN key = 'clock_note' THEN value END),
                   max(CASE WHEN key = 'clock_offset_ns' THEN value END),
                   max(CASE WHEN key = 'clock_residual_ns' THEN value END)
            FROM engine_config WHERE source_id = ? AND origin = 'bench_clock' GROUP BY line_no ORDER BY line_no""",
                           [sid]).fetchall()
        if not rows:
            continue
        methods = {r[1] for r in rows}
        method = rows[0][1] if len(methods) == 1 else "mixed"
        resid = [int(r[4]) for r in rows if r[4] is not None]
        note = rows[0][2] if len(rows) == 1 else f"{len(rows)} runs, per-run clock in engine_config (origin " \
            "bench_clock): " + "; ".join(f"line {r[0]}: {r[1]}" for r in rows)
        span = con.execute("SELECT min(arrival_ns), max(finish_ns) FROM requests WHERE source_id = ?", [sid]).fetchall()[0]
        con.execute("""UPDATE sources SET clock_method = ?, clock_note = ?, clock_offset_ns = ?, clock_residual_ns = ?,
                              first_ns = coalesce(?, first_ns), last_ns = coalesce(?, last_ns) WHERE source_id = ?""",
                    [method, note, None if rows[0][3] is None else int(rows[0][3]), max(resid) if resid else None,
                     span[0], span[1], sid])


def _fmt_ns(ns: int) -> str:
    return _dt.datetime.fromtimestamp(ns / 1e9, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z"
