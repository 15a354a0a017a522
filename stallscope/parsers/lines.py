"""Line-oriented inputs as polars frames, streamed in large blocks: the shared front end of every log parser.

A block of bytes becomes an Arrow string-view array over the block itself (lines found with numpy, without
their newline), which polars takes without a copy, so no Python object is made per line; memory stays bounded by
the block size whatever the file size. Lines keep
their 1-based physical line numbers. Invalid UTF-8 is decoded with U+FFFD replacement and flagged, never fatal.
"""
from __future__ import annotations

import os
import queue
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import numpy as np
import polars as pl
import pyarrow as pa

from .base import InputFile

BLOCK_BYTES = 16 << 20


_HEAD = np.arange(12, dtype=np.int64)


def frame_lines(body: bytes, first_line_no: int) -> pl.DataFrame:
    """`body` (ending with a newline) → DataFrame(line_no Int64, text String, bad_utf8 Boolean)."""
    arr = np.frombuffer(body, dtype=np.uint8)
    nl = np.flatnonzero(arr == 10)
    n = len(nl)
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[0] = 0
    offsets[1:] = nl + 1
    strings = pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(body))
    try:
        strings.validate(full=True)
    except pa.ArrowInvalid:
        # Rare: some line holds bytes that are not UTF-8. Decode this block line by line with replacement.
        return _frame_replaced(body, offsets, first_line_no)
    line_no = pl.Series("line_no", np.arange(first_line_no, first_line_no + n, dtype=np.int64))
    if n and len(body) < 1 << 31:
        text = pl.from_arrow(_line_views(arr, offsets[:-1], nl))
    else:  # views address their buffer with 32-bit offsets
        text = pl.from_arrow(strings).str.strip_suffix("\n").str.strip_suffix("\r")
    return pl.DataFrame([line_no, text.alias("text"), pl.Series("bad_utf8", np.zeros(n, dtype=bool))])


def _line_views(arr: np.ndarray, starts: np.ndarray, nl: np.ndarray) -> pa.Array:
    """The lines as an Arrow string-view array over `arr` itself, without their newline and a CR before it:
    polars takes it without a copy (its strings are views), where stripping the newline afterwards copied every
    line twice (~2x less CPU for the frame, and one copy of the block less in memory)."""
    n = len(nl)
    ends = nl - ((arr[np.maximum(nl - 1, 0)] == 13) & (nl > starts))
    lens = (ends - starts).astype(np.int32)
    # A view is 16 bytes: int32 length, then a long string's first 4 bytes, buffer index and offset, or a short
    # string's (<= 12 bytes) own bytes, zero-padded (Arrow's BinaryView layout).
    views = np.zeros((n, 4), dtype=np.int32)
    views[:, 0] = lens
    long = lens > 12
    il = np.flatnonzero(long)
    if len(il):
        words = np.ndarray((len(arr) - 3,), dtype="<i4", buffer=arr, strides=(1,))  # 4 bytes at every offset
        views[il, 1] = words[starts[il]]
        views[il, 3] = starts[il]
    if len(il) < n:
        ish = np.flatnonzero(~long)
        idx = starts[ish, None] + _HEAD
        np.minimum(idx, len(arr) - 1, out=idx)
        head = arr[idx]
        head[_HEAD[None, :] >= lens[ish, None]] = 0
        views.view(np.uint8).reshape(n, 16)[ish, 4:16] = head
    return pa.Array.from_buffers(pa.string_view(), n, [None, pa.py_buffer(views), pa.py_buffer(arr)])


def _frame_replaced(body: bytes, offsets: np.ndarray, first_line_no: int) -> pl.DataFrame:
    """frame_lines for a block with invalid UTF-8: each line decoded on its own, with U+FFFD replacement."""
    n = len(offsets) - 1
    bad = []
    texts = []
    for i in range(n):
        b = body[offsets[i]:offsets[i + 1]]
        try:
            texts.append(b.decode("utf-8"))
            bad.append(False)
        except UnicodeDecodeError:
            texts.append(b.decode("utf-8", "replace"))
            bad.append(True)
    df = pl.DataFrame({
        "line_no": pl.Series(np.arange(first_line_no, first_line_no + n, dtype=np.int64)),
        "text": pl.from_arrow(pa.array(texts, type=pa.large_string())),
    })
    df = df.with_columns(pl.col("text").str.strip_suffix("\n").str.strip_suffix("\r"))
    return df.with_columns(pl.Series("bad_utf8", bad, dtype=pl.Boolean))


def iter_line_frames(inp: InputFile, block_bytes: int = BLOCK_BYTES) -> Iterator[pl.DataFrame]:
    """Frames of consecutive lines. After the loop, `inp.cut_error` says whether a gzip stream ended early."""
    carry = b""
    line_no = 1
    for block in inp.iter_blocks(block_bytes):
        buf = carry + block if carry else block
        cut = buf.rfind(b"\n")
        if cut < 0:
            carry = buf
            continue
        body, carry = buf[: cut + 1], buf[cut + 1:]
        df = frame_lines(body, line_no)
        line_no += df.height
        yield df
    if carry:
        yield frame_lines(carry + b"\n", line_no)


def prefetch(frames: Iterator, depth: int = 1) -> Iterator:
    """Read and split the next frames in a background thread while this one is parsed (numpy, Arrow and polars
    release the GIL, so reading overlaps parsing on a second core). At most `depth` frames wait in memory."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    done = object()
    stop = threading.Event()

    def put(item) -> bool:
        # Never block for good: the consumer may have stopped (an error while parsing) with the queue full.
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce():
        try:
            for f in frames:
                if not put(f):
                    return
            put(done)
        except BaseException as e:  # handed to the consumer, which raises it in the parser's thread
            put(e)

    t = threading.Thread(target=produce, name="log-reader", daemon=True)
    t.start()
    try:
        while True:
            item = q.get()
            if item is done:
                break
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        t.join()


def log_workers() -> int:
    """Threads that work on a log's frames at once: STALLSCOPE_LOG_WORKERS (0: in the parser's own thread), else 2."""
    try:
        return max(0, int(os.environ.get("STALLSCOPE_LOG_WORKERS", "2")))
    except ValueError:
        return 2


def ordered_map(fn, items, workers: int | None = None, ahead: int | None = None) -> Iterator:
    """`fn` over `items` on a pool of threads, results in input order. Polars, numpy and Arrow release the GIL, so
    frames of one file are worked on both cores at once while the caller applies finished ones in order (its
    running state: times carried forward, running indexes, writes). At most `ahead` results wait in memory."""
    workers = log_workers() if workers is None else workers
    if workers == 0:
        yield from map(fn, items)
        return
    ahead = max(1, ahead or workers)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="log-work") as ex:
        pending: deque = deque()
        try:
            for it in items:
                pending.append(ex.submit(fn, it))
                if len(pending) > ahead:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for f in pending:
                f.cancel()
