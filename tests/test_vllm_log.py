"""vLLM server logs: every real log ingests, every line is accounted for, and the tables say what the files say."""
from __future__ import annotations

import gzip
import os
import re
import subprocess
import sys
from functools import partial
from pathlib import Path

import polars as pl
import pytest

import stallscope
from stallscope.parsers import InputFile, Options
from stallscope.parsers import vllm_log as V
from stallscope.parsers import vllm_log_patterns as P
from stallscope.parsers.lines import iter_line_frames
from stallscope.parsers.logtime import Local, WallClock, choose_year
from conftest import REAL, real

LOG_800 = "vllm/v0_0.8.3_ray_tp4pp2_llama70b_full_server_log_800req_llmk8s.log"
ALL_LOGS = sorted(str(p.relative_to(REAL)) for d in ("vllm", "vllm/excerpts") for p in (REAL / d).glob("*.log"))
NS = 1_000_000_000


def _ingest(path: Path, **opts):
    s = stallscope.open(":memory:")
    report = s.ingest([path], options=Options(**opts))
    return s, report[0]


def _physical_lines(data: bytes) -> int:
    return data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)


@pytest.fixture(scope="module")
def store_800():
    s, r = _ingest(real(LOG_800))
    assert r.status == "ingested", r.message
    yield s, r
    s.close()


# -- formats as data -----------------------------------------------------------------------------------------

def test_patterns_yield_declared_fields_in_python_and_polars():
    problems = []
    for p in P.PATTERNS:
        assert p.samples, p.name
        problems += p.check()
        groups = list(p.compiled.groupindex)
        for s in p.samples:
            if groups:
                got = pl.Series([s.line]).str.extract_groups(p.regex).struct.unnest().row(0, named=True)
            else:
                got = {}
                if not pl.Series([s.line]).str.contains(p.regex)[0]:
                    problems.append(f"{p.name}: polars finds no match in {s.line[:80]!r}")
            problems += [f"{p.name}: polars {k}={got.get(k)!r}, expected {v!r}" for k, v in s.fields.items()
                         if got.get(k) != v]
    assert not problems, "\n".join(problems)


def test_samples_without_a_fixture_cite_a_public_issue():
    # Those with a fixture occur in it verbatim (test_patterns); formats no fixture shows carry a line from a
    # public issue, named in the doc.
    for p in P.PATTERNS:
        for s in p.samples:
            if not s.source:
                assert "https://github.com/" in p.doc or p.name == "tb_chain", f"{p.name}: sample without source"


# -- every real log: accounting and grep counts --------------------------------------------------------------

GREP = {
    "stats": re.compile(r"\] (?:Engine \d+: |\d+ Engines Aggregated: )?Avg prompt throughput: "),
    "prefix_hits": re.compile(r"\] Prefix cache hit rate: GPU: "),
    "received": re.compile(r"\] Received request "),
    "added": re.compile(r"\] Added request "),
    "finished": re.compile(r"\] Finished request "),
}


@pytest.mark.parametrize("rel", ALL_LOGS)
def test_real_log_ingests_accounts_every_line_and_matches_grep(rel):
    path = real(rel)
    data = path.read_bytes()
    s, r = _ingest(path)
    try:
        assert r.status == "ingested" and r.format == "vllm_log", r.message
        src = s.sql("SELECT * FROM sources").row(0, named=True)
        n_lines = _physical_lines(data)
        assert src["records_parsed"] + src["records_skipped"] + src["records_rejected"] == n_lines
        assert s.sql("SELECT count(*) FROM rejects").item() == src["records_rejected"]
        assert s.sql("SELECT count(*) FROM rejects WHERE line_no IS NULL OR reason IS NULL").item() == 0
        lines = data.decode("utf-8").split("\n")
        grep = {k: sum(1 for ln in lines if rx.search(ln)) for k, rx in GREP.items()}
        got = s.sql("""SELECT
            (SELECT count(*) FROM engine_stats WHERE prompt_throughput_tps IS NOT NULL) AS stats,
            (SELECT count(*) FROM engine_stats WHERE cpu_prefix_cache_hit_rate_pct IS NOT NULL) AS prefix_hits,
            (SELECT count(*) FROM request_events WHERE event = 'received') AS received,
            (SELECT count(*) FROM request_events WHERE event = 'added') AS added,
            (SELECT count(*) FROM request_events WHERE event = 'finished') AS finished""").row(0, named=True)
        assert got == grep
        # One engine_stats row per stats interval: V0's prefix-cache line is folded into its stats row.
        assert s.sql("SELECT count(*) FROM engine_stats").item() == grep["stats"]
        # Every timed row has a time, and the clock says where its year came from.
        assert src["clock_method"] == "log_wallclock" and "year" in src["clock_note"]
        assert s.sql("SELECT count(*) FROM engine_stats WHERE ts_ns IS NULL").item() == 0
        assert s.sql("SELECT count(*) FROM request_events WHERE ts_ns IS NULL").item() == 0
        assert src["first_ns"] <= src["last_ns"]
    finally:
        s.close()


