"""Fuzzing the JSON ingest (Kineto traces, benchmark results) with mutations of every real JSON sample.

Each example takes a real file (a trace cut down to a window of its first events in its own bytes and layout,
or a whole benchmark result), damages it one way (a field set to NaN/inf/huge/wrong type, an entry replaced by a
non-object or by deep nesting, a cut at a random offset, a flipped byte, a spliced or deleted stretch) and
ingests it. Every example must finish within a bound proportional to the clean sample's own time, show no
internal exception text in any message, and account for every record: parsed + skipped + rejected equals what
the file holds, counted independently with Python's own `json` decoder on the undamaged original.

Deterministic (`derandomize=True`, no example database): CI runs the same examples every time.
"""
from __future__ import annotations

import gzip
import json
import re
import time
from functools import lru_cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import stallscope
from conftest import REAL, ROOT

pytestmark = pytest.mark.fuzz

TRACE_FILES = sorted((REAL / "traces").glob("*.json*")) + sorted((ROOT / "sample_traces").glob("*/*.trace.json.gz"))
BENCH_FILES = sorted((REAL / "vllm").glob("bench_*.json")) + sorted((ROOT / "sample_traces").glob("*/bench_serve.json.gz"))
WINDOW = 800  # events kept from each trace: its own bytes, so its own layout
# What must never reach a user: exception class names, decoder and library internals, tracebacks.
INTERNAL = re.compile(r"Traceback|Exception|[A-Z][a-z]+Error\b|\bduckdb\b|msgspec|orjson|polars|pyarrow|"
                      r"File \"|line \d+, in ")
_DEC = json.JSONDecoder()
_WS = re.compile(r"[ \t\r\n]*")


