"""The TGI parser's fast paths land exactly what its generic path lands: every table the parser writes, the sources
accounting and the notes, with every parser's fast lanes off (`base.fast_lanes(False)`: every line through the generic
record path) and on,
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
from stallscope.parsers.base import fast_lanes
from stallscope.parsers.tgi_log_patterns import _L_CHAT, _L_RADIX, _L_SUCCESS, _L_UNTIMED
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


PLAIN = "plain"  # key of `taken`: the fast Success lines `_plain_success` read


def _both(monkeypatch, paths) -> tuple[dict, dict, dict]:
    """(generic digest, fast digest, how many lines of each fast kind the fast run took)."""
    taken = {tgi_mod.FAST_SUCCESS: 0, tgi_mod.FAST_RADIX: 0, PLAIN: 0}
    orig, orig_plain = tgi_mod._fast_kind, tgi_mod._plain_success

    def counting(df):
        k = orig(df)
        for kind in (tgi_mod.FAST_SUCCESS, tgi_mod.FAST_RADIX):
            taken[kind] += int((k == kind).sum())
        return k

    def counting_plain(df):
        got = orig_plain(df)
        taken[PLAIN] += int(got[-1].sum())
        return got

    monkeypatch.setattr(tgi_mod, "_fast_kind", counting)
    monkeypatch.setattr(tgi_mod, "_plain_success", counting_plain)
    with fast_lanes(False):
        generic = _digest(paths)
    assert sum(taken.values()) == 0
    with fast_lanes(True):
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
    assert 3 <= taken[PLAIN] <= taken[tgi_mod.FAST_SUCCESS]


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
    # Most fast Success lines are read straight from the line; the look-alikes among them are not.
    assert taken[tgi_mod.FAST_SUCCESS] // 2 < taken[PLAIN] < taken[tgi_mod.FAST_SUCCESS]


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
    real = [_L_SUCCESS, _L_CHAT, _L_UNTIMED, _L_RADIX]
    assert tgi_mod._fast_kind(pl.DataFrame({"t": real})).to_list() == [1, 1, 1, 2]


_HEAD = "2024-02-14T06:49:53.000001Z  INFO "
_TAIL = ('total_time="611.286748ms" validation_time="754.5µs" queue_time="127.337µs" inference_time="610.405028ms" '
         'time_per_token="43.600359ms" seed="Some(18446744073709551615)"}: text_generation_router::server: '
         'router/src/server.rs:299: Success')
_GP = "generate{parameters=GenerateParameters { best_of: None, max_new_tokens: Some(7), stop: [], seed: None } "
# Success lines at the edges of what `_plain_success` reads from the line (each is a fast Success line; which of
# them the plain lane takes decides only the speed, never the rows).
PLAIN_EDGES = [
    _HEAD + _GP + _TAIL,                                                          # taken
    "INFO " + _GP + _TAIL,                                                        # untimed: taken
    _HEAD + "chat_completions{" + _TAIL,                                          # no parameters: taken
    _HEAD + _GP.replace("stop: []", 'stop: ["trace_id=4bf92f3577b34da6a3ce929d0e0e4736"]') + _TAIL,  # P_TRACE_ID
    _HEAD + 'chat_completions{parameters="GenerateParameters { top_n_tokens: None }" ' + _TAIL,  # quoted: P_PARAMS
    _HEAD + _GP.replace("stop: []", 'stop: ["parameters"]').replace("GenerateParameters {", "Params {", 1) + _TAIL,
    _HEAD + _GP.replace("max_new_tokens: Some(7)", "max_new_tokens: None, x: \"max_new_tokens: 5\"") + _TAIL,
    _HEAD + _GP + _TAIL.replace("text_generation_router::server", "text_generation_parameters"),
    _HEAD + "chat_completions{" + _TAIL.replace("text_generation_router::server", "text_generation_parameters"),
    _HEAD + _GP + _TAIL.replace('seed="Some(18446744073709551615)"', 'seed="Some(18446744073709551616)"'),
    _HEAD + _GP + _TAIL.replace('total_time="611.286748ms"', 'total_time="0.0000000000001234567s"'),
    _HEAD + _GP.replace("stop: []", 'stop: ["ü", "} total_time=x"]') + _TAIL,
    _HEAD + _GP.replace("stop: []", 'stop: [queue_time="5ms"]') + _TAIL,          # P_DURATION's first match
]


def test_plain_success_edges_same_as_generic(monkeypatch, tmp_path):
    path = tmp_path / "tgi_plain_edges.log"
    path.write_text("\n".join(PLAIN_EDGES + _equiv_module().TRICKY) + "\n", encoding="utf-8")
    generic, fast, taken = _both(monkeypatch, [path])
    _same(generic, fast)
    assert taken[tgi_mod.FAST_SUCCESS] >= len(PLAIN_EDGES)
    df = pl.DataFrame({"line_no": range(len(PLAIN_EDGES)), "t": PLAIN_EDGES})
    assert tgi_mod._fast_kind(df).to_list() == [tgi_mod.FAST_SUCCESS] * len(PLAIN_EDGES)
    # The first three, and the ones whose searched texts lie outside the span chain, are read from the line.
    assert tgi_mod._plain_success(df)[-1].to_list() == [True, True, True, False, False, False, True, True, True,
                                                         True, True, True, False]


def test_frames_of_fast_lines_only_same_as_generic(monkeypatch, tmp_path):
    """A long-running server's log is Success and radix lines only: such frames skip the record passes
    (`_compute_fast`). Timed and pasted (untimed) Success lines, radix lines and one generic record between runs of
    them, in frames small enough that most hold fast lines only."""
    real = [ln for p in sorted((REAL / "tgi").glob("*_text_*.log"))
            for ln in p.read_text(encoding="utf-8").splitlines()
            if ln.endswith(": Success") or " - Suffix " in ln]
    assert any(ln.startswith("INFO ") for ln in real) and any(" - Suffix " in ln for ln in real)
    block = real * 15 + PLAIN_EDGES[:3] + ["2024-02-14T06:49:53.000009Z  WARN text_generation_router: a warning",
                                           "a stray line: a record of its own, untimed"]
    path = tmp_path / "tgi_fast_only.log"
    path.write_text("\n".join(block * 2) + "\n", encoding="utf-8")
    monkeypatch.setattr(lr, "FRAME_BYTES", 4_000)
    used = []
    orig = tgi_mod._compute_fast
    monkeypatch.setattr(tgi_mod, "_compute_fast", lambda *a: used.append(1) or orig(*a))
    generic, fast, taken = _both(monkeypatch, [path])
    _same(generic, fast)
    assert len(used) >= 4 and taken[PLAIN] > 0 and taken[tgi_mod.FAST_RADIX] > 0


def test_compute_fast_is_compute_without_records():
    """`_compute_fast` (a frame of fast lines only) gives the plan `_compute` gives with an empty record frame: the
    last time is the highest timed line's, whatever the order of the parts (here the frame ends untimed)."""
    lines = [_L_RADIX, _L_SUCCESS, _L_RADIX.replace("10:46:35", "10:46:36"),
             _L_UNTIMED, PLAIN_EDGES[0], _L_UNTIMED]
    df = pl.DataFrame({"line_no": range(10, 10 + len(lines)), "t": lines})
    fast = df.with_columns(tgi_mod._fast_kind(df).alias("kind"))
    assert fast["kind"].null_count() == 0
    empty = tgi_mod._normalise(lr.collapse(
        tgi_mod._prepare(pl.DataFrame({"line_no": [1], "text": ["x"], "bad_utf8": [False]})).with_columns(
            pl.lit(0, pl.Int64).alias("gid")).head(0)))[0]
    full = tgi_mod._compute(empty.with_columns(pl.lit(1, pl.Int64).alias("line_count")).head(0), fast)
    only = tgi_mod._compute(None, fast)
    # The highest timed line is the plain Success line 14 (lines 13 and 15 are pasted without a time).
    assert only["last_ts"] == full["last_ts"] == pl.select(tgi_mod._ts_ns(pl.lit("2024-02-14T06:49:53.000001Z"))).item()
    assert (only["timed"], only["args"], only["config"], only["events"]) == (full["timed"], None, [], None)
    for a, b in zip(only["requests"][0] + only["requests"][1] + only["radix"],
                    full["requests"][0] + full["requests"][1] + full["radix"]):
        assert a.equals(b)
