"""The SGLang log parser on the real scheduler logs in ../shared/real/sglang/: batch-line counts against a grep of the
raw files, exact field values, rejected spliced lines, line accounting, dates of time-only logs, streaming across
blocks, and bad input."""
from __future__ import annotations

import gzip
import os
import re
import zlib
from datetime import datetime, timezone

import polars as pl
import pytest

import stallscope
from stallscope.parsers import logrecords
import stallscope.parsers.sglang_log as sg_mod
import stallscope.parsers.tgi_log as tgi_mod
from stallscope.parsers import Options
from conftest import REAL, real
from helpers import by_source, cli, ingested_store, physical_lines

SGL = sorted(p.name for p in (REAL / "sglang").glob("*.log"))
MANGLED = "sglang_tqdm_interleaved_mangled_lines_pr25960.log"


def ns(text: str, tz=timezone.utc) -> int:
    return int(datetime.strptime(text, "%Y-%m-%d %H:%M:%S").replace(tzinfo=tz).timestamp()) * 1_000_000_000


@pytest.fixture(scope="module")
def store():
    s = ingested_store(real(f"sglang/{n}") for n in SGL)
    yield s
    s.close()


q = by_source


def batches(store, name: str) -> pl.DataFrame:
    return q(store, "SELECT * FROM engine_batches WHERE source_id = $sid ORDER BY line_no", name)


def test_all_thirteen_files_ingest(store):
    assert len(SGL) == 13
    assert store.sql("SELECT count(*) FROM sources WHERE parser = 'sglang_log'").item() == 13


@pytest.mark.parametrize("name", SGL)
def test_every_line_is_accounted_for(store, name):
    data = real(f"sglang/{name}").read_bytes()
    p, s, r = q(store, "SELECT records_parsed, records_skipped, records_rejected FROM sources WHERE source_id = $sid",
                name).row(0)
    assert p + s + r == physical_lines(data)
    assert r == q(store, "SELECT count(*) FROM rejects WHERE source_id = $sid", name).item()
    assert r == (5 if name == MANGLED else 0)


@pytest.mark.parametrize("name", SGL)
def test_batch_lines_match_a_grep_of_the_file(store, name):
    lines = real(f"sglang/{name}").read_text(encoding="utf-8").splitlines()
    want = {k: sum(1 for x in lines if re.search(rf"\b{k.capitalize()} batch[.,(]", x)) for k in ("prefill", "decode")}
    got = dict(q(store, "SELECT kind, count(*) FROM engine_batches WHERE source_id = $sid GROUP BY kind", name).rows())
    rejected = dict(q(store, "SELECT lower(split_part(reason, ' ', 1)), count(*) FROM rejects WHERE source_id = $sid "
                             "GROUP BY 1", name).rows())
    for k in ("prefill", "decode"):
        assert got.get(k, 0) + rejected.get(k, 0) == want[k], k
    if name != MANGLED:
        assert not rejected


def test_totals_over_the_folder(store):
    # 59 batch lines in the folder: 54 read, and the 5 spliced ones of pr25960 rejected.
    assert store.sql("SELECT count(*) FROM engine_batches").item() == 54
    assert store.sql("SELECT kind, count(*) FROM engine_batches GROUP BY kind ORDER BY kind").rows() == [
        ("decode", 29), ("prefill", 25)]


def test_chunked_prefill_2048(store):
    b = batches(store, "issue2255")
    assert b.height == 7 and (b["kind"] == "prefill").all()
    assert (b["new_tokens"] == 2048).all() and (b["new_seqs"] == 2).all()
    assert b["cached_tokens"].to_list() == [2048, 2031, 2014, 1997, 1980, 1963, 1946]
    assert b["running_reqs"].to_list() == [1, 2, 3, 4, 5, 6, 7]
    assert b["queued_reqs"].to_list() == [30, 48, 70, 85, 112, 128, 155]
    assert b["token_usage"].to_list() == [0.0, 0.0, 0.01, 0.01, 0.01, 0.01, 0.01]
    assert (b["cache_hit_rate_pct"] == 0.0).all() and (b["tp_rank"] == 0).all()
    assert b["ts_ns"][0] == ns("2024-11-29 10:28:25") and b["ts_ns"][6] == ns("2024-11-29 10:28:26")
    assert b["dp_rank"].is_null().all() and b["extra"].is_null().all()


