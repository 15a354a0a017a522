"""The TGI log parser on the real router/launcher logs in ../shared/real/tgi/: counts against a grep of the raw files,
exact field values, line accounting, sniffing against every real log, streaming across blocks, and bad input."""
from __future__ import annotations

import gzip
import re
import zlib
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest

import stallscope
from stallscope.parsers import logrecords
import stallscope.parsers.tgi_log as tgi_mod
from stallscope.parsers import InputFile, all_parsers, detect
from conftest import REAL, real
from helpers import by_source, cli, ingested_store, physical_lines

TGI = sorted(p.name for p in (REAL / "tgi").glob("*.log"))


def ns(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1_000_000) * 1000


@pytest.fixture(scope="module")
def store():
    s = ingested_store(real(f"tgi/{n}") for n in TGI)
    yield s
    s.close()


q = by_source


def test_all_sixteen_files_ingest(store):
    assert len(TGI) == 16
    assert store.sql("SELECT count(*) FROM sources WHERE parser = 'tgi_log'").item() == 16


@pytest.mark.parametrize("name", TGI)
def test_every_line_is_accounted_for(store, name):
    data = real(f"tgi/{name}").read_bytes()
    p, s, r, raw = q(store, "SELECT records_parsed, records_skipped, records_rejected, raw_bytes FROM sources "
                            "WHERE source_id = $sid", name).row(0)
    assert p + s + r == physical_lines(data)
    assert r == q(store, "SELECT count(*) FROM rejects WHERE source_id = $sid", name).item()
    assert raw == len(data)


# A grep over the raw file, independent of the parser: complete Success records (text and JSON) and request-level
# ERROR records (the first span is an HTTP handler).
SUCCESS_RX = re.compile(r'(?:: Success$|"message":"Success")')
REQ_ERROR_RX = re.compile(r'(?:^\S+Z ERROR |"level":"ERROR".*"spans":\[\{"name":")'
                          r'(?:compat_generate|generate|generate_stream|chat_completions|completions|'
                          r'vertex_compatibility|sagemaker_compatibility)[{:"]')


@pytest.mark.parametrize("name", TGI)
def test_requests_match_a_grep_of_the_file(store, name):
    lines = real(f"tgi/{name}").read_text(encoding="utf-8").splitlines()
    ok = sum(1 for x in lines if SUCCESS_RX.search(x))
    failed = sum(1 for x in lines if REQ_ERROR_RX.search(x))
    got = q(store, "SELECT count(*) FILTER (WHERE status = 'ok'), count(*) FILTER (WHERE status = 'failed') "
                   "FROM requests WHERE source_id = $sid", name).row(0)
    assert got == (ok, failed)
    ev = q(store, "SELECT count(*) FROM request_events WHERE source_id = $sid AND event = 'success'", name).item()
    assert ev == ok


def test_the_three_complete_success_lines_and_their_fields(store):
    assert store.sql("SELECT count(*) FROM requests WHERE status = 'ok'").item() == 3
    r = q(store, "SELECT * FROM requests WHERE source_id = $sid", "tgi_v1.4dev").to_dicts()
    assert len(r) == 1
    r = r[0]
    finish = ns("2024-02-14T06:49:51.437631Z")
    assert r["finish_ns"] == finish
    assert (r["e2e_latency_ns"], r["validation_ns"], r["queue_ns"], r["inference_ns"], r["time_per_token_ns"]) == (
        611_286_748, 754_500, 127_337, 610_405_028, 43_600_359)
    assert r["arrival_ns"] == finish - 611_286_748
    assert r["scheduled_ns"] == r["arrival_ns"] + 754_500 + 127_337
    assert (r["output_tokens"], r["max_tokens"], r["endpoint"], r["seed"], r["status"]) == (14, 14, "generate", None,
                                                                                             "ok")
    assert r["engine"] == "tgi" and r["kind"] == "server" and r["request_id"] == r["server_request_id"] == "L3"
    assert r["params"].startswith("GenerateParameters { best_of: None,") and r["params"].endswith("top_n_tokens: None }")

    r = q(store, "SELECT * FROM requests WHERE source_id = $sid", "tgi_v3.0_").to_dicts()[0]
    assert r["endpoint"] == "chat_completions" and r["params"] is None and r["max_tokens"] is None
    assert r["seed"] == 13465365087046561476  # above the int64 range: UBIGINT
    assert (r["validation_ns"], r["queue_ns"], r["output_tokens"]) == (955_594, 73_176, 20)
    assert r["finish_ns"] == ns("2024-12-10T21:50:03.478010Z")

    # Pasted without a timestamp: the request counts, its instants stay NULL.
    r = q(store, "SELECT * FROM requests WHERE source_id = $sid", "tgi_v1.4.4").to_dicts()[0]
    assert r["arrival_ns"] is None and r["finish_ns"] is None and r["scheduled_ns"] is None
    assert (r["e2e_latency_ns"], r["validation_ns"], r["queue_ns"], r["inference_ns"], r["time_per_token_ns"]) == (
        357_867_572, 1_968_440, 49_382, 355_849_981, 14_827_082)
    assert (r["output_tokens"], r["max_tokens"], r["status"]) == (24, 512, "ok")


