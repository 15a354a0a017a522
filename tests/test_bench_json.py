"""The benchmark-result parser on the real vLLM 0.8.3 result files and on variants built from them: counts,
exact values, every key variant (JSON Lines, start_times, failed requests, the itl[0] = TTFT bug), SGLang
output, bad input and record accounting."""
from __future__ import annotations

import datetime as dt
import json
import math

import orjson
import pytest

import stallscope
from stallscope.parsers import InputFile, Options, detect
from conftest import real

FILES = {
    "01": ("bench_serving_0.8.3_llama70b_tp4pp2_sharegpt_qps_01_llmk8s.json", 216.1, 1.0, "20250414-162000"),
    "04": ("bench_serving_0.8.3_llama70b_tp4pp2_sharegpt_qps_04_llmk8s.json", 79.0, 4.0, "20250414-162134"),
    "16": ("bench_serving_0.8.3_llama70b_tp4pp2_sharegpt_qps_16_llmk8s.json", 52.7, 16.0, "20250414-162242"),
    "inf": ("bench_serving_0.8.3_llama70b_tp4pp2_sharegpt_qps_inf_llmk8s.json", 45.6, math.inf, "20250414-162342"),
}


def _path(q: str):
    return real(f"vllm/{FILES[q][0]}")


def _obj(q: str) -> dict:
    return orjson.loads(_path(q).read_bytes())


@pytest.fixture(scope="module")
def bench_store():
    s = stallscope.open(":memory:")
    rep = s.ingest([_path(q) for q in FILES])
    assert all(r.status == "ingested" for r in rep), [r.message for r in rep]
    yield s
    s.close()


def _sid(store, q: str) -> int:
    return store.sql("SELECT source_id FROM sources WHERE path LIKE ?", [f"%{FILES[q][0]}"]).item()


def _cfg(store, sid: int, key: str, origin: str = "bench_summary"):
    return store.sql("SELECT value, value_num FROM engine_config WHERE source_id = ? AND key = ? AND origin = ?",
                     [sid, key, origin]).row(0)


def _write(tmp_path, name: str, obj_or_text) -> str:
    p = tmp_path / name
    p.write_text(obj_or_text if isinstance(obj_or_text, str) else json.dumps(obj_or_text))
    return str(p)


# -- the real files -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("q", list(FILES))
def test_real_file_requests_gaps_and_summary(bench_store, q):
    name, duration, rate, date = FILES[q]
    obj = _obj(q)
    sid = _sid(bench_store, q)
    fmt, parsed, skipped, rejected = bench_store.sql(
        "SELECT format, records_parsed, records_skipped, records_rejected FROM sources WHERE source_id = ?",
        [sid]).row(0)
    assert fmt == "vllm_bench_json"
    # One record per request plus the run object; nothing rejected or skipped in these files.
    assert (parsed, skipped, rejected) == (201, 0, 0)
    n, ok, ids, pt, ot, engines = bench_store.sql("""
        SELECT count(*), count(*) FILTER (WHERE status = 'ok'), count(DISTINCT request_id), sum(prompt_tokens),
               sum(output_tokens), string_agg(DISTINCT engine || '/' || kind) FROM requests WHERE source_id = ?""",
                                                  [sid]).row(0)
    assert (n, ok, ids) == (200, 200, 200)
    assert (pt, ot) == (obj["total_input_tokens"], obj["total_output_tokens"]) == (42659, obj["total_output_tokens"])
    assert engines == "vllm_bench/client"
    # request_id is the send-order index as text.
    first = bench_store.sql("SELECT request_id, prompt_tokens, output_tokens FROM requests WHERE source_id = ? "
                            "AND request_index = 0", [sid]).row(0)
    assert first == ("0", 13, obj["output_lens"][0])
    # token_gaps: one row per ITL entry; every request has output_lens - 1 of them in these files.
    gaps = bench_store.sql("SELECT count(*), count(tokens_in_chunk) FROM token_gaps WHERE source_id = ?", [sid]).row(0)
    assert gaps == (sum(len(x) for x in obj["itls"]), 0)
    off = bench_store.sql("""
        SELECT count(*) FROM requests r LEFT JOIN (SELECT request_id, count(*) AS k FROM token_gaps
                                                   WHERE source_id = ? GROUP BY 1) g USING (request_id)
        WHERE r.source_id = ? AND coalesce(g.k, 0) <> r.output_tokens - 1""", [sid, sid]).item()
    assert off == 0
    # Run summary: duration, rate ("inf" as text in the qps_inf file), the `request_goodput:` key spelling.
    assert round(_cfg(bench_store, sid, "duration")[1], 1) == duration
    value, num = _cfg(bench_store, sid, "request_rate")
    assert num == rate and (value == "inf") == (q == "inf")
    assert _cfg(bench_store, sid, "request_goodput_key")[0] == "request_goodput:"
    assert _cfg(bench_store, sid, "request_goodput") == (None, None)
    assert _cfg(bench_store, sid, "date")[0] == date
    assert _cfg(bench_store, sid, "send_times")[0] == "none"
    assert _cfg(bench_store, sid, "tool")[0] == "vllm_bench_serve"


