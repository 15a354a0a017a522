"""`stallscope export perfetto`: Chrome-trace JSON that keeps the original timeline and adds the analysis's
gap, spike and prefill-chunk tracks, on the real H100 trace and on a bundled incident."""
from __future__ import annotations

import collections
import gzip

import orjson
import pytest
from conftest import real
from reportkit import SLO, run_ok, unchunked_db, workdir

import stallscope
from stallscope.analyze import Options, analyze, parse_slo

pytestmark = pytest.mark.slow

ADDED = {"stallscope: decode gaps": "stallscope_gap", "stallscope: spikes": "stallscope_spike",
         "stallscope: prefill chunks": "stallscope_chunk"}


def _load(path):
    data = path.read_bytes()
    return orjson.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)


def _names(events):
    procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    return procs, threads


def _check_chrome_trace(doc):
    """The shape chrome://tracing and Perfetto's JSON importer need, and added slices that nest on every thread
    (the original kernels are kept as recorded: on Hopper a kernel can start before the previous one on its stream
    ends, programmatic dependent launch, and the real trace shows it)."""
    assert isinstance(doc["traceEvents"], list) and doc["displayTimeUnit"] in ("ms", "ns")
    by_thread = collections.defaultdict(list)
    for e in doc["traceEvents"]:
        assert e["ph"] in ("X", "M") and isinstance(e["pid"], int) and isinstance(e["tid"], int), e
        assert isinstance(e["name"], str) and isinstance(e["args"], dict)
        if e["ph"] == "X":
            assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0 and e["dur"] >= 0, e
            if e["cat"].startswith("stallscope"):
                by_thread[(e["pid"], e["tid"])].append((e["ts"], e["dur"]))
    for key, spans in by_thread.items():
        stack = []
        for ts, dur in sorted(spans, key=lambda x: (x[0], -x[1])):
            while stack and stack[-1] <= ts + 1e-3:
                stack.pop()
            assert not stack or ts + dur <= stack[-1] + 1e-3, (key, ts, dur, stack[-1])
            stack.append(ts + dur)


def test_h100_trace_export_keeps_every_kernel_and_adds_the_tracks(tmp_path):
    src = real("traces/vllm_h100_tp4_llama_isl1000_osl10_c32.pt.trace.json.gz")
    out = tmp_path / "h100.json.gz"
    r = run_ok("export", "perfetto", out, src)
    assert "ui.perfetto.dev" in r.stdout
    doc = _load(out)
    _check_chrome_trace(doc)
    ev = doc["traceEvents"]
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    original = [e for e in _load(src)["traceEvents"] if e.get("cat") in ("kernel", "Kernel") and e.get("ph") == "X"]
    assert len(kernels) == len(original) == 13508
    assert collections.Counter(e["name"] for e in kernels) == collections.Counter(e["name"] for e in original)
    # durations survive to the nanosecond; start times keep their spacing on the shifted clock
    assert sorted(round(e["dur"] * 1000) for e in kernels) == sorted(round(e["dur"] * 1000) for e in original)
    first = min(e["ts"] for e in original)
    assert sorted(round((e["ts"] - first) * 1000) for e in original)[:50] == \
        sorted(round((e["ts"] - min(k["ts"] for k in kernels)) * 1000) for e in kernels)[:50]
    procs, threads = _names(ev)
    for proc, cat in ADDED.items():
        pid = next(p for p, n in procs.items() if n == proc)
        assert any(e["pid"] == pid and e.get("cat") == cat for e in ev), proc
    assert any(n.startswith("engine step gaps ") for n in threads.values())
    assert any(n.startswith("engine step spikes ") for n in threads.values())
    spike = next(e for e in ev if e.get("cat") == "stallscope_spike")
    assert spike["name"].startswith("spike ") and spike["args"]["level"] == "step"
    assert spike["args"]["gap_ms"] > 3 * spike["args"]["baseline_ms"]
    assert sum(1 for e in ev if e.get("cat") == "stallscope_step") == 11
    assert any(e.get("cat") == "cpu_op" for e in ev) and any(e.get("cat") == "cuda_runtime" for e in ev)
    assert doc["otherData"]["stallscope_origin_ns"] > 1.7e18


@pytest.fixture(scope="module")
def sample_export():
    out = workdir() / "unchunked-perfetto.json"
    run_ok("export", "perfetto", "--db", unchunked_db(), "--slo", SLO, out)
    s = stallscope.open(unchunked_db(), read_only=True)
    a = analyze(s.con, Options(slo=parse_slo(SLO)))
    gaps = s.sql("SELECT count(*) FROM client_gaps").item()
    requests = s.sql("SELECT count(*) FROM requests WHERE kind = 'client'").item()
    s.close()
    return _load(out), a, gaps, requests


def test_bundled_sample_export_has_the_named_tracks(sample_export):
    doc, a, gaps, requests = sample_export
    _check_chrome_trace(doc)
    ev = doc["traceEvents"]
    procs, threads = _names(ev)
    assert set(ADDED) <= set(procs.values())
    pid = {n: p for p, n in procs.items()}
    cats = collections.Counter(e.get("cat") for e in ev)
    assert cats["stallscope_gap"] == gaps and cats["stallscope_spike"] == len(a["spikes"])
    # one thread per request on the gap track, named by its server id
    gap_threads = [n for (p, _), n in threads.items() if p == pid["stallscope: decode gaps"]]
    assert len(gap_threads) == requests and all(n.startswith("request cmpl-") for n in gap_threads)
    # the long stalls: spike slices whose top culprit is an 8k-token prompt, with the culprit list in args
    big = [e for e in ev if e.get("cat") == "stallscope_spike" and e["args"]["gap_ms"] > 600]
    assert len(big) >= 4 * 60
    assert all(e["args"]["culprits"] and e["args"]["culprits"][0]["prompt_tokens"] == 8192 for e in big)
    assert all(e["args"]["evidence"] == "kernels" and e["args"]["share"] > 0.9 for e in big)
    chunks = [e for e in ev if e.get("cat") == "stallscope_chunk" and e["pid"] == pid["stallscope: prefill chunks"]]
    assert sum(1 for e in chunks if e["args"].get("tokens") == 8192) == 4
    assert any(n.startswith("prefill steps ") for n in threads.values())
    assert cats["kernel"] > 0 and cats["stallscope_step"] > 0