def test_success_cut_inside_inference_time_keeps_only_complete_timings(store):
    r = q(store, "SELECT * FROM requests WHERE source_id = $sid", "tgi_v1.1.0").to_dicts()
    assert len(r) == 1
    r = r[0]
    assert r["status"] is None  # the message was cut off: the log does not say
    assert (r["e2e_latency_ns"], r["validation_ns"], r["queue_ns"]) == (667_179_861, 11_640_733, 129_535)
    assert r["inference_ns"] is None and r["time_per_token_ns"] is None and r["output_tokens"] is None
    assert r["max_tokens"] == 48 and r["endpoint"] == "generate"  # ≤v1.0 style bare `max_new_tokens: 48`
    assert any("cut off" in n for n in store.notes["tgi_v1.1.0_text_success_generate_truncated_issue1440.log"])


def test_request_errors_and_batch_span_errors(store):
    name = "tgi_v1.3_text_error_batch"
    r = q(store, "SELECT * FROM requests WHERE source_id = $sid", name).to_dicts()
    assert len(r) == 1 and r[0]["status"] == "failed" and r[0]["max_tokens"] == 180
    assert r[0]["error"].startswith("Request failed during generation: Server error: Out of available cache blocks")
    assert r[0]["finish_ns"] == ns("2023-12-18T02:36:52.143255Z")
    ev = q(store, "SELECT * FROM log_events WHERE source_id = $sid ORDER BY line_no", name).to_dicts()
    assert [(e["kind"], e["batch_kind"], e["batch_id"], e["batch_size"]) for e in ev] == [
        ("error", "prefill", 7571, 1), ("error", None, None, None)]
    assert ev[0]["target"] == "text_generation_client"
    assert ev[0]["spans"] == "batch{batch_size=1}:prefill:prefill{id=7571 size=1}:prefill{id=7571 size=1}"

    r = q(store, "SELECT endpoint, error FROM requests WHERE source_id = $sid", "tgi_v2.x_json").to_dicts()
    assert r == [{"endpoint": "vertex_compatibility",
                  "error": "`inputs` tokens + `max_new_tokens` must be <= 2048. Given: 4375 `inputs` tokens and 100 "
                           "`max_new_tokens`"}]
    r = q(store, "SELECT endpoint FROM requests WHERE source_id = $sid", "tgi_v2.2").to_series().to_list()
    assert r == ["chat_completions"]


def test_radix_prefix_line_and_v3_batch_errors(store):
    name = "tgi_v3.x_text_radix"
    ev = q(store, "SELECT * FROM request_events WHERE source_id = $sid", name).to_dicts()
    assert len(ev) == 1
    assert (ev[0]["event"], ev[0]["detail"], ev[0]["request_id"]) == ("prefix_match", "prefix=580 suffix=1023", None)
    assert ev[0]["ts_ns"] == ns("2025-05-26T10:46:35.221388Z")
    b = q(store, "SELECT batch_kind, batch_id, batch_size, target FROM log_events WHERE source_id = $sid", name)
    assert b.height == 4 and b.unique().rows() == [("prefill", 622, 1, "text_generation_router_v3::client")]


def test_compose_prefix_and_orphan_shard_traceback(store):
    ev = q(store, "SELECT * FROM log_events WHERE source_id = $sid ORDER BY line_no", "tgi_neuron").to_dicts()
    assert [(e["line_no"], e["line_count"], e["kind"]) for e in ev] == [(1, 5, "traceback"), (6, 1, "error")]
    assert ev[0]["ts_ns"] is None  # no timed line precedes it
    assert ev[0]["message"].startswith("ValueError: Cannot prefill 16 new request(s) with only 8 empty slots.")
    assert (ev[1]["batch_id"], ev[1]["batch_size"], ev[1]["target"]) == (8, 16, "text_generation_router_v2::client")
    assert ev[1]["ts_ns"] == ns("2025-05-29T20:53:24.815316Z")


