"""Service-level objectives: the `Slo` type and the one parser of `--slo` text, shared by every command, the
analysis and the simulator (a bottom module: it imports nothing of stallscope but its errors)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import StallscopeError

SLO_KEYS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "itl": "itl_ms", "e2el": "e2el_ms", "e2e": "e2el_ms"}


@dataclass
class Slo:
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    itl_ms: float | None = None
    e2el_ms: float | None = None

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None}


def parse_slo(text: str | None) -> Slo:
    """`ttft=500ms,tpot=50ms,itl=200ms` (any subset; units ms or s, bare numbers are ms) into an Slo."""
    slo = Slo()
    if not text:
        return slo
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"(?P<k>[a-z0-9]+)\s*[=:]\s*(?P<v>[0-9]*\.?[0-9]+)\s*(?P<u>ms|s)?", part)
        if not m or m["k"] not in SLO_KEYS:
            raise StallscopeError(f"bad SLO {part!r}: use ttft=500ms,tpot=50ms,itl=200ms,e2el=10s (units ms or s)")
        v = float(m["v"]) * (1000.0 if m["u"] == "s" else 1.0)
        setattr(slo, SLO_KEYS[m["k"]], v)
    return slo