def test_cli_ingests_every_real_log_in_one_call(tmp_path):
    exe = Path(sys.executable).with_name("stallscope")
    res = subprocess.run([str(exe), "ingest", *[str(real(r)) for r in ALL_LOGS], "--db", str(tmp_path / "s.duckdb")],
                         capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "Traceback" not in res.stdout + res.stderr


# -- the matched 0.8.3 server log ----------------------------------------------------------------------------

def test_800_request_log_counts(store_800):
    s, r = store_800
    q = lambda sql: s.sql(sql).item()  # noqa: E731
    assert q("SELECT count(*) FROM request_events WHERE event = 'received'") == 805
    assert q("SELECT count(*) FROM request_events WHERE event = 'added'") == 805
    assert q("SELECT count(*) FROM request_events WHERE event = 'finished'") == 805
    assert q("SELECT count(*) FROM engine_stats WHERE prompt_throughput_tps IS NOT NULL") == 92
    assert q("SELECT count(*) FROM engine_stats WHERE cpu_prefix_cache_hit_rate_pct IS NOT NULL") == 92
    assert q("SELECT count(*) FROM log_events WHERE kind = 'access'") == 934
    assert q("SELECT count(*) FROM log_events WHERE kind = 'access' AND http_path = '/health'") == 129
    assert q("SELECT count(*) FROM log_events WHERE kind = 'access' AND http_path = '/v1/completions'") == 804
    # Four prompts contain the word Traceback: no traceback event comes out of them.
    assert q("SELECT count(*) FROM log_events WHERE kind = 'traceback'") == 0
    assert q("SELECT count(*) FROM log_events WHERE ts_ns IS NULL") == 0


def test_800_request_log_requests_and_prompt_lengths(store_800):
    s, _ = store_800
    text = real(LOG_800).read_text(encoding="utf-8")
    expected = {}
    for m in re.finditer(r"Received request (\S+?): .*?prompt_token_ids: (\[[0-9, ]*\]|None), lora_request", text):
        expected[m.group(1)] = None if m.group(2) == "None" else len(m.group(2)[1:-1].split(", "))
    assert len(expected) == 805 and sum(v is None for v in expected.values()) == 1  # the one chat request
    req = s.sql("SELECT request_id, request_index, prompt_tokens, max_tokens, status, arrival_ns, finish_ns, "
                "engine, kind, endpoint, params FROM requests ORDER BY request_index")
    assert req.height == 805
    assert req["request_index"].to_list() == list(range(805))
    assert dict(zip(req["request_id"], req["prompt_tokens"])) == expected
    assert set(req["status"]) == {"ok"} and set(req["engine"]) == {"vllm"} and set(req["kind"]) == {"server"}
    assert req.filter(pl.col("finish_ns") < pl.col("arrival_ns")).height == 0
    first = req.row(0, named=True)
    assert first["request_id"] == "chatcmpl-8d50639d633d4cda959507475b226dfd"
    assert first["endpoint"] == "chat_completions" and first["max_tokens"] == 131027
    assert first["params"].startswith("SamplingParams(n=1, ") and first["params"].endswith("extra_args=None)")
    # 04-14 16:14:55 in the log, year from the Ray line `2025-04-14 16:07:42,252`, zone UTC.
    assert first["arrival_ns"] == 1744647295 * NS
    assert set(req.filter(pl.col("endpoint") == "completions")["max_tokens"].unique()) <= set(range(1, 131073))


def test_800_request_log_config_and_clock(store_800):
    s, _ = store_800
    cfg = dict(s.sql("SELECT key, value FROM engine_config").iter_rows())
    assert cfg["max_num_batched_tokens"] == "2048"
    assert cfg["tensor_parallel_size"] == "4" and cfg["pipeline_parallel_size"] == "2"
    assert cfg["engine"] == "vllm" and cfg["engine_version"] == "V0" and cfg["vllm_version"] == "0.8.3"
    assert cfg["model"] == "meta-llama/Llama-3.3-70B-Instruct"
    assert cfg["enable_prefix_caching"] == "True" and cfg["enable_chunked_prefill"] == "True"
    assert cfg["num_gpu_blocks"] == "25588" and cfg["num_cpu_blocks"] == "6553"
    assert cfg["arg.max_num_batched_tokens"] == "None"  # the raw args dump says unset; the effective value wins
    note = s.sql("SELECT clock_note FROM sources").item()
    assert "year 2025" in note and "Ray line 2" in note and "UTC" in note
    stats = s.sql("SELECT * FROM engine_stats WHERE prompt_throughput_tps IS NOT NULL ORDER BY line_no").row(0, named=True)
    assert (stats["prompt_throughput_tps"], stats["generation_throughput_tps"], stats["running_reqs"],
            stats["swapped_reqs"], stats["waiting_reqs"]) == (9.0, 22.1, 1, 0, 0)
    assert stats["ts_ns"] == 1744647300 * NS  # 04-14 16:15:00


# -- other variants ------------------------------------------------------------------------------------------

def test_v1_stats_variants():
    s, _ = _ingest(real("vllm/excerpts/v1_2026_apiserver_loggers259_prefill_saturated_pr37307.log"))
    rows = s.sql("SELECT * FROM engine_stats ORDER BY line_no")
    assert rows["waiting_reqs"].to_list() == [90, 84, 78, 72, 66]
    assert rows["engine_index"].to_list() == [0] * 5 and rows["process"].to_list() == ["APIServer pid=11574"] * 5
    assert rows["prompt_throughput_tps"][0] == 23998.2 and rows["gpu_kv_cache_usage_pct"][4] == 65.4
    assert dict(s.sql("SELECT key, value FROM engine_config").iter_rows())["engine_version"] == "V1"
    s, _ = _ingest(real("vllm/excerpts/v1_0.8.x_loggers80_no_engine_prefix_received_added_issue16361.log"))
    rows = s.sql("SELECT * FROM engine_stats ORDER BY line_no")
    assert rows["engine_index"].to_list() == [None, None] and rows["prefix_cache_hit_rate_pct"].to_list() == [80.0, 80.0]
    req = s.sql("SELECT * FROM requests").row(0, named=True)
    assert req["request_id"] == "chatcmpl-b654b653c8714431a1096a3be88f1662" and req["prompt_tokens"] is None
    assert req["max_tokens"] == 32742 and req["status"] is None  # V1 logs no Finished line


def test_v0_0_3_received_and_untimed_variants():
    s, _ = _ingest(real("vllm/excerpts/v0_0.3.x_async_llm_engine_received_request_prefix_pos_issue2731.log"))
    req = s.sql("SELECT request_id, prompt_tokens, max_tokens FROM requests ORDER BY request_index").rows()
    # `prompt_token_ids: []` (the client sent text): the length is unknown, not 0.
    assert req == [("cmpl-bfd5818ad84548fdb8fbd3ed075d8a00-0", None, 512), ("cmpl-cd834640585140fabf9f9f5342d08617-0", None, 250)]
    s, _ = _ingest(real("vllm/excerpts/v0_0.2.x_llm_engine_metrics_no_brackets_trailing_spaces_issue1935.log"))
    assert s.sql("SELECT running_reqs FROM engine_stats ORDER BY line_no").to_series().to_list() == [110, 107, 101, 93, 95]


def test_tracebacks_one_event_each():
    cases = {
        "v1_0.8.x_enginecore_startup_traceback_no_process_prefix_issue18455.log": [(1, 12)],
        "v1_0.11.x_enginecore_dp0_startup_traceback_logged_then_raw_issue28910.log": [(1, 5), (6, 7)],
        "v1_2026_enginecore_no_dp_suffix_py313_traceback_markers_issue44411.log": [(1, 3), (4, 9)],
        "v1_0.9.2_ascend_worker_rank_prefixed_traceback_then_engine_and_raw_tracebacks_vllmascend1813.log":
            [(12, 35), (47, 17), (65, 23), (88, 41)],
        "v1_0.9.x_intel_fork_compose_prefixed_runtime_worker_death_traceback_llmscaler154.log": [(3, 8)],
    }
    for name, events in cases.items():
        s, _ = _ingest(real("vllm/excerpts/" + name))
        got = s.sql("SELECT line_no, line_count FROM log_events WHERE kind = 'traceback' ORDER BY line_no").rows()
        assert got == events, name
    s, _ = _ingest(real("vllm/excerpts/v1_0.9.2_ascend_worker_rank_prefixed_traceback_then_engine_and_raw_tracebacks_"
                        "vllmascend1813.log"))
    ev = s.sql("SELECT * FROM log_events WHERE kind = 'traceback' ORDER BY line_no").rows(named=True)
    assert ev[0]["process"] == "VllmWorker rank=0 pid=281" and ev[0]["level"] == "ERROR"
    assert ev[0]["message"].startswith("RuntimeError: shape '[2048, 2048]' is invalid for input of size 16777216\n"
                                       "WorkerProc hit an exception.\nTraceback (most recent call last):")
    assert ev[3]["message"].startswith("RuntimeError: Engine core initialization failed.")
    assert s.sql("SELECT line_no FROM rejects").rows() == [(129,)]  # the vendor `[ERROR] 2025-07-15-…` line


def test_hard_wrapped_copy_is_joined():
    s, r = _ingest(real("vllm/v1_0.10.1.1_mp_tp2_qwen7b_startup_hardwrapped_dennislee22.log"))
    cfg = dict(s.sql("SELECT key, value FROM engine_config").iter_rows())
    assert cfg["tensor_parallel_size"] == "2" and cfg["model"] == "Qwen2-7B-Instruct"
    assert cfg["num_gpu_blocks"] == "74510"  # `... num_gpu_blocks is` + `: 74510` on the next physical line
    assert cfg["kv_cache_tokens"] == "1192160" and cfg["gpu_memory_utilization"] == "0.5"
    init = s.sql("SELECT line_no, line_count, kind FROM log_events WHERE message LIKE 'Initializing a V1%'").rows()
    assert init == [(11, 13, "startup")]
    assert s.sql("SELECT line_no FROM rejects").rows() == [(6,)]  # transformers' raw `torch_dtype` warning


def test_ansi_ray_nested_prefixes_and_year_from_ray():
    s, _ = _ingest(real("vllm/v1_0.10.1.1_ray_tp4_gptoss120b_startup_ansi_dennislee22.log"))
    procs = set(s.sql("SELECT DISTINCT process FROM log_events WHERE process IS NOT NULL").to_series())
    assert {"APIServer pid=1009", "EngineCore_0 pid=1159", "EngineCore_0 pid=1159 / RayWorkerWrapper pid=343, ip=10.42.9.224"} <= procs
    assert "Ray line" in s.sql("SELECT clock_note FROM sources").item()
    first = s.sql("SELECT min(ts_ns) FROM log_events").item()
    assert first == 1757546766 * NS  # 2025-09-10 23:26:06 UTC, the first line
    assert s.sql("SELECT count(*) FROM log_events WHERE message LIKE '%repeated%across cluster%'").item() == 0


def test_compose_prefix_and_uvicorn_time_inherited():
    s, _ = _ingest(real("vllm/excerpts/v1_0.9.x_intel_fork_compose_prefixed_runtime_worker_death_traceback_llmscaler154.log"))
    acc = s.sql("SELECT * FROM log_events WHERE kind = 'access'").row(0, named=True)
    assert (acc["http_method"], acc["http_path"], acc["http_status"], acc["process"]) == ("GET", "/health", 200,
                                                                                      "eap-llm-server-on-arc")
    assert acc["ts_ns"] is None  # the first line: no earlier record to inherit a time from
    err = s.sql("SELECT * FROM log_events WHERE kind = 'error'").row(0, named=True)
    assert err["message"].startswith("Worker proc VllmWorker-3 died unexpectedly")


def test_torn_record_behind_nccl_output_is_kept():
    s, _ = _ingest(real("vllm/v0_0.8.3_ray_deepseekv25_tp8pp2_startup_and_2req_llmk8s.log"))
    m = s.sql("SELECT line_no, message FROM log_events WHERE message LIKE 'rank 15 in world size 16%'").rows()
    assert m and m[0][0] == 309
    reasons = s.sql("SELECT reason, count(*) FROM rejects GROUP BY reason").rows()
    assert all(r for r, _ in reasons) and any("torn" in r for r, _ in reasons)


def test_2026_engine_id_suffix_is_folded_onto_the_api_id(tmp_path):
    # Real lines (https://github.com/vllm-project/vllm/issues/34503), as the 2026 API server prints them.
    log = tmp_path / "v2026.log"
    log.write_text("(APIServer pid=90458) INFO 02-13 11:33:33 [logger.py:49] " + P._RECV_2026 + "\n"
                   "(APIServer pid=90458) INFO 02-13 11:33:33 [async_llm.py:382] Added request "
                   "chatcmpl-a269fdcb7c6ce890-a8a65d16.\n"
                   "(APIServer pid=90458) INFO:     10.80.23.18:51408 - \"POST /v1/chat/completions HTTP/1.1\" 200 OK\n")
    s, r = _ingest(log, year=2026)
    assert r.status == "ingested", r.message
    ev = s.sql("SELECT event, request_id, detail FROM request_events ORDER BY line_no").rows()
    assert ev == [("received", "chatcmpl-a269fdcb7c6ce890", None),
                  ("added", "chatcmpl-a269fdcb7c6ce890", "engine_request_id=chatcmpl-a269fdcb7c6ce890-a8a65d16")]
    req = s.sql("SELECT request_id, max_tokens, arrival_ns FROM requests").rows()
    assert req == [("chatcmpl-a269fdcb7c6ce890", 100, 1770982413 * NS)]


# -- year and zone -------------------------------------------------------------------------------------------

def test_year_and_zone_options():
    p = real("vllm/excerpts/v0_0.8.x_bracketed_metrics481_issue15018.log")  # 03-18 09:04:46 …
    s, _ = _ingest(p, year=2023)
    assert s.sql("SELECT min(ts_ns) FROM engine_stats").item() == 1679130286 * NS
    assert "--year" in s.sql("SELECT clock_note FROM sources").item()
    s, _ = _ingest(p, year=2023, tz="Europe/Berlin")  # CET, UTC+1 in March before the switch
    assert s.sql("SELECT min(ts_ns) FROM engine_stats").item() == (1679130286 - 3600) * NS
    s, r = _ingest(p, tz="Mars/Olympus")
    assert r.status == "failed" and "unknown time zone" in r.message


def test_year_from_another_source_in_the_store():
    s = stallscope.open(":memory:")
    # A dated source already in the store (what a benchmark JSON or a trace leaves): 2024-01-22 18:00 UTC.
    s.con.execute("INSERT INTO sources (source_id, path, format, first_ns, last_ns, clock_method) "
                  "VALUES (99, '/x/bench.json', 'vllm_bench_json', ?, ?, 'bench_date_minus_duration')",
                  [1705946400 * NS, 1705947000 * NS])
    r = s.ingest([real("vllm/excerpts/v0_0.6.x_metrics449_single_request_issue12314.log")])[0]  # 01-22 18:27:20
    assert r.status == "ingested"
    assert s.sql("SELECT min(ts_ns) FROM engine_stats").item() == 1705948040 * NS
    assert "from source 99 (bench.json" in s.sql("SELECT clock_note FROM sources WHERE source_id <> 99").item()


def test_year_from_file_mtime(tmp_path):
    for name, year in (("v0_0.8.x_bracketed_metrics481_issue15018.log", 2024),  # 03-18: before the mtime
                       ("v0_0.2.x_llm_engine_metrics_no_brackets_trailing_spaces_issue1935.log", 2023)):  # 12-05: after
        p = tmp_path / name
        p.write_bytes(real("vllm/excerpts/" + name).read_bytes())
        t = 1717243200  # 2024-06-01 12:00 UTC
        os.utime(p, (t, t))
        s, _ = _ingest(p)
        assert s.sql("SELECT year(to_timestamp(min(ts_ns) / 1e9)) FROM engine_stats").item() == year
        assert "modification time" in s.sql("SELECT clock_note FROM sources").item()


def test_new_year_roll_over_and_late_lines():
    clock = WallClock(2024, "UTC")
    df = pl.DataFrame({"mo": [12, 12, 1, 12, 1, 1], "d": [31, 31, 1, 31, 1, 2], "h": [23, 23, 0, 23, 0, 9],
                       "mi": [59, 59, 0, 59, 0, 0], "s": [58, 59, 0, 59, 1, 0]})
    ns = clock.epoch_ns(df.head(3), "mo", "d", "h", "mi", "s").to_list() + \
        clock.epoch_ns(df.tail(3), "mo", "d", "h", "mi", "s").to_list()  # across two frames
    assert [n // NS for n in ns] == [1735689598, 1735689599, 1735689600, 1735689599, 1735689601, 1735808400]
    assert Local(2, 29).in_year(2023, "UTC") is None and choose_year(None, None, Local(5, 1), option_year=2019)[0] == 2019


# -- bad input -----------------------------------------------------------------------------------------------

def _cli(*paths: Path) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("stallscope")
    return subprocess.run([str(exe), "ingest", *map(str, paths), "--db", ":memory:"], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "300"})


@pytest.mark.slow
def test_bad_inputs_fail_with_one_clear_line(tmp_path):
    cases = {
        "empty.log": (b"", "empty file"),
        "binary.log": (bytes(range(256)) * 64, "binary file"),
        "unknown.log": (b"hello\nthis is not a server log\n" * 50, "unknown format"),
        "one_long_line.log": (b"x" * (10 << 20), "unknown format"),
        "cut_early.log.gz": (gzip.compress(real(LOG_800).read_bytes())[:30], "gzip"),
    }
    for name, (data, words) in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        res = _cli(p)
        out = res.stdout + res.stderr
        assert res.returncode != 0, name
        assert words in out and "Traceback" not in out, (name, out[-2000:])


def test_cut_gzip_reads_up_to_the_cut(tmp_path):
    data = real(LOG_800).read_bytes()
    z = gzip.compress(data)
    p = tmp_path / "cut.log.gz"
    p.write_bytes(z[: len(z) // 2])
    s, r = _ingest(p)
    assert r.status == "ingested" and r.notes and "gzip" in r.notes[0]
    src = s.sql("SELECT * FROM sources").row(0, named=True)
    read = src["records_parsed"] + src["records_skipped"] + src["records_rejected"]
    assert 1000 < read < data.count(b"\n")
    last = s.sql("SELECT line_no, reason FROM rejects ORDER BY line_no DESC LIMIT 1").row(0)
    assert last[0] == read and "gzip" in last[1] and "incomplete" in last[1]


def test_nothing_left_behind_when_nothing_is_usable(tmp_path):
    # A log cut inside its first line: the only line is incomplete, so nothing is usable and the source rolls back.
    data = real("vllm/excerpts/v0_0.8.x_bracketed_metrics481_issue15018.log").read_bytes()
    z = gzip.compress(data * 40, compresslevel=1)
    p = tmp_path / "tiny_cut.log.gz"
    p.write_bytes(z[:120])
    s = stallscope.open(":memory:")
    r = s.ingest([p])[0]
    assert r.status == "failed" and "nothing usable" in r.message
    for t in ("sources", "rejects", "engine_stats", "log_events", "request_events", "requests", "engine_config"):
        assert s.sql(f"SELECT count(*) FROM {t}").item() == 0, t


def test_invalid_utf8_and_a_10mb_line_inside_a_log(tmp_path):
    src = real("vllm/excerpts/v1_0.8.x_loggers80_no_engine_prefix_received_added_issue16361.log").read_bytes()
    lines = src.split(b"\n")
    bad_record = lines[2].replace(b"Hello!", b"Hel\xff\xfelo!")  # the Received line, with bytes that are not UTF-8
    data = b"\n".join([lines[0], b"\xc3\x28 garbage \xff", lines[1], bad_record, b"y" * (10 << 20), lines[3]]) + b"\n"
    p = tmp_path / "mixed.log"
    p.write_bytes(data)
    s, r = _ingest(p)
    assert r.status == "ingested"
    assert any("invalid UTF-8" in n for n in r.notes)
    assert s.sql("SELECT count(*) FROM request_events").item() == 2  # the damaged Received line still counts
    rej = s.sql("SELECT line_no, reason, length(raw) FROM rejects ORDER BY line_no").rows()
    assert [x[0] for x in rej] == [2, 5] and "UTF-8" in rej[0][1] and rej[1][2] <= 512
    assert r.parsed + r.skipped + r.rejected == 6


# -- frames: the result does not depend on where the 32 MB blocks fall ----------------------------------------

@pytest.mark.parametrize("rel", [LOG_800, "vllm/excerpts/v1_0.9.2_ascend_worker_rank_prefixed_traceback_then_engine_"
                                          "and_raw_tracebacks_vllmascend1813.log",
                                 "vllm/v1_0.10.1.1_mp_tp2_qwen7b_startup_hardwrapped_dennislee22.log"])
def test_small_blocks_give_the_same_tables(rel, monkeypatch):
    tables = ("engine_stats", "request_events", "requests", "log_events", "engine_config", "rejects")

    def dump():
        s, r = _ingest(real(rel))
        out = {t: s.sql(f"SELECT * EXCLUDE (source_id) FROM {t} ORDER BY ALL").rows() for t in tables}
        return (r.parsed, r.skipped, r.rejected), out

    whole = dump()
    # 40 frame edges in the 2.6 MB log at 64 KB (8 KB blocks, 315 frames, cost ~18 s in the frames' fixed cost).
    block = 8192 if real(rel).stat().st_size < 1 << 20 else 1 << 16
    monkeypatch.setattr(V, "iter_line_frames", partial(iter_line_frames, block_bytes=block))
    small = dump()
    assert small == whole


def test_sniff_leaves_tgi_and_sglang_logs_alone():
    for d in ("tgi", "sglang"):
        for f in (REAL / d).glob("*"):
            assert V.PARSER.sniff(InputFile(f).head(), None) is None or V.sniff_score(InputFile(f).head()) < 0.5, f.name
    assert V.PARSER.sniff(InputFile(real(LOG_800)).head(), None)[1] > 0.9


# -- frames on two threads: a failure in one stops the file, never hangs it ------------------------------------

@pytest.mark.parametrize("where", ["_cut", "_process"])
def test_a_failing_frame_fails_the_file_and_nothing_waits_for_it(where, monkeypatch):
    """Frames are parsed on two threads, each waiting for the one before to hand over its carried tail: an error
    in the third frame (in the hand-over, or after it) fails the file with the one-line internal-error reason, and
    the frame already waiting for that hand-over stops too (the ingest returns; nothing is kept)."""
    import threading
    import time

    monkeypatch.setattr(V, "iter_line_frames", partial(iter_line_frames, block_bytes=64 << 10))
    monkeypatch.setenv("STALLSCOPE_LOG_WORKERS", "2")
    orig, calls = getattr(V._Run, where), []

    def failing(self, *a):
        calls.append(1)
        if len(calls) == 3:
            time.sleep(0.3)  # the fourth frame is classified by now and waits for this one's hand-over
            raise RuntimeError("boom")
        return orig(self, *a)

    monkeypatch.setattr(V._Run, where, failing)
    got = []
    t = threading.Thread(target=lambda: got.append(_ingest(real(LOG_800))), daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "the ingest hangs after a failing frame"
    s, r = got[0]
    assert r.status != "ingested" and "internal error" in r.message and "\n" not in r.message, r.message
    assert s.sql("SELECT count(*) FROM requests").rows() == [(0,)]
    assert len(calls) < 40  # the file stopped at the failure (it has ~40 frames of 64 KB)
