"""The Kineto parser on damaged and unusual traces, each derived from a real one."""
from __future__ import annotations

import gzip
import zlib

import orjson
import pytest

import stallscope
from conftest import real
from helpers import cli, load_trace, write_trace

MIXED = "traces/vllm_mi300x_mixed_step_ctx9_gen37.json.gz"
H100 = "traces/vllm_h100_tp4_llama_isl1000_osl10_c32.pt.trace.json.gz"


@pytest.mark.parametrize("fraction", [0.35, 0.8])
def test_truncated_gzip_keeps_complete_events_and_rejects_the_cut(tmp_path, fraction):
    data = real(H100).read_bytes()
    cut = tmp_path / "killed.pt.trace.json.gz"
    cut.write_bytes(data[: int(len(data) * fraction)])
    s = stallscope.open(":memory:")
    r = s.ingest(cut)[0]
    assert r.status == "ingested", r.message
    n = s.sql("SELECT events FROM trace_meta").item()
    assert s.sql("SELECT truncated FROM trace_meta").item() is True
    # The kept events are exactly the first n events of the full trace.
    full = orjson.loads(gzip.decompress(data))["traceEvents"]
    assert 0 < n < len(full)
    assert s.sql("SELECT count(*) FROM gpu_kernels").item() == sum(1 for e in full[:n] if e.get("cat") == "kernel")
    rej = s.sql("SELECT reason, byte_offset FROM rejects")
    assert rej.height == 1
    assert "gzip stream ends early" in rej["reason"][0] and "kept" in rej["reason"][0]
    assert rej["byte_offset"][0] > 0
    # Nothing after the cut was invented: the decompressible prefix is longer than what was kept.
    prefix = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(cut.read_bytes())
    assert rej["byte_offset"][0] <= len(prefix)


