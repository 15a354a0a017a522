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
