"""The events of a JSON array as one Arrow string column, without copying them out of the decoded trace.

The column is an Arrow string *view* array over the original buffer: one 16-byte view (length, first bytes,
offset) per event. Two ways find where the events are:

- by layout (`split_by_layout`): trace writers put the same separator between every two events, and Kineto,
  `json.dump(indent=...)` and line-per-event writers put a newline in it. A newline cannot occur inside a
  JSON string, so separator + `{` marks the event boundaries of such a file, and numpy finds them all in one
  scan, without decoding anything. The events themselves are validated when DuckDB parses them: a piece that
  is not JSON (a broken event, or a guess that cut through one) is rejected or split again by structure.
  Files without such a layout go:
- by decoding (`event_text`): msgspec splits the array into `Raw` slices (validating the JSON); their
  offsets follow from their lengths when the separator is regular (checked against the buffer), else the
  slices are joined into a new buffer.
- by structure (`scan_elements`), for what neither can read (NaN literals, cut files, broken events, nesting too
  deep for a recursive decoder): numpy finds the array's top-level commas outside strings in a few linear passes,
  without validating anything, so one bad event costs only that event. DuckDB then judges each element.
"""
from __future__ import annotations

import mmap
import re
from collections import Counter
from dataclasses import dataclass

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
    got = layout_split(src, lo, hi)
    return None if got is None else got[0]


def layout_split(src, lo: int, hi: int) -> tuple[pa.Array, np.ndarray] | None:
    """`split_by_layout`, with the byte offset where each event starts."""
    first = src.find(b"{", lo, hi)
    last = src.rfind(b"}", lo, hi)
    if first < 0 or last <= first:
        return None
    sep = _first_separator(src, first, min(hi, first + (1 << 20)))
    if sep is None:
        return None
    # Anything but whitespace before the first `{` or after the last `}` belongs to the first or last piece:
    # a broken first event, or entries that are not objects, are then one piece to judge, not a reason to
    # give up the layout of the whole file.
    if _WHITESPACE[np.frombuffer(src, dtype=np.uint8)[lo:first]].all():
        lead = first
    else:
        lead = lo
    if not _WHITESPACE[np.frombuffer(src, dtype=np.uint8)[last + 1:hi]].all():
        last = hi - 1
    # A boundary is the separator followed by `{`; the `}` before it is not required, so an event cut short
    # (no closing brace) still ends at its boundary and costs only itself.
    pat = sep + b"{"
    k = len(pat) - 1
    buf = np.frombuffer(src, dtype=np.uint8)
    scratch = np.empty(_SCAN, dtype=bool)
    found = [np.array([lead], dtype=np.int64)]
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
    return _views(buf, starts, lens, src), starts


def _first_separator(src, first: int, stop: int) -> bytes | None:
    """What follows the first event: the `,` and whitespace up to the next `{`, if it holds a newline. The first
    event that decodes on its own between two candidate separators settles it, so one broken event at the
    start of a file does not send the whole file down a slower path."""
    head = bytes(src[first:stop])
    found = [m for _, m in zip(range(64), _SEPARATOR.finditer(head))]
    for k, m in enumerate(found):
        for lo, hi in ((0, m.start() + 1),) if k == 0 else ():
            if _is_object(head[lo:hi]):
                return _newline_sep(m.group(1))
        if k + 1 < len(found) and found[k + 1].group(1) == m.group(1) \
                and _is_object(head[m.end() - 1: found[k + 1].start() + 1]):
            return _newline_sep(m.group(1))
    # No event decodes on its own near the start (many broken ones): the commonest separator, if it holds a
    # newline. A wrong guess cannot pass unseen: a split anywhere but between events leaves unbalanced
    # brackets on both sides, DuckDB refuses both pieces, and the parser splits them again by structure.
    common = Counter(m.group(1) for m in found).most_common(1)
    return _newline_sep(common[0][0]) if common and common[0][1] >= 2 else None


def _is_object(text: bytes) -> bool:
    try:
        return isinstance(msgspec.json.decode(text), dict)
    except (msgspec.DecodeError, RecursionError):
        return False  # a `}, {` inside an event, or a broken event


