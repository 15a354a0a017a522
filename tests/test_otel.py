"""OpenTelemetry spans (OTLP/JSON, the Collector's file exporter) → `requests` → goodput exactly as vLLM defines it.

The spans are made by stallscope/simulate/emit_otel.py from a simulated run (faithful to the format: vLLM's
`llm_request` attributes, 64-bit integers as strings); the truth is the simulator's own per-request times."""
from __future__ import annotations

import json

import numpy as np
import pytest

import stallscope
from stallscope.analyze import Options, analyze, parse_slo
from stallscope.parsers import otel
from stallscope.simulate import emit_otel
from stallscope.simulate.runner import RunSpec, execute


@pytest.fixture(scope="module")
def spans_run(tmp_path_factory):
    run = execute(RunSpec(rate=5.0, duration_s=40.0, incident="long-prompts:count=3,tokens=8192,at=15,spacing=6",
                          seed=5))
    path = tmp_path_factory.mktemp("otel") / "otel_spans.jsonl"
    path.write_bytes(emit_otel.jsonl(run))
    return run, path


def _truth_attainment(run, ttft_ms, tpot_ms):
    out = run.workload.output_len
    ttft = (run.first_token_ns - run.arrival_ns) / 1e9
    tpot = np.where(out > 1, (run.finish_ns - run.first_token_ns) / np.maximum(out - 1, 1) / 1e9, 0.0)
    return float(((ttft <= ttft_ms / 1000) & (tpot <= tpot_ms / 1000)).mean())


def test_sniffs_the_collector_file_exporter_and_nothing_else(spans_run):
    _, path = spans_run
    assert otel.sniff(path.read_bytes()[:65536]) == ("otlp_json_traces", 0.95)
    assert otel.sniff(b'{"status":"success","data":{"resultType":"matrix","result":[]}}') is None


@pytest.mark.parametrize("slo", ["ttft=500ms,tpot=50ms", "ttft=300ms,tpot=45ms", "ttft=2s,tpot=60ms"])
def test_attainment_from_spans_equals_the_truth(spans_run, slo):
    run, path = spans_run
    s = stallscope.open(":memory:")
    r = s.ingest([path])[0]
    assert r.ok and r.format == "otlp_json_traces", r.message
    assert s.sql("SELECT count(*) FROM requests").item() == run.n
    opts = Options(slo=parse_slo(slo), report_views=False)
    doc = analyze(s.con, opts)
    want = _truth_attainment(run, opts.slo.ttft_ms, opts.slo.tpot_ms)
    assert doc["requests"]["total"] == run.n
    assert doc["attainment"] == pytest.approx(want, abs=1e-12)
    assert 0 < want < 1 or slo == "ttft=2s,tpot=60ms"
    assert doc["spans"]["itl_judgeable"] is False and "metrics" not in doc


def test_span_fields_become_the_request_columns(spans_run):
    run, path = spans_run
    s = stallscope.open(":memory:")
    s.ingest([path])
    got = s.sql("SELECT request_id, arrival_ns, first_token_ns, finish_ns, prompt_tokens, output_tokens, queue_ns "
                "FROM requests ORDER BY arrival_ns").rows()
    order = np.argsort(run.arrival_ns, kind="stable")
    i = order[len(order) // 2]
    row = got[len(order) // 2]
    assert row[0] == run.request_ids[i]
    assert row[1] == run.wall(run.arrival_ns[i])
    assert abs(row[2] - run.wall(run.first_token_ns[i])) <= 1  # rebuilt from the double TTFT in seconds
    assert row[3] == run.wall(run.finish_ns[i])
    assert (row[4], row[5]) == (run.workload.prompt_len[i], run.workload.output_len[i])
    assert row[6] >= 0


def test_bad_lines_are_rejected_with_their_line_and_other_spans_skipped(spans_run, tmp_path):
    _, path = spans_run
    lines = path.read_bytes().splitlines()
    other = {"resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {}, "spans": [
        {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "POST /v1/completions", "kind": 2,
         "startTimeUnixNano": "1743523200000000000", "endTimeUnixNano": "1743523201000000000", "attributes": []}]}]}]}
    bad = [lines[0], b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId"', json.dumps(other).encode(),
           b'{"hello": "world"}', lines[1]]
    p = tmp_path / "damaged.jsonl"
    p.write_bytes(b"\n".join(bad) + b"\n")
    s = stallscope.open(":memory:")
    r = s.ingest([p])[0]
    assert r.ok
    rej = s.sql("SELECT line_no, reason FROM rejects ORDER BY line_no").rows()
    assert [x[0] for x in rej] == [2, 4]
    assert "not JSON" in rej[0][1] and "resourceSpans" in rej[1][1]
    n0, n1 = (len(json.loads(x)["resourceSpans"][0]["scopeSpans"][0]["spans"]) for x in (lines[0], lines[1]))
    src = s.sql("SELECT records_parsed, records_skipped, records_rejected FROM sources").row(0)
    assert src == (n0 + n1, 1, 2)


def test_simulate_cli_writes_both_and_analyze_reads_them_together(tmp_path):
    from helpers import cli
    out = tmp_path / "sim"
    r = cli("simulate", "--out", out, "--duration", "20", "--rate", "4", "--metrics", "--otel",
            "--metrics-interval", "5", "--seed", "2")
    assert r.returncode == 0, r.stderr
    db = tmp_path / "s.duckdb"
    r = cli("ingest", out / "prometheus_query_range.json", out / "otel_spans.jsonl", "--db", db)
    assert r.returncode == 0, r.stderr
    r = cli("analyze", "--db", db, "--slo", "ttft=500ms,tpot=50ms", "--json", tmp_path / "a.json")
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "a.json").read_text())
    lo, hi = doc["metrics"]["attainment_bounds"]
    assert lo <= doc["attainment"] <= hi  # the spans' exact attainment lies in the metrics' bounds
    assert doc["spans"]["requests"] == doc["requests"]["total"]