@pytest.mark.parametrize("q", list(FILES))
def test_stored_times_reproduce_the_files_own_statistics(bench_store, q):
    """TTFT, TPOT ((e2e - ttft)/(out - 1), requests with out > 1) and ITL means equal vLLM's printed ones."""
    obj = _obj(q)
    sid = _sid(bench_store, q)
    ttft, tpot = bench_store.sql("""
        SELECT avg(ttft_ns) / 1e6,
               avg((e2e_latency_ns - ttft_ns) / (output_tokens - 1)) FILTER (WHERE output_tokens > 1) / 1e6
        FROM requests WHERE source_id = ?""", [sid]).row(0)
    itl = bench_store.sql("SELECT avg(gap_ns) / 1e6 FROM token_gaps WHERE source_id = ?", [sid]).item()
    assert ttft == pytest.approx(obj["mean_ttft_ms"], rel=1e-9)
    assert itl == pytest.approx(obj["mean_itl_ms"], rel=1e-9)
    # vLLM measured the latency itself; ttft + sum(itl) differs from it by microseconds per request.
    assert tpot == pytest.approx(obj["mean_tpot_ms"], rel=1e-5)


def test_coarse_clock_without_a_server_log(bench_store):
    sid = _sid(bench_store, "01")
    method, note, first, last, offset = bench_store.sql(
        "SELECT clock_method, clock_note, first_ns, last_ns, clock_offset_ns FROM sources WHERE source_id = ?",
        [sid]).row(0)
    assert method == "bench_date_minus_duration"
    assert "coarse" in note and "zone UTC" in note and "no start_times" in note
    end = int(dt.datetime(2025, 4, 14, 16, 20, 0, tzinfo=dt.timezone.utc).timestamp()) * 10**9 + 500_000_000
    duration_ns = round(_obj("01")["duration"] * 1e9)
    assert first == offset == end - duration_ns
    assert last == end
    # No send times in a 0.8.3 file: per-request instants stay unknown rather than invented.
    known = bench_store.sql("SELECT count(arrival_ns) + count(first_token_ns) + count(finish_ns) FROM requests "
                            "WHERE source_id = ?", [sid]).item()
    assert known == 0
    assert bench_store.sql("SELECT count(end_ns) FROM token_gaps WHERE source_id = ?", [sid]).item() == 0


def test_date_is_read_in_the_given_zone():
    s = stallscope.open(":memory:")
    s.ingest([_path("01")], options=Options(tz="Europe/Berlin"))
    first = s.sql("SELECT first_ns FROM sources").item()
    utc = stallscope.open(":memory:")
    utc.ingest([_path("01")])
    # 16:20:00 in Berlin (CEST, UTC+2 in April) is two hours before 16:20:00 UTC.
    assert utc.sql("SELECT first_ns FROM sources").item() - first == 2 * 3600 * 10**9
    assert "zone Europe/Berlin" in s.sql("SELECT clock_note FROM sources").item()


def test_sniff_is_by_content(tmp_path):
    renamed = tmp_path / "results.txt"
    renamed.write_bytes(_path("inf").read_bytes())
    parser, fmt = detect(InputFile(renamed))
    assert (parser.name, fmt) == ("bench_json", "vllm_bench_json")
    # The SGLang console summary is text, not a result object: this parser does not claim it.
    summary = real("sglang/sglang_v0.4.0_bench_serving_text_summary_truncated_issue2805.log")
    got = detect(InputFile(summary))
    assert got is None or got[0].name != "bench_json"


