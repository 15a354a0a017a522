"""Formats as data: a parser's regexes declared next to real sample lines and the fields each must yield."""
from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Sample:
    """A real line (as it appears in `source`, a file under ../shared/real/) and the captures it must give."""

    line: str
    fields: dict[str, str | None]
    source: str = ""


@dataclass(frozen=True)
class Pattern:
    """A named regex in the syntax common to Python `re` and Rust `regex` (polars), with its samples.

    `regex` is applied with `re.search` semantics to the text the parser feeds it (documented in `doc`).
    """

    name: str
    regex: str
    samples: tuple[Sample, ...] = field(default_factory=tuple)
    doc: str = ""

    @property
    def compiled(self) -> re.Pattern:
        return _compile(self.regex)

    def check(self) -> list[str]:
        """Problems with the declared samples; empty when every sample yields its declared fields."""
        problems = []
        for s in self.samples:
            m = self.compiled.search(s.line)
            if m is None:
                problems.append(f"{self.name}: no match for {s.line[:120]!r}")
                continue
            got = m.groupdict()
            for k, v in s.fields.items():
                if got.get(k) != v:
                    problems.append(f"{self.name}: {k}={got.get(k)!r}, expected {v!r} in {s.line[:120]!r}")
        return problems


_cache: dict[str, re.Pattern] = {}


def _compile(rx: str) -> re.Pattern:
    c = _cache.get(rx)
    if c is None:
        c = _cache[rx] = re.compile(rx)
    return c
