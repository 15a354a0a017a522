"""Formats are data: every parser's declared patterns yield their declared fields on their real sample lines."""
from __future__ import annotations

import gzip
import importlib
import pkgutil

import pytest

import stallscope.parsers as parsers_pkg
from stallscope.parsers.patterns import Pattern
from conftest import ROOT, real


def _modules():
    out = []
    for m in pkgutil.iter_modules(parsers_pkg.__path__):
        mod = importlib.import_module(f"stallscope.parsers.{m.name}")
        pats = getattr(mod, "PATTERNS", None)
        if pats:
            out.append((m.name, pats))
    return out


MODULES = _modules()


def test_every_parser_declares_patterns():
    names = {p.name for p in parsers_pkg.all_parsers()}
    with_patterns = {m for m, _ in MODULES}
    assert "kineto" in with_patterns
    modules_of = {type(p).__module__.rsplit(".", 1)[1] for p in parsers_pkg.all_parsers()}
    assert modules_of <= with_patterns, f"parsers without PATTERNS: {modules_of - with_patterns} ({names})"


@pytest.mark.parametrize("engine", ["vllm", "tgi", "sglang"])
def test_each_engine_log_parser_keeps_its_formats_beside_their_samples(engine):
    """One shape for every engine's log parser: its regexes in `<engine>_log_patterns.py` with their real samples,
    declared by the parser as its PATTERNS."""
    parser = importlib.import_module(f"stallscope.parsers.{engine}_log")
    formats = importlib.import_module(f"stallscope.parsers.{engine}_log_patterns")
    assert parser.PATTERNS is formats.PATTERNS and len(formats.PATTERNS) >= 15
    assert sum(1 for p in formats.PATTERNS for s in p.samples if s.source) >= 15


@pytest.mark.parametrize("module,patterns", MODULES, ids=[m for m, _ in MODULES])
def test_samples_parse_to_declared_fields(module, patterns):
    problems = []
    for p in patterns:
        assert isinstance(p, Pattern)
        assert p.samples, f"{module}.{p.name} has no sample lines"
        problems += p.check()
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("module,patterns", MODULES, ids=[m for m, _ in MODULES])
def test_samples_are_real(module, patterns):
    """A sample that names a real source must occur in it verbatim."""
    cache: dict[str, str] = {}
    missing = []
    for p in patterns:
        for s in p.samples:
            if not s.source:
                continue
            # Sources are written relative to the repository ("../shared/real/..."); the fixtures may live
            # elsewhere (STALLSCOPE_REAL).
            prefix = "../shared/real/"
            path = real(s.source[len(prefix):]) if s.source.startswith(prefix) else (ROOT / s.source).resolve()
            if s.source not in cache:
                data = path.read_bytes()
                if data[:2] == b"\x1f\x8b":
                    data = gzip.decompress(data)
                cache[s.source] = data.decode("utf-8", "replace")
            if s.line not in cache[s.source]:
                missing.append(f"{module}.{p.name}: {s.line[:80]!r} not in {s.source}")
    assert not missing, "\n".join(missing)
