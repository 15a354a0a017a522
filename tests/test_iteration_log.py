"""vLLM per-step `Iteration(i): …` lines into engine_steps: prefixes, sequences, rejects, dummies, placement.

No public log carries these lines yet: every sample here is built from the source format (vllm/v1/engine/core.py
`EngineCore.log_iteration_details`, vllm/v1/utils.py `compute_iteration_details`; see
../shared/notes/production-evidence.md §1) inside the envelopes of real EngineCore lines.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import stallscope
from stallscope.parsers import Options
from stallscope.parsers.vllm_steps import NS_PER_S, place

HEAD = ("(APIServer pid=101) INFO 12-09 14:39:50 [api_server.py:1805] vLLM API server version 0.12.0\n"
        "(APIServer pid=101) INFO 12-09 14:39:50 [utils.py:326] non-default args: {'model': 'm', "
        "'enable_logging_iteration_details': True}\n")


def _it(prefix: str, hms: str, i: int, ctx=(0, 0), gen=(3, 3), ms="20.00", dummy=False) -> str:
    return (f"{prefix}INFO 12-09 {hms} [core.py:457] Iteration({i}): {ctx[0]} context requests, {ctx[1]} context "
            f"tokens, {gen[0]} generation requests, {gen[1]} generation tokens, iteration elapsed time: {ms} ms"
            + (" (dummy)" if dummy else "") + "\n")


def _ingest(tmp_path: Path, text: str):
    p = tmp_path / "server.log"
    p.write_text(HEAD + text)
    s = stallscope.open(":memory:")
    r = s.ingest([p], options=Options(year=2025))[0]
    assert r.status == "ingested", r.message
    return s


def test_every_prefix_gives_its_own_sequence_with_rank_and_pid(tmp_path):
    text = (_it("(EngineCore_DP0 pid=2415) ", "14:40:01", 0) + _it("(EngineCore_DP1 pid=2416) ", "14:40:01", 0)
            + _it("(EngineCore_DP0 pid=2415) ", "14:40:01", 1) + _it("(EngineCore_DP1 pid=2416) ", "14:40:01", 1,
                                                                       dummy=True, gen=(0, 0), ms="0.05")
            + _it("(EngineCore pid=395145) ", "14:40:02", 0) + _it("", "14:40:02", 0, ctx=(1, 512), gen=(0, 0)))
    s = _ingest(tmp_path, text)
    rows = s.sql("""SELECT engine_core, dp_rank, pid, sequence, count(*) AS n, sum(dummy::INT) AS dummies
                    FROM engine_steps GROUP BY ALL ORDER BY engine_core NULLS LAST, dp_rank""").rows()
    assert rows == [("EngineCore", None, 395145, 0, 1, 0), ("EngineCore_DP0", 0, 2415, 0, 2, 0),
                    ("EngineCore_DP1", 1, 2416, 0, 2, 1), (None, None, None, 0, 1, 0)]
    # Iteration lines are steps, not log messages.
    assert s.sql("SELECT count(*) FROM log_events WHERE message LIKE 'Iteration(%'").item() == 0
    one = s.sql("SELECT ctx_reqs, ctx_tokens, gen_reqs, gen_tokens, elapsed_ms FROM engine_steps "
                "WHERE engine_core IS NULL").row(0)
    assert one == (1, 512, 0, 0, 20.0)


def test_a_counter_restart_starts_a_new_sequence(tmp_path):
    p = "(EngineCore_DP0 pid=7) "
    text = "".join(_it(p, "14:40:01", i) for i in range(5)) + "".join(_it(p, "14:40:09", i) for i in range(3))
    s = _ingest(tmp_path, text)
    assert s.sql("SELECT sequence, min(iteration), max(iteration), count(*) FROM engine_steps GROUP BY 1 "
                 "ORDER BY 1").rows() == [(0, 0, 4, 5), (1, 0, 2, 3)]


def test_bad_iteration_lines_become_rejects_with_line_numbers(tmp_path):
    p = "(EngineCore_DP0 pid=7) "
    good = [_it(p, "14:40:01", i) for i in range(4)]
    bad = [p + "INFO 12-09 14:40:01 [core.py:457] Iteration(4): 2 context requests, iteration elapsed time: 5.00 ms\n",
           _it(p, "14:40:01", 5, ms="-3.10"), _it(p, "14:40:01", 6, ms="nan"), _it(p, "14:40:01", 7, ms="inf")]
    s = _ingest(tmp_path, "".join(good + bad))
    first = HEAD.count("\n") + len(good) + 1
    rej = s.sql("SELECT line_no, reason FROM rejects ORDER BY line_no").rows()
    assert [r[0] for r in rej] == list(range(first, first + 4))
    assert "missing or malformed" in rej[0][1] and "negative" in rej[1][1]
    assert "not a finite number" in rej[2][1] and "not a finite number" in rej[3][1]
    assert s.sql("SELECT count(*), count(DISTINCT sequence) FROM engine_steps").row(0) == (4, 1)
    src = s.sql("SELECT records_rejected, records_parsed FROM sources").row(0)
    assert src == (4, HEAD.count("\n") + 4)


def test_steps_are_placed_inside_their_seconds_and_pinned_by_second_edges(tmp_path):
    """Ten 300-ms steps back to back from 14:40:00.5: true ends .8, 1.1, …, 3.5 s. Every placed end lies in its
    stamped second and within its bounds; the edges pin the chain to within a step."""
    p = "(EngineCore_DP0 pid=7) "
    ends = 0.5 + 0.3 * np.arange(1, 11)
    text = "".join(_it(p, f"14:40:{int(t):02d}", i, ms="300.00") for i, t in enumerate(ends))
    s = _ingest(tmp_path, text)
    got = s.sql("SELECT stamp_ns, start_ns, end_ns, end_lo_ns, end_hi_ns FROM engine_steps ORDER BY iteration"
                ).to_numpy().T
    got = dict(zip(("stamp_ns", "start_ns", "end_ns", "end_lo_ns", "end_hi_ns"), got))
    base = int(got["stamp_ns"][0])  # 14:40:00
    truth = base + np.rint(ends * NS_PER_S).astype(np.int64)
    assert (got["end_ns"] >= got["stamp_ns"]).all() and (got["end_ns"] < got["stamp_ns"] + NS_PER_S).all()
    assert (truth >= got["end_lo_ns"]).all() and (truth <= got["end_hi_ns"]).all()
    assert np.abs(got["end_ns"] - truth)[1:].max() <= 300_000_000
    assert (got["end_ns"] - got["start_ns"] == 300_000_000).all()
    assert (np.diff(got["end_ns"]) >= 300_000_000).all()  # each step keeps its own elapsed time


def test_placement_bounds_hold_for_any_gaps_and_tighten_with_busy_seconds():
    rng = np.random.default_rng(3)
    e = rng.uniform(5e6, 60e6, 4000).astype(np.int64)
    g = rng.uniform(0.2e6, 0.6e6, 4000).astype(np.int64)
    g[rng.integers(0, 4000, 20)] += 2 * NS_PER_S  # idle stretches
    ends = 10 * NS_PER_S + np.cumsum(e + g)
    stamp = ends // NS_PER_S * NS_PER_S
    lo, hi = place(np.zeros(4000, np.int64), stamp, e, np.zeros(4000, np.int64))
    assert (lo <= ends).all() and (ends <= hi).all()
    assert np.median(hi - lo) < 0.1 * NS_PER_S


@pytest.mark.parametrize("seed", [1])
def test_simulated_iteration_log_places_steps_near_the_truth(tmp_path, seed):
    from stallscope.simulate import artifacts
    from stallscope.simulate.runner import RunSpec, execute

    run = execute(RunSpec(duration_s=30, rate=3, seed=seed, iteration_log=True))
    written = artifacts.write_all(run, tmp_path, only=("vllm",))
    text = written["vllm"].read_text()
    assert "enable_logging_iteration_details=True" in text and "[logger.py:49] Received request" in text
    assert "prompt_token_ids" not in text
    s = stallscope.open(":memory:")
    assert s.ingest([written["vllm"]], options=Options(year=2025))[0].status == "ingested"
    got = s.sql("SELECT iteration, end_ns, end_lo_ns, end_hi_ns, ctx_tokens, gen_reqs, elapsed_ms FROM engine_steps "
                "ORDER BY iteration")
    got = {k: got[k].to_numpy() for k in got.columns}
    sim = run.sim
    truth = run.wall(sim.end_ns)
    assert len(got["iteration"]) == len(truth)
    assert (got["ctx_tokens"] == sim.prefill_tokens).all() and (got["gen_reqs"] == sim.n_decode).all()
    assert np.allclose(got["elapsed_ms"], (sim.end_ns - sim.start_ns) / 1e6, atol=0.006)
    assert ((truth >= got["end_lo_ns"]) & (truth <= got["end_hi_ns"])).all()
    err = np.abs(got["end_ns"] - truth)
    assert np.quantile(err, 0.5) < 10e6 and np.quantile(err, 0.9) < 25e6


def test_simulated_iteration_log_is_deterministic_and_off_by_default(tmp_path):
    from stallscope.simulate import emit_logs
    from stallscope.simulate.runner import RunSpec, execute

    spec = dict(duration_s=5, rate=2, seed=4)
    a = emit_logs.vllm_v1(execute(RunSpec(**spec, iteration_log=True)))
    assert a == emit_logs.vllm_v1(execute(RunSpec(**spec, iteration_log=True)))
    plain = emit_logs.vllm_v1(execute(RunSpec(**spec)))
    assert b"Iteration(" not in plain and b"prompt_token_ids" in plain and b"EngineCore_0 pid=" in plain
    assert a.count(b"] Iteration(") == len(execute(RunSpec(**spec)).sim.end_ns)
    assert "iteration_log" not in RunSpec(**spec).to_dict()  # runs without it keep their truth.json bytes