def test_launcher_traceback_is_one_event(store):
    ev = q(store, "SELECT * FROM log_events WHERE source_id = $sid AND kind = 'traceback'", "tgi_v2.2").to_dicts()
    assert len(ev) == 1
    assert (ev[0]["line_no"], ev[0]["line_count"], ev[0]["level"]) == (3, 12, "ERROR")
    assert ev[0]["message"].splitlines()[:3] == ["    rv = self.invoke(ctx)", "Method Prefill encountered an error.",
                                                 "Traceback (most recent call last):"]


def test_debug_multiline_input_is_one_event(store):
    ev = q(store, "SELECT * FROM log_events WHERE source_id = $sid ORDER BY line_no", "tgi_v3.x_text_debug").to_dicts()
    assert [(e["line_no"], e["line_count"], e["level"]) for e in ev] == [(1, 1, "DEBUG"), (2, 1, "INFO"),
                                                                         (3, 5, "DEBUG")]
    assert ev[2]["message"].startswith("Input: <|im_start|>system\nYou are CIPHER.")
    assert ev[2]["message"].endswith("<|im_start|>assistant")
    assert q(store, "SELECT records_skipped FROM sources WHERE source_id = $sid", "tgi_v3.x_text_debug").item() == 1


def test_compact_launcher_lines(store):
    ev = q(store, "SELECT spans, message FROM log_events WHERE source_id = $sid", "tgi_v2.3")
    assert ev.height == 11 and set(ev["spans"]) == {"shard-manager"}
    assert ev["message"].str.starts_with("Waiting for shard to be ready... rank=").all()


def config(store, name: str) -> dict:
    return dict(q(store, "SELECT key, value FROM engine_config WHERE source_id = $sid", name).rows())


def test_args_single_line_cut(store):
    c = config(store, "tgi_v0.7")
    assert c["engine"] == "tgi" and c["model"] == c["model_id"] == "/data/starcoder"
    assert (c["max_batch_total_tokens"], c["waiting_served_ratio"], c["max_waiting_tokens"]) == ("32000", "1.2", "20")
    assert (c["max_input_length"], c["max_total_tokens"], c["max_concurrent_requests"]) == ("1000", "8192", "128")
    assert c["num_shard"] == c["tensor_parallel_size"] == "1" and c["sharded"] is None
    assert c["disable_custom_kernels"] == "false"  # the last complete field before the cut
    assert len(c) == 21 + 3  # 21 complete fields, two aliases, engine
    num = dict(q(store, "SELECT key, value_num FROM engine_config WHERE source_id = $sid", "tgi_v0.7").rows())
    assert num["waiting_served_ratio"] == 1.2 and num["quantize"] == 0.0


def test_args_pretty_multiline_cut(store):
    c = config(store, "tgi_v2.x_text_launcher")
    assert c["model_id"] == "VAGOsolutions/Llama-3-SauerkrautLM-70b-Instruct"
    assert c["quantize"] == "BitsandbytesNF4" and c["huggingface_hub_cache"] == "/data"  # Some(\n x,\n) folded
    assert c["waiting_served_ratio"] == "0.3" and c["max_waiting_tokens"] == "20"
    assert c["max_batch_prefill_tokens"] is None and "max_batch_prefill_tokens" in c  # printed as None: unset
    assert c["watermark_gamma"] is None and "watermark_delta" not in c  # `watermark_delta: No` was cut
    assert any("kept its 38 complete fields" in n for n in
               store.notes["tgi_v2.x_text_launcher_args_pretty_multiline_issue2238.log"])


