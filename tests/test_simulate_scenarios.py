"""The committed scenarios of sample_traces/: layout and size, regeneration from their specs gives the same content,
every artifact ingests through the real parsers with zero rejects, and truth.json holds what each README claims."""
from __future__ import annotations

import gzip
import importlib.util

import numpy as np
import pytest

import stallscope
from conftest import ROOT
from helpers import cli
from stallscope.simulate import truth

pytestmark = pytest.mark.slow

SAMPLES = ROOT / "sample_traces"


def _build_module():
    spec = importlib.util.spec_from_file_location("sample_build", SAMPLES / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


BUILD = _build_module()
NAMES = list(BUILD.SCENARIOS)


def _content(p):
    data = p.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def _artifacts(d):
    return sorted(p for p in d.iterdir() if p.name not in ("README.md", "truth.json"))


def test_the_three_required_scenarios_exist_and_fit_in_5_mb():
    assert {"unchunked-long-prompt-stall", "chunked-2048-healthy", "chunked-8192-tpot-violations"} <= set(NAMES)
    for name in NAMES:
        d = SAMPLES / name
        files = {p.name for p in d.iterdir()}
        assert {"README.md", "truth.json", "trace.pt.trace.json.gz"} <= files, name
        assert any(f.startswith("bench_serve.json") for f in files) and any(f.startswith("vllm_server.log")
                                                                           for f in files), name
        assert sum(p.stat().st_size for p in d.iterdir()) <= 5_000_000, name
        assert "stallscope simulate" in (d / "README.md").read_text()


@pytest.mark.parametrize("name", NAMES)
def test_regenerating_a_scenario_gives_the_committed_content(name, tmp_path):
    written = BUILD.build(name, tmp_path / name)
    for p in written.values():
        assert _content(p) == _content(SAMPLES / name / p.name), p.name
    assert (tmp_path / name / "README.md").read_text() == (SAMPLES / name / "README.md").read_text()


@pytest.mark.parametrize("name", NAMES)
def test_scenario_artifacts_ingest_with_zero_rejects(name):
    s = stallscope.open(":memory:")
    try:
        report = s.ingest(_artifacts(SAMPLES / name))
        assert all(r.status == "ingested" and r.rejected == 0 for r in report), \
            [(r.path, r.status, r.rejected, r.message) for r in report]
        assert {r.parser for r in report} >= {"kineto", "bench_json", "vllm_log", "tgi_log"}
        doc = truth.load(SAMPLES / name / "truth.json")
        assert s.sql("SELECT count(*) FROM steps").item() == doc["summary"]["steps"]
        ids = s.sql("SELECT server_request_id FROM requests WHERE kind = 'client' ORDER BY request_index")
        assert ids.to_series().to_list() == doc["requests"]["request_id"]
    finally:
        s.close()


def test_demo_commands_on_the_unchunked_scenario(tmp_path):
    db = tmp_path / "demo.duckdb"
    r = cli("ingest", *_artifacts(SAMPLES / "unchunked-long-prompt-stall"), "--db", db)
    assert r.returncode == 0, r.stderr
    r = cli("steps", "--db", db, "--limit", "20")
    assert r.returncode == 0 and "vllm_execute_model" in r.stdout


def test_unchunked_truth_shows_the_stall():
    doc = truth.load(SAMPLES / "unchunked-long-prompt-stall" / "truth.json")
    s = doc["summary"]
    sp = doc["spikes"]
    gap = np.asarray(sp["gap_ms"])
    big = gap > 500
    assert big.sum() >= 4 * 60                               # four 8k prefills x ~64 stalled streams
    assert gap[big].min() >= 5 * s["median_decode_gap_ms"]
    assert min(np.asarray(sp["stalled_decodes"])[big]) >= 60
    # the top culprit of every long stall is one of the four 8k prompts
    prompt = np.asarray(doc["requests"]["prompt_tokens"])
    assert (prompt[np.asarray(sp["top_culprit"])[big]] == 8192).all()
    assert s["slo_pass"]["tpot"] == s["requests"] and s["slo_pass"]["itl"] < s["requests"]
    assert s["goodput_lost_rps"] > 0.5


def test_chunked_2048_is_healthy_and_8192_violates_tpot():
    h = truth.load(SAMPLES / "chunked-2048-healthy" / "truth.json")["summary"]
    assert h["good"] == h["requests"] and h["goodput_lost_rps"] == 0 and h["max_gap_ms"] < 200
    assert h["spikes"] > 0                                      # mixed steps still exceed 3x the decode step
    t = truth.load(SAMPLES / "chunked-8192-tpot-violations" / "truth.json")["summary"]
    assert t["slo_pass"]["tpot"] < 0.7 * t["requests"] and t["slo_pass"]["ttft"] == t["requests"]
    assert t["good_counterfactual"] == t["requests"] and t["goodput_lost_rps"] > 0.5