def _newline_sep(sep: bytes) -> bytes | None:
    return sep if b"\n" in sep else None


def event_text(raws: list, src) -> pa.Array:
    """One string per raw event: a zero-copy view array over `src` when the layout is regular, else a copy."""
    return event_text_at(raws, src)[0]


def event_text_at(raws: list, src) -> tuple[pa.Array, np.ndarray | None]:
    """`event_text`, with each event's byte offset in `src` (None for a copy: the offsets are not known)."""
    lens = np.fromiter(map(len, raws), dtype=np.int64, count=len(raws))
    starts = _locate(raws, lens, src) if src is not None and len(raws) else None
    if starts is None:
        return _joined(raws, lens), None
    return _views(np.frombuffer(src, dtype=np.uint8), starts, lens, src), starts


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


# -- by structure -------------------------------------------------------------------------------------------

MAX_DEPTH = 256  # deeper elements are rejected: recursive decoders (msgspec, json) stop near 1000 levels
_STRUCTURAL = np.zeros(256, dtype=bool)
_STRUCTURAL[list(b"{}[],")] = True
_DELTA = np.zeros(256, dtype=np.int64)
_DELTA[list(b"{[")] = 1
_DELTA[list(b"}]")] = -1
_WHITESPACE = np.zeros(256, dtype=bool)
_WHITESPACE[list(b" \t\r\n")] = True
_NON_WHITESPACE = re.compile(rb"[^ \t\r\n]")
_QUOTE, _BACKSLASH, _NEWLINE, _COMMA = 0x22, 0x5C, 0x0A, 0x2C


@dataclass
class Elements:
    """The top-level elements of a JSON array's body as byte ranges, found by structure alone."""

    starts: np.ndarray  # int64: first byte of each element (leading whitespace included)
    lens: np.ndarray  # int64
    depth: np.ndarray  # int64: deepest nesting inside each element (0 for a scalar)
    closed: int | None  # offset of the array's closing `]`, None when the bytes ran out first
    tail_open: bool  # the last element was still open (inside a string or a bracket) when the bytes ran out

    def __len__(self) -> int:
        return len(self.starts)


def scan_elements(src, lo: int, hi: int, stop_at_close: bool = True, chunk: int = 1 << 22) -> Elements:
    """The elements of the array body `src[lo:hi]` (just after its `[`): split at commas outside strings and
    brackets, in O(hi - lo) numpy work whatever the bytes hold.

    Strings are tracked by unescaped quotes; a raw newline cannot occur inside a JSON string, so the string
    state restarts at every newline: a broken quote spoils one line, not the rest of the file. With
    `stop_at_close` the array ends at the `]` that closes it; without, a stray closer is part of its element
    (the region is known to be the whole body, so nothing after it is lost)."""
    buf = np.frombuffer(src, dtype=np.uint8)
    seps: list[np.ndarray] = []
    peaks: list[tuple[np.ndarray, np.ndarray]] = []  # (element number, deepest level) per chunk
    depth, quoted, backslashes, n_seps = 0, False, 0, 0
    closed = None
    for a in range(lo, hi, chunk):
        c = buf[a: min(a + chunk, hi)]
        real, backslashes = _unescaped_quotes(c, backslashes)
        lines = np.flatnonzero(c == _NEWLINE)
        at = np.flatnonzero(_STRUCTURAL[c])
        outside = ~_in_string(at, real, lines, quoted)
        quoted = bool(_in_string(np.array([len(c)]), real, lines, quoted)[0])
        at = at[outside]
        if not len(at):
            continue
        level = depth + np.cumsum(_DELTA[c[at]])
        if stop_at_close:
            below = np.flatnonzero(level < 0)
            if len(below):
                closed = a + int(at[below[0]])
                at, level = at[: below[0]], level[: below[0]]
        else:
            # A stray closer at the top level is absorbed (reflected at 0) instead of ending the array.
            level = level - np.minimum(np.minimum.accumulate(np.minimum(level, 0)), 0)
        is_sep = (c[at] == _COMMA) & (level == 0)
        element = n_seps + np.cumsum(is_sep) - is_sep  # the element each structural byte belongs to
        if len(at):
            cut = np.flatnonzero(np.diff(element)) + 1
            first = np.concatenate(([0], cut))
            peaks.append((element[first], np.maximum.reduceat(level, first)))
            depth = int(level[-1])
        seps.append(a + at[is_sep])
        n_seps += int(is_sep.sum())
        if closed is not None:
            break
    sep = np.concatenate(seps) if seps else np.empty(0, dtype=np.int64)
    end = closed if closed is not None else hi
    starts = np.concatenate(([lo], sep + 1)).astype(np.int64)
    ends = np.concatenate((sep, [end])).astype(np.int64)
    peak = np.zeros(len(starts), dtype=np.int64)
    for el, lv in peaks:
        np.maximum.at(peak, el, lv)
    tail_open = closed is None and (depth > 0 or quoted)
    if len(starts) == 1 and _WHITESPACE[buf[lo:end]].all():  # `[]`, `[ ]`: no element at all
        starts, ends, peak = starts[:0], ends[:0], peak[:0]
    return Elements(starts, ends - starts, peak, closed, tail_open)


