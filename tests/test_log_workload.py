"""The workload from a 2026-style vLLM server log alone (no benchmark file), against known truth.

The incident is simulated with `--iteration-log` (Received lines without the prompt, one Iteration line per step);
the store gets the server log only. Prompt lengths are rebuilt from the Iteration lines in FCFS admission order,
output lengths from max_tokens checked against the generation counts; the recommended budget is run on the true
engine next to every other budget.
"""
from __future__ import annotations

import numpy as np
import pytest

from helpers import true_goodput
import stallscope
from stallscope.analyze import parse_slo
from stallscope.recommend import Options, log_workload, recommend
from stallscope.simulate import artifacts
from stallscope.simulate.runner import RunSpec, execute

# Truth tests of a recommendation path (the true engine re-run at budgets): the whole suite (make test) runs them,
# the everyday tier does not.
pytestmark = pytest.mark.slow

SPEC = dict(duration_s=60, rate=2.5, prompt_len="2500:0.5", output_len="128:0.4", seed=2, iteration_log=True)


@pytest.fixture(scope="module")
def incident(tmp_path_factory):
    run = execute(RunSpec(**SPEC))
    out = tmp_path_factory.mktemp("log_incident")
    files = artifacts.write_all(run, out, only=("vllm",))
    s = stallscope.open(":memory:")
    s.ingest([files["vllm"]])
    return run, files, s


@pytest.mark.parametrize("text", ["ttft=5s,itl=80ms", "ttft=400ms,itl=1s", "tpot=40ms"])
def test_budget_from_the_log_alone_holds_on_the_true_engine(incident, text):
    run, _, s = incident
    assert s.sql("SELECT count(*) FROM requests WHERE kind = 'client'").item() == 0
    assert s.sql("SELECT count(prompt_tokens) FROM requests").item() == 0
    slo = parse_slo(text)
    rec = recommend(s.con, Options(slo=slo, replays=1))
    assert rec["evidence"] == "iteration_log" and not rec["missing_evidence"], rec["missing_evidence"]
    wb = rec["workload_basis"]
    assert wb["requests"] == len(run.workload) and wb["prompt_lengths"].startswith("Iteration lines, FCFS")
    assert wb["output_lengths"].startswith("max_tokens")
    assert any(n.startswith("workload from the server log alone") and "inferred" in n for n in rec["notes"])
    true = true_goodput(run, {k: v for k, v in slo.as_dict().items() if k in ("ttft_ms", "itl_ms", "tpot_ms")})
    best = max(true, key=true.get)
    assert true[rec["chunk_tokens"]] >= 0.9 * true[best], (text, rec["chunk_tokens"], true)


def test_prompts_rebuilt_from_the_iteration_lines_match_the_truth(incident):
    run, _, s = incident
    wl, basis, why = log_workload.from_iteration_lines(s.con, 2048)
    assert why is None
    truth = run.workload.prompt_len
    assert len(wl.prompt_len) == len(truth) and wl.prompt_len.sum() == pytest.approx(truth.sum(), abs=len(truth))
    exact = wl.prompt_len == truth
    assert exact.mean() == pytest.approx(basis["prompt_lengths_exact_share"], abs=0.02) and exact.mean() > 0.3
    assert np.corrcoef(wl.prompt_len, truth)[0, 1] > 0.9
    assert np.array_equal(wl.output_len, run.workload.output_len)
    # Arrivals: within the second their line is stamped with, in order (the log's stamps carry no year: the
    # store's clock is shifted from the simulator's by whole seconds).
    true_arr = run.wall(run.workload.arrival_ns)
    shift = np.round((wl.arrival_ns[0] - true_arr[0]) / 1e9) * 1e9
    err = np.abs(wl.arrival_ns - true_arr - shift)
    assert (err < 1e9).all() and (np.diff(wl.arrival_ns) >= 0).all()
    # The step that ran each first chunk narrows the second: half the error of spreading through it (77 vs 164 ms).
    stamps = s.sql("SELECT arrival_ns FROM requests WHERE kind = 'server' ORDER BY arrival_ns, request_index")
    spread = log_workload._arrivals(stamps.to_numpy()[:, 0].astype(np.int64))
    assert err.mean() < 0.6 * np.abs(spread - true_arr - shift).mean()


def test_split_context_follows_the_fcfs_budget():
    # Budget 100. Step 0: A (250) starts, cut. Step 1: A continues, cut. Step 2: A ends (50), B (30) whole, C starts
    # (20, cut). Step 3: C ends (40) with 2 decodes, not budget-bound. Step 4: D (60) whole.
    n = [1, 1, 3, 1, 1]
    c = [100, 100, 100, 40, 60]
    g = [0, 0, 0, 2, 3]
    prompt, exact, done = log_workload.split_context(n, c, g, 100, 4)
    assert done == 4 and exact.tolist() == [False, False, False, True]
    # A: 100 + 100 + 100/3; B: 100/3; C: 100/3 + 40; D: 60 (the step with 3 requests is split evenly).
    assert prompt.tolist() == pytest.approx([200 + 100 / 3, 100 / 3, 100 / 3 + 40, 60])
    assert prompt.sum() == pytest.approx(sum(c))


def test_without_the_budget_the_log_alone_names_why(incident):
    _, _, s = incident
    wl, basis, why = log_workload.from_iteration_lines(s.con, None)
    assert wl is None and "max_num_batched_tokens" in why


def test_two_data_parallel_engines_name_why_the_prompts_cannot_be_split(incident, tmp_path):
    """With data parallelism each EngineCore serves part of the requests and the log does not say which: the
    prompts are not assigned, and the recommendation says so (exit 0, no traceback)."""
    _, files, _ = incident
    text = files["vllm"].read_text()
    dp1 = [ln.replace("(EngineCore_DP0 pid=1294)", "(EngineCore_DP1 pid=1295)") for ln in text.splitlines()
           if ln.startswith("(EngineCore_DP0 pid=1294)") and "Iteration(" in ln]
    assert len(dp1) > 1000
    log = tmp_path / "vllm_server.log"
    log.write_text(text + "\n".join(dp1) + "\n")
    s = stallscope.open(":memory:")
    s.ingest([log])
    rec = recommend(s.con, Options(slo=parse_slo("ttft=5s,itl=80ms"), replays=1))
    assert rec["chunk_tokens"] is None
    why = " ".join(rec["missing_evidence"])
    assert "prompts cannot be rebuilt from vLLM's iteration lines" in why and "data parallelism" in why