# -- key variants -----------------------------------------------------------------------------------------------

def test_json_lines_from_append_result(tmp_path):
    """--append-result: runs joined by a newline (no trailing one); ids and rows are per run (line)."""
    a, b = _path("01").read_text(), _path("inf").read_text()
    p = _write(tmp_path, "appended.json", a + "\n" + b)
    s = stallscope.open(":memory:")
    rep = s.ingest([p])
    assert rep[0].status == "ingested", rep[0].message
    fmt, parsed, skipped, rejected = s.sql(
        "SELECT format, records_parsed, records_skipped, records_rejected FROM sources").row(0)
    assert (fmt, parsed, skipped, rejected) == ("vllm_bench_jsonl", 402, 0, 0)
    runs = s.sql("SELECT line_no, count(*), min(request_id), max(request_index) FROM requests "
                 "GROUP BY 1 ORDER BY 1").rows()
    assert runs == [(1, 200, "0:0", 199), (2, 200, "1:0", 199)]
    # Gap rows name their run's requests (14 requests per run produced one token, hence no gap).
    assert s.sql("SELECT count(DISTINCT request_id) FROM token_gaps").item() == 400 - 2 * 14
    assert s.sql("SELECT count(*) FROM token_gaps g LEFT JOIN requests r USING (request_id) "
                 "WHERE r.request_id IS NULL").item() == 0
    rates = s.sql("SELECT line_no, value FROM engine_config WHERE key = 'request_rate' ORDER BY 1").rows()
    assert rates == [(1, "1.0"), (2, "inf")]
    assert "2 runs" in s.sql("SELECT clock_note FROM sources").item()


def _new_format(obj: dict, base: float = 81234.5) -> dict:
    """A `vllm bench serve --save-detailed` result (2026 keys) built from a real 0.8.3 run."""
    out = {k: v for k, v in obj.items() if k != "request_goodput:"}
    out["request_goodput"] = None
    out["endpoint_type"] = out["label"] = "vllm"
    out["failed"] = 0
    starts, t = [], base
    for i in range(len(obj["ttfts"])):  # test fixture: spaced sends, 0.25 s apart
        starts.append(t)
        t += 0.25
    out["start_times"] = starts
    out["latencies"] = [tt + sum(itl) for tt, itl in zip(obj["ttfts"], obj["itls"])]
    out["queue_times"] = [0.0] * len(starts)
    return out


def test_start_times_give_send_instants(tmp_path):
    obj = _new_format(_obj("04"))
    s = stallscope.open(":memory:")
    s.ingest([_write(tmp_path, "new.json", obj)])
    assert s.sql("SELECT value FROM engine_config WHERE key = 'request_goodput_key'").item() == "request_goodput"
    assert s.sql("SELECT value FROM engine_config WHERE key = 'send_times'").item() == "start_times"
    anchor = int(dt.datetime(2025, 4, 14, 16, 21, 34, tzinfo=dt.timezone.utc).timestamp()) * 10**9 \
        + 500_000_000 - round(obj["duration"] * 1e9)
    rows = s.sql("SELECT request_index, arrival_ns, first_token_ns, ttft_ns, finish_ns, e2e_latency_ns FROM requests "
                 "ORDER BY request_index").rows()
    assert rows[0][1] == anchor
    assert rows[10][1] - anchor == round(81234.5 * 1e9 + 2.5e9) - round(81234.5 * 1e9)  # perf_counter deltas
    assert all(r[2] == r[1] + r[3] and r[4] == r[1] + r[5] for r in rows)
    # The last chunk of each request arrives at its finish (latency = ttft + sum(itl) in this fixture).
    late = s.sql("""SELECT count(*) FROM (SELECT request_id, max(end_ns) AS e FROM token_gaps GROUP BY 1) g
                    JOIN requests r USING (request_id) WHERE abs(g.e - r.finish_ns) > 1000""").item()
    assert late == 0
    assert s.sql("SELECT clock_offset_ns FROM sources").item() == anchor - round(81234.5 * 1e9)


