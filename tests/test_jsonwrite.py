"""stallscope.jsonwrite writes exactly json.dumps(doc, indent=1), whatever shape the records have."""
import io
import json
import math

import pytest

from stallscope import jsonwrite


def _spike(i: int) -> dict:
    return {"request_id": f"r-{i}\u00e9\"\\\n", "token_index": i, "gap_ms": i / 7, "share": None if i % 3 else 0.5,
            "ok": i % 2 == 0, "culprits": [{"request_id": f"c{j}", "overlap_ms": float(j), "ambiguous_with":
                                            [f"a{k}" for k in range(j)]} for j in range(i % 4)],
            "odd %s %d key": 1 << 70, "nan": [math.nan, math.inf, -math.inf, -0.0, 1e-7, 1e22][i % 6],
            "mixed": [1, 2.0, "x", None, True][i % 5]}


def _doc(spikes) -> dict:
    return {"schema": "x/1", "window": {"start_ns": 1, "end_ns": None}, "spikes": spikes, "after": [1, {"a": []}],
            "rows": [{"a": 1}, {"a": 2}]}


def _written(doc) -> str:
    f = io.StringIO()
    jsonwrite.write(doc, f)
    return f.getvalue()


@pytest.mark.parametrize("n", [0, 1, 2, 57])
def test_like_shaped_records_are_byte_identical(n):
    doc = _doc([_spike(i) for i in range(n)])
    assert _written(doc) == json.dumps(doc, indent=1)


def test_the_fast_path_renders_the_records(monkeypatch):
    """The spikes really go through the columnar renderer (not the json module's fallback)."""
    calls = []
    real = jsonwrite._render_records
    monkeypatch.setattr(jsonwrite, "_render_records", lambda r, d: calls.append(len(r)) or real(r, d))
    doc = _doc([_spike(i) for i in range(40)])
    assert _written(doc) == json.dumps(doc, indent=1)
    assert 40 in calls


@pytest.mark.parametrize("odd", [{"x": 1}, {"request_id": "r", "extra": 1}, {"token_index": 1, "request_id": "r"},
                                 "scalar", {"request_id": {"nested": "dict"}}, {"request_id": [{"a": 1}, 2]},
                                 {1: "int key"}])
def test_records_of_another_shape_fall_back_even_after_a_batch(monkeypatch, odd):
    monkeypatch.setattr(jsonwrite, "BATCH", 3)
    spikes = [{"request_id": f"r{i}", "token_index": i} for i in range(10)] + [odd]
    doc = _doc(spikes)
    assert _written(doc) == json.dumps(doc, indent=1)


def test_batches_join_exactly(monkeypatch):
    monkeypatch.setattr(jsonwrite, "BATCH", 4)
    doc = _doc([_spike(i) for i in range(23)])
    assert _written(doc) == json.dumps(doc, indent=1)


@pytest.mark.parametrize("n", [0, 5, 23, 24])
def test_orjson_batches_are_the_same_bytes(monkeypatch, n):
    import orjson

    monkeypatch.setattr(jsonwrite, "BATCH", 4)
    spikes = [{k: v for k, v in _spike(i).items() if not k.startswith("odd")} for i in range(n)]  # 2**70: no
    doc = _doc(spikes)
    doc["recommendation"] = {"setting": "x\ny", "nested": [{"a": [1, 2]}]}
    want = orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)
    assert b"".join(jsonwrite.orjson_bytes(doc)) == want
