"""Memory policy of an ingest: which pool Arrow allocates from, and handing freed memory back between phases.

Arrow's pool (`arrow_pool`): pyarrow's default pool on Linux is mimalloc. In a Kineto ingest it leaves ~0.7 GB
of the process in transparent huge pages (jemalloc: ~0.2 GB) and costs twice the system time: on a 558 MB trace
on a 2-core VM, 1.5-1.9 s of system time against 0.8-1.0 s, 0.7 s more wall time and +0.08 GB peak RSS, with
fewer but costlier page faults. So an ingest allocates Arrow memory from pyarrow's jemalloc pool where it has one.

Between phases (`release_freed`): memory one phase freed is never reused by the next, and only raises the
peak RSS, so it is handed back to the OS.

DuckDB's share (`store_memory`): a source is loaded in one transaction, and DuckDB keeps the rows appended in it
in its buffer pool until the commit, so by default its memory grows with the file (TGI: ~0.2 GB at 200 MB, ~0.5 GB
at 1 GB). The appended row groups are already written to the store file (optimistic writes), so a memory_limit
while loading makes DuckDB drop them from memory and the peak stops growing with the file. 64 MB cost TGI ~10% CPU
and was too small for vLLM's own UPDATEs on a 1 GB log (out of memory); 256 MB bounds it, and a source that still
runs out is loaded again without the limit (`StoreMemory.lift`), so the limit never fails an ingest.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
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


INGEST_DUCKDB_BYTES = 256 << 20  # DuckDB's memory_limit while sources are loaded (`store_memory`)


_SETTING = "SELECT current_setting('memory_limit')"


@functools.lru_cache(maxsize=1)
def _default_limit() -> str:
    """DuckDB's default memory_limit as a fresh database prints it (DuckDB prints a limit rounded down, so a user's
    own value cannot be read back and set again exactly: it is left alone instead). Once per process: a fresh
    connection costs ~30 ms, paid by every ingest otherwise."""
    import duckdb

    with duckdb.connect() as fresh:
        return fresh.execute(_SETTING).fetchone()[0]


class StoreMemory:
    """DuckDB's memory_limit while sources load (`store_memory`): `lift()` gives DuckDB its default back for a
    source whose own SQL needs more than the limit (an UPDATE over the rows it wrote cannot spill), `apply()`
    sets the limit again for the next one. A limit the user set on the connection is theirs: never touched."""

    def __init__(self, con, limit_bytes: int):
        self.con, self.limit_bytes = con, limit_bytes
        self.ours = con.execute(_SETTING).fetchone()[0] == _default_limit()
        self.applied = False

    def apply(self) -> None:
        if self.ours and not self.applied:
            self.con.execute(f"SET memory_limit = '{int(self.limit_bytes)}B'")
            self.applied = True

    def lift(self) -> bool:
        """Back to DuckDB's default; False when the limit was not ours to lift (nothing to retry)."""
        if not self.applied:
            return False
        self.con.execute("RESET memory_limit")
        self.applied = False
        return True


def out_of_memory(e: BaseException | None) -> bool:
    """Whether DuckDB ran out of its memory_limit somewhere in `e`'s chain of causes."""
    import duckdb

    seen = 0
    while e is not None and seen < 20:
        if isinstance(e, duckdb.OutOfMemoryException):
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


@contextmanager
def store_memory(con, limit_bytes: int = INGEST_DUCKDB_BYTES):
    """DuckDB's memory_limit is `limit_bytes` for the duration (`StoreMemory`), then its default again.
    DuckDB spills what does not fit (the rows a load appended are already in the store file)."""
    mem = StoreMemory(con, limit_bytes)
    mem.apply()
    try:
        yield mem
    except BaseException:
        try:
            mem.lift()
        except Exception:  # noqa: BLE001 - after a fatal error (disk full) DuckDB refuses even a RESET: the
            pass  # error that brought us here is the one the user must see
        raise
    mem.lift()


def release_freed() -> None:
    """Arrow's pool releases its cached blocks; glibc trims its heap, where big numpy temporaries land once its
    adaptive mmap threshold has grown (`malloc_trim` exists only in glibc: elsewhere only Arrow's part runs)."""
    pa.default_memory_pool().release_unused()
    if _trim is not None:
        _trim(0)


# DuckDB's memory_limit while a store is analysed, reported or replayed (`analysis_memory`). DuckDB's own default is
# 80% of RAM, and it keeps what it may: on an hour at 20 req/s (9.1M gaps) `stallscope report` peaked at 4.3 GB RSS,
# 1.5 GB of it the analysis' materialised tables and most of the rest one recommendation query's sorts. At 2 GB
# DuckDB spills those instead: 3.0 GB peak for 4% more wall time (93.5 s against 90.0 s on 2 cores).
ANALYSIS_MEMORY_LIMIT = "2GB"


def analysis_memory(con, memory_limit: str | None = None) -> None:
    """Bound DuckDB's memory for an analysis: `memory_limit` (DuckDB's units, e.g. 2GB, 512MB), ANALYSIS_MEMORY_LIMIT
    when None, DuckDB's own default for "none". Beyond it DuckDB spills to a folder of this process's own under
    the system's temp folder (removed at exit; a read-only store's default spill folder sits beside the store,
    which may not be writable, and two processes must not share one)."""
    import atexit
    import shutil
    import tempfile

    from stallscope.errors import StallscopeError

    limit = ANALYSIS_MEMORY_LIMIT if memory_limit is None else memory_limit.strip()
    if limit.lower() in ("none", "default", ""):
        return
    try:
        con.execute(f"SET memory_limit = '{limit.replace(chr(39), '')}'")
    except Exception as e:  # noqa: BLE001 - DuckDB's parse error, as one line
        raise StallscopeError(f"bad --memory-limit {memory_limit!r}: {str(e).splitlines()[0]} (use e.g. 2GB, 512MB "
                              "or none)") from None
    spill = tempfile.mkdtemp(prefix="stallscope-spill-")
    atexit.register(shutil.rmtree, spill, ignore_errors=True)
    con.execute(f"SET temp_directory = '{spill}'")