def test_failed_requests_keep_their_place(tmp_path):
    obj = _obj("16")
    for i in (3, 150):
        obj["ttfts"][i], obj["itls"][i], obj["output_lens"][i], obj["generated_texts"][i] = 0.0, [], 0, ""
        obj["errors"][i] = ("Traceback (most recent call last):\n  ...\n"
                            "aiohttp.client_exceptions.ServerDisconnectedError")
    s = stallscope.open(":memory:")
    rep = s.ingest([_write(tmp_path, "failed.json", obj)])
    assert any("2 failed" in n for n in rep[0].notes)
    rows = s.sql("SELECT request_index, status, ttft_ns, e2e_latency_ns, output_tokens, error FROM requests "
                 "WHERE status <> 'ok' ORDER BY 1").rows()
    assert [r[:5] for r in rows] == [(3, "failed", None, None, 0), (150, "failed", None, None, 0)]
    assert rows[0][5].startswith("Traceback") and rows[0][5].endswith("ServerDisconnectedError")
    assert s.sql("SELECT count(*) FROM token_gaps WHERE request_id IN ('3', '150')").item() == 0
    # The arrays stay index-aligned: request 4 is still request 4.
    assert s.sql("SELECT prompt_tokens FROM requests WHERE request_index = 4").item() == obj["input_lens"][4]
    assert s.sql("SELECT records_parsed FROM sources").item() == 201


def test_failed_requests_without_an_errors_array(tmp_path):
    obj = _obj("16")
    del obj["errors"]
    obj["ttfts"][7], obj["itls"][7], obj["output_lens"][7] = 0.0, [], 0
    s = stallscope.open(":memory:")
    s.ingest([_write(tmp_path, "noerrors.json", obj)])
    assert s.sql("SELECT request_index, error FROM requests WHERE status = 'failed'").rows() == \
        [(7, "failed (no error text)")]


def test_itl_that_repeats_the_ttft_is_dropped(tmp_path):
    """vllm#7242: benchmark_serving appended the TTFT to the ITL list as well (a few µs apart)."""
    obj = _obj("01")
    want = sum(len(x) for x in obj["itls"])
    obj["itls"] = [[t - 2e-6] + itl for t, itl in zip(obj["ttfts"], obj["itls"])]
    s = stallscope.open(":memory:")
    rep = s.ingest([_write(tmp_path, "bug.json", obj)])
    assert any("vllm#7242" in n and "200/200" in n for n in rep[0].notes)
    assert s.sql("SELECT count(*) FROM token_gaps").item() == want
    assert s.sql("SELECT value_num FROM engine_config WHERE key = 'itl_ttft_bug_dropped'").item() == 200
    # A clean file keeps its first gaps.
    clean = stallscope.open(":memory:")
    clean.ingest([_path("01")])
    assert clean.sql("SELECT value_num FROM engine_config WHERE key = 'itl_ttft_bug_dropped'").item() == 0


def test_summary_only_file(tmp_path):
    """Without --save-detailed (vLLM >= 0.9) only the run summary (and in 2026 the latencies) remain."""
    obj = {k: v for k, v in _new_format(_obj("04")).items()
           if k not in ("input_lens", "output_lens", "start_times", "ttfts", "itls", "generated_texts", "errors")}
    s = stallscope.open(":memory:")
    rep = s.ingest([_write(tmp_path, "summary.json", obj)])
    assert rep[0].status == "ingested"
    n, ok, pt, e2e = s.sql("SELECT count(*), count(*) FILTER (WHERE status = 'ok'), count(prompt_tokens), "
                           "sum(e2e_latency_ns)::DOUBLE FROM requests").row(0)
    assert (n, ok, pt) == (200, 200, 0)
    assert e2e == pytest.approx(sum(obj["latencies"]) * 1e9, rel=1e-9)
    del obj["latencies"], obj["queue_times"]
    s2 = stallscope.open(":memory:")
    rep = s2.ingest([_write(tmp_path, "summary2.json", obj)])
    assert rep[0].status == "ingested" and rep[0].parsed == 1
    assert any("run summary only" in n for n in rep[0].notes)
    assert s2.sql("SELECT count(*) FROM requests").item() == 0
    assert s2.sql("SELECT value_num FROM engine_config WHERE key = 'completed'").item() == 200


