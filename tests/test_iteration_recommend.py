"""Recommending the chunk budget from vLLM's per-step Iteration lines (no profiler trace), against known truth.

The incident is simulated with `--iteration-log` (a 2026-style vLLM log: one Iteration line per engine step, Received
lines without the prompt) plus its benchmark file; the store gets those two files only. The recommended budget is
then run on the true engine (the simulator's own preset and the true workload) next to every other budget.
"""
from __future__ import annotations

import json

import pytest

from helpers import true_goodput
import stallscope
from stallscope.analyze import parse_slo
from stallscope.recommend import Options, recommend
from stallscope.simulate import artifacts
from stallscope.simulate.runner import RunSpec, execute

pytestmark = pytest.mark.slow

# Long prompts under load: a tight ITL wants small budgets, a tight TTFT large ones (the optima differ; see below).
SPEC = dict(duration_s=60, rate=2.5, prompt_len="2500:0.5", output_len="128:0.4", seed=2, iteration_log=True)


@pytest.fixture(scope="module")
def incident(tmp_path_factory):
    run = execute(RunSpec(**SPEC))
    out = tmp_path_factory.mktemp("iteration_incident")
    return run, artifacts.write_all(run, out, only=("vllm", "bench", "trace"))


def test_budget_from_iteration_lines_holds_on_the_true_engine(incident):
    run, files = incident
    s = stallscope.open(":memory:")
    s.ingest([files["vllm"], files["bench"]])
    assert s.sql("SELECT count(*) FROM steps").item() == 0
    clock = s.sql("SELECT clock_method FROM sources WHERE parser = 'bench_json'").item()
    assert clock == "matched_iteration_steps"
    optima = set()
    for text in ("ttft=5s,itl=80ms", "ttft=400ms,itl=1s"):
        slo = parse_slo(text)
        rec = recommend(s.con, Options(slo=slo, replays=1))
        assert rec["evidence"] == "iteration_log" and rec["evidence_steps"] > 1000, rec.get("missing_evidence")
        assert rec["model"]["composition_basis"] == {"iteration_line": rec["model"]["composition_basis"][
            "iteration_line"]}
        true = true_goodput(run, {k: v for k, v in slo.as_dict().items() if k in ("ttft_ms", "itl_ms")})
        best = max(true, key=true.get)
        optima.add(best)
        assert true[rec["chunk_tokens"]] >= 0.95 * true[best], (text, rec["chunk_tokens"], true)
        lo, hi = rec["goodput_band_rps"]
        assert lo <= rec["goodput_rps"] <= hi
    assert len(optima) == 2, optima  # the two SLOs really ask for different budgets


def test_a_trace_outranks_the_iteration_lines(incident, tmp_path):
    _, files = incident
    s = stallscope.open(":memory:")
    s.ingest([files["vllm"], files["bench"], files["trace"]])
    rec = recommend(s.con, Options(slo=parse_slo("ttft=5s,itl=80ms"), replays=1))
    assert rec["evidence"] == "trace", rec.get("missing_evidence")
    assert "iteration_line" not in rec["model"]["composition_basis"]


def test_evidence_is_in_the_cli_json(incident, tmp_path):
    from typer.testing import CliRunner

    from stallscope.cli import app

    _, files = incident
    out = tmp_path / "rec.json"
    r = CliRunner().invoke(app, ["recommend", str(files["vllm"]), str(files["bench"]), "--db",
                                 str(tmp_path / "s.duckdb"), "--slo", "tpot=40ms", "--replays", "1", "--json",
                                 str(out)])
    assert r.exit_code == 0, r.output
    rec = json.loads(out.read_text())
    assert rec["evidence"] == "iteration_log" and rec["evidence_steps"] > 1000
    assert rec["chunk_tokens"] is not None


def test_the_report_says_which_step_evidence_was_used():
    from stallscope.report.build import _recommendation
    from stallscope.report.page import Para, to_markdown

    img = {"step_time": Para(["(figure)"]), "chunk_goodput": Para(["(figure)"])}
    for evidence, words in (("iteration_log", "vLLM's per-step Iteration log lines"), ("trace", "profiler trace")):
        blocks: list = []
        _recommendation({"recommendation": {"setting": "--max-num-batched-tokens 512", "engine": "vllm",
                                            "chunk_tokens": 512, "evidence": evidence, "evidence_steps": 1735}},
                        blocks, img)
        md = to_markdown(blocks)
        assert "Step evidence: " in md and words in md and "1,735 steps fitted" in md, md