def test_prefix_cache_heavy_prefills_and_uvicorn_lines(store):
    name = "issue6291"
    b = batches(store, name)
    assert b["new_tokens"].to_list() == [2, 4, 5]
    assert b["cached_tokens"].to_list() == [8027, 16030, 20050]
    assert b["running_reqs"].to_list() == [28, 30, 34] and b["tp_rank"].is_null().all()
    a = q(store, "SELECT * FROM log_events WHERE source_id = $sid AND kind = 'access'", name)
    assert a.height == 10
    assert a.select("http_method", "http_path", "http_status").unique().rows() == [("POST", "/v1/completions", 200)]
    assert (a["ts_ns"] == ns("2025-05-14 09:31:43")).all() and a["process"].is_null().all()


def test_decode_variants(store):
    b = batches(store, "issue4407")  # 0.4.4: largest-len and a trailing ", "
    assert b["running_reqs"].to_list() == [509, 454, 397, 346, 301, 235, 182]
    assert b["kv_tokens"][0] == 180776 and b["gen_throughput_tps"][0] == 7897.87
    assert (b["extra"] == "largest-len: 0").all()

    b = batches(store, "pr22331")  # >=0.5.10: comma style, cuda graph
    assert b.height == 8 and b["cuda_graph"].all()
    assert b["gen_throughput_tps"].to_list() == [144.95, 140.27, 136.39, 139.89, 144.10, 157.64, 153.78, 157.11]
    assert (b["kv_tokens"] == 20800).all() and (b["token_usage"] == 0.29).all()

    b = batches(store, "issue938")  # 0.2: a bare line, no prefix, no time
    r = b.row(0, named=True)
    assert (r["kind"], r["ts_ns"], r["running_reqs"], r["kv_tokens"], r["token_usage"], r["gen_throughput_tps"],
            r["queued_reqs"]) == ("decode", None, 1010, 55006, 0.93, 1397.13, 12279)
    assert q(store, "SELECT clock_method FROM sources WHERE source_id = $sid", "issue938").item() == "none"


def test_npu_ep_rank_spec_decoding(store):
    name = "sglkernelnpu_pr608"
    b = batches(store, name)
    assert b["kind"].to_list() == ["prefill", "decode", "decode", "decode"]
    assert (b["tp_rank"] == 0).all() and (b["ep_rank"] == 0).all()
    p = b.row(0, named=True)
    assert (p["new_seqs"], p["new_tokens"], p["cached_tokens"], p["pending_tokens"], p["cuda_graph"],
            p["input_throughput_tps"]) == (8, 54400, 482304, 0, False, 2793.64)
    d = b.slice(1)
    assert d["accept_len"].to_list() == [3.05, 2.63, 2.83] and d["accept_rate"].to_list() == [0.68, 0.54, 0.61]
    assert d["cuda_graph"].all() and d["gen_throughput_tps"].to_list() == [239.06, 631.96, 648.87]
    a = q(store, "SELECT count(*) FROM log_events WHERE source_id = $sid AND kind = 'access'", name).item()
    assert a == 6


def test_hybrid_mamba_usage(store):
    b = batches(store, "pr30047")
    assert b["token_usage"].to_list() == [0.14, 0.20, 0.27, 0.33, 0.40]
    assert b["mamba_usage"].to_list() == [0.20, 0.30, 0.40, 0.50, 0.60]
    assert b["pending_tokens"].to_list() == [109585, 340001, 298084, 255240, 213301]
    assert b["new_tokens"].to_list() == [43008, 43264, 43008, 43904, 43008]
    assert (b["cuda_graph"] == False).all()  # noqa: E712  (`npu graph: False`)


def test_comma_style_with_stray_lines(store):
    name = "pr13023"
    b = batches(store, name)
    assert b.height == 9 and b["new_tokens"].to_list() == [771, 3341, 895] + [4096] * 6
    assert b["queued_reqs"].to_list()[3:] == [186, 170, 153, 141, 125, 120]
    ev = q(store, "SELECT * FROM log_events WHERE source_id = $sid", name).to_dicts()
    assert [(e["line_no"], e["line_count"], e["kind"], e["message"]) for e in ev] == [(3, 2, "message", "Benchmark...")]
    assert ev[0]["ts_ns"] == ns("2025-11-11 04:28:01")


def test_spliced_lines_are_rejected_not_misread(store):
    assert batches(store, MANGLED).height == 0
    rej = q(store, "SELECT line_no, reason FROM rejects WHERE source_id = $sid ORDER BY line_no", MANGLED).rows()
    assert [n for n, _ in rej] == [1, 2, 3, 4, 5]
    assert all("'#cached-tounning-req'" in r for n, r in rej if n != 4)
    assert "'token usaccept rate'" in rej[3][1] and rej[3][1].startswith("Decode batch line")
    a = q(store, "SELECT http_path, http_status FROM log_events WHERE source_id = $sid", MANGLED).rows()
    assert a == [("/v1/completions", None)]  # cut before its status


