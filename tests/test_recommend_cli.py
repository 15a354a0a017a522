"""`stallscope recommend` and `analyze --recommend` as a user runs them: the JSON contract of docs/analysis-json.md,
the real fixtures (an answer or the precise missing evidence, exit 0), and one clear line for bad input."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import real
from helpers import cli

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces" / "chunked-2048-healthy"
CONTRACT = {"engine", "setting", "chunk_tokens", "current_chunk_tokens", "policy_observed", "predicted_p99_itl_ms",
            "predicted_mean_tpot_ms", "predicted_p90_ttft_ms", "goodput_rps", "goodput_band_rps", "ttft_cost_ms",
            "placement", "prefill_decode_split", "placement_margin", "goodput_by_chunk", "model", "missing_evidence"}
ROW = {"chunk_tokens", "goodput_rps", "lo", "hi", "p99_itl_ms", "mean_tpot_ms", "p90_ttft_ms"}
MODEL = {"coefficients", "identified", "mape", "p99_coverage", "steps_used"}
COEFS = {"fixed_ms", "per_decode_seq_ms", "per_kv_token_ms", "per_prefill_token_ms", "per_attention_unit_ms"}


@pytest.fixture(scope="module")
def sample_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("rec") / "s.duckdb"
    r = cli("ingest", SAMPLE / "trace.pt.trace.json.gz", SAMPLE / "bench_serve.json.gz", SAMPLE / "vllm_server.log.gz",
            "--db", db)
    assert r.returncode == 0, r.stderr
    return db


def _check_contract(rec: dict):
    assert CONTRACT <= set(rec), CONTRACT - set(rec)
    assert rec["engine"] == "vllm" and rec["current_chunk_tokens"] == 2048 and rec["policy_observed"] == "chunked"
    assert rec["setting"].startswith("--max-num-batched-tokens ")
    assert int(rec["setting"].split()[1]) == rec["chunk_tokens"]
    rows = rec["goodput_by_chunk"]
    assert rows and all(ROW <= set(r) for r in rows)
    assert rec["chunk_tokens"] in [r["chunk_tokens"] for r in rows]
    assert rows[-1]["chunk_tokens"] is None                     # the unchunked policy is replayed too
    lo, hi = rec["goodput_band_rps"]
    assert lo <= rec["goodput_rps"] <= hi
    best = max(r["goodput_rps"] for r in rows)
    assert rec["goodput_rps"] >= best - (hi - lo) - 0.02 * best
    assert rec["placement"] in ("aggregated", "disaggregated") and len(rec["prefill_decode_split"]) == 2
    m = rec["model"]
    assert MODEL <= set(m) and set(m["coefficients"]) == COEFS and set(m["identified"]) == COEFS
    assert m["mape"] < 0.05 and 0.97 <= m["p99_coverage"] <= 1.0
    assert rec["missing_evidence"] == []


def test_recommend_command_answers_with_evidence(sample_db, tmp_path):
    out = tmp_path / "rec.json"
    r = cli("recommend", "--db", sample_db, "--slo", "ttft=1s,itl=60ms", "--replays", "2", "--json", out)
    assert r.returncode == 0, r.stderr
    rec = json.loads(out.read_text())
    _check_contract(rec)
    # The sample's healthy 2048 budget lets 8k prompts stall past a 60 ms ITL SLO; the replay says: chunk smaller.
    assert rec["chunk_tokens"] is not None and rec["chunk_tokens"] < 2048
    assert "replayed goodput by budget" in r.stdout and f"--max-num-batched-tokens {rec['chunk_tokens']}" in r.stdout


def test_analyze_recommend_adds_the_same_object(sample_db, tmp_path):
    out = tmp_path / "a.json"
    r = cli("analyze", "--db", sample_db, "--slo", "ttft=1s,itl=60ms", "--recommend", "--json", out)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["schema"] == "stallscope.analysis/1" and "spikes" in doc
    _check_contract(doc["recommendation"])
    assert "recommendation: --max-num-batched-tokens" in r.stdout
    r2 = cli("analyze", "--db", sample_db, "--slo", "ttft=1s", "--json", tmp_path / "b.json")
    assert "recommendation" not in json.loads((tmp_path / "b.json").read_text())


def test_real_h100_trace_alone_names_the_missing_evidence():
    r = cli("recommend", real("traces/vllm_h100_tp4_llama_isl1000_osl10_c32.pt.trace.json.gz"), "--slo",
            "ttft=1s,itl=100ms")
    assert r.returncode == 0, r.stderr
    assert "missing evidence" in r.stdout and "batch composition" in r.stdout and "the workload" in r.stdout


def test_real_083_log_and_benchmarks_name_the_missing_evidence(tmp_path):
    files = [real("vllm/v0_0.8.3_ray_tp4pp2_llama70b_full_server_log_800req_llmk8s.log")]
    files += sorted(real("vllm").glob("bench_serving_0.8.3_*.json"))
    out = tmp_path / "r.json"
    r = cli("recommend", *files, "--slo", "ttft=2s,tpot=100ms", "--json", out)
    assert r.returncode == 0, r.stderr
    rec = json.loads(out.read_text())
    assert rec["setting"] is None and any("engine steps" in m for m in rec["missing_evidence"])
    # The log says "Chunked prefill is enabled with max_num_batched_tokens=2048" (V0 with chunking).
    assert rec["policy_observed"] == "chunked" and rec["current_chunk_tokens"] == 2048


@pytest.mark.parametrize("name, policy, current, flag", [
    ("unchunked-long-prompt-stall", "prefill_first", None, "--enable-chunked-prefill --max-num-batched-tokens "),
    ("chunked-8192-tpot-violations", "chunked", 8192, "--max-num-batched-tokens ")])
def test_a_whole_sample_is_answered_in_its_own_engines_flags(name, policy, current, flag, tmp_path):
    """Each sample directory also holds a TGI router log of the same requests: the answer is still vLLM's (the
    trace's steps and the vLLM log are vLLM's), with the policy the steps show (prefill-only steps between decode
    steps: prefill-first; mixed steps: chunked) and the budget of the vLLM log, not TGI's words."""
    out = tmp_path / "r.json"
    r = cli("recommend", ROOT / "sample_traces" / name, "--slo", "ttft=2s,tpot=50ms,itl=200ms", "--replays", "1",
            "--json", out)
    assert r.returncode == 0, r.stderr
    rec = json.loads(out.read_text())
    assert rec["engine"] == "vllm" and rec["policy_observed"] == policy and rec["current_chunk_tokens"] == current
    assert rec["setting"].startswith(flag) and "(tgi)" not in r.stdout, rec["setting"]