def test_json_wrapped_startup_records(store):
    name = "tgi_v1.2.0_json"
    c = config(store, name)
    # Args says max_batch_total_tokens: None; the router's warm-up line sets it, and a set value wins.
    assert c["max_batch_total_tokens"] == "16000" and c["max_batch_prefill_tokens"] == "4096"
    assert c["quantize"] == "Bitsandbytes" and c["model"] == "google/flan-t5-small" and c["json_output"] == "true"
    # 23 records (13 launcher, 10 router) over 39 physical lines: Args and the warm-up line went to engine_config.
    ev = q(store, "SELECT * FROM log_events WHERE source_id = $sid ORDER BY line_no", name)
    assert ev.height == 21
    assert ev.filter(pl.col("target") == "text_generation_launcher").height == 12
    assert ev.filter(pl.col("target") == "text_generation_router").height == 9
    assert ev["line_count"].sum() + 6 + 1 == 39
    first = ev.row(0, named=True)
    assert (first["message"], first["spans"], first["ts_ns"]) == ("Starting download process.", "download",
                                                                  ns("2024-02-21T05:09:46.815155Z"))
    assert ev.filter(pl.col("message") == "Shard ready in 5.607799614s")["spans"].to_list() == ["shard-manager"]
    warns = real("tgi/tgi_v1.2.0_json_launcher_and_router_startup_wrapped_openshift.log").read_text().count(
        '"level":"WARN"')
    assert ev.filter(pl.col("level") == "WARNING").height == warns == 9


def test_json_router_startup(store):
    c = config(store, "tgi_v1.4_json")
    assert c["max_batch_total_tokens"] == "133696"
    ev = q(store, "SELECT message FROM log_events WHERE source_id = $sid ORDER BY line_no", "tgi_v1.4_json")
    assert ev["message"].to_list() == ["Warming up model", "Connected"]


def test_json_record_cut_in_its_args_message(store):
    name = "tgi_v1.3_json_launcher"
    c = config(store, name)
    assert c["model_id"] == "mistralai/Mistral-7B-Instruct-v0.1" and c["rope_factor"] == "8.0"
    assert (c["max_batch_prefill_tokens"], c["max_input_length"], c["max_total_tokens"]) == ("4096", "4096", "8192")
    assert "otlp_endpoint" not in c  # its value was cut
    assert q(store, "SELECT clock_method FROM sources WHERE source_id = $sid", name).item() == "none"


def test_clock_and_time_span(store):
    # first_ns is the Connected line (the Success arrival, 51.437631 s - 0.611 s, is later); last_ns the Success.
    row = q(store, "SELECT clock_method, first_ns, last_ns FROM sources WHERE source_id = $sid", "tgi_v1.4dev").row(0)
    assert row == ("log_wallclock_utc", ns("2024-02-14T06:49:40.621798Z"), ns("2024-02-14T06:49:51.437631Z"))


# -- variants built from real lines with documented transformations ---------------------------------------------------

CHAT = real("tgi/tgi_v3.0_text_connected_and_chat_completions_success_2024-12-10.log").read_text().splitlines()[1]


def test_ansi_coloured_lines(tmp_path):
    """tracing-subscriber colours by default even into files: dim time, coloured level, bold span names,
    italic field names (router/src/logging.rs: colour unless LOG_COLORIZE=1)."""
    ts, rest = CHAT.split("  INFO ", 1)
    coloured = (f"\x1b[2m{ts}\x1b[0m \x1b[32m INFO\x1b[0m \x1b[1mchat_completions\x1b[0m\x1b[1m{{\x1b[0m"
                + rest[len("chat_completions{"):].replace("total_time=", "\x1b[3mtotal_time\x1b[0m\x1b[2m=\x1b[0m"))
    p = tmp_path / "ansi.log"
    p.write_text(coloured + "\n")
    with stallscope.open(":memory:") as s:
        s.ingest(p)
        r = s.sql("SELECT endpoint, e2e_latency_ns, output_tokens, finish_ns FROM requests").row(0)
        assert r == ("chat_completions", 735_200_735, 20, ns("2024-12-10T21:50:03.478010Z"))