def test_finish_record_wrapped_over_nine_lines(store):
    name = "pr11146"
    r = q(store, "SELECT * FROM requests WHERE source_id = $sid", name).to_dicts()
    assert len(r) == 1
    r = r[0]
    assert r["request_id"] == r["server_request_id"] == "24fa397b7cab4418b3f6a5c903ae310f"
    assert (r["prompt_tokens"], r["output_tokens"], r["cached_tokens"]) == (50, 97, 1)
    assert (r["e2e_latency_ns"], r["finish_reason"], r["status"], r["engine"]) == (663_267_612, "stop", "ok", "sglang")
    assert r["finish_ns"] == ns("2025-10-01 21:25:35") and r["arrival_ns"] == r["finish_ns"] - 663_267_612
    ev = q(store, "SELECT event, request_id FROM request_events WHERE source_id = $sid", name).rows()
    assert ev == [("finished", "24fa397b7cab4418b3f6a5c903ae310f")]
    assert q(store, "SELECT records_parsed FROM sources WHERE source_id = $sid", name).item() == 9


def test_server_args_cut_line(store):
    c = dict(q(store, "SELECT key, value FROM engine_config WHERE source_id = $sid", "pr6170").rows())
    assert (c["chunked_prefill_size"], c["max_prefill_tokens"], c["schedule_policy"]) == ("8192", "16384", "fcfs")
    assert c["tp_size"] == c["tensor_parallel_size"] == "1" and c["pp_size"] == "1"
    assert c["model"] == c["model_path"] == "qwen/qwen2.5-0.5b-instruct" and c["engine"] == "sglang"
    assert c["show_time_cost"] == "False" and c["max_running_requests"] is None
    assert not any(k.startswith("enable_me") for k in c)  # the cut last field
    assert any("kept its 46 complete fields" in n for n in store.notes["sglang_v0.4.6_server_args_line_truncated_pr6170.log"])
    num = dict(q(store, "SELECT key, value_num FROM engine_config WHERE source_id = $sid", "pr6170").rows())
    assert num["chunked_prefill_size"] == 8192.0 and num["log_requests"] == 0.0


def test_bench_serving_summary_is_one_event(store):
    ev = q(store, "SELECT * FROM log_events WHERE source_id = $sid", "issue2805").to_dicts()
    assert len(ev) == 1 and ev[0]["kind"] == "bench_summary" and ev[0]["line_count"] == 18
    assert "Successful requests:                     1648" in ev[0]["message"]
    assert "Max reqeuest concurrency:" in ev[0]["message"]


def test_time_only_log_dates_from_the_file_time(tmp_path):
    src = real("sglang/sglang_v0.2-0.3_decode_hhmmss_tp0_issue1270.log")
    p = tmp_path / "hhmmss.log"
    p.write_bytes(src.read_bytes())
    mtime = ns("2024-08-31 12:00:00")
    os.utime(p, ns=(mtime, mtime))
    with stallscope.open(":memory:") as s:
        s.ingest(p)
        b = s.sql("SELECT ts_ns, kv_tokens FROM engine_batches ORDER BY line_no")
        assert b["ts_ns"][0] == ns("2024-08-31 04:40:55") and b["ts_ns"][9] == ns("2024-08-31 04:40:57")
        assert b["kv_tokens"].to_list() == [4078, 4158, 4238, 3902, 3942, 3982, 4022, 4062, 4102, 4142]
        method, note = s.sql("SELECT clock_method, clock_note FROM sources").row(0)
        assert method == "log_wallclock" and "modification time" in note and "2024-08-31" in note
        # Before 04:40:57 on that day the log cannot have been written yet: the day before.
    mtime = ns("2024-08-31 04:00:00")
    os.utime(p, ns=(mtime, mtime))
    with stallscope.open(":memory:") as s:
        s.ingest(p)
        assert s.sql("SELECT min(ts_ns) FROM engine_batches").item() == ns("2024-08-30 04:40:55")