def test_truncated_plain_json(tmp_path):
    data = gzip.decompress(real(MIXED).read_bytes())
    p = tmp_path / "cut.json"
    p.write_bytes(data[: len(data) // 2])
    s = stallscope.open(":memory:")
    r = s.ingest(p)[0]
    assert r.status == "ingested" and r.rejected == 1
    assert "JSON ends early" in s.sql("SELECT reason FROM rejects").item()


def test_gzip_cut_before_any_event_is_a_clear_error(tmp_path):
    p = tmp_path / "t.json.gz"
    p.write_bytes(real(MIXED).read_bytes()[:300])
    r = cli("ingest", p, "--db", tmp_path / "x.duckdb")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1 and "error:" in r.stderr
    s = stallscope.open(tmp_path / "x.duckdb")
    assert s.sql("SELECT count(*) FROM sources").item() == 0
    assert s.sql("SELECT count(*) FROM rejects").item() == 0  # no partial rows left behind


def test_case_variant_arg_keys_unknown_categories_and_string_pids(tmp_path):
    t = load_trace(real(MIXED))
    ev = t["traceEvents"]
    memcpy = next(e for e in ev if e.get("cat") == "gpu_memcpy")
    memcpy["args"]["Bytes"] = 999  # allocator-style key next to the memcpy's own `bytes`
    want_bytes = memcpy["args"]["bytes"]
    ev.append({"ph": "X", "cat": "my_vendor_counter", "name": "x", "pid": 1, "tid": 1, "ts": ev[0]["ts"], "dur": 1})
    ev.append({"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
               "ts": ev[0]["ts"], "dur": 5})
    ev.append({"ph": "M", "name": "thread_name", "pid": 2, "tid": 0, "args": {"name": "stream 0 "}})
    ev.append({"ph": "M", "name": "process_name", "pid": "Traces", "args": {"name": "Traces"}})
    ev.append({"ph": "X", "cat": "cpu_op", "name": "no_ts"})  # broken event
    ev.append([1, 2])  # not an event at all
    p = write_trace(t, tmp_path / "odd.json.gz")
    s = stallscope.open(":memory:")
    r = s.ingest(p)[0]
    assert r.status == "ingested" and r.rejected == 2
    assert s.sql("SELECT bytes FROM gpu_memops WHERE event_id = ?", [ev.index(memcpy)]).item() == int(want_bytes)
    cats = s.sql("SELECT cat, stored_in, events FROM trace_categories WHERE cat IN ('my_vendor_counter', 'Trace')")
    assert dict(zip(cats["cat"], cats["stored_in"])) == {"my_vendor_counter": "unknown", "Trace": "skipped"}
    th = s.sql("SELECT pid, tid, value FROM trace_threads ORDER BY value")
    assert ("Traces", None, "Traces") in th.rows() and ("2", "0", "stream 0") in th.rows()
    reasons = set(s.sql("SELECT reason FROM rejects")["reason"])
    assert any("without ts" in x for x in reasons) and any("not a trace event" in x for x in reasons)
    assert any("unknown event categories" in n for n in r.notes)
    assert r.parsed + r.skipped + r.rejected == len(ev)


def test_directory_of_per_rank_files(tmp_path):
    t = load_trace(real("traces/vllm_b200_tp8_eager_prefill_step.json.gz"))
    d = tmp_path / "profile"
    d.mkdir()
    for rank in (0, 1):
        t["distributedInfo"]["rank"] = rank
        write_trace(t, d / f"host_{rank}.{1000 + rank}.pt.trace.json.gz")
    (d / ".hidden").write_text("ignored")
    s = stallscope.open(":memory:")
    rep = s.ingest(d)
    assert [r.status for r in rep] == ["ingested", "ingested"]
    per_rank = s.sql("SELECT rank, count(*) AS n FROM gpu_kernels GROUP BY rank ORDER BY rank")
    assert per_rank.rows() == [(0, 768), (1, 768)]
    assert s.sql("SELECT count(*) FROM steps").item() == 2


def test_bare_event_array_and_old_category_names(tmp_path):
    t = load_trace(real(MIXED))
    ev = t["traceEvents"]
    for e in ev:
        if e.get("cat") == "kernel":
            e["cat"] = "Kernel"
        elif e.get("cat") == "cuda_runtime":
            e["cat"] = "Runtime"
    p = tmp_path / "bare.json"
    p.write_bytes(orjson.dumps(ev))
    s = stallscope.open(":memory:")
    r = s.ingest(p)[0]
    assert r.status == "ingested"
    assert s.sql("SELECT count(*), count(launch_event_id) FROM gpu_kernels").row(0) == (413, 413)
    # Without baseTimeNanoseconds and with small ts, times are trace-relative and say so.
    assert s.sql("SELECT clock_method FROM sources").item() == "trace_unanchored"


def test_python_functions_can_be_dropped_but_steps_survive(tmp_path):
    s = stallscope.open(":memory:")
    from stallscope.parsers import Options

    r = s.ingest(real(H100), options=Options(keep_python_functions=False))[0]
    assert r.status == "ingested"
    assert s.sql("SELECT count(*) FROM steps").item() == 11
    py = s.sql("SELECT count(*) FROM cpu_ops WHERE category = 'python_function'").item()
    assert py == 22  # only the execute_model windows (gpu_worker and gpu_model_runner, 11 each)
    assert r.parsed + r.skipped == s.sql("SELECT sum(events) FROM trace_categories").item()


@pytest.mark.parametrize("annotation,want", [
    ("execute_new_3_cached_29", {"new_reqs": 3, "cached_reqs": 29, "phase": "mixed", "annotation_kind": "new_cached"}),
    ("execute_new_2_cached_0", {"new_reqs": 2, "cached_reqs": 0, "phase": "prefill"}),
    ("execute_context_2(4096)_generation_30(30)",
     {"ctx_reqs": 2, "ctx_tokens": 4096, "gen_reqs": 30, "gen_tokens": 30, "total_tokens": 4126, "phase": "mixed",
      "annotation_kind": "context_generation"}),
    ("execute_4126_context_2(4096)_generation_30(30)", {"total_tokens": 4126, "ctx_tokens": 4096}),
    ("execute_context_0(0)_generation_32(32)", {"ctx_reqs": 0, "gen_reqs": 32, "phase": "decode"}),
    ("step[DECODE bs=32]", {"gen_reqs": 32, "ctx_reqs": 0, "phase": "decode", "batch_size": 32}),
    ("step[MIXED bs=15 toks=4110]", {"phase": "mixed", "batch_size": 15, "total_tokens": 4110, "ctx_tokens": None}),
])
def test_every_step_annotation_variant(tmp_path, annotation, want):
    """The B200 step carries `execute_context_1(888_788544)_generation_0(0)`; the other variants real vLLM and
    SGLang versions write are swapped in for it, on the same real events."""
    t = load_trace(real("traces/vllm_b200_tp8_eager_prefill_step.json.gz"))
    for e in t["traceEvents"]:
        if e.get("name", "").startswith("execute_context_"):
            e["name"] = annotation
    s = stallscope.open(":memory:")
    assert s.ingest(write_trace(t, tmp_path / "t.json.gz"))[0].status == "ingested"
    st = s.sql("SELECT * FROM steps").row(0, named=True)
    assert st["annotation"] == annotation and st["kernel_count"] == 768
    for k, v in want.items():
        assert st[k] == v, (k, st[k], v)


@pytest.mark.parametrize("trace", ["vllm_h100_tp4_llama_isl1000_osl10_c32.pt.trace.json.gz",
                                   pytest.param("hta_v100_ddp_training_int_ts.json.gz", marks=pytest.mark.slow)])
def test_many_small_batches_give_the_same_tables_as_one(trace):
    # Big traces are parsed and routed a batch at a time (the real samples fit in one): same rows either way.
    from stallscope.parsers import Options

    path = real(f"traces/{trace}")
    one, many = stallscope.open(":memory:"), stallscope.open(":memory:")
    assert one.ingest(path)[0].status == "ingested"
    assert many.ingest(path, options=Options(chunk_events=7_001))[0].status == "ingested"
    for table in ("cpu_ops", "runtime_calls", "gpu_kernels", "gpu_memops", "gpu_annotations", "steps",
                  "trace_threads", "trace_categories", "rejects"):
        query = f"SELECT * EXCLUDE (source_id) FROM {table} ORDER BY ALL"
        a, b = one.sql(query), many.sql(query)
        assert a.height == b.height and a.equals(b), table
    assert one.sql("SELECT count(*) FROM cpu_ops").item() > 7_001 * 3
