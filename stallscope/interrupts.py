"""Ctrl-C ends any command within about a second, with exit status 130 and the store consistent.

Python runs its SIGINT handler only in the main thread, between bytecodes: a DuckDB query (which ignores it),
a blocking call in C or a parser's worker threads (joined at exit) would hold the KeyboardInterrupt back. So
`install` has the signal also wake a watcher thread (`signal.set_wakeup_fd`, written by the C-level handler
whatever the main thread is doing), which interrupts every open DuckDB connection (`con.interrupt()`: the
query fails at once and its transaction rolls back) and, if the process is still alive `GRACE_S` later, ends
it with `os._exit(130)`. The store stays consistent either way: every load and derived step is one
transaction, and an unfinished one is rolled back (or, after `os._exit`, never committed).
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import weakref

GRACE_S = 1.0  # from Ctrl-C to a forced exit when the main thread has not finished unwinding by then
EXIT_INTERRUPTED = 130

_connections: "weakref.WeakSet" = weakref.WeakSet()
_requested = threading.Event()
_said = threading.Lock()


def register(con) -> None:
    """A DuckDB connection that Ctrl-C interrupts (stallscope.store opens every store through this)."""
    try:
        _connections.add(con)
    except TypeError:  # a connection type without weak references: it is simply not interrupted early
        pass


def requested() -> bool:
    """Whether Ctrl-C was pressed: an error raised after it (an interrupted query) is the interruption."""
    return _requested.is_set()


def say_interrupted() -> None:
    """The one line a user sees, once, whichever path ends the process."""
    if _said.acquire(blocking=False):
        try:
            sys.stderr.write("interrupted\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass


def install() -> None:
    """Call once from the main thread before a command runs."""
    if threading.current_thread() is not threading.main_thread():
        return
    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except (ValueError, OSError):
        os.close(r)
        os.close(w)
        return
    threading.Thread(target=_watch, args=(r,), name="stallscope-interrupt", daemon=True).start()


def _watch(r: int) -> None:
    while True:
        try:
            data = os.read(r, 64)
        except OSError:
            return
        if not data:
            return
        if signal.SIGINT in data:
            _on_interrupt()


def _on_interrupt() -> None:
    _requested.set()
    for con in list(_connections):
        try:
            con.interrupt()
        except Exception:  # noqa: BLE001 - a closed connection: nothing to interrupt
            pass
    timer = threading.Timer(GRACE_S, _force_exit)
    timer.daemon = True
    timer.start()


def _force_exit() -> None:
    say_interrupted()
    os._exit(EXIT_INTERRUPTED)
