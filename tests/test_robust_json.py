"""Damaged JSON inputs built from the real files: one bad record costs that record, never the file, a hang or a
traceback (issue 14). Each case is a small corruption of a real trace or benchmark result."""
from __future__ import annotations

import gzip
import json
import time

import pytest

import stallscope
from conftest import real
from helpers import cli

H100 = "traces/vllm_h100_tp4_llama_isl1000_osl10_c32.pt.trace.json.gz"
MIXED = "traces/vllm_mi300x_mixed_step_ctx9_gen37.json.gz"
BENCH = "vllm/bench_serving_0.8.3_llama70b_tp4pp2_sharegpt_qps_01_llmk8s.json"
INTERNAL = ("Traceback", "Exception", "Error:", "ValueError", "TypeError", "duckdb", "msgspec", "polars")


def _ingest(path):
    s = stallscope.open(":memory:")
    t0 = time.process_time()
    report = s.ingest(path)
    return s, report, time.process_time() - t0


def _no_internal_text(report) -> None:
    for line in [r.message for r in report] + [n for r in report for n in r.notes] + list(report.notes):
        assert not any(x in line for x in INTERNAL), line


@pytest.fixture(scope="module")
def h100():
    data = gzip.decompress(real(H100).read_bytes())
    obj = json.loads(data)
    kernels = [i for i, e in enumerate(obj["traceEvents"]) if e.get("cat") == "kernel"]
    _, _, seconds = _ingest(real(H100))
    return data, obj, kernels, seconds