def test_json_success_records(tmp_path):
    """`--json-output` Success records in the shape router/src/server.rs + logging.rs produce (flattened event,
    span fields as strings); no real sample exists, so they are built from the real text lines' values."""
    chat = ('{"timestamp":"2024-12-10T21:50:03.478010Z","level":"INFO","message":"Success","target":'
            '"text_generation_router::server","filename":"router/src/server.rs","line_number":622,"span":{'
            '"total_time":"735.200735ms","validation_time":"955.594µs","queue_time":"73.176µs","inference_time":'
            '"734.172108ms","time_per_token":"36.708605ms","seed":"Some(13465365087046561476)","name":"chat_completions"},'
            '"spans":[{"total_time":"735.200735ms","validation_time":"955.594µs","queue_time":"73.176µs",'
            '"inference_time":"734.172108ms","time_per_token":"36.708605ms","seed":"Some(13465365087046561476)",'
            '"name":"chat_completions"}]}')
    gen = ('{"timestamp":"2024-02-14T06:49:51.437631Z","level":"INFO","message":"Success","target":'
           '"text_generation_router::server","filename":"router/src/server.rs","line_number":299,"span":{"parameters":'
           '"GenerateParameters { best_of: None, max_new_tokens: Some(14), stop: [\\"\\\\n}\\"], seed: None }",'
           '"total_time":"611.286748ms","validation_time":"754.5µs","queue_time":"127.337µs","inference_time":'
           '"610.405028ms","time_per_token":"43.600359ms","seed":"None","name":"generate"},"spans":[]}')
    p = tmp_path / "json_success.log"
    p.write_text(chat + "\n" + gen + "\n")
    with stallscope.open(":memory:") as s:
        assert s.ingest(p)[0].parsed == 2
        rows = s.sql("SELECT endpoint, seed, output_tokens, max_tokens, params, validation_ns, finish_ns "
                     "FROM requests ORDER BY line_no").rows()
        assert rows[0] == ("chat_completions", 13465365087046561476, 20, None, None, 955_594,
                           ns("2024-12-10T21:50:03.478010Z"))
        assert rows[1][:4] == ("generate", None, 14, 14)
        assert rows[1][4] == 'GenerateParameters { best_of: None, max_new_tokens: Some(14), stop: ["\\n}"], seed: None }'


def test_v1_0_http_request_span_gives_the_trace_id(tmp_path):
    """Up to v1.0.x every request line sits in axum-tracing-opentelemetry's `HTTP request{…}` span."""
    ts, rest = real("tgi/tgi_v1.4dev_text_connected_and_success_2024-02-14.log").read_text().splitlines()[2].split(
        "  INFO ", 1)
    span = ("HTTP request{otel.name=POST /generate http.client_ip= http.flavor=1.1 http.host=localhost:8080 "
            "http.method=POST http.route=/generate http.scheme=HTTP http.target=/generate "
            "http.user_agent=python-requests/2.31.0 otel.kind=server trace_id=4bf92f3577b34da6a3ce929d0e0e4736}:")
    p = tmp_path / "v10.log"
    p.write_text(f"{ts}  INFO {span}{rest}\n")
    with stallscope.open(":memory:") as s:
        s.ingest(p)
        r = s.sql("SELECT request_id, endpoint, max_tokens, status FROM requests").row(0)
        assert r == ("4bf92f3577b34da6a3ce929d0e0e4736", "generate", 14, "ok")


# -- patterns ------------------------------------------------------------------------------------------------------

def test_patterns_cover_the_real_logs():
    # test_patterns checks every sample parses and occurs verbatim in its source; here, that there are many.
    assert sum(1 for p in tgi_mod.PATTERNS for s in p.samples if s.source) >= 25


# -- sniffing: every real log goes to its own parser, and only to it -------------------------------------------------

def _expected(folder: str, path: Path) -> str:
    if folder == "tgi":
        return "tgi_log"
    if folder == "sglang":
        return "sglang_log"
    return "bench_json" if path.suffix == ".json" else "vllm_log"


ALL_LOGS = [(d, p) for d in ("tgi", "sglang", "vllm", "vllm/excerpts") for p in sorted((REAL / d).glob("*"))
            if p.is_file()]


@pytest.mark.parametrize("folder,path", ALL_LOGS, ids=[p.name[:60] for _, p in ALL_LOGS])
def test_each_real_file_is_claimed_by_its_parser_only(folder, path):
    inp = InputFile(path)
    head = inp.head()
    names = {p.name for p in all_parsers()}
    claimed = {p.name for p in all_parsers() if p.sniff(head, inp)}
    want = _expected(folder, path)
    if want in names:
        assert claimed == {want}
        assert detect(inp)[0].name == want
    else:  # that parser is not in this checkout: at least ours must keep off
        assert not claimed & {"tgi_log", "sglang_log"} - {want}


# -- streaming: records that straddle block edges come out the same -----------------------------------------------

def _tables(s) -> dict:
    out = {}
    for t in ("requests", "request_events", "engine_config", "log_events", "engine_batches", "rejects"):
        df = s.table(t).drop("source_id")
        out[t] = df.sort(df.columns, nulls_last=True)
    out["sources"] = s.sql("SELECT records_parsed, records_skipped, records_rejected FROM sources").rows()
    return out


