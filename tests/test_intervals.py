"""Vectorised interval nesting against a brute-force definition, on random properly nested ranges."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from stallscope.ingest.intervals import Nesting


def _nested(draw, thread, lo, hi, depth, out):
    if depth > 4 or hi - lo < 2:
        return
    k = draw(st.integers(0, 3))
    cuts = sorted(draw(st.lists(st.integers(lo, hi), min_size=2 * k, max_size=2 * k)))
    for a, b in zip(cuts[::2], cuts[1::2]):
        out.append((thread, a, b))  # zero-length ranges (a == b) included on purpose
        _nested(draw, thread, a, b, depth + 1, out)


@st.composite
def nested_ranges(draw):
    out: list[tuple[int, int, int]] = []
    for thread in range(draw(st.integers(1, 3))):
        _nested(draw, thread, 0, 200, 0, out)
    return out


def _key(r, i):
    return (r[1], -(r[2] - r[1]), i)


@settings(max_examples=150, deadline=None)
@given(nested_ranges(), st.lists(st.tuples(st.integers(0, 2), st.integers(-5, 205)), max_size=30))
def test_depth_parent_enclosing_match_brute_force(ranges, points):
    if not ranges:
        return
    th = np.array([r[0] for r in ranges])
    s = np.array([r[1] for r in ranges])
    e = np.array([r[2] for r in ranges])
    n = Nesting(th, s, e)
    for i, r in enumerate(ranges):
        # Enclosing ranges of r: same thread, start no later, end no earlier, earlier in start order.
        enc = [j for j, q in enumerate(ranges) if j != i and q[0] == r[0] and q[1] <= r[1] and r[2] <= q[2]
               and (q[2] > r[1] or q[1] == q[2] == r[1]) and _key(q, j) < _key(r, i)]
        assert n.depth[i] == len(enc)
        assert n.parent[i] == (max(enc, key=lambda j: _key(ranges[j], j)) if enc else -1)
    if points:
        qt = np.array([p[1] for p in points])
        qth = np.array([p[0] for p in points])
        got = n.enclosing(qth, qt)
        for k, (pth, t) in enumerate(points):
            c = [j for j, q in enumerate(ranges) if q[0] == pth and q[1] <= t < q[2]]
            assert got[k] == (max(c, key=lambda j: _key(ranges[j], j)) if c else -1)


def test_overlapping_ranges_never_yield_a_non_container():
    # Two ranges that overlap without nesting (async CPU ops do this in real traces).
    n = Nesting(np.array([0, 0]), np.array([0, 5]), np.array([10, 15]))
    got = n.enclosing(np.array([0, 0, 0]), np.array([3, 12, 20]))
    assert got[0] == 0 and got[2] == -1
    assert got[1] in (-1, 1)  # whatever it picks must contain t=12


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([-1, 0, 7, 2**40]), st.integers(0, 3), st.integers(0, 1)), min_size=1,
                max_size=60),
       st.lists(st.tuples(st.sampled_from([-1, 0, 5, 2**40]), st.integers(0, 4), st.integers(0, 1)), max_size=20))
def test_dense_keys_number_distinct_rows_and_look_up_others(rows, queries):
    from stallscope.ingest.intervals import DenseKeys

    cols = [np.array([r[i] for r in rows], dtype=np.int64) for i in range(3)]
    keys = DenseKeys(*cols)
    # Dense ids in order of first appearance, one per distinct row.
    first = list(dict.fromkeys(rows))
    assert keys.ids.tolist() == [first.index(r) for r in rows]
    if queries:
        got = keys.lookup(*[np.array([q[i] for q in queries], dtype=np.int64) for i in range(3)])
        assert got.tolist() == [first.index(q) if q in first else -1 for q in queries]