def _one_line_error(r, text):
    assert r.returncode != 0
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and text in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_bad_input_gets_one_clear_line(tmp_path):
    import stallscope

    _one_line_error(cli("recommend", SAMPLE / "bench_serve.json.gz"), "no latency term")
    _one_line_error(cli("recommend", SAMPLE / "bench_serve.json.gz", "--slo", "attainment=0.9"), "bad SLO")
    empty = tmp_path / "empty.duckdb"
    stallscope.open(empty).close()
    _one_line_error(cli("recommend", "--db", empty, "--slo", "ttft=1s"), "the store is empty")
    # Requests but no steps: not an error, one line that names what is missing.
    r = cli("recommend", SAMPLE / "bench_serve.json.gz", "--slo", "ttft=1s,itl=60ms")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().count("\n") == 0, r.stdout
    assert r.stdout.startswith("cannot recommend a budget: missing evidence"), r.stdout


def test_the_commands_budget_holds_on_the_true_engine(sample_db, tmp_path):
    """End to end: the budget `recommend` picks from the sample's store, run on the engine the sample was simulated
    with (its true preset, the same replayed workload), is within 5 % of that engine's best budget."""
    import numpy as np

    import stallscope
    from stallscope.recommend import observe, replay
    from stallscope.simulate.stepmodel import get_preset
    from stallscope.simulate.workload import Workload

    out = tmp_path / "rec.json"
    r = cli("recommend", "--db", sample_db, "--slo", "ttft=1s,itl=60ms", "--replays", "1", "--json", out)
    assert r.returncode == 0, r.stderr
    rec = json.loads(out.read_text())
    with stallscope.open(sample_db, read_only=True) as s:
        from stallscope import sqlviews

        sqlviews.install(s.con)
        w = observe.workload(s.con)
    wl = Workload(w.arrival_ns - w.arrival_ns[0], w.prompt_len, w.output_len, np.zeros(len(w.arrival_ns), bool))
    p = get_preset("llama70b-h100-tp4")
    sem = replay.Semantics("chunked", kv_cache_tokens=p.kv_cache_tokens)
    true = {x.chunk_tokens: x.goodput_rps for x in replay.sweep([p], sem, wl, {"ttft_ms": 1000, "itl_ms": 60},
                                                                  replay.grid(sem, wl), seed=5)}
    assert true[rec["chunk_tokens"]] >= 0.95 * max(true.values()), (rec["chunk_tokens"], true)
