"""Artifacts of `stallscope simulate`, read back by stallscope's real parsers: zero rejects for every file and
policy, the parsed values equal the simulator's truth, Kineto envelope and kernel names as in the real H100 trace,
the benchmark JSON reproduces vLLM's own metrics, byte-identical output for the same seed."""
from __future__ import annotations

import gzip
import json
import re

import numpy as np
import orjson
import polars as pl
import pytest

import stallscope
from stallscope import sqlviews
from conftest import real
from helpers import cli
from stallscope.simulate import artifacts, emit_logs, truth
from stallscope.simulate.runner import RunSpec, execute, parse_slo

PARSER_FOR = {"trace": "kineto", "bench": "bench_json", "vllm": "vllm_log", "tgi": "tgi_log", "sglang": "sglang_log"}

CASES = {
    "chunked-fa3": dict(policy="chunked", budget=2048),
    "v0": dict(policy="v0", budget=16384),
    "sglang": dict(policy="sglang", budget=2048),
    "chunked-flashinfer-detailed": dict(policy="chunked", budget=1024, attention_backend="flashinfer",
                                        trace_annotation="detailed", trace_layers=2),
}


def _spec(**kw) -> RunSpec:
    base = dict(rate=3.0, duration_s=15.0, prompt_len="500:0.6", output_len="200:0.4",
                incident="long-prompts:count=2,tokens=8192,at=5,spacing=2", seed=21,
                slo=parse_slo("ttft=2s,tpot=40ms,itl=200ms"))
    base.update(kw)
    return RunSpec(**base)


@pytest.fixture(scope="module", params=list(CASES))
def ingested(request, tmp_path_factory):
    name = request.param
    run = execute(_spec(**CASES[name]))
    a = truth.Analysis(run)
    out = tmp_path_factory.mktemp(name)
    written = artifacts.write_all(run, out, analysis=a, compress=("vllm",) if name == "v0" else ())
    store = stallscope.open(":memory:")
    files = [p for k, p in written.items() if k != "truth"]
    report = store.ingest(files)
    yield name, run, a, written, store, report
    store.close()


def test_every_artifact_ingests_with_zero_rejects(ingested):
    name, run, a, written, store, report = ingested
    by_path = {r.path: r for r in report}
    for kind, p in written.items():
        if kind == "truth":
            continue
        r = by_path[str(p.resolve())]
        assert r.status == "ingested", (kind, r.message)
        assert r.parser == PARSER_FOR[kind], (kind, r.parser)
        assert r.rejected == 0, (kind, store.sql("SELECT reason, raw FROM rejects LIMIT 5"))
        assert r.parsed > 0
    assert store.sql("SELECT count(*) FROM rejects").item() == 0
    expected = {"trace", "bench", "tgi", "truth"} | ({"sglang"} if run.spec.policy == "sglang" else {"vllm"})
    assert set(written) == expected


def test_trace_steps_match_the_simulated_steps(ingested):
    name, run, a, written, store, report = ingested
    sim = run.sim
    steps = store.sql("SELECT * FROM steps ORDER BY step_index")
    assert steps.height == sim.n_steps
    # CPU windows are the simulated step windows (execute_model / step[...] annotation)
    cpu_start = steps["cpu_start_ns"].to_numpy()
    wall_start = run.wall(sim.start_ns)
    if run.spec.policy == "sglang":   # the annotation opens 10 us before the step
        assert np.array_equal(cpu_start + 10_000, wall_start)
    else:
        assert np.array_equal(cpu_start, wall_start)
        assert np.array_equal(steps["cpu_end_ns"].to_numpy(), run.wall(sim.end_ns))
    # the GPU work of each step lies inside it
    assert (steps["gpu_start_ns"].to_numpy() >= wall_start).all()
    assert (steps["gpu_end_ns"].to_numpy() <= run.wall(sim.end_ns)).all()
    assert (steps["gpu_busy_ns"].to_numpy() >= 0.95 * steps["gpu_dur_ns"].to_numpy()).all()
    if run.spec.resolved_backend() == "v0-flash":
        assert steps["phase"].null_count() == steps.height   # V0 writes no composition annotation
    else:
        if run.spec.policy == "sglang":
            pf = sim.prefill_tokens > 0
            assert np.array_equal(steps["ctx_tokens"].to_numpy()[pf], sim.prefill_tokens[pf])
            assert (steps["phase"].to_numpy()[~pf] == "decode").all()
        else:
            assert np.array_equal(steps["ctx_tokens"].to_numpy(), sim.prefill_tokens)
            assert np.array_equal(steps["gen_reqs"].to_numpy(), sim.n_decode)
            expect = np.array(["decode", "prefill", "mixed"])[sim.kind]
            assert (steps["phase"].to_numpy() == expect).all()
            if run.spec.trace_annotation == "detailed":
                assert np.array_equal(steps["gen_sum_kv"].to_numpy(), sim.kv_read)
                assert np.allclose(steps["ctx_sum_qkv"].to_numpy(),
                                   np.bincount(sim.ch_step, sim.ch_tokens * (sim.ch_tokens + sim.ch_ctx),
                                               minlength=sim.n_steps))


