"""The Kineto parser on the real traces in ../shared/real/traces/: counts, links, steps, clocks."""
from __future__ import annotations

import gzip

import orjson
import pytest

from conftest import real, source_id

TRACE_FILES = [
    "vllm_h100_tp4_llama_isl1000_osl10_c32.pt.trace.json.gz",
    "vllm_mi300x_tp4_llama_isl1000_osl10_c32.pt.trace.json.gz",
    "vllm_mi300x_mixed_step_ctx9_gen37.json.gz",
    "sglang_mi300x_qwen3-8b_extend_step.json.gz",
    "vllm_b200_tp8_eager_prefill_step.json.gz",
    "hta_v100_ddp_training_int_ts.json.gz",
]


def _events(name: str) -> list[dict]:
    return orjson.loads(gzip.decompress(real(f"traces/{name}").read_bytes()))["traceEvents"]


@pytest.mark.parametrize("name", TRACE_FILES)
def test_every_kernel_event_becomes_a_row(traces_store, name):
    sid = source_id(traces_store, name)
    ev = _events(name)
    want = sum(1 for e in ev if e.get("cat") == "kernel")
    got = traces_store.sql("SELECT count(*) FROM gpu_kernels WHERE source_id = ?", [sid]).item()
    assert got == want
    # Every event is accounted for: parsed + skipped + rejected = events in the file.
    p, s, r = traces_store.sql("SELECT records_parsed, records_skipped, records_rejected FROM sources "
                               "WHERE source_id = ?", [sid]).row(0)
    assert p + s + r == len(ev)
    assert r == 0
    cats = traces_store.sql("SELECT sum(events) FROM trace_categories WHERE source_id = ?", [sid]).item()
    assert cats == len(ev)


@pytest.mark.parametrize("name", TRACE_FILES[:2])
def test_serving_traces_link_every_kernel_to_its_launch(traces_store, name):
    sid = source_id(traces_store, name)
    n, linked, to_cpu, graph = traces_store.sql(
        "SELECT count(*), count(launch_event_id), count(cpu_op_event_id), count(*) FILTER (WHERE graph_launch) "
        "FROM gpu_kernels WHERE source_id = ?", [sid]).row(0)
    assert linked == n
    # Graph replays have no External id; time containment still finds the Python frame that replayed them.
    assert graph > 8000 and to_cpu == n
    # Launch and kernel share the correlation id, and the launch precedes the kernel.
    bad = traces_store.sql("""
        SELECT count(*) FROM gpu_kernels k JOIN runtime_calls r
          ON r.source_id = k.source_id AND r.event_id = k.launch_event_id
        WHERE k.source_id = ? AND (r.correlation <> k.correlation OR r.start_ns > k.start_ns)""", [sid]).item()
    assert bad == 0


def test_eager_launch_links_by_external_id_to_the_innermost_op(traces_store):
    sid = source_id(traces_store, "vllm_h100")
    rows = traces_store.sql("""
        SELECT o.name, o.category, k.cpu_link, r.start_ns BETWEEN o.start_ns AND o.end_ns AS inside
        FROM gpu_kernels k
        JOIN runtime_calls r ON r.source_id = k.source_id AND r.event_id = k.launch_event_id
        JOIN cpu_ops o ON o.source_id = k.source_id AND o.event_id = k.cpu_op_event_id
        WHERE k.source_id = ? AND k.cpu_link = 'external_id'""", [sid])
    assert rows.height > 4000
    assert rows["inside"].all()
    assert rows["category"].is_in(["cpu_op", "user_annotation"]).all()
    assert (rows["name"].str.starts_with("aten::") | rows["name"].str.contains("::")).mean() > 0.9


def test_h100_steps_one_prefill_nine_decodes_one_empty(traces_store):
    sid = source_id(traces_store, "vllm_h100")
    st = traces_store.sql("SELECT * FROM steps WHERE source_id = ? ORDER BY step_index", [sid])
    assert st.height == 11
    assert (st["marker"] == "vllm_execute_model").all()
    cpu_ms = (st["cpu_dur_ns"] / 1e6).to_list()
    assert 85 < cpu_ms[0] < 95
    assert all(18 <= d <= 20.5 for d in cpu_ms[1:10])
    assert st["kernel_count"][10] == 0 and st["gpu_start_ns"][10] is None
    assert all(k > 1000 for k in st["kernel_count"][:10])
    # The trace has no composition annotation: phase and token counts stay NULL, not guessed.
    assert st["phase"].null_count() == 11 and st["ctx_tokens"].null_count() == 11
    # Decode steps replay piecewise CUDA graphs; the prefill step runs eagerly.
    assert st["graph_launches"][0] == 0 and all(g == 81 for g in st["graph_launches"][1:10])
    busy = (st["gpu_busy_ns"] / 1e6).to_list()
    assert 80 < busy[0] < 90 and all(15 < b < 18 for b in busy[1:10])


