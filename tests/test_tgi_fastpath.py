"""The TGI parser's fast paths land exactly what its generic path lands: every table the parser writes, the sources
accounting and the notes, with STALLSCOPE_TGI_GENERIC=1 (every line through the generic record path) and without,
on the real TGI logs and on a bench-style log that mixes wrapper prefixes, ANSI colour, dedup markers and lines built
to look like the fast layouts without being them (bench/logvariants.py; bench/compare_ingest.py also compares
against another checkout)."""
from __future__ import annotations

import hashlib
import importlib.util

import polars as pl
import pytest

import stallscope
import stallscope.parsers.logrecords as lr
import stallscope.parsers.tgi_log as tgi_mod
from conftest import REAL, ROOT

TABLES = ("requests", "request_events", "engine_config", "log_events", "engine_batches", "rejects")


def _equiv_module():
    spec = importlib.util.spec_from_file_location("logvariants", ROOT / "bench" / "logvariants.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _digest(paths) -> dict:
    out = {}
    with stallscope.open(":memory:") as s:
        report = s.ingest(list(paths))
        assert all(r.ok for r in report), [r.message for r in report if not r.ok]
        for t in TABLES:
            df = s.sql(f"SELECT s.path, x.* EXCLUDE (source_id) FROM {t} x JOIN sources s USING (source_id)")
            df = df.sort(df.columns, nulls_last=True)
            out[t] = (df.height, hashlib.sha256(df.write_csv().encode()).hexdigest())
        out["sources"] = s.sql("SELECT path, format, parser, records_parsed, records_skipped, records_rejected, "
                               "raw_bytes, clock_method, clock_note, first_ns, last_ns FROM sources ORDER BY path").rows()
        out["notes"] = sorted((r.path, tuple(r.notes)) for r in report)
    return out


def _both(monkeypatch, paths) -> tuple[dict, dict, dict]:
    """(generic digest, fast digest, how many lines of each fast kind the fast run took)."""
    taken = {tgi_mod.FAST_SUCCESS: 0, tgi_mod.FAST_RADIX: 0}
    orig = tgi_mod._fast_kind

    def counting(df):
        k = orig(df)
        for kind in taken:
            taken[kind] += int((k == kind).sum())
        return k

    monkeypatch.setattr(tgi_mod, "_fast_kind", counting)
    monkeypatch.setenv("STALLSCOPE_TGI_GENERIC", "1")
    generic = _digest(paths)
    assert sum(taken.values()) == 0
    monkeypatch.setenv("STALLSCOPE_TGI_GENERIC", "0")
    fast = _digest(paths)
    return generic, fast, taken


def _same(generic: dict, fast: dict) -> None:
    for k in generic:
        assert generic[k] == fast[k], k


def test_real_tgi_logs_same_with_and_without_fast_paths(monkeypatch):
    paths = sorted((REAL / "tgi").glob("*.log"))
    assert len(paths) == 16
    generic, fast, taken = _both(monkeypatch, paths)
    _same(generic, fast)
    # The complete text Success lines and the radix line of the real logs take the fast path; the others do not.
    assert taken[tgi_mod.FAST_SUCCESS] >= 3 and taken[tgi_mod.FAST_RADIX] >= 1
    assert generic["requests"][0] > taken[tgi_mod.FAST_SUCCESS]


@pytest.mark.parametrize("frame_bytes", [None, 40_000])
def test_bench_style_log_same_with_and_without_fast_paths(monkeypatch, tmp_path, frame_bytes):
    """Small frames put frame edges inside multi-line records and between fast lines and the records they follow."""
    if frame_bytes:
        monkeypatch.setattr(lr, "FRAME_BYTES", frame_bytes)
    path = _equiv_module().tgi_bench_style(tmp_path / "tgi_mixed.log", 0.6)
    generic, fast, taken = _both(monkeypatch, [path])
    _same(generic, fast)
    n_req = generic["requests"][0]
    assert taken[tgi_mod.FAST_SUCCESS] > n_req // 2  # most requests are plain Success lines: the fast path
    assert taken[tgi_mod.FAST_RADIX] > 0


def test_fast_kind_refuses_the_look_alikes():
    """Each line built to look like a fast layout without being one (bench/logvariants.TRICKY) is left to the generic
    path unless the generic path reads it as the same kind of record; the real Success lines are taken."""
    tricky = _equiv_module().TRICKY
    df = pl.DataFrame({"t": tricky})
    kinds = dict(zip(tricky, tgi_mod._fast_kind(df).to_list()))
    fast_success = [t for t, k in kinds.items() if k == tgi_mod.FAST_SUCCESS]
    # Only the ones whose span chain, target and message are the Success layout (their timings may still need the
    # generic capture: `_timings` decides that per row).
    assert all(t.endswith(": Success") and "INFO " in t[:40] for t in fast_success)
    for t, k in kinds.items():
        if "xtotal_time" in t or t.startswith("2024-02-14T06:49:52.000013Z  WARN") or "Success!" in t \
                or "outer{" in t or " more" in t or t.startswith("{") or t.startswith("    ") or "evil{" in t \
                or not t[:4].isascii():
            assert k is None, t
    real = [tgi_mod._L_SUCCESS, tgi_mod._L_CHAT, tgi_mod._L_UNTIMED, tgi_mod._L_RADIX]
    assert tgi_mod._fast_kind(pl.DataFrame({"t": real})).to_list() == [1, 1, 1, 2]