def _unescaped_quotes(c: np.ndarray, carried: int) -> tuple[np.ndarray, int]:
    """Positions of the quotes in `c` not escaped by an odd run of backslashes (`carried` backslashes end the
    previous chunk), and the run of backslashes this chunk ends with."""
    quotes = np.flatnonzero(c == _QUOTE)
    if not (c == _BACKSLASH).any():
        if carried % 2 and len(quotes) and quotes[0] == 0:
            quotes = quotes[1:]
        return quotes, 0
    idx = np.arange(len(c))
    last_other = np.maximum.accumulate(np.where(c != _BACKSLASH, idx, -1))  # last non-backslash at or before i
    prev = quotes - 1
    run = np.where(prev >= 0, prev - last_other[np.maximum(prev, 0)], 0)
    run = np.where((prev < 0) | (last_other[np.maximum(prev, 0)] < 0), run + carried, run)
    trailing = len(c) - 1 - int(last_other[-1]) + (carried if last_other[-1] < 0 else 0)
    return quotes[run % 2 == 0], trailing


def _in_string(at: np.ndarray, quotes: np.ndarray, lines: np.ndarray, quoted: bool) -> np.ndarray:
    """Whether each position is inside a string: the parity of the quotes since the last newline before it
    (since the chunk start, plus the carried state, when no newline precedes it)."""
    before = np.searchsorted(quotes, at)
    if not len(lines):
        return ((before + int(quoted)) & 1).astype(bool)
    k = np.searchsorted(lines, at) - 1  # the newline before each position, -1 for none
    since = before - np.where(k >= 0, np.searchsorted(quotes, lines[np.maximum(k, 0)]), 0)
    carry = np.where(k >= 0, 0, int(quoted))
    return ((since + carry) & 1).astype(bool)


def views(src, starts: np.ndarray, lens: np.ndarray) -> pa.Array:
    """String views over `src` for the given byte ranges (each shorter than 1 GiB)."""
    if not len(starts):
        return pa.array([], type=pa.string_view())
    return _views(np.frombuffer(src, dtype=np.uint8), starts, lens, src)


def skip_whitespace(src, pos: np.ndarray, limit: np.ndarray) -> np.ndarray:
    """Each position moved past leading JSON whitespace, not beyond its limit (vectorised over positions)."""
    buf = np.frombuffer(src, dtype=np.uint8)
    pos = pos.astype(np.int64, copy=True)
    todo = np.flatnonzero(pos < limit)
    for _ in range(64):  # real separators hold a few bytes of whitespace
        if not len(todo):
            return pos
        todo = todo[_WHITESPACE[buf[pos[todo]]]]
        pos[todo] += 1
        todo = todo[pos[todo] < limit[todo]]
    for i in todo:  # long runs: each is searched once, linear in its length
        m = _NON_WHITESPACE.search(src, int(pos[i]), int(limit[i]))
        pos[i] = m.start() if m else limit[i]
    return pos