def test_mi300x_mixed_step_composition(traces_store):
    sid = source_id(traces_store, "mixed_step_ctx9_gen37")
    st = traces_store.sql("SELECT * FROM steps WHERE source_id = ?", [sid])
    assert st.height == 1
    r = st.row(0, named=True)
    assert (r["ctx_reqs"], r["ctx_tokens"], r["gen_reqs"], r["gen_tokens"], r["total_tokens"]) == (9, 8155, 37, 37, 8192)
    assert r["phase"] == "mixed" and r["annotation_kind"] == "detailed"
    assert (r["ctx_sum_kv"], r["ctx_sum_qkv"], r["gen_sum_kv"]) == (8430, 7671310, 34489)
    assert r["kernel_count"] == 413


def test_b200_single_context_request(traces_store):
    sid = source_id(traces_store, "b200")
    r = traces_store.sql("SELECT * FROM steps WHERE source_id = ?", [sid]).row(0, named=True)
    assert (r["ctx_reqs"], r["ctx_tokens"], r["gen_reqs"], r["phase"]) == (1, 888, 0, "prefill")
    assert r["ctx_sum_qkv"] == 888 * 888


def test_sglang_extend_step(traces_store):
    sid = source_id(traces_store, "sglang_mi300x")
    r = traces_store.sql("SELECT * FROM steps WHERE source_id = ?", [sid]).row(0, named=True)
    assert r["marker"] == "sglang_step" and r["batch_size"] == 15
    assert (r["ctx_reqs"], r["ctx_tokens"], r["phase"]) == (15, 15360, "prefill")


def test_clocks(traces_store):
    meta = traces_store.sql("SELECT s.path, m.* FROM trace_meta m JOIN sources s USING (source_id)")
    by = {p.rsplit("/", 1)[1]: r for p, r in zip(meta["path"], meta.iter_rows(named=True))}
    h100 = by["vllm_h100_tp4_llama_isl1000_osl10_c32.pt.trace.json.gz"]
    assert h100["base_time_ns"] == 1743521598000000000 and h100["ts_mode"] == "relative_to_base"
    assert h100["vendor"] == "nvidia" and h100["rank"] == 0 and h100["world_size"] == 4
    # The trace starts 2025-05-14 04:49:57 UTC (SOURCES.md).
    assert 1747198190 * 10**9 < h100["start_ns"] < 1747198200 * 10**9
    v100 = by["hta_v100_ddp_training_int_ts.json.gz"]
    assert v100["base_time_ns"] is None and v100["ts_mode"] == "epoch_us" and v100["rank"] == 1
    # Integer epoch microseconds convert exactly (a float64 would lose the last digits).
    first = min(e["ts"] for e in _events("hta_v100_ddp_training_int_ts.json.gz") if e.get("ph") == "X")
    assert v100["start_ns"] == first * 1000
    assert by["vllm_mi300x_tp4_llama_isl1000_osl10_c32.pt.trace.json.gz"]["vendor"] == "amd"


def test_rocm_gpu_pid_and_stream_names(traces_store):
    sid = source_id(traces_store, "vllm_mi300x_tp4")
    devices = traces_store.sql("SELECT DISTINCT device FROM gpu_kernels WHERE source_id = ?", [sid]).to_series().to_list()
    assert devices == [6]
    names = traces_store.sql("SELECT value FROM trace_threads WHERE source_id = ? AND kind = 'thread_name' "
                             "AND value LIKE 'stream%'", [sid]).to_series().to_list()
    assert names and all(not v.endswith(" ") for v in names)


def test_cpu_op_depth_and_parent_nest(traces_store):
    sid = source_id(traces_store, "vllm_h100")
    bad = traces_store.sql("""
        SELECT count(*) FROM cpu_ops c JOIN cpu_ops p
          ON p.source_id = c.source_id AND p.event_id = c.parent_event_id
        WHERE c.source_id = ? AND (p.depth <> c.depth - 1 OR p.start_ns > c.start_ns OR p.end_ns < c.end_ns
                                   OR p.tid <> c.tid)""", [sid]).item()
    assert bad == 0
    roots = traces_store.sql("SELECT count(*) FROM cpu_ops WHERE source_id = ? AND depth = 0 "
                             "AND parent_event_id IS NOT NULL", [sid]).item()
    assert roots == 0
    # execute_model windows sit inside the python stack, several frames deep.
    d = traces_store.sql("SELECT min(depth) FROM cpu_ops WHERE source_id = ? AND name LIKE "
                         "'%gpu_model_runner.py(1002): execute_model'", [sid]).item()
    assert d > 3
