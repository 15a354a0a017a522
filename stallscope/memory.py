"""Memory policy of an ingest: which pool Arrow allocates from, and handing freed memory back between phases.

Arrow's pool (`arrow_pool`): pyarrow's default pool on Linux is mimalloc. In a Kineto ingest it leaves ~0.7 GB
of the process in transparent huge pages (jemalloc: ~0.2 GB) and costs twice the system time: on a 558 MB trace
on a 2-core VM, 1.5-1.9 s of system time against 0.8-1.0 s, 0.7 s more wall time and +0.08 GB peak RSS, with
fewer but costlier page faults. So an ingest allocates Arrow memory from pyarrow's jemalloc pool where it has one.

Between phases (`release_freed`): memory one phase freed is never reused by the next, and only raises the
peak RSS, so it is handed back to the OS.

DuckDB's share (`store_memory`): a source is loaded in one transaction, and DuckDB keeps the rows appended in it
in its buffer pool until the commit, so by default its memory grows with the file (~0.5x a TGI log's size). The
appended row groups are already written to the store file (optimistic writes), so a small memory_limit while
loading only makes DuckDB drop them from memory: the peak stops growing with the file, at no measurable CPU cost.
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
            pass
    if pool is None:
        yield
        return
    previous = pa.default_memory_pool()
    pa.set_memory_pool(pool)
    try:
        yield
    finally:
        pa.set_memory_pool(previous)


INGEST_DUCKDB_BYTES = 64 << 20  # DuckDB's memory_limit while sources are loaded (`store_memory`)


@contextmanager
def store_memory(con, limit_bytes: int = INGEST_DUCKDB_BYTES):
    """DuckDB's memory_limit is `limit_bytes` for the duration, then its default again. A limit the user set on
    this connection is theirs and kept as is. DuckDB spills what does not fit (to the store file, or its temp
    directory for a query's intermediates)."""
    import duckdb

    setting = "SELECT current_setting('memory_limit')"
    # The default, as a fresh database prints it (DuckDB prints a limit rounded down, so a user's own value
    # cannot be read back and set again exactly: it is left alone instead).
    with duckdb.connect() as fresh:
        default = fresh.execute(setting).fetchone()[0]
    if con.execute(setting).fetchone()[0] != default:
        yield
        return
    con.execute(f"SET memory_limit = '{int(limit_bytes)}B'")
    try:
        yield
    finally:
        con.execute("RESET memory_limit")


def release_freed() -> None:
    """Arrow's pool releases its cached blocks; glibc trims its heap, where big numpy temporaries land once its
    adaptive mmap threshold has grown (`malloc_trim` exists only in glibc: elsewhere only Arrow's part runs)."""
    pa.default_memory_pool().release_unused()
    if _trim is not None:
        _trim(0)
