"""Raw JSON event slices as one Arrow string column, without copying the events out of the decoded trace.

msgspec splits `traceEvents` into `Raw` slices that point into the decompressed buffer. Joining them into a
new buffer costs a full copy of the trace and, on a VM, most of a second per 500 MB in page faults. Trace
writers (Kineto, TraceLens, orjson/json dumps) put the same separator between every two events, so each
event's offset follows from the lengths alone; the offsets are checked against the buffer (every event opens
with `{`, closes with `}` and is followed by exactly that separator) and the column is built as an Arrow
string *view* array over the original buffer. Anything irregular falls back to the joining copy.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

_WINDOW_BITS = 30  # view offsets are int32: each view buffer is a 2 GiB window starting at a multiple of 1 GiB
_WINDOW = 1 << _WINDOW_BITS
_INLINE = 12  # Arrow inlines strings of at most 12 bytes in the view itself
_VIEW = np.dtype([("len", "<i4"), ("prefix", "<u4"), ("buf", "<i4"), ("off", "<i4")])


def event_text(raws: list, src) -> pa.Array:
    """One string per raw event: a zero-copy view array over `src` when the layout is regular, else a copy."""
    lens = np.fromiter(map(len, raws), dtype=np.int64, count=len(raws))
    starts = _locate(raws, lens, src) if src is not None else None
    if starts is None:
        return _joined(raws, lens)
    return _views(np.frombuffer(src, dtype=np.uint8), starts, lens, src)


def _locate(raws: list, lens: np.ndarray, src) -> np.ndarray | None:
    """Start offset of every raw in `src`, or None when the events are not evenly separated."""
    n = len(raws)
    if n == 0 or lens.max() >= _WINDOW:
        return None
    buf = np.frombuffer(src, dtype=np.uint8)
    first = bytes(raws[0])
    s0 = src.find(first)
    if s0 < 0:
        return None
    if n == 1:
        return np.array([s0], dtype=np.int64)
    e0 = s0 + len(first)
    s1 = src.find(bytes(raws[1])[:1], e0)
    sep = bytes(src[e0:s1])
    if s1 < 0 or sep.strip(b" \t\r\n") != b",":
        return None
    g = len(sep)
    starts = np.empty(n, dtype=np.int64)
    starts[0] = s0
    np.cumsum(lens[:-1] + g, out=starts[1:])
    starts[1:] += s0
    ends = starts + lens
    if ends[-1] > len(buf):
        return None
    ok = (buf[starts] == ord("{")).all() and (buf[ends - 1] == ord("}")).all()
    for j, byte in enumerate(sep):
        ok = ok and (buf[ends[:-1] + j] == byte).all()
    return starts if ok else None


def _views(buf: np.ndarray, starts: np.ndarray, lens: np.ndarray, src) -> pa.Array:
    """Arrow view structs (length, first 4 bytes, buffer index, offset) as an (n, 4) int32 matrix."""
    n = len(starts)
    views = np.empty((n, 4), dtype=np.int32)
    views[:, 0] = lens
    window = starts >> _WINDOW_BITS
    views[:, 2] = window
    views[:, 3] = starts & (_WINDOW - 1)
    # Every byte offset as an unaligned little-endian uint32: the prefix is one gather.
    words = np.lib.stride_tricks.as_strided(buf, shape=(max(len(buf) - 3, 0), 4), strides=(1, 1)).view("<u4")[:, 0]
    # An event in the last 3 bytes is shorter than 4 bytes, so inline: its prefix word is never used.
    views[:, 1] = words[np.minimum(starts, len(words) - 1)].view(np.int32) if len(words) else 0
    short = np.flatnonzero(lens <= _INLINE)
    if len(short):
        # Short strings live in the view itself: the data after the length, zero padded.
        raw = views.view(np.uint8).reshape(n, 16)
        col = np.arange(_INLINE)
        take = np.minimum(starts[short, None] + col, len(buf) - 1)
        raw[short, 4:16] = np.where(col < lens[short, None], buf[take], 0)
    whole = pa.py_buffer(src)
    buffers = [whole.slice(w * _WINDOW, min(2 * _WINDOW, whole.size - w * _WINDOW))
               for w in range(int(window.max()) + 1)]
    return pa.Array.from_buffers(pa.string_view(), n, [None, pa.py_buffer(views)] + buffers)


def _joined(raws: list, lens: np.ndarray) -> pa.Array:
    offsets = np.zeros(len(raws) + 1, dtype=np.int64)
    np.cumsum(lens + 1, out=offsets[1:])
    data = b"\n".join(raws) + b"\n"  # trailing whitespace is valid JSON
    return pa.LargeStringArray.from_buffers(len(raws), pa.py_buffer(offsets), pa.py_buffer(data))
