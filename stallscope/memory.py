"""Hand memory freed by one ingest phase back to the OS before the next phase allocates its own.

Big numpy temporaries come from glibc's heap once its adaptive mmap threshold has grown, and freed heap memory
stays mapped; Arrow's pool keeps freed blocks for reuse. Between phases that never reuse them, both only
raise the peak RSS. `malloc_trim` exists only in glibc: elsewhere this is a no-op.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys

import pyarrow as pa

_trim = None
if sys.platform.startswith("linux"):
    try:
        _trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
        _trim.argtypes = [ctypes.c_size_t]
    except (OSError, AttributeError):  # musl and other libcs have no malloc_trim
        _trim = None


def release_freed() -> None:
    pa.default_memory_pool().release_unused()
    if _trim is not None:
        _trim(0)