def test_time_only_log_takes_its_date_from_another_source_and_counts_midnights(tmp_path):
    line = real("sglang/sglang_v0.2-0.3_decode_hhmmss_tp0_issue1270.log").read_text().splitlines()[0]
    body = line[len("[04:40:55 TP0] "):]
    p = tmp_path / "midnight.log"
    p.write_text("".join(f"[{t} TP0] {body}\n" for t in ("23:59:58", "23:59:59", "00:00:01", "23:59:59",
                                                             "00:00:00")))
    with stallscope.open(":memory:") as s:
        # A TGI log with absolute UTC times, ingested in the same call (its timestamps: 2024-02-14 06:49 UTC).
        s.ingest([real("tgi/tgi_v1.4dev_text_connected_and_success_2024-02-14.log"), p])
        ts = s.sql("SELECT ts_ns FROM engine_batches ORDER BY line_no")["ts_ns"].to_list()
        base = ns("2024-02-13 23:59:58")  # the date that puts 23:59:58 nearest 2024-02-14 06:49
        assert [t - base for t in ts] == [x * 1_000_000_000 for x in (0, 1, 3, 86401, 86402)]
        note = s.sql("SELECT clock_note FROM sources WHERE path LIKE '%midnight%'").item()
        assert "from source 1" in note and "2 midnight roll-over(s)" in note


def test_local_time_zone_option():
    with stallscope.open(":memory:") as s:
        s.ingest(real("sglang/sglang_v0.3.6-0.4.3_prefill_chunked_2048_cache_hit_rate_issue2255.log"),
                 options=Options(tz="America/New_York"))
        assert s.sql("SELECT min(ts_ns) FROM engine_batches").item() == ns("2024-11-29 15:28:25")
        assert "America/New_York" in s.sql("SELECT clock_note FROM sources").item()


# -- variants built from real lines --------------------------------------------------------------------------------

def test_tqdm_debris_ray_prefix_and_a_cut_line(tmp_path):
    chunk = real("sglang/sglang_v0.3.6-0.4.3_prefill_chunked_2048_cache_hit_rate_issue2255.log").read_text().splitlines()
    decode = real("sglang/sglang_v0.5.10plus_decode_cuda_graph_tp0_pr22331.log").read_text().splitlines()[0]
    debris = real(f"sglang/{MANGLED}").read_text().splitlines()[0].split("[")[0]  # "  0%|     ..."
    p = tmp_path / "variants.log"
    p.write_text("\n".join([
        debris + chunk[0],                                   # tqdm bar glued in front: stripped, line read
        "(SGLangEngine pid=41820) " + decode,                # Ray actor prefix
        decode.replace("[2026-04-08 14:05:21 TP0]", "[2026-04-08 14:05:21 DP1 TP0 EP3]"),
        chunk[1][: chunk[1].index("#queue-req") + 12],       # cut before its last value: "#queue-req: "
        chunk[2][: chunk[2].index(", token usage")],        # cut after a complete field that no format ends with
        debris.strip(),                                      # a lone tqdm bar
    ]) + "\n")
    with stallscope.open(":memory:") as s:
        r = s.ingest(p)[0]
        assert r.ok and (r.parsed, r.skipped, r.rejected) == (3, 1, 2)
        b = s.sql("SELECT * FROM engine_batches ORDER BY line_no").to_dicts()
        assert [x["line_no"] for x in b] == [1, 2, 3]
        assert b[0]["cached_tokens"] == 2048 and b[0]["new_tokens"] == 2048
        assert b[1]["process"] == "SGLangEngine pid=41820" and b[1]["gen_throughput_tps"] == 144.95
        assert (b[2]["dp_rank"], b[2]["tp_rank"], b[2]["ep_rank"]) == (1, 0, 3)
        rej = s.sql("SELECT line_no, reason FROM rejects ORDER BY line_no").rows()
        assert rej[0][0] == 4 and "line whose fields do not fit" in rej[0][1]
        assert rej[1] == (5, "Prefill batch line cut off after 'cache hit rate'; not read")
        assert any("tqdm" in n for n in r.notes)