@pytest.mark.parametrize("writer", ["kineto_layout", "python_json_dumps"])
def test_one_nan_kernel_ts_costs_one_event_not_the_file(tmp_path, h100, writer):
    data, obj, kernels, intact_s = h100
    assert len(kernels) == 13_508
    k = kernels[len(kernels) // 2]
    if writer == "kineto_layout":  # the file's own bytes with one value replaced, as an editor would
        at = _nth(data, b'"cat": "kernel"', len(kernels) // 2)
        at = data.rindex(b"{", 0, at)
        i = data.index(b'"ts": ', at) + 6
        doc = data[:i] + b"NaN" + data[data.index(b",", i):]
    else:  # what Python writes for float('nan'): a one-line file with a bare NaN literal
        bad = json.loads(data)
        bad["traceEvents"][k]["ts"] = float("nan")
        doc = json.dumps(bad).encode()
        at = None
    p = tmp_path / "nan.pt.trace.json.gz"
    p.write_bytes(gzip.compress(doc, 1))
    s, report, seconds = _ingest(p)
    r = report[0]
    assert r.status == "ingested", r.message
    assert s.sql("SELECT count(*) FROM gpu_kernels").item() == 13_507
    rej = s.sql("SELECT record_index, byte_offset, reason FROM rejects").rows()
    assert len(rej) == 1 and rej[0][0] == k and "ts is NaN" in rej[0][2]
    off = rej[0][1]
    assert at is None or off == at
    event = json.JSONDecoder().raw_decode(doc.decode("latin-1"), off)[0]  # the reject points at the event itself
    assert event["name"] == obj["traceEvents"][k]["name"] and event["ts"] != event["ts"]
    assert r.parsed + r.skipped + r.rejected == len(obj["traceEvents"])
    # "In about the time of the intact file": a hang guard with room for a loaded machine, not a benchmark.
    assert seconds < 3 * intact_s + 2, (seconds, intact_s)
    _no_internal_text(report)


def _nth(data: bytes, needle: bytes, n: int) -> int:
    at = -1
    for _ in range(n + 1):
        at = data.index(needle, at + 1)
    return at


def _mixed_types(obj: dict) -> tuple[dict, dict[int, str]]:
    """A copy of a real trace with a few events of the wrong types; {index in traceEvents: expected reason}."""
    ev = obj["traceEvents"]
    kern = [i for i, e in enumerate(ev) if e.get("cat") == "kernel"]
    ops = [i for i, e in enumerate(ev) if e.get("cat") == "cpu_op"]
    want = {}
    for i, field, value, why in ((kern[0], "pid", "gpu0", "pid is a string that is not a number"),
                                 (kern[1], "tid", None, "tid is null"),
                                 (kern[2], "ts", "NaN", "ts is NaN"),
                                 (kern[3], "dur", -5, "dur is negative"),
                                 (ops[0], "ts", float("inf"), "ts is infinite"),
                                 (ops[1], "dur", "long", "dur is a string"),
                                 (ops[2], "pid", 2 ** 70, "pid is out of range"),
                                 (ops[3], "ts", 1e300, "ts out of range")):
        ev[i][field] = value
        want[i] = why
    ev[kern[4]]["args"]["grid"] = [2 ** 40, 1, 1]  # an argument out of range: that field NULL, the event kept
    for at, value, what in ((10, 7, "a number"), (20, "x", "a string"), (30, None, "null"),
                            (40, [1, [2]], "an array"), (50, True, "a boolean")):
        ev.insert(at, value)
        want = {(k + 1 if k >= at else k): w for k, w in want.items()}
        want[at] = what
    return obj, want


@pytest.mark.parametrize("indent", [None, 2])
def test_events_of_the_wrong_types_are_rejected_one_by_one(tmp_path, indent):
    obj, want = _mixed_types(json.loads(gzip.decompress(real(MIXED).read_bytes())))
    ev = obj["traceEvents"]
    doc = json.dumps(obj, indent=indent).encode()
    p = tmp_path / "mixed.json"
    p.write_bytes(doc)
    s, report, _ = _ingest(p)
    r = report[0]
    assert r.status == "ingested", r.message
    rej = {i: (off, why) for i, off, why in s.sql("SELECT record_index, byte_offset, reason FROM rejects").rows()}
    assert set(rej) == set(want)
    text = doc.decode("latin-1")
    for i, (off, why) in rej.items():
        assert want[i] in why, (i, why)
        assert json.JSONDecoder().raw_decode(text, off)[0] == json.loads(json.dumps(ev[i])), i  # at the record
    good = [e for i, e in enumerate(ev) if i not in want and isinstance(e, dict)]
    for table, cats in (("gpu_kernels", ("kernel",)), ("cpu_ops", ("cpu_op", "user_annotation", "python_function"))):
        assert s.sql(f"SELECT count(*) FROM {table}").item() == sum(e.get("cat") in cats for e in good), table
    assert s.sql("SELECT count(*) FROM gpu_kernels WHERE grid_x IS NULL AND grid_y = 1").item() == 1
    assert r.parsed + r.skipped + r.rejected == len(ev)
    _no_internal_text(report)
    assert s.sql("SELECT rank FROM trace_meta").item() is not None


def test_benchmark_nan_duration_and_text_ttft(tmp_path):
    obj = json.loads(real(BENCH).read_bytes())
    n = len(obj["ttfts"])
    obj["duration"] = float("nan")
    obj["ttfts"][3] = "fast"
    obj["ttfts"][7] = float("nan")
    obj["itls"][9] = "none"
    p = tmp_path / "bench.json"
    p.write_text(json.dumps(obj))  # Python writes NaN as a bare literal
    s, report, _ = _ingest(p)
    r = report[0]
    assert r.status == "ingested", r.message
    rej = dict(s.sql("SELECT record_index, reason FROM rejects").rows())
    assert rej == {3: "ttfts[i] is not a number", 7: "successful request without a valid TTFT (ttfts[i])",
                   9: "itls[i] is not a list of gaps"}
    assert r.parsed == 1 + n - 3 and r.parsed + r.skipped + r.rejected == 1 + n
    assert any(x.startswith("run 0: `duration` is NaN") for x in r.notes), r.notes
    cfg = dict(s.sql("SELECT key, value_num FROM engine_config WHERE key IN ('duration', 'run_start_anchor_ns')")
               .rows())
    assert cfg == {"duration": None, "run_start_anchor_ns": None}
    assert report.notes == []  # the cross-source step (clock alignment) ran without failing
    _no_internal_text(report)
    out = cli("analyze", "--db", tmp_path / "x.duckdb", p)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr


def test_bad_run_level_numbers_are_notes_not_exceptions(tmp_path):
    obj = json.loads(real(BENCH).read_bytes())
    obj.update(duration=1e300, completed="many", request_rate=-2)
    p = tmp_path / "bench.json"
    p.write_text(json.dumps(obj))
    s, report, _ = _ingest(p)
    r = report[0]
    assert r.status == "ingested" and r.rejected == 0
    notes = " | ".join(r.notes)
    for key in ("`duration` is 1e+300, not a number of seconds", "`completed` is the text 'many', not a count",
                "`request_rate` is -2, not a rate"):
        assert key in notes, notes
    nums = dict(s.sql("SELECT key, value_num FROM engine_config WHERE key IN ('duration', 'completed', "
                      "'request_rate')").rows())
    assert nums == {"duration": None, "completed": None, "request_rate": None}
    _no_internal_text(report)


def test_a_null_duration_is_said_like_a_bad_one(tmp_path):
    # Found by the fuzz harness (`("run", "duration", None)`): a null was skipped silently, where the run start and
    # the run's window need the field.
    obj = json.loads(real(BENCH).read_bytes())
    obj["duration"] = None
    p = tmp_path / "bench.json"
    p.write_text(json.dumps(obj))
    s, report, _ = _ingest(p)
    r = report[0]
    assert r.status == "ingested" and r.rejected == 0
    assert any("`duration` is null, not a number of seconds: the run start" in x for x in r.notes), r.notes
    assert s.sql("SELECT value_num FROM engine_config WHERE key = 'run_start_anchor_ns'").item() is None


DEEP = b"[" * 100_000 + b"]" * 100_000


def test_a_trace_nested_100000_deep_is_a_one_line_error(tmp_path):
    p = tmp_path / "deep.json"
    p.write_bytes(b'{"traceEvents": [' + DEEP + b"]}")
    out = cli("ingest", p, "--db", tmp_path / "x.duckdb")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.count("\n") == 1 and "nested deeper than 256 levels (depth limit) at byte 17" in out.stderr


@pytest.mark.parametrize("where", ["entry", "header"])
def test_deep_nesting_beside_real_events_costs_only_itself(tmp_path, where):
    data = gzip.decompress(real(MIXED).read_bytes())
    n = len(json.loads(data)["traceEvents"])
    if where == "entry":
        i = data.index(b'"traceEvents": [') + 16
        doc = data[:i] + DEEP + b", " + data[i:]
    else:
        doc = b'{"junk": ' + b"[" * 20_000 + b"]" * 20_000 + b", " + data[1:]  # inside the sniffed 64 KB
    p = tmp_path / "t.json"
    p.write_bytes(doc)
    s, report, _ = _ingest(p)
    r = report[0]
    assert r.status == "ingested", r.message
    assert s.sql("SELECT count(*) FROM gpu_kernels").item() == 413
    if where == "entry":
        assert r.rejected == 1 and r.parsed + r.skipped == n
        assert s.sql("SELECT reason FROM rejects").item() == "nested deeper than 256 levels (depth limit)"
    else:
        assert r.rejected == 0 and any("header keys before traceEvents" in x for x in r.notes)
    _no_internal_text(report)


def test_a_benchmark_result_nested_too_deep_is_a_one_line_error(tmp_path):
    obj = json.loads(real(BENCH).read_bytes())
    text = json.dumps(obj).replace('"ttfts": [', '"ttfts": [' + "[" * 100_000 + "]" * 100_000 + ", ", 1)
    p = tmp_path / "bench.json"
    p.write_text(text)
    out = cli("ingest", p, "--db", tmp_path / "x.duckdb")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.count("\n") == 1 and "nested deeper than" in out.stderr, out.stderr


def test_exit_zero_with_rejects_and_a_clean_stderr(tmp_path):
    obj, _ = _mixed_types(json.loads(gzip.decompress(real(MIXED).read_bytes())))
    p = tmp_path / "mixed.json"
    p.write_text(json.dumps(obj))
    out = cli("ingest", p, "--db", tmp_path / "x.duckdb")
    assert out.returncode == 0, out.stderr
    assert not any(x in out.stdout + out.stderr for x in INTERNAL)


def test_an_internal_failure_names_the_file_and_place_not_the_exception(tmp_path, monkeypatch):
    from stallscope.parsers import kineto

    def boom(self, cur, sql, ids, batch):
        raise ValueError("cannot convert float NaN to integer")

    monkeypatch.setattr(kineto._Loader, "_parse_batch", boom)
    s = stallscope.open(":memory:")
    r = s.ingest(real(MIXED))[0]
    assert r.status == "failed"
    assert r.message.startswith(str(real(MIXED))) and "internal error while parsing events 0-19288" in r.message
    assert "ValueError" not in r.message and "NaN" not in r.message
    monkeypatch.setenv("STALLSCOPE_DEBUG", "1")
    r = stallscope.open(":memory:").ingest(real(MIXED))[0]
    assert "[ValueError: cannot convert float NaN to integer]" in r.message


@pytest.mark.parametrize("body", ["stray_commas", "open_quote", "nan_events", "broken_every_other"])
def test_work_stays_linear_on_pathological_traces(tmp_path, body):
    """Four times the input must not cost much more than four times the work (a super-linear path costs 16x
    or more): CPU seconds of each size, with slack for a loaded machine."""
    event = (b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": %d, "dur": 1.5, '
             b'"args": {"correlation": %d}}')

    def doc(n: int) -> bytes:
        if body == "stray_commas":
            return b'{"traceEvents": [' + b"," * n * 20 + b"]}"
        if body == "open_quote":  # one unterminated string, then n events on the same line
            return b'{"traceEvents": [{"ph": "X, "x": 1}, ' + b", ".join(event % (i, i) for i in range(n)) + b"]}"
        if body == "nan_events":
            return b'{"traceEvents": [' + b", ".join((event % (i, i)).replace(b'"dur": 1.5', b'"dur": NaN')
                                                     for i in range(n)) + b"]}"
        return b'{"traceEvents": [\n  ' + b",\n  ".join(event % (i, i) if i % 2 else (event % (i, i))[:-9]
                                                     for i in range(n)) + b"\n]}"

    times = []
    for n in (5_000, 20_000):
        p = tmp_path / f"{body}_{n}.json"
        p.write_bytes(doc(n))
        s, report, seconds = _ingest(p)
        r = report[0]
        if body == "broken_every_other":  # a multi-line file: every intact event is kept, each broken one rejected
            assert r.status == "ingested" and r.parsed == n // 2 and r.rejected == n // 2, r.message
        else:  # nothing usable (every event is bad, or a broken quote spoils the rest of a one-line file)
            assert r.status == "failed" and "nothing usable" in r.message and r.message.count("\n") == 0
        times.append(seconds)
    assert times[1] < 8 * times[0] + 1.0, times
