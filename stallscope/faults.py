"""Deterministic crash points for fault tests: `STALLSCOPE_CRASH_AT` ends the process at a named point, as a
kill -9 or a power cut would (no clean-up, no flush), so a test can crash a command exactly where it wants.

`STALLSCOPE_CRASH_AT` is a point's name (`ingest.file3.committed`) or a number N (the N-th point reached, from 1);
`STALLSCOPE_CRASH_LOG=FILE` appends the name of every point reached, so a test can list them from a clean run.
Unset (always, outside tests), a point costs one dictionary lookup.
"""
from __future__ import annotations

import os

CRASH_EXIT = 86  # the exit status of a crash point: distinct from any status stallscope gives on purpose
_reached = 0


def crash_point(name: str) -> None:
    """End the process here, at once, when STALLSCOPE_CRASH_AT names this point (or its ordinal)."""
    global _reached
    at = os.environ.get("STALLSCOPE_CRASH_AT")
    log = os.environ.get("STALLSCOPE_CRASH_LOG")
    if not at and not log:
        return
    _reached += 1
    if log:
        with open(log, "a") as f:
            f.write(name + "\n")
    if at and (at == name or at == str(_reached)):
        os._exit(CRASH_EXIT)