def test_prefill_attention_kernels_carry_the_attention_work(ingested):
    # Culprit ranking splits a step's attention time by attention work, so the emitted attention kernels must
    # take the model's attention component (they were once 1 ns each, which hid a misranking).
    name, run, a, written, store, report = ingested
    sqlviews.install(store.con)
    attn = store.sql("SELECT prefill_attn_gpu_ns FROM step_phase ORDER BY step_index")["prefill_attn_gpu_ns"]
    pf = run.sim.prefill_tokens > 0
    got = attn.to_numpy()[pf].astype(np.float64)
    assert (got > 10_000).all()
    assert np.corrcoef(got, run.sim.attn_work[pf])[0, 1] > 0.99


def test_trace_launch_links_and_graph_replays(ingested):
    name, run, a, written, store, report = ingested
    k = store.sql("""SELECT count(*) AS n, count(launch_event_id) AS linked, count(step_id) AS in_step,
                            count(*) FILTER (WHERE graph_launch) AS graph,
                            count(*) FILTER (WHERE cpu_link = 'external_id') AS by_ext
                     FROM gpu_kernels""").row(0, named=True)
    assert k["n"] == k["linked"] == k["in_step"]              # every kernel has its launch, inside a step
    if run.spec.policy != "v0":
        assert k["by_ext"] > 0
    # a graph replay starts several kernels under one correlation id
    multi = store.sql("""SELECT count(*) FROM (SELECT correlation FROM gpu_kernels WHERE graph_launch
                         GROUP BY correlation HAVING count(*) > 1)""").item()
    assert multi > 0
    # the step's kernels add up to its GPU time; attention kernels carry the attention part of the model
    assert store.sql("SELECT count(*) FROM gpu_memops WHERE kind = 'memcpy'").item() == run.sim.n_steps


@pytest.mark.slow
def test_fa3_kernel_names_are_those_of_the_real_h100_trace(tmp_path):
    run = execute(_spec(policy="chunked", budget=2048, duration_s=5.0, incident=None))
    d = orjson.loads(gzip.decompress(_trace_bytes(run, tmp_path)))
    ours = {e["name"] for e in d["traceEvents"] if e.get("cat") == "kernel"}
    real_names = {e["name"] for e in orjson.loads(gzip.decompress(
        real("traces/vllm_h100_tp4_llama_isl1000_osl10_c32.pt.trace.json.gz").read_bytes()))["traceEvents"]
        if e.get("cat") == "kernel"}
    assert ours <= real_names, ours - real_names
    ops = {e["name"] for e in d["traceEvents"] if e.get("cat") == "cpu_op"}
    real_ops = {e["name"] for e in orjson.loads(gzip.decompress(
        real("traces/vllm_h100_tp4_llama_isl1000_osl10_c32.pt.trace.json.gz").read_bytes()))["traceEvents"]
        if e.get("cat") == "cpu_op"}
    assert ops <= real_ops | {"aten::argmax"}, ops - real_ops


def _trace_bytes(run, tmp_path) -> bytes:
    p = tmp_path / "t.pt.trace.json.gz"
    from stallscope.simulate import emit_kineto
    emit_kineto.write(run, p)
    return p.read_bytes()