def _raw(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def element_spans(text: str, lo: int, limit: int | None = None) -> tuple[list[tuple[int, int]], int]:
    """(start, end) of each element of the JSON array whose body starts at `lo`, and the offset of its `]`,
    by Python's json decoder (the independent count). `text` is the file decoded as latin-1: one char per byte."""
    spans, pos = [], _WS.match(text, lo).end()
    if text[pos] == "]":
        return spans, pos
    while limit is None or len(spans) < limit:
        _, end = _DEC.raw_decode(text, pos)
        spans.append((pos, end))
        pos = _WS.match(text, end).end()
        if text[pos] == "]":
            return spans, pos
        assert text[pos] == ","
        pos = _WS.match(text, pos + 1).end()
    return spans, -1


@lru_cache(maxsize=None)
def trace_sample(path: Path) -> tuple[bytes, tuple[tuple[int, int], ...]]:
    """The trace's header, its first WINDOW events and its trailer, byte for byte; with the events' spans."""
    data = _raw(path)
    text = data.decode("latin-1")
    lo = text.index("[", text.index('"traceEvents"')) + 1
    spans, _ = element_spans(text, lo, WINDOW)
    close = data.rindex(b"]")
    doc = data[: spans[-1][1]] + b"\n" + data[close:]
    assert len(json.loads(doc)["traceEvents"]) == len(spans)
    return doc, tuple(spans)


@lru_cache(maxsize=None)
def bench_sample(path: Path) -> tuple[dict, int]:
    obj = json.loads(_raw(path))
    lens = [len(v) for k, v in obj.items() if isinstance(v, list) and k in
            ("input_lens", "output_lens", "ttfts", "itls", "errors", "generated_texts", "latencies", "start_times")]
    return obj, min(lens)


def ingest(tmp_path: Path, name: str, data: bytes):
    p = tmp_path / name
    p.write_bytes(data)
    s = stallscope.open(":memory:")
    t0 = time.process_time()
    report = s.ingest(p)
    return s, report, time.process_time() - t0


@lru_cache(maxsize=None)
def clean_seconds(kind: str, path: Path, tmp: str) -> float:
    """CPU seconds of the undamaged sample: the yardstick for the time bound."""
    data = trace_sample(path)[0] if kind == "trace" else json.dumps(bench_sample(path)[0]).encode()
    best = min(ingest(Path(tmp), f"clean_{path.name}.json", data)[2] for _ in range(2))
    return best


def check_common(s, report, seconds: float, clean: float) -> None:
    # A hang guard, not a benchmark: a super-linear path on these inputs costs many times the clean ingest.
    assert seconds <= 4 * clean + 3.0, (seconds, clean)
    lines = [r.message for r in report] + [n for r in report for n in r.notes] + list(report.notes)
    lines += [x for x in s.sql("SELECT reason FROM rejects").to_series().to_list()]
    for line in lines:
        assert "\n" not in line.strip() and not INTERNAL.search(line), line


def accounted(r) -> int:
    return r.parsed + r.skipped + r.rejected


# -- mutations ---------------------------------------------------------------------------------------------

BAD_VALUES = [b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e400", b"123456789012345678901234567890", b"-5",
              b'"str"', b'"NaN"', b"null", b"true", b"[]", b"{}", b'"\\u0000"', b"1.5", b'"12"', b"[[[[1]]]]"]
NOT_EVENTS = [b"7", b'"x"', b"null", b"true", b"[1, [2]]", b"{}", b'{"ph": 5}', b'{"ph": "X"}']
FIELDS = [b"ts", b"dur", b"pid", b"tid", b"ph", b"cat", b"name", b"correlation", b"External id", b"grid"]


def deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def set_field(doc: bytes, span: tuple[int, int], field: bytes, value: bytes) -> bytes | None:
    m = re.compile(rb'"' + re.escape(field) + rb'"\s*:\s*').search(doc, span[0], span[1])
    if m is None:
        return None
    _, end = _DEC.raw_decode(doc.decode("latin-1"), m.end())
    return doc[: m.end()] + value + doc[end:]


trace_mutation = st.one_of(
    st.tuples(st.just("field"), st.integers(0, WINDOW - 1), st.sampled_from(FIELDS),
              st.one_of(st.sampled_from(BAD_VALUES), st.integers(300, 100_000).map(deep))),
    st.tuples(st.just("replace"), st.integers(0, WINDOW - 1),
              st.one_of(st.sampled_from(NOT_EVENTS), st.integers(300, 100_000).map(deep))),
    st.tuples(st.just("insert"), st.integers(0, WINDOW - 1), st.sampled_from(NOT_EVENTS + [deep(5000)])),
    st.tuples(st.just("truncate"), st.floats(0.0, 1.0)),
    st.tuples(st.just("flip"), st.floats(0.0, 1.0), st.sampled_from(list(b'{}[],":\\ \n\x00\xff') + [ord("a")])),
    st.tuples(st.just("splice"), st.floats(0.0, 1.0), st.integers(1, 3000), st.floats(0.0, 1.0)),
    st.tuples(st.just("delete"), st.floats(0.0, 1.0), st.integers(1, 3000)),
)

# No shrinking: a failure is reported as generated, at once (shrinking a slow ingest takes minutes).
FUZZ = settings(max_examples=50, derandomize=True, database=None, deadline=None,
                phases=(Phase.explicit, Phase.generate), report_multiple_bugs=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@FUZZ
@given(file=st.sampled_from(TRACE_FILES), mutation=trace_mutation)
def test_damaged_traces(tmp_path, file, mutation):
    doc, spans = trace_sample(file)
    n = len(spans)
    clean = clean_seconds("trace", file, str(tmp_path))
    kind = mutation[0]
    expect = None  # the exact number of records, where the damage leaves it known
    at_most_rejected = None
    if kind == "field":
        _, i, field, value = mutation
        got = set_field(doc, spans[i], field, value)
        doc, expect, at_most_rejected = (got, n, 1) if got is not None else (doc, n, 0)
    elif kind == "replace":
        _, i, value = mutation
        doc, expect, at_most_rejected = doc[: spans[i][0]] + value + doc[spans[i][1]:], n, 1
    elif kind == "insert":
        _, i, value = mutation
        doc, expect, at_most_rejected = doc[: spans[i][0]] + value + b", " + doc[spans[i][0]:], n + 1, 1
    elif kind == "truncate":
        cut = max(1, int(mutation[1] * (len(doc) - 1)))
        complete = sum(1 for _, e in spans if e <= cut)
        try:
            json.loads(doc[:cut])
            expect = n  # only trailing whitespace went
        except ValueError:
            expect = complete + 1 if complete else None  # the complete events, and the cut itself
        doc = doc[:cut]
    elif kind == "flip":
        p = spans[0][0] + int(mutation[1] * (spans[-1][1] - spans[0][0] - 1))
        doc = doc[:p] + bytes([mutation[2]]) + doc[p + 1:]
    elif kind == "splice":
        a = spans[0][0] + int(mutation[1] * (spans[-1][1] - spans[0][0] - 1))
        c = spans[0][0] + int(mutation[3] * (spans[-1][1] - spans[0][0] - 1))
        doc = doc[:c] + doc[a: a + mutation[2]] + doc[c:]
    elif kind == "delete":
        a = spans[0][0] + int(mutation[1] * (spans[-1][1] - spans[0][0] - 1))
        doc = doc[:a] + doc[a + mutation[2]:]
    s, report, seconds = ingest(tmp_path, "t.json", doc)
    check_common(s, report, seconds, clean)
    r = report[0]
    if not r.ok:
        assert kind in ("truncate", "flip", "splice", "delete") and expect is None, (kind, r.message)
        return
    events = s.sql("SELECT events FROM trace_meta").item()
    cuts = s.sql("SELECT count(*) FROM rejects WHERE reason LIKE 'trace cut%'").item()
    assert accounted(r) == events + cuts  # every element the parser found, and the cut
    if expect is not None:
        assert accounted(r) == expect, (kind, accounted(r), expect)
    if at_most_rejected is not None:
        assert r.rejected <= at_most_rejected, s.sql("SELECT reason FROM rejects").rows()
    if kind in ("flip", "splice", "delete") and doc.count(b"\n") > 100:
        # In a multi-line trace, damage stays local: all but a few of the events survive.
        assert abs(accounted(r) - n) <= 3 + mutation[2] // 20 if kind != "flip" else abs(accounted(r) - n) <= 3
        assert r.parsed + r.skipped >= n - 3 - (mutation[2] // 20 if kind != "flip" else 0)
    rej = s.sql("SELECT byte_offset FROM rejects WHERE reason NOT LIKE 'trace cut%'").to_series().to_list()
    for off in rej:
        assert off is not None and 0 <= off < len(doc)


REQUEST_KEYS = ["ttfts", "itls", "input_lens", "output_lens", "errors"]
RUN_KEYS = ["duration", "completed", "request_rate", "date", "mean_ttft_ms", "num_prompts", "total_input_tokens"]
PY_BAD = [float("nan"), float("inf"), -1, "str", None, 1e300, 2 ** 70, [], {}, [[1]], True, "NaN"]

bench_mutation = st.one_of(
    st.tuples(st.just("request"), st.sampled_from(REQUEST_KEYS), st.floats(0.0, 1.0),
              st.one_of(st.sampled_from(PY_BAD), st.integers(2, 900).map(lambda d: json.loads(deep(d))))),
    st.tuples(st.just("run"), st.sampled_from(RUN_KEYS), st.sampled_from(PY_BAD)),
    st.tuples(st.just("truncate"), st.floats(0.0, 1.0)),
    st.tuples(st.just("flip"), st.floats(0.0, 1.0), st.sampled_from(list(b'{}[],":\\ \n\x00\xff'))),
)


@settings(FUZZ, max_examples=25)
@given(file=st.sampled_from(BENCH_FILES), mutation=bench_mutation)
def test_damaged_benchmark_results(tmp_path, file, mutation):
    obj, n = bench_sample(file)
    clean = clean_seconds("bench", file, str(tmp_path))
    obj = json.loads(json.dumps(obj))
    kind = mutation[0]
    expect = None
    if kind == "request":
        _, key, where, value = mutation
        obj[key][int(where * (n - 1))] = value
        expect = 1 + n  # the run object and every request
    elif kind == "run":
        _, key, value = mutation
        obj[key] = value
        expect = 1 + n
    doc = json.dumps(obj).encode()
    if kind == "truncate":
        doc = doc[: max(1, int(mutation[1] * (len(doc) - 1)))]
    elif kind == "flip":
        p = int(mutation[1] * (len(doc) - 1))
        doc = doc[:p] + bytes([mutation[2]]) + doc[p + 1:]
    s, report, seconds = ingest(tmp_path, "bench.json", doc)
    check_common(s, report, seconds, clean)
    r = report[0]
    if expect is None:
        # A cut or broken single-object result: a one-line reason (checked above), or what could be read.
        assert r.ok or r.status == "failed"
        return
    assert r.ok, r.message
    assert accounted(r) == expect, (accounted(r), expect)
    assert r.rejected <= 1
    if kind == "run" and key == "duration" and not (isinstance(value, (int, float)) and not isinstance(value, bool)
                                                     and 0 <= value <= 1e7):
        assert any("`duration`" in x for x in r.notes), r.notes
        assert s.sql("SELECT value_num FROM engine_config WHERE key = 'duration'").item() is None
