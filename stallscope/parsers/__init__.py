"""Parsers: each module turns one family of input formats into the canonical tables (see docs/schema.md).

The parsers are the plain list in `all_parsers` (a new parser module is added there, see docs/architecture.md);
a parser module that fails to import fails ingest loudly instead of turning its files into "not an input"."""
from __future__ import annotations

from functools import cache

from .base import InputFile, Options, ParseContext, Parser

__all__ = ["InputFile", "Options", "ParseContext", "Parser", "all_parsers", "detect"]


@cache
def all_parsers() -> tuple[Parser, ...]:
    """Every parser, in detection order (`order`, then name). Imported on first use: `stallscope.parsers.Options`
    alone does not load polars-heavy parser modules into every command."""
    from . import bench_json, kineto, otel, prometheus, sglang_log, tgi_log, vllm_log

    found = (bench_json.PARSER, kineto.PARSER, otel.PARSER, prometheus.PARSER, sglang_log.PARSER, tgi_log.PARSER,
             vllm_log.PARSER)
    return tuple(sorted(found, key=lambda p: (p.order, p.name)))


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