def _sglang_run(obj: dict, rate) -> dict:
    """An SGLang bench_serving --output-details record with the keys of sglang/bench_serving.py (0.4.6-0.5.x)."""
    return {
        "backend": "sglang", "dataset_name": "sharegpt", "request_rate": rate, "max_concurrency": None,
        "sharegpt_output_len": None, "random_input_len": 1024, "random_output_len": 1024, "random_range_ratio": 0.0,
        "duration": obj["duration"], "completed": obj["completed"], "total_input_tokens": obj["total_input_tokens"],
        "total_output_tokens": obj["total_output_tokens"],
        "total_output_tokens_retokenized": obj["total_output_tokens"] - 3,
        "request_throughput": obj["request_throughput"], "input_throughput": 1.0,
        "output_throughput": obj["output_throughput"], "mean_e2e_latency_ms": 1.0, "median_e2e_latency_ms": 1.0,
        "std_e2e_latency_ms": 0.0, "p99_e2e_latency_ms": 1.0, "mean_ttft_ms": obj["mean_ttft_ms"],
        "median_ttft_ms": 1.0, "std_ttft_ms": 0.0, "p99_ttft_ms": 1.0, "mean_tpot_ms": obj["mean_tpot_ms"],
        "median_tpot_ms": 1.0, "std_tpot_ms": 0.0, "p99_tpot_ms": 1.0, "mean_itl_ms": obj["mean_itl_ms"],
        "median_itl_ms": 1.0, "std_itl_ms": 0.0, "p95_itl_ms": 1.0, "p99_itl_ms": 1.0, "concurrency": 3.2,
        "accept_length": None,
        "input_lens": obj["input_lens"], "output_lens": obj["output_lens"], "ttfts": obj["ttfts"],
        "itls": obj["itls"], "generated_texts": obj["generated_texts"], "errors": obj["errors"],
    }


def test_sglang_output_file(tmp_path):
    """No real SGLang --output-file sample exists: this JSONL is built from the documented key set
    (../shared/notes/tgi-sglang-formats.md §2.7) with real per-request arrays. Python's json writes the default
    rate inf as a bare `Infinity`."""
    lines = [json.dumps(_sglang_run(_obj("inf"), float("inf"))), json.dumps(_sglang_run(_obj("04"), 4.0))]
    assert "Infinity" in lines[0]
    p = _write(tmp_path, "sglang_0414_200_sharegpt.jsonl", "\n".join(lines) + "\n")
    s = stallscope.open(":memory:")
    rep = s.ingest([p])
    assert rep[0].status == "ingested", rep[0].message
    fmt, parsed, skipped, rejected, method = s.sql(
        "SELECT format, records_parsed, records_skipped, records_rejected, clock_method FROM sources").row(0)
    # The trailing newline leaves one blank line: counted as skipped noise.
    assert (fmt, parsed, skipped, rejected) == ("sglang_bench_jsonl", 402, 1, 0)
    assert method == "bench_unanchored"
    assert s.sql("SELECT DISTINCT engine FROM requests").item() == "sglang_bench"
    assert s.sql("SELECT value, value_num FROM engine_config WHERE key = 'request_rate' AND line_no = 1").row(0) \
        == ("inf", math.inf)
    assert s.sql("SELECT value FROM engine_config WHERE key = 'tool' AND line_no = 2").item() == "sglang_bench_serving"
    assert s.sql("SELECT count(*) FROM token_gaps").item() == sum(len(x) for x in _obj("inf")["itls"]) \
        + sum(len(x) for x in _obj("04")["itls"])


# -- bad input and accounting -----------------------------------------------------------------------------------

def test_truncated_json_is_one_clear_error(tmp_path):
    p = tmp_path / "cut.json"
    p.write_bytes(_path("01").read_bytes()[:500_000])
    s = stallscope.open(":memory:")
    rep = s.ingest([p])
    assert rep[0].status == "failed"
    assert "truncated or invalid JSON" in rep[0].message and "\n" not in rep[0].message
    assert s.sql("SELECT (SELECT count(*) FROM sources) + (SELECT count(*) FROM requests) + "
                 "(SELECT count(*) FROM engine_config)").item() == 0


