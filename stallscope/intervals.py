"""Vectorised interval nesting: depth, parent and innermost enclosing range per thread, by sorts and binary search.

Ranges are half-open [start, end) on a thread (a dense int id). Ties at one instant order as: ranges that end
there, then ranges that start there (longest first), then zero-length ranges' ends, then query points. Depth is the number of ranges open just before a range starts (0 = outermost). Everything is numpy
sorting and searching, never a loop over events. The big sorts go to polars, which sorts on all cores.
"""
from __future__ import annotations

import numpy as np
import polars as pl


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
        # By thread, start, then longer first (start - end ascending); a stable sort keeps input order in ties.
        self.order = pl.DataFrame({"t": thread, "s": s2, "d": start - end}).select(
            pl.arg_sort_by(["t", "s", "d"], maintain_order=True)).to_series().to_numpy().astype(np.int64)
        self.s_th = thread[self.order]
        self.s_key = self._key(self.s_th, s2[self.order])
        self.e_key = _sort(self._key(thread, e2))
        pos = np.arange(n, dtype=np.int64)
        # Starts before this one (all threads) minus ends at or before its instant (all threads): earlier
        # threads balance out, leaving the ranges of this thread still open.
        depth_sorted = pos - np.searchsorted(self.e_key, self.s_key, side="right")
        self.depth = np.empty(n, dtype=np.int64)
        self.depth[self.order] = depth_sorted
        self.max_depth = int(depth_sorted.max()) if n else 0
        self.bd_key = _sort(self._dkey(self.s_th, depth_sorted, pos))
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


def _sort(a: np.ndarray) -> np.ndarray:
    return pl.Series(a).sort().to_numpy() if len(a) > 100_000 else np.sort(a)


class DenseKeys:
    """Dense ids 0..k-1 for the distinct rows of some int64 key columns, and lookups of other rows (-1 if unseen)."""

    def __init__(self, *cols: np.ndarray):
        frame = _frame(cols)
        self.names = frame.columns
        self.keys = frame.unique().with_row_index("id")
        self.ids = self._join(frame)

    def lookup(self, *cols: np.ndarray) -> np.ndarray:
        return self._join(_frame(cols))

    def _join(self, frame: pl.DataFrame) -> np.ndarray:
        ids = frame.join(self.keys, on=self.names, how="left", maintain_order="left")["id"]
        return ids.fill_null(-1).to_numpy().astype(np.int64)


def _frame(cols) -> pl.DataFrame:
    return pl.DataFrame({f"k{i}": np.asarray(c, dtype=np.int64) for i, c in enumerate(cols)})
