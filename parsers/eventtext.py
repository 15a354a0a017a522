"""The events of a JSON array as one Arrow string column, without copying them out of the decoded trace.

The column is an Arrow string *view* array over the original buffer: one 16-byte view (length, first bytes,
offset) per event. Two ways find where the events are:

- by layout (`split_by_layout`): trace writers put the same separator between every two events, and Kineto,
  `json.dump(indent=...)` and line-per-event writers put a newline in it. A newline cannot occur inside a
  JSON string, so `}` + separator + `{` marks exactly the event boundaries of such a file, and numpy finds
  them all in one scan, without decoding anything. The events themselves are validated when DuckDB parses
  them; a file this guess gets wrong fails there, and the caller falls back to:
- by decoding (`event_text`): msgspec splits the array into `Raw` slices (validating the JSON); their
  offsets follow from their lengths when the separator is regular (checked against the buffer), else the
  slices are joined into a new buffer.
"""
from __future__ import annotations

import mmap
import re

import msgspec
import numpy as np
import pyarrow as pa

_WINDOW_BITS = 30  # view offsets are int32: each view buffer is a 2 GiB window starting at a multiple of 1 GiB
_WINDOW = 1 << _WINDOW_BITS
_INLINE = 12  # Arrow inlines strings of at most 12 bytes in the view itself


_SEPARATOR = re.compile(rb"\}(\s*,\s*)\{")
_SCAN = 1 << 22  # bytes compared per numpy step: the scratch mask stays small


def split_by_layout(src, lo: int, hi: int) -> pa.Array | None:
    """The events between byte `lo` and `hi` (inside the array's brackets) when a newline-bearing separator
    splits them all; None otherwise (compact separators, a single event, no objects)."""
    first = src.find(b"{", lo, hi)
    last = src.rfind(b"}", lo, hi)
    if first < 0 or last <= first or src[lo:first].strip() or src[last + 1:hi].strip():
        return None
    sep = _first_separator(src, first, min(hi, first + (1 << 20)))
    if sep is None:
        return None
    pat = b"}" + sep + b"{"
    k = len(pat) - 1
    buf = np.frombuffer(src, dtype=np.uint8)
    scratch = np.empty(_SCAN, dtype=bool)
    found = [np.array([first], dtype=np.int64)]
    for a in range(first + k, last, _SCAN):
        b = min(a + _SCAN, last)
        at = np.flatnonzero(np.equal(buf[a:b], pat[-1], out=scratch[: b - a])) + a
        ok = np.ones(len(at), dtype=bool)
        for j, byte in enumerate(pat[:-1]):
            ok &= buf[at - k + j] == byte
        found.append(at[ok])
    starts = np.concatenate(found)
    ends = np.empty_like(starts)
    ends[:-1] = starts[1:] - len(sep)
    ends[-1] = last + 1
    lens = ends - starts
    if lens.max() >= _WINDOW:
        return None
    return _views(buf, starts, lens, src)


def _first_separator(src, first: int, stop: int) -> bytes | None:
    """What follows the first event: the `,` and whitespace up to the next `{`, if it holds a newline."""
    head = bytes(src[first:stop])
    for m in _SEPARATOR.finditer(head):
        try:
            event = msgspec.json.decode(head[: m.start() + 1])
        except msgspec.DecodeError:
            continue  # a `}, {` inside the first event
        sep = m.group(1)
        return sep if isinstance(event, dict) and b"\n" in sep else None
    return None


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


def release_parsed(src, text: pa.Array, upto: int) -> None:
    """Unmap the pages of a mapped file that hold only events before `upto` (parsed already), so the
    process keeps just the part still to parse; the OS page cache serves them again if ever needed."""
    if not isinstance(src, mmap.mmap) or not hasattr(src, "madvise") or text.type != pa.string_view():
        return
    if upto >= len(text):
        return
    views = np.frombuffer(text.buffers()[1], dtype=np.int32).reshape(-1, 4)
    length, _, window, offset = (int(v) for v in views[text.offset + upto])
    if length <= _INLINE:
        return
    end = window * _WINDOW + offset
    end -= end % mmap.PAGESIZE
    if end > 0:
        src.madvise(mmap.MADV_DONTNEED, 0, end)


def _joined(raws: list, lens: np.ndarray) -> pa.Array:
    offsets = np.zeros(len(raws) + 1, dtype=np.int64)
    np.cumsum(lens + 1, out=offsets[1:])
    data = b"\n".join(raws) + b"\n"  # trailing whitespace is valid JSON
    return pa.LargeStringArray.from_buffers(len(raws), pa.py_buffer(offsets), pa.py_buffer(data))
