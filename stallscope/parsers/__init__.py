"""Parsers: each module turns one family of input formats into the canonical tables (see docs/schema.md)."""
from __future__ import annotations

import importlib
import pkgutil

from .base import InputFile, Options, ParseContext, Parser

__all__ = ["InputFile", "Options", "ParseContext", "Parser", "all_parsers", "detect"]

_PARSERS: list[Parser] | None = None
BROKEN: dict[str, str] = {}  # parser modules that failed to import: name -> one-line reason


def all_parsers() -> list[Parser]:
    """Every parser module in this package that defines `PARSER` (new modules register themselves by existing)."""
    global _PARSERS
    if _PARSERS is None:
        found = []
        for m in pkgutil.iter_modules(__path__):
            if m.name in ("base", "patterns") or m.name.startswith("_"):
                continue
            try:
                mod = importlib.import_module(f"{__name__}.{m.name}")
            except Exception as e:  # one broken parser must not take the others down
                BROKEN[m.name] = f"{type(e).__name__}: {e}"
                continue
            p = getattr(mod, "PARSER", None)
            if p is not None:
                found.append(p)
        _PARSERS = sorted(found, key=lambda p: (p.order, p.name))
    return _PARSERS


def detect(inp: InputFile) -> tuple[Parser, str] | None:
    """The parser and format for a file, decided by its content (never its name)."""
    head = inp.head()
    best: tuple[float, Parser, str] | None = None
    for p in all_parsers():
        got = p.sniff(head, inp)
        if got is None:
            continue
        fmt, score = got
        if best is None or score > best[0]:
            best = (score, p, fmt)
    if best is None or best[0] <= 0:
        return None
    return best[1], best[2]