def test_layouts_known_only_from_the_wheels(tmp_path):
    """0.1.x (no label, `new fill batch`), 0.2.0 (`[gpu_id=N]`), 0.2.x mixed chunk, 0.5.5+ `[iter]`: the format
    strings of the PyPI wheels (tgi-sglang-formats.md §2.2-2.3), filled in; no real sample of them exists."""
    p = tmp_path / "old.log"
    p.write_text(
        "new fill batch. #seq: 1. #cached_token: 0. #new_token: 15. #remaining_req: 2. #running_req: 3. "
        "tree_cache_hit_rate: 12.50%.\n"
        "#running-req: 1, #token: 68, token usage: 0.00, gen throughput (token/s): 32.71, #queue-req: 0\n"
        "[gpu_id=0] Prefill batch. #new-seq: 1, #new-token: 9, #cached-token: 0, cache hit rate: 0.00%, "
        "#running-req: 0, #queue-req: 0\n"
        "[12:00:01 TP0] Prefill batch(mixed #running-req: 7). #new-seq: 1, #new-token: 512, #cached-token: 0, "
        "cache hit rate: 0.00%, #queue-req: 0\n"
        "[2025-11-11 04:28:01 TP0] Decode batch [1234], #running-req: 4, #token: 900, token usage: 0.01, "
        "cuda graph: True, gen throughput (token/s): 88.00, #queue-req: 0, \n")
    with stallscope.open(":memory:") as s:
        r = s.ingest(p)[0]
        assert r.ok and (r.parsed, r.rejected) == (5, 0)
        rows = s.sql("SELECT kind, new_seqs, new_tokens, cached_tokens, running_reqs, queued_reqs, kv_tokens, "
                     "cache_hit_rate_pct, forward_iter, extra FROM engine_batches ORDER BY line_no").rows()
        assert rows == [
            ("prefill", 1, 15, 0, 3, 2, None, 12.5, None, None),
            ("decode", None, None, None, 1, 0, 68, None, None, None),
            ("prefill", 1, 9, 0, 0, 0, None, 0.0, None, "gpu_id=0"),
            ("mixed", 1, 512, 0, 7, 0, None, 0.0, None, None),
            ("decode", None, None, None, 4, 0, 900, None, 1234, None),
        ]


@pytest.mark.parametrize("name", ["sglang_log_requests_finish_line_wrapped_pr11146.log",
                                  "sglang_v0.4.6_prefill_no_tp_prefix_with_uvicorn_access_issue6291.log",
                                  "sglang_v0.5.x_prefill_comma_style_trailing_comma_pr13023.log",
                                  "sglang_v0.4.0_bench_serving_text_summary_truncated_issue2805.log"])
def test_tiny_blocks_give_the_same_rows(monkeypatch, name):
    path = real(f"sglang/{name}")

    def tables():
        with stallscope.open(":memory:") as s:
            s.ingest(path)
            out = {t: s.table(t).drop("source_id") for t in ("requests", "engine_batches", "log_events",
                                                               "engine_config", "rejects")}
            out = {t: df.sort(df.columns, nulls_last=True) for t, df in out.items()}
            out["n"] = s.sql("SELECT records_parsed, records_skipped, records_rejected FROM sources").rows()
            return out

    whole = tables()
    orig = logrecords.iter_line_frames
    monkeypatch.setattr(logrecords, "iter_line_frames", lambda inp, **kw: orig(inp, block_bytes=53))
    tiny = tables()
    for k, v in whole.items():
        assert (v.equals(tiny[k]) if isinstance(v, pl.DataFrame) else v == tiny[k]), k


def test_patterns_cover_the_real_logs():
    # test_patterns checks every sample parses and occurs verbatim in its source; here, that there are many.
    assert sum(1 for p in sg_mod.PATTERNS for s in p.samples if s.source) >= 25


# -- bad input ------------------------------------------------------------------------------------------------------

def test_invalid_utf8_and_cut_gzip(tmp_path):
    data = b"".join(real(f"sglang/{n}").read_bytes() for n in (
        "sglang_v0.3.6-0.4.3_prefill_chunked_2048_cache_hit_rate_issue2255.log",
        "sglang_v0.4.4_decode_largest_len_trailing_comma_issue4407.log"))
    lines = data.split(b"\n")
    lines[3] = lines[3].replace(b"Prefill", b"Pre\xc3\x28fill")
    data = b"\n".join(lines)
    p = tmp_path / "bad.log"
    p.write_bytes(data)
    with stallscope.open(":memory:") as s:
        r = s.ingest(p)[0]
        assert r.ok and (r.parsed, r.rejected) == (13, 1)
        assert s.sql("SELECT line_no, reason FROM rejects").rows() == [(4, "invalid UTF-8")]
        assert s.sql("SELECT count(*) FROM engine_batches").item() == 13
    z = gzip.compress(data)
    cut = z[: len(z) * 2 // 3]
    g = tmp_path / "cut.log.gz"
    g.write_bytes(cut)
    partial = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(cut)
    with stallscope.open(":memory:") as s:
        r = s.ingest(g)[0]
        assert r.ok and r.parsed + r.skipped + r.rejected == physical_lines(partial)
        rej = s.sql("SELECT line_no, reason FROM rejects ORDER BY line_no").rows()
        assert rej[0] == (4, "invalid UTF-8") and "gzip" in rej[-1][1] and rej[-1][0] == physical_lines(partial)
        assert s.sql("SELECT count(*) FROM engine_batches").item() == physical_lines(partial) - 2


def test_cli_ingests_the_whole_folder():
    r = cli("ingest", REAL / "sglang", "--db", ":memory:")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("sglang_log") >= 13
