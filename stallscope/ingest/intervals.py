"""Vectorised interval nesting: depth, parent and innermost enclosing range per thread, by sorts and binary search.

Ranges are half-open [start, end) on a thread (a dense int id). Ties at one instant order as: ranges that end
there, then ranges that start there (longest first), then zero-length ranges' ends, then query points. Depth is
the number of ranges open just before a range starts (0 = outermost). Everything is numpy sorting and searching,
never a loop over events (numpy's sorts are vectorised, AVX-512 where the CPU has it); dense thread keys come
from Arrow's hash encoding.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


class Nesting:
    """Depth and parent of every range, and the innermost range enclosing any point."""

    def __init__(self, thread, start, end):
        thread = np.asarray(thread, dtype=np.int64)
        start = np.asarray(start, dtype=np.int64)
        end = np.maximum(np.asarray(end, dtype=np.int64), start)
        n = self.n = len(start)
        self.end = end
        self.t0 = int(start.min()) if n else 0
        s2 = (start - self.t0) * 2
        e2 = (end - self.t0) * 2 + (end == start)  # a zero-length range closes half a tick after it opens
        self.hi = int(e2.max()) + 2 if n else 2
        nthreads = int(thread.max()) + 1 if n else 1
        self.width = self.hi + 2
        if nthreads * self.width >= 2**62:
            raise OverflowError("trace spans too long for nesting keys")
        self.order = _start_order(self._key(thread, s2), start - end)
        self.s_th = thread[self.order]
        self.s_key = self._key(self.s_th, s2[self.order])
        self.e_key = np.sort(self._key(thread, e2))
        pos = np.arange(n, dtype=np.int64)
        # Starts before this one (all threads) minus ends at or before its instant (all threads): earlier
        # threads balance out, leaving the ranges of this thread still open.
        depth_sorted = pos - np.searchsorted(self.e_key, self.s_key, side="right")
        self.depth = np.empty(n, dtype=np.int64)
        self.depth[self.order] = depth_sorted
        self.max_depth = int(depth_sorted.max()) if n else 0
        self.bd_key = np.sort(self._dkey(self.s_th, depth_sorted, pos))
        parent_sorted = self._last_at_depth(self.s_th, depth_sorted - 1, pos)
        self.parent = np.full(n, -1, dtype=np.int64)
        self.parent[self.order] = parent_sorted

    def _key(self, thread: np.ndarray, t2: np.ndarray) -> np.ndarray:
        return thread * self.width + (np.clip(t2, -1, self.hi) + 1)

    def _dkey(self, thread, depth, pos) -> np.ndarray:
        span_p = self.n + 1
        span_d = self.max_depth + 3
        return (thread * span_d + (np.clip(depth, -1, self.max_depth + 1) + 1)) * span_p + pos

    def _last_at_depth(self, q_th, q_depth, q_pos) -> np.ndarray:
        """Input index of the last range in start order before q_pos on thread q_th at depth q_depth, else -1."""
        if self.n == 0:
            return np.full(len(q_th), -1, dtype=np.int64)
        qkey = self._dkey(q_th, q_depth, q_pos)
        i = np.searchsorted(self.bd_key, qkey, side="left") - 1
        ic = np.clip(i, 0, self.n - 1)
        span_p = self.n + 1
        found = self.bd_key[ic]
        same_bucket = (found // span_p) == (qkey // span_p)
        ok = (i >= 0) & same_bucket & (q_depth >= 0) & (q_depth <= self.max_depth)
        return np.where(ok, self.order[found % span_p if self.n else 0], -1)

    def enclosing(self, q_thread, q_t) -> np.ndarray:
        """Input index of the innermost range containing each point (thread, t), else -1."""
        q_thread = np.asarray(q_thread, dtype=np.int64)
        q_t = np.asarray(q_t, dtype=np.int64)
        if self.n == 0 or len(q_t) == 0:
            return np.full(len(q_t), -1, dtype=np.int64)
        # A point sits after every range that starts or ends at its instant, zero-length ones included.
        qk = self._key(q_thread, (q_t - self.t0) * 2 + 1)
        starts_le = np.searchsorted(self.s_key, qk, side="right")
        open_ = starts_le - np.searchsorted(self.e_key, qk, side="right")
        cand = self._last_at_depth(q_thread, open_ - 1, starts_le)
        # Ranges that overlap without nesting can fool the count: keep only a candidate that contains the point.
        c = np.where(cand >= 0, cand, 0)
        return np.where((cand >= 0) & (self.end[c] > q_t), cand, -1)


def _start_order(key: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Indices ordering ranges by (thread, start) key, then longer first (d = start - end ascending), then input
    order. Ranges sharing a start are few: one stable sort by key, then only the tied rows are re-sorted."""
    order = np.argsort(key, kind="stable")
    sk = key[order]
    tie = np.flatnonzero(sk[1:] == sk[:-1])
    if len(tie):
        pos = np.union1d(tie, tie + 1)  # tie groups are contiguous runs in sorted order
        rows = order[pos]
        order[pos] = rows[np.lexsort((rows, d[rows], key[rows]))]
    return order


class DenseKeys:
    """Dense ids 0..k-1 for the distinct rows of some int64 key columns, and lookups of other rows (-1 if unseen).

    Arrow hash-encodes each column, then each running combination of codes (so the combined code never
    overflows): one hash pass per column, no sort, no join. Ids follow first appearance."""

    def __init__(self, *cols: np.ndarray):
        self.dicts: list[pa.Array] = []
        self.combos: list[pa.Array] = []
        acc = None
        for c in cols:
            enc = pc.dictionary_encode(pa.array(np.asarray(c, dtype=np.int64)))
            self.dicts.append(enc.dictionary)
            code = enc.indices.to_numpy().astype(np.int64)
            if acc is None:
                acc = code
                continue
            enc = pc.dictionary_encode(pa.array(acc * len(enc.dictionary) + code))
            self.combos.append(enc.dictionary)
            acc = enc.indices.to_numpy().astype(np.int64)
        self.ids = acc if acc is not None else np.zeros(0, dtype=np.int64)

    def lookup(self, *cols: np.ndarray) -> np.ndarray:
        codes = [pc.index_in(pa.array(np.asarray(c, dtype=np.int64)), value_set=d) for c, d in zip(cols, self.dicts)]
        acc = codes[0]
        for d, code, combo in zip(self.dicts[1:], codes[1:], self.combos):
            acc = pc.index_in(pc.add(pc.multiply(acc.cast(pa.int64()), len(d)), code), value_set=combo)
        return pc.fill_null(acc, -1).to_numpy().astype(np.int64)
