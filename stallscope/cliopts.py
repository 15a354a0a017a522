"""Range checks of command-line option values (typer callbacks): a value out of range is a usage error, exit 2,
one line naming the option, before any work starts."""
from __future__ import annotations

import math
import re

import typer


def _number(value, what: str):
    if value is not None and isinstance(value, float) and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a number; {what}")
    return value


def attainment(value: float | None) -> float | None:
    """A share of requests: in (0, 1]."""
    _number(value, "give a share in (0, 1], e.g. 0.9")
    if value is not None and not 0 < value <= 1:
        raise typer.BadParameter(f"{value:g} is not a share in (0, 1]; e.g. 0.9 for 90% of requests good")
    return value


def spike_k(value: float | None) -> float | None:
    """A multiple of the decode-only gap: above 1 (at 1 or below, every ordinary gap is a spike)."""
    _number(value, "give a factor above 1, e.g. 3")
    if value is not None and not value > 1:
        raise typer.BadParameter(f"{value:g} must be above 1 (a spike is a gap over k x the decode-only gap)")
    return value


def positive(value):
    """A duration, rate, size or count that must be above 0."""
    _number(value, "give a positive number")
    if value is not None and not value > 0:
        raise typer.BadParameter(f"{value:g} must be above 0")
    return value


def non_negative(value):
    _number(value, "give a number of 0 or more")
    if value is not None and value < 0:
        raise typer.BadParameter(f"{value:g} must be 0 or more")
    return value


_SLO_PART = re.compile(r"\s*(?P<k>[A-Za-z0-9_]+)\s*[=:]\s*(?P<v>[^,]*)")


def slo(value: str | None) -> str | None:
    """Each SLO key at most once (`ttft=2s,ttft=3s` would keep one silently), each value above 0; the rest of
    the syntax is stallscope.analyze.parse_slo's."""
    if not value:
        return value
    seen: set[str] = set()
    for part in value.split(","):
        m = _SLO_PART.fullmatch(part)
        if not m:
            continue  # parse_slo says what is wrong with it
        key = m["k"].lower()
        if key in seen:
            raise typer.BadParameter(f"{key} given twice in {value!r}: give each SLO once")
        seen.add(key)
        num = re.match(r"\s*([0-9]*\.?[0-9]+)", m["v"])
        if num and float(num[1]) == 0:
            raise typer.BadParameter(f"{key}={m['v'].strip()}: an SLO must be above 0")
    return value


MEMORY_LIMIT_HELP = ("DuckDB's memory_limit for the analysis (default 2GB; e.g. 512MB, 8GB, or none for DuckDB's own, "
                     "80% of RAM): beyond it DuckDB spills to a temp folder.")


class stage_progress:  # noqa: N801 - used as a context manager
    """A transient rich progress line naming the stage (`total` stages; the context value is called with each
    stage's name as it starts), shown on a terminal once the work has run for a couple of seconds (short work
    prints nothing extra)."""

    DELAY_S = 2.0

    def __init__(self, total: int, verb: str = "analysing"):
        import sys
        import time

        self._t0 = time.monotonic()
        self._clock = time.monotonic
        self._tty = sys.stderr.isatty()
        self._prog = None
        self._task = None
        self._done = 0
        self._total = total
        self._verb = verb

    def __enter__(self):
        return self.stage

    def stage(self, name: str) -> None:
        if not self._tty:
            return
        if self._prog is None and self._clock() - self._t0 >= self.DELAY_S:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._prog = Progress(TextColumn(self._verb + ": {task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), console=Console(stderr=True), transient=True)
            self._prog.start()
            self._task = self._prog.add_task(name, total=self._total, completed=self._done)
        self._done += 1
        if self._prog is not None:
            self._prog.update(self._task, description=name, completed=self._done - 1)

    def __exit__(self, *exc):
        if self._prog is not None:
            self._prog.stop()
        return False