@pytest.mark.parametrize("name", ["tgi_v1.2.0_json_launcher_and_router_startup_wrapped_openshift.log",
                                  "tgi_v2.x_text_launcher_args_pretty_multiline_issue2238.log",
                                  "tgi_v2.2_text_error_chat_spans_and_shard_traceback_issue2310.log"])
def test_tiny_blocks_give_the_same_rows(monkeypatch, name):
    path = real(f"tgi/{name}")
    with stallscope.open(":memory:") as s:
        s.ingest(path)
        whole = _tables(s)
    orig = logrecords.iter_line_frames
    monkeypatch.setattr(logrecords, "iter_line_frames", lambda inp, **kw: orig(inp, block_bytes=61))
    with stallscope.open(":memory:") as s:
        s.ingest(path)
        tiny = _tables(s)
    for k in whole:
        if isinstance(whole[k], pl.DataFrame):
            assert whole[k].equals(tiny[k]), k
        else:
            assert whole[k] == tiny[k], k


# -- bad input ------------------------------------------------------------------------------------------------------

def test_invalid_utf8_line_is_rejected_and_the_rest_ingested(tmp_path):
    lines = real("tgi/tgi_v1.4dev_text_connected_and_success_2024-02-14.log").read_bytes().split(b"\n")
    lines.insert(1, b"2024-02-14T06:49:41.000000Z  WARN text_generation_router: router/src/main.rs:1: bad \xff\xfe")
    p = tmp_path / "tgi_bad_utf8.log"
    p.write_bytes(b"\n".join(lines))
    with stallscope.open(":memory:") as s:
        r = s.ingest(p)[0]
        assert r.ok and (r.parsed, r.skipped, r.rejected) == (2, 1, 1)
        assert s.sql("SELECT line_no, reason FROM rejects").rows() == [(2, "invalid UTF-8")]
        assert s.sql("SELECT count(*) FROM requests WHERE status = 'ok'").item() == 1


def test_cut_gzip_rejects_its_last_line_and_keeps_the_rest(tmp_path):
    data = b"".join(real(f"tgi/{n}").read_bytes() for n in (
        "tgi_v1.2.0_json_launcher_and_router_startup_wrapped_openshift.log",
        "tgi_v1.4dev_text_connected_and_success_2024-02-14.log"))
    z = gzip.compress(data)
    p = tmp_path / "tgi_cut.log.gz"
    p.write_bytes(z[: len(z) - 40])
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    partial = d.decompress(z[: len(z) - 40])
    with stallscope.open(":memory:") as s:
        r = s.ingest(p)[0]
        assert r.ok
        assert r.parsed + r.skipped + r.rejected == physical_lines(partial)
        rej = s.sql("SELECT line_no, reason FROM rejects").rows()
        assert rej[-1][0] == physical_lines(partial) and "gzip" in rej[-1][1]
        assert s.sql("SELECT value FROM engine_config WHERE key = 'max_batch_total_tokens'").item() == "16000"


def test_cut_json_record_that_is_not_args_is_rejected(tmp_path):
    data = real("tgi/tgi_v1.4_json_router_startup_k8s_2024-03-09.log").read_bytes()
    p = tmp_path / "tgi_cut.json.log"
    p.write_bytes(data[: data.rindex(b'"target"')])
    with stallscope.open(":memory:") as s:
        r = s.ingest(p)[0]
        assert r.ok and (r.parsed, r.rejected) == (2, 1)
        assert s.sql("SELECT line_no, reason FROM rejects").rows() == [
            (3, "JSON record that does not parse (cut off or corrupt), starting at line 3")]


def test_file_with_nothing_usable_fails_in_one_line(tmp_path):
    data = real("tgi/tgi_v1.4_json_router_startup_k8s_2024-03-09.log").read_bytes()
    p = tmp_path / "tgi_nothing.log"
    first = data.splitlines()[0]
    p.write_bytes(first[: first.index(b'"filename"') + 15] + b"\n")  # cut after its target: still TGI by content
    r = cli("ingest", p, "--db", ":memory:")
    assert r.returncode == 1
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "nothing usable" in err[0] and "1 rejected" in err[0], r.stderr


def test_cli_ingests_the_whole_folder():
    r = cli("ingest", REAL / "tgi", "--db", ":memory:")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("tgi_log") >= 16
