"""Exact fast paths for views whose SQL DuckDB evaluates slowly at scale, used when a view is materialised.

The SQL file stays the definition (a notebook's `install` gets it as written); `sqlviews.materialise` fills the
view's temp table from the function registered here instead, with the same rows. tests/test_fastviews.py holds
each fast path equal to its SQL on simulated stores.

`client_gap_median`: DuckDB evaluates a RANGE-framed window aggregate over ~150k-row frames at ~8 us a row
(a 9.1M-gap hour: ~80 CPU-s, growing faster than the rows). Here the frame of every gap is found by binary
search and the median's two middle values by a wavelet matrix built level by level (vectorised numpy, no loop
over rows): O(n log V) for n gaps with V distinct lengths.
"""
from __future__ import annotations

import numpy as np


def kth_smallest(values: np.ndarray, lo: np.ndarray, hi: np.ndarray, k: np.ndarray) -> np.ndarray:
    """For every query q, the k[q]-th smallest (0-based) of values[lo[q]:hi[q]] (needs 0 <= k < hi - lo)."""
    uniq, inv = _dense_ranks(values)
    return uniq[_kth_rank(inv, len(uniq), lo, hi, k)[0]]


def _dense_ranks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(values, return_inverse=True), ~15x faster on 9M gaps: np.unique's inverse argsorts the values,
    where a plain sort and a binary search of each value among the few distinct ones suffice."""
    s = np.sort(np.asarray(values).ravel())
    uniq = s[np.r_[True, s[1:] != s[:-1]]] if len(s) else s
    return uniq, np.searchsorted(uniq, np.asarray(values).ravel())


def _kth_rank(inv: np.ndarray, nuniq: int, lo: np.ndarray, hi: np.ndarray, k: np.ndarray):
    """The dense rank of the k-th smallest of inv[lo:hi] per query, and how many copies of it the range holds
    after that k-th one (0: the (k+1)-th smallest is a larger value).

    Wavelet matrix: at each bit level (high to low) of the values' dense ranks, the array is stably split into
    zeros then ones; a query's range maps into the half its answer lies in by prefix counts of zeros. Only one
    level is held at a time; at the last level a query's range holds exactly the copies of its answer."""
    n = len(inv)
    it = np.int32 if n < 2**31 - 1 and nuniq < 2**31 else np.int64   # halves the memory of 9M-row hours
    cur, nxt = inv.astype(it).ravel(), np.empty(n, it)
    lo, hi, k = lo.astype(it), hi.astype(it), k.astype(it)
    q = len(k)
    rank = np.zeros(q, it)
    zeros_before = np.zeros(n + 1, it)
    zero = np.empty(n, bool)
    zl, zr, tmp = np.empty(q, it), np.empty(q, it), np.empty(q, it)
    right, left = np.empty(q, bool), np.empty(q, bool)
    # Buffers are reused level to level (out=): fresh 9M-element temporaries per level cost more in page faults
    # than in arithmetic.
    for b in range(max(1, (nuniq - 1).bit_length()) - 1, -1, -1):
        np.bitwise_and(np.right_shift(cur, b, out=nxt), 1, out=nxt)
        np.equal(nxt, 0, out=zero)
        np.cumsum(zero, out=zeros_before[1:])
        nz = zeros_before[n]
        np.take(zeros_before, lo, out=zl)
        np.take(zeros_before, hi, out=zr)
        zr -= zl                                    # zeros in the range
        np.greater_equal(k, zr, out=right)
        np.logical_not(right, out=left)
        np.bitwise_or(rank, it(1 << b), out=rank, where=right)
        # Into the ones' half (after all nz zeros, offset by the ones before lo) or the zeros' half.
        np.subtract(k, zr, out=k, where=right)
        np.add(zl, zr, out=tmp)                     # zeros_before[hi]
        np.subtract(hi, tmp, out=hi)
        hi += nz
        np.copyto(hi, tmp, where=left)
        np.subtract(lo, zl, out=lo)
        lo += nz
        np.copyto(lo, zl, where=left)
        if b:
            nzi = int(nz)
            nxt[:nzi] = cur[zero]
            nxt[nzi:] = cur[~zero]
            cur, nxt = nxt, cur
    hi -= lo
    hi -= k
    hi -= 1
    return rank, hi