def test_json_that_is_not_a_benchmark_result(tmp_path):
    s = stallscope.open(":memory:")
    # Result keys, but nested: the sniff sees them, the parser refuses the object.
    nested = _write(tmp_path, "nested.json", {"meta": {"duration": 1.0, "completed": 2, "request_throughput": 3.0,
                                                       "ttfts": [0.1], "input_lens": [5], "num_prompts": 2}})
    other = _write(tmp_path, "other.json", {"duration": 3, "name": "x", "items": [1, 2]})
    rep = s.ingest([nested, other])
    msg = {r.path.rsplit("/", 1)[-1]: r.message for r in rep}
    assert all(r.status == "failed" for r in rep)
    assert "not a benchmark result" in msg["nested.json"]
    assert "unknown format" in msg["other.json"]
    assert s.sql("SELECT count(*) FROM sources").item() == 0


def test_empty_arrays(tmp_path):
    obj = _obj("01")
    for k in ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors"):
        obj[k] = []
    s = stallscope.open(":memory:")
    rep = s.ingest([_write(tmp_path, "empty.json", obj)])
    assert rep[0].status == "ingested" and rep[0].parsed == 1
    assert s.sql("SELECT count(*) FROM requests").item() == 0
    assert s.sql("SELECT value_num FROM engine_config WHERE key = 'requests'").item() == 0


def test_arrays_of_different_lengths_reject_the_surplus(tmp_path):
    obj = _obj("01")
    obj["ttfts"] = obj["ttfts"][:198]
    s = stallscope.open(":memory:")
    s.ingest([_write(tmp_path, "short.json", obj)])
    assert s.sql("SELECT records_parsed, records_rejected FROM sources").row(0) == (199, 2)
    rej = s.sql("SELECT line_no, record_index, reason FROM rejects ORDER BY record_index").rows()
    assert [r[:2] for r in rej] == [(1, 198), (1, 199)]
    assert "ttfts 198" in rej[0][2] and "input_lens 200" in rej[0][2]


def test_bad_values_reject_the_request(tmp_path):
    obj = _obj("04")
    obj["ttfts"][10] = None
    obj["itls"][20][5] = -0.5
    s = stallscope.open(":memory:")
    s.ingest([_write(tmp_path, "bad.json", obj)])
    assert s.sql("SELECT records_parsed, records_rejected FROM sources").row(0) == (199, 2)
    assert s.sql("SELECT record_index FROM rejects ORDER BY 1").to_series().to_list() == [10, 20]
    assert s.sql("SELECT count(*) FROM requests WHERE request_index IN (10, 20)").item() == 0


def test_json_lines_with_a_cut_last_record(tmp_path):
    a, b = _path("01").read_text(), _path("04").read_text()
    p = _write(tmp_path, "interrupted.json", a + "\n" + b + "\n" + b[:300_000])
    s = stallscope.open(":memory:")
    rep = s.ingest([p])
    assert rep[0].status == "ingested"
    assert s.sql("SELECT records_parsed, records_skipped, records_rejected FROM sources").row(0) == (402, 0, 1)
    line, reason = s.sql("SELECT line_no, reason FROM rejects").row(0)
    assert line == 3 and "does not decode" in reason
    assert s.sql("SELECT count(*) FROM requests").item() == 400


def test_gzip_and_cut_gzip(tmp_path):
    import gzip

    data = _path("inf").read_bytes()
    whole = tmp_path / "run.json.gz"
    whole.write_bytes(gzip.compress(data))
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    s = stallscope.open(":memory:")
    rep = {r.path.rsplit("/", 1)[-1]: r for r in s.ingest([whole, cut])}
    assert rep["run.json.gz"].status == "ingested" and rep["run.json.gz"].parsed == 201
    assert rep["cut.json.gz"].status == "failed"
    assert "truncated or invalid JSON (gzip stream ends early" in rep["cut.json.gz"].message
    assert s.sql("SELECT count(*), sum(compression = 'gzip')::INT FROM sources").row(0) == (1, 1)
