"""Memory policy of an ingest: which pool Arrow allocates from, and handing freed memory back between phases.

Within a phase the same sizes are allocated over and over (one batch of parsed events after another), so freed
memory should stay mapped for the next batch: a page the process gives back and touches again costs a page
fault, and on virtual machines faults are the slowest and least predictable part of an ingest. pyarrow's
default pool on Linux (mimalloc) hands freed pages back within milliseconds; its jemalloc pool, as Arrow
configures it, keeps them for about a second (`arrow_pool`). Between phases, the opposite: memory one phase
freed is never reused by the next, and only raises the peak RSS (`release_freed`).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from contextlib import contextmanager

import pyarrow as pa

_trim = None
if sys.platform.startswith("linux"):
    try:
        _trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
        _trim.argtypes = [ctypes.c_size_t]
    except (OSError, AttributeError):  # musl and other libcs have no malloc_trim
        _trim = None


@contextmanager
def arrow_pool():
    """Arrow's default pool is jemalloc for the duration (where pyarrow has it, and the user has not chosen a
    pool with ARROW_DEFAULT_MEMORY_POOL); buffers keep the pool they came from, so switching back is safe."""
    pool = None
    if not os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        try:
            pool = pa.jemalloc_memory_pool()
        except NotImplementedError:  # pyarrow built without jemalloc (Windows wheels)
            pool = None
    if pool is None:
        yield
        return
    previous = pa.default_memory_pool()
    pa.set_memory_pool(pool)
    try:
        yield
    finally:
        pa.set_memory_pool(previous)


def release_freed() -> None:
    pa.default_memory_pool().release_unused()
    if _trim is not None:
        _trim(0)