def window_median(part: np.ndarray, t: np.ndarray, v: np.ndarray, half_width) -> np.ndarray:
    """The median (quantile_cont 0.5, as DuckDB's `median`) of v over every row's frame: the rows of its
    partition with t within half_width either side, bounds included (a RANGE frame). Rows must be sorted by
    (part, t)."""
    n = len(t)
    if n == 0:
        return np.zeros(0, np.float64)
    starts = np.flatnonzero(np.r_[True, part[1:] != part[:-1]])
    t = t.astype(np.int64)
    lo, hi = np.empty(n, np.int64), np.empty(n, np.int64)
    for s, e in zip(starts, np.r_[starts[1:], n]):  # per partition (runs), not per row
        tt = t[s:e]
        lo[s:e] = s + np.searchsorted(tt, tt - half_width, "left")
        hi[s:e] = s + np.searchsorted(tt, tt + half_width, "right")
    m = hi - lo
    uniq, inv = _dense_ranks(v)
    low, after = _kth_rank(inv, len(uniq), lo, hi, (m - 1) // 2)
    # An even frame's median also needs the next value up: the same one when the frame holds another copy of
    # it (most frames of ~10^5 gaps do), else one more query for the frames that do not.
    up = low.copy()
    need = np.flatnonzero((m % 2 == 0) & (after == 0))
    if len(need):
        up[need] = _kth_rank(inv, len(uniq), lo[need], hi[need], m[need] // 2)[0]
    # Exact for values below 2**52, as DuckDB's interpolation is.
    return (uniq[low].astype(np.float64) + uniq[up].astype(np.float64)) / 2.0


def client_gap_median(con, table: str) -> bool:
    """Fill `table` with the rows of the `client_gap_median` view; False (nothing done) when the gaps hold what
    the fast path does not handle: unknown lengths (the median skips them) or lengths beyond exact doubles."""
    w = con.execute("SELECT CAST(baseline_window_s * 1e9 AS BIGINT) FROM analysis_params").fetchall()[0][0]
    n, known, big = con.execute("SELECT count(*), count(gap_ns), max(abs(gap_ns)) FROM client_gaps").fetchall()[0]
    if w is None or known != n or (big or 0) >= 2**52:
        return False
    # Only the four numeric columns leave DuckDB (in the gaps' own order), are sorted in numpy, and the medians
    # go back in that same order, joined by position: no sorted copy of the gaps with their text request ids.
    d = con.execute("SELECT source_id, run_line, end_ns, gap_ns FROM client_gaps").fetchnumpy()
    src, run, t, v = (np.asarray(d[c]) for c in ("source_id", "run_line", "end_ns", "gap_ns"))
    del d
    order = np.lexsort((t, run, src))
    src, run = src[order], run[order]
    part = np.cumsum(np.r_[False, (src[1:] != src[:-1]) | (run[1:] != run[:-1])]) if len(order) else src
    del src, run
    med = np.empty(len(order), np.float64)
    med[order] = window_median(part, t[order], v[order], w)
    del part, t, v, order
    import pyarrow as pa

    con.register(f"{table}_arrow", pa.table({"med_ns": med}))
    try:
        con.execute(f"""CREATE OR REPLACE TEMP TABLE {table} AS
            SELECT g.source_id, g.run_line, g.request_id, g.gap_index, g.end_ns, m.med_ns
            FROM (SELECT source_id, run_line, request_id, gap_index, end_ns FROM client_gaps) g
            POSITIONAL JOIN {table}_arrow m""")
    finally:
        con.unregister(f"{table}_arrow")
    return True


# view name -> function(con, table) that creates the temp table `table` with the view's rows
FAST = {"client_gap_median": client_gap_median}
