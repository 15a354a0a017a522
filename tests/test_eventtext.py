"""Event texts found by layout and by decoding: the same events, as zero-copy views where the layout allows."""
from __future__ import annotations

import gzip
import json

import msgspec
import orjson
import pyarrow as pa
import pytest

import stallscope
from conftest import real
from stallscope.parsers import eventtext

H100 = "traces/vllm_h100_tp4_llama_isl1000_osl10_c32.pt.trace.json.gz"
SGLANG = "traces/sglang_mi300x_qwen3-8b_extend_step.json.gz"

EVENTS = [
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1.5, "dur": 2, "args": {"External id": 7}},
    {"ph": "X", "cat": "kernel", "name": "void k<{lambda()#1}, 4>(int)}, {", "ts": 2.0, "dur": 1},
    {"ph": "i"},  # 12 bytes when compact: Arrow keeps it inside the view itself
    {"ph": "X", "cat": "python_function", "name": "x\ny", "ts": 3, "args": {"list": [{"a": 1}, {"b": 2}]}},
]


def _array(events, sep: bytes, indent: bytes = b"") -> bytes:
    return b"[" + indent + sep.join(orjson.dumps(e) for e in events) + b"\n]"


def _texts(col: pa.Array) -> list:
    return [json.loads(t) for t in col.to_pylist()]


@pytest.mark.parametrize("sep", [b",\n", b",\n  ", b"\r\n,\r\n"])
def test_layout_split_finds_every_event(sep):
    doc = _array(EVENTS, sep, indent=b"\n  ")
    col = eventtext.split_by_layout(doc, 1, len(doc) - 1)
    assert col is not None and col.type == pa.string_view()
    assert _texts(col) == EVENTS


def test_layout_split_declines_what_it_cannot_be_sure_of():
    compact = _array(EVENTS, b", ")  # a `}, {` can sit inside a string: only decoding can tell
    assert eventtext.split_by_layout(compact, 1, len(compact) - 1) is None
    one = _array(EVENTS[:1], b",\n")
    assert eventtext.split_by_layout(one, 1, len(one) - 1) is None
    empty = b"[\n]"
    assert eventtext.split_by_layout(empty, 1, 2) is None


def test_decoded_slices_become_views_when_evenly_spaced_else_a_copy():
    for sep, kind in ((b",\n  ", pa.string_view()), (b", ", pa.string_view())):
        doc = _array(EVENTS, sep)
        raws = msgspec.json.decode(doc, type=list[msgspec.Raw])
        col = eventtext.event_text(raws, doc)
        assert col.type == kind and _texts(col) == EVENTS
    uneven = b"[" + orjson.dumps(EVENTS[0]) + b",\n" + b",   ".join(orjson.dumps(e) for e in EVENTS[1:]) + b"]"
    raws = msgspec.json.decode(uneven, type=list[msgspec.Raw])
    col = eventtext.event_text(raws, uneven)
    assert col.type == pa.large_string() and _texts(col) == EVENTS


def test_views_span_several_buffers(monkeypatch):
    # Offsets past the first window go to later (overlapping) buffers; shrink the window to exercise it.
    monkeypatch.setattr(eventtext, "_WINDOW_BITS", 7)
    monkeypatch.setattr(eventtext, "_WINDOW", 1 << 7)
    events = [{"ph": "X", "i": i, "name": "n" * (i % 50)} for i in range(200)]
    doc = _array(events, b",\n")
    col = eventtext.split_by_layout(doc, 1, len(doc) - 1)
    assert col is not None and len(col.buffers()) > 3
    col.validate(full=True)
    assert _texts(col) == events


def _bounds(doc: bytes) -> tuple[int, int]:
    return doc.index(b"[", doc.index(b'"traceEvents"')) + 1, doc.rindex(b"]")


def test_real_kineto_layout_matches_decoding():
    doc = gzip.decompress(real(H100).read_bytes())
    lo, hi = _bounds(doc)
    by_layout = eventtext.split_by_layout(doc, lo, hi)
    raws = msgspec.json.decode(doc[lo - 1: hi + 1], type=list[msgspec.Raw])
    assert by_layout is not None and len(by_layout) == len(raws)
    assert by_layout.to_pylist() == [bytes(r).decode() for r in raws]
    # SGLang's trace puts all events on one line: decoding, not layout, finds them.
    sg = gzip.decompress(real(SGLANG).read_bytes())
    assert eventtext.split_by_layout(sg, *_bounds(sg)) is None


def test_a_wrong_layout_guess_falls_back_to_decoding(tmp_path):
    # An argument list of objects printed at the events' own indentation fools the layout split; DuckDB
    # then meets half-events, and the parser decodes the array properly instead.
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": float(i), "dur": 0.5}
              for i in range(5)]
    body = [orjson.dumps(e) for e in events]
    body[2] = body[2][:-1] + b', "args": {"list": [{"a": 1},\n  {"b": 2}]}}'
    doc = b'{"schemaVersion": 1, "traceEvents": [\n  ' + b",\n  ".join(body) + b'\n], "baseTimeNanoseconds": 1}'
    guess = eventtext.split_by_layout(doc, *_bounds(doc))
    assert guess is not None and len(guess) == 6  # the list's second object taken for an event
    p = tmp_path / "odd.json"
    p.write_bytes(doc)
    s = stallscope.open(":memory:")
    r = s.ingest(p)[0]
    assert r.status == "ingested", r.message
    assert s.sql("SELECT count(*) FROM cpu_ops").item() == 5 and r.rejected == 0
