"""Line-oriented inputs as polars frames, streamed in large blocks: the shared front end of every log parser.

A block of bytes becomes an Arrow string array whose offsets are the newline positions (found with numpy), so
no Python object is made per line; memory stays bounded by the block size whatever the file size. Lines keep
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


def frame_lines(body: bytes, first_line_no: int) -> pl.DataFrame:
    """`body` (ending with a newline) → DataFrame(line_no Int64, text String, bad_utf8 Boolean)."""
    arr = np.frombuffer(body, dtype=np.uint8)
    nl = np.flatnonzero(arr == 10)
    n = len(nl)
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[0] = 0
    offsets[1:] = nl + 1
    strings = pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(body))
    bad = None
    try:
        strings.validate(full=True)
    except pa.ArrowInvalid:
        # Rare: some line holds bytes that are not UTF-8. Decode this block line by line with replacement.
        raw = [body[offsets[i]:offsets[i + 1]] for i in range(n)]
        bad = []
        texts = []
        for b in raw:
            try:
                texts.append(b.decode("utf-8"))
                bad.append(False)
            except UnicodeDecodeError:
                texts.append(b.decode("utf-8", "replace"))
                bad.append(True)
        strings = pa.array(texts, type=pa.large_string())
    df = pl.DataFrame({
        "line_no": pl.Series(np.arange(first_line_no, first_line_no + n, dtype=np.int64)),
        "text": pl.from_arrow(strings),
    })
    df = df.with_columns(pl.col("text").str.strip_suffix("\n").str.strip_suffix("\r"))
    return df.with_columns(pl.Series("bad_utf8", bad, dtype=pl.Boolean) if bad is not None
                           else pl.lit(False).alias("bad_utf8"))


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