def test_kineto_envelope(tmp_path):
    run = execute(_spec(policy="chunked", budget=2048, duration_s=5.0))
    raw = gzip.decompress(_trace_bytes(run, tmp_path))
    d = orjson.loads(raw)
    assert list(d) == ["schemaVersion", "deviceProperties", "cupti_version", "cuda_runtime_version",
                       "cuda_driver_version", "distributedInfo", "with_stack", "trace_id", "traceEvents", "traceName",
                       "displayTimeUnit", "baseTimeNanoseconds"]
    base = d["baseTimeNanoseconds"]
    assert base % (7_889_238 * 10 ** 9) == 0 and base <= run.epoch_start_ns
    assert d["distributedInfo"]["world_size"] == 4 and len(d["deviceProperties"]) == 8
    # ts / dur are written "<us>.<ns:03>" and are relative to the base
    assert re.findall(rb'"ts": (\d+\.\d{3}),', raw[:200_000])
    assert not re.search(rb'"ts": \d+(?:\.\d{1,2}|\.\d{4,})?[,\n]', raw)
    ev = d["traceEvents"]
    phs = {(e["ph"], e.get("cat")) for e in ev}
    for want in [("X", "kernel"), ("X", "cuda_runtime"), ("X", "cpu_op"),
                 ("X", "python_function"), ("X", "user_annotation"), ("X", "gpu_user_annotation"),
                 ("X", "gpu_memcpy"), ("s", "ac2g"), ("f", "ac2g"), ("M", None), ("i", None)]:
        assert want in phs, want
    win = [e for e in ev if e.get("cat") == "python_function" and e["name"].endswith(": execute_model")
           and "gpu_model_runner" in e["name"]]
    assert len(win) == run.sim.n_steps
    first = min(e["ts"] for e in win)
    assert base + round(first * 1000) == run.wall(run.sim.start_ns[0])
    ann = [e["name"] for e in ev if e.get("cat") == "user_annotation"]
    assert all(re.fullmatch(r"execute_context_\d+\(\d+\)_generation_\d+\(\d+\)", n) for n in ann)
    threads = {(e["pid"], e["tid"], e["args"].get("name")) for e in ev if e.get("name") == "thread_name"}
    assert (0, 7, "stream 7 ") in threads
    # flows: one start per launch, one end per GPU activity, ids = correlation ids
    s_ids = [e["id"] for e in ev if e["ph"] == "s"]
    rt = [e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    assert sorted(s_ids) == sorted(e["args"]["correlation"] for e in rt)
    graph = [e for e in rt if e["name"] == "cudaGraphLaunch"]
    assert graph and all("External id" not in e["args"] for e in graph)


@pytest.mark.slow
def test_same_seed_gives_byte_identical_artifacts(tmp_path):
    args = ["simulate", "--policy", "chunked", "--budget", "1024", "--rate", "3", "--duration", "8",
            "--incident", "long-prompts:count=1,at=3", "--slo", "ttft=1s,itl=150ms", "--gzip", "tgi"]
    outs = []
    for i, seed in enumerate(("5", "5", "6")):
        out = tmp_path / f"run{i}"
        r = cli(*args, "--seed", seed, "--out", out)
        assert r.returncode == 0, r.stderr
        outs.append(out)
    names = sorted(p.name for p in outs[0].iterdir())
    assert names == ["bench_serve.json", "tgi_router.log.gz", "trace.pt.trace.json.gz", "truth.json",
                     "vllm_server.log"]
    for n in names:
        assert (outs[0] / n).read_bytes() == (outs[1] / n).read_bytes(), n
        assert (outs[0] / n).read_bytes() != (outs[2] / n).read_bytes(), n


def test_no_wall_clock_or_host_leaks(tmp_path):
    """Nothing of the machine that ran the simulation ends up in the artifacts."""
    import os
    import socket

    run = execute(_spec(policy="chunked", budget=2048, duration_s=4.0))
    written = artifacts.write_all(run, tmp_path)
    host = socket.gethostname().encode()
    user = os.environ.get("USER", "nobody-here").encode()
    for p in written.values():
        data = p.read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        assert str(tmp_path).encode() not in data
        if len(host) >= 6:  # a short host name ("vm") occurs by chance in the gibberish prompts
            assert host not in data
        assert b"/" + user + b"/" not in data


def test_bench_json_matches_vllms_own_computation(ingested):
    name, run, a, written, store, report = ingested
    d = json.loads(written["bench"].read_bytes())
    keys = list(d)
    assert keys[:10] == ["date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
                         "request_rate", "burstiness", "max_concurrency"]
    for k in ("input_lens", "output_lens", "ttfts", "itls", "start_times", "generated_texts", "errors"):
        assert len(d[k]) == run.n, k
    assert [len(x) for x in d["itls"]] == [o - 1 for o in d["output_lens"]]
    assert re.fullmatch(r"\d{8}-\d{6}", d["date"])
    assert np.all(np.diff(d["start_times"]) > 0)
    # vLLM's calculate_metrics, line by line, on the file
    ttfts, lat = np.array(d["ttfts"]), np.array(d["ttfts"]) + np.array([sum(x) for x in d["itls"]])
    out = np.array(d["output_lens"])
    tpots = np.where(out > 1, (lat - ttfts) / np.maximum(out - 1, 1), 0)
    good = sum(1 for t, p in zip(ttfts, tpots) if 2.0 >= t and 0.040 >= p)
    assert d["request_goodput"] == pytest.approx(good / d["duration"])
    assert d["mean_ttft_ms"] == pytest.approx(np.mean(ttfts) * 1000)
    assert d["p99_itl_ms"] == pytest.approx(np.percentile(np.concatenate([x for x in d["itls"] if x]), 99) * 1000)
    # the same per-request numbers as truth.json
    assert d["ttfts"] == a.ttft_s.tolist()
    assert np.allclose(lat, a.latency_s, atol=1e-9)
    assert d["input_lens"] == run.workload.prompt_len.tolist()
    # and the store's client rows, joined to the server's ids when a server log was ingested
    rq = store.sql("SELECT request_id, server_request_id, prompt_tokens, ttft_ns FROM requests "
                   "WHERE kind = 'client' ORDER BY request_index")
    assert rq["prompt_tokens"].to_list() == run.workload.prompt_len.tolist()
    assert np.allclose(rq["ttft_ns"].to_numpy(), a.ttft_s * 1e9, atol=1)
    if run.spec.policy in ("chunked", "v0"):
        assert rq["server_request_id"].to_list() == run.request_ids


def test_vllm_log_parses_to_the_simulated_requests_and_config(ingested):
    name, run, a, written, store, report = ingested
    if run.spec.policy == "sglang":
        assert "vllm" not in written and store.sql("SELECT count(*) FROM requests WHERE engine = 'vllm'").item() == 0
        return
    rq = store.sql("SELECT request_id, prompt_tokens, max_tokens, arrival_ns, finish_ns FROM requests "
                   "WHERE engine = 'vllm' AND kind = 'server' ORDER BY request_index")
    assert rq["request_id"].to_list() == run.request_ids
    assert rq["prompt_tokens"].to_list() == run.workload.prompt_len.tolist()
    arr = run.wall(run.workload.arrival_ns)
    assert (np.abs(rq["arrival_ns"].to_numpy() - arr) < 1_000_000_000).all()     # 1 s log resolution
    cfg = dict(store.sql("SELECT key, value FROM engine_config WHERE source_id IN "
                         "(SELECT source_id FROM sources WHERE format LIKE 'vllm_log%')").iter_rows())
    assert any(v == str(run.spec.resolved_budget()) for k, v in cfg.items() if "max_num_batched_tokens" in k)
    stats = store.sql("SELECT ts_ns, running_reqs FROM engine_stats ORDER BY ts_ns")
    assert stats.height >= 2
    if run.spec.policy == "v0":
        fin = store.sql("SELECT count(*) FROM request_events WHERE event = 'finished'").item()
        assert fin == run.n


def test_tgi_log_timings_equal_the_simulated_ones(ingested):
    name, run, a, written, store, report = ingested
    rq = store.sql("SELECT max_tokens, inference_ns, queue_ns, finish_ns FROM requests WHERE engine = 'tgi' "
                   "ORDER BY finish_ns")
    first_chunk = np.full(run.n, np.iinfo(np.int64).max)
    np.minimum.at(first_chunk, run.sim.ch_req, run.sim.start_ns[run.sim.ch_step])
    order = np.argsort(rq["finish_ns"].to_numpy())
    expect_inf = np.sort(run.finish_ns - first_chunk)
    assert rq.height == run.n
    assert np.array_equal(np.sort(rq["inference_ns"].to_numpy()), expect_inf)
    assert np.array_equal(np.sort(rq["queue_ns"].to_numpy()), np.sort(first_chunk - run.workload.arrival_ns))
    assert sorted(rq["max_tokens"].to_list()) == sorted(run.workload.output_len.tolist())
    assert len(order) == run.n


def test_sglang_log_batches_equal_the_simulated_forwards(ingested):
    name, run, a, written, store, report = ingested
    if run.spec.policy != "sglang":
        assert "sglang" not in written and store.sql("SELECT count(*) FROM engine_batches").item() == 0
        return
    sim = run.sim
    pf = store.sql("SELECT new_tokens, running_reqs, cached_tokens FROM engine_batches WHERE kind = 'prefill' "
                   "ORDER BY line_no")
    has = sim.prefill_tokens > 0
    assert pf["new_tokens"].to_list() == sim.prefill_tokens[has].tolist()
    assert pf["running_reqs"].to_list() == sim.decoders[has].tolist()
    dec = store.sql("SELECT count(*) FROM engine_batches WHERE kind = 'decode'").item()
    assert dec == int((sim.n_decode > 0).sum()) // 40


@pytest.mark.parametrize("ns,text", [(850, "850ns"), (1_000, "1µs"), (49_382, "49.382µs"), (754_500, "754.5µs"),
                                     (735_200_735, "735.200735ms"), (1_000_000, "1ms"), (2_000_000_000, "2s"),
                                     (4_065_504_959, "4.065504959s")])
def test_rust_duration_debug_format(ns, text):
    got = pl.DataFrame({"d": [ns]}).select(emit_logs._rust_duration(pl.col("d")))[0, 0]
    assert got == text
