"""Clock alignment: benchmark runs matched to the real 0.8.3 server log (every ingest order), to server rows
without finish lines, across a wrong client zone; send-time offsets and trace-step refinement recovered from
synthetic runs with a known clock; the pure functions on small cases."""
from __future__ import annotations

import datetime as dt
import json

import numpy as np
import polars as pl
import pytest

import stallscope
from stallscope.ingest import align
from stallscope.parsers import Options
from conftest import real

LOG = "vllm/v0_0.8.3_ray_tp4pp2_llama70b_full_server_log_800req_llmk8s.log"
RUNS = ["01", "04", "16", "inf"]
BENCH = {q: f"vllm/bench_serving_0.8.3_llama70b_tp4pp2_sharegpt_qps_{q}_llmk8s.json" for q in RUNS}
# The log's non-benchmark requests: the chat request and the four warm-up "test prompt" requests.
NOT_BENCH = {"chatcmpl-8d50639d633d4cda959507475b226dfd", "cmpl-db4066929c294a489173c390a0497566-0",
             "cmpl-5eee83afd99a4958acedbc7e2c393b49-0", "cmpl-a62c821025b44039815bd638f592b3df-0",
             "cmpl-336572b2c40b42a89093010f00106ebb-0"}

JOINED = """
    SELECT regexp_extract(s.path, 'qps_([0-9a-z]+)_', 1) AS q, b.request_index, b.server_request_id,
           b.prompt_tokens AS bench_len, r.prompt_tokens AS server_len, b.arrival_ns, r.arrival_ns AS server_ns,
           r.request_index - min(r.request_index) OVER (PARTITION BY b.source_id) AS server_pos,
           b.e2e_latency_ns, r.finish_ns AS server_finish_ns
    FROM requests b JOIN sources s ON s.source_id = b.source_id
    LEFT JOIN requests r ON r.kind = 'server' AND r.request_id = b.server_request_id
    WHERE b.kind = 'client'"""


def _bench_paths(runs=RUNS):
    return [real(BENCH[q]) for q in runs]


@pytest.fixture(scope="module")
def joined_one_call():
    s = stallscope.open(":memory:")
    rep = s.ingest(_bench_paths() + [real(LOG)])
    assert all(r.ok for r in rep), [r.message for r in rep]
    out = s.sql(JOINED)
    sources = s.sql("SELECT path, clock_method, clock_offset_ns, clock_residual_ns, clock_note FROM sources "
                    "WHERE parser = 'bench_json' ORDER BY path")
    yield s, out, sources, rep.notes
    s.close()


def test_real_log_joins_all_800_benchmark_requests(joined_one_call):
    s, j, sources, notes = joined_one_call
    assert j.height == 800
    assert j["server_request_id"].null_count() == 0
    assert j["server_request_id"].n_unique() == 800
    assert (j["bench_len"] == j["server_len"]).all()
    assert not set(j["server_request_id"]) & NOT_BENCH
    # Every request's send sits inside (within 1 s of the centre of) its server Received second.
    resid = (j["arrival_ns"] - j["server_ns"] - 500_000_000).abs()
    assert resid.max() < 10**9
    assert sources["clock_method"].to_list() == ["matched_server_log"] * 4
    assert (sources["clock_residual_ns"] < 10**9).all()
    assert len(notes) == 4 and all("200 requests joined" in n for n in notes)


def test_real_matching_order_is_the_documented_one(joined_one_call):
    """SOURCES.md: same order at qps 1 and 4 (200/200), 198/200 at qps 16, 31/200 at qps inf."""
    _, j, _, _ = joined_one_call
    in_order = j.group_by("q").agg((pl.col("request_index") == pl.col("server_pos")).sum().alias("n"))
    assert dict(in_order.iter_rows()) == {"01": 200, "04": 200, "16": 198, "inf": 31}


def test_real_matches_agree_with_the_server_finish_lines(joined_one_call):
    """A request's client latency fits between its server Received and Finished seconds (1-s resolution)."""
    _, j, _, _ = joined_one_call
    c = (j["server_ns"] - j["server_finish_ns"] + j["e2e_latency_ns"]).abs()
    assert c.max() < 10**9


def test_real_offsets_sit_near_the_date_anchor(joined_one_call):
    s, _, sources, _ = joined_one_call
    for path, offset, note in sources.select("path", "clock_offset_ns", "clock_note").iter_rows():
        anchor = s.sql("SELECT CAST(c.value AS BIGINT) FROM engine_config c JOIN sources USING (source_id) "
                       "WHERE path = ? AND key = 'run_start_anchor_ns'", [path]).item()
        # The client's date and the server log share one clock here (both pods UTC): the run start found on
        # the server clock is within a second of date + 0.5 s - duration.
        assert abs(offset - anchor) < 10**9, path
        assert "server - client date anchor" in note and "200/200 requests" in note


@pytest.mark.parametrize("order", ["log_first", "bench_first", "interleaved"])
def test_separate_ingest_calls_align_in_any_order(joined_one_call, order):
    _, want, _, _ = joined_one_call
    batches = {"log_first": [[real(LOG)], _bench_paths()],
               "bench_first": [_bench_paths(), [real(LOG)]],
               "interleaved": [_bench_paths(["16"]), [real(LOG)], _bench_paths(["inf", "01", "04"])]}[order]
    s = stallscope.open(":memory:")
    for batch in batches:
        assert all(r.ok for r in s.ingest(batch))
    got = s.sql(JOINED)
    key = ["q", "request_index", "server_request_id", "arrival_ns"]
    assert got.select(key).sort(key[:2]).equals(want.select(key).sort(key[:2]))


def test_alignment_is_idempotent(joined_one_call):
    s, want, _, _ = joined_one_call
    align.align_store(s.con)
    align.align_store(s.con)
    assert s.sql(JOINED).sort(["q", "request_index"]).equals(want.sort(["q", "request_index"]))
    assert s.sql("SELECT count(*) FROM engine_config WHERE origin = 'bench_clock'").item() == 4 * 6


def test_token_instants_follow_the_aligned_arrival(joined_one_call):
    s, _, _, _ = joined_one_call
    bad = s.sql("""
        SELECT count(*) FROM token_gaps g JOIN requests r ON r.source_id = g.source_id AND r.request_id = g.request_id
        WHERE r.kind = 'client' AND g.end_ns <> r.arrival_ns + r.ttft_ns + (
              SELECT sum(g2.gap_ns) FROM token_gaps g2 WHERE g2.source_id = g.source_id
                 AND g2.request_id = g.request_id AND g2.gap_index <= g.gap_index)""").item()
    assert bad == 0
    n, known = s.sql("SELECT count(*), count(first_token_ns) FROM requests WHERE kind = 'client'").row(0)
    assert n == known == 800


# -- server rows as a log parser writes them (mimic), to vary what the log holds --------------------------------

def _server_rows(path) -> tuple[pl.DataFrame, pl.DataFrame]:
    """`Received request` and `Finished request` lines of a vLLM 0.8 log, extracted column-wise."""
    text = pl.read_csv(path, has_header=False, separator="\x01", quote_char=None, new_columns=["text"],
                       schema_overrides={"text": pl.String}).with_row_index("line_no", 1)
    stamp = (pl.lit("2025-") + pl.col("text").str.extract(r"^INFO (\d\d-\d\d \d\d:\d\d:\d\d) ")) \
        .str.to_datetime("%Y-%m-%d %H:%M:%S", time_zone="UTC").dt.epoch("ns")
    rec = text.filter(pl.col("text").str.contains(r"\] Received request \S+: ")).select(
        pl.col("line_no").cast(pl.Int64), stamp.alias("arrival_ns"),
        pl.col("text").str.extract(r"Received request (\S+?): ").alias("request_id"),
        pl.col("text").str.extract(r"prompt_token_ids: (\[[\d, ]*\]|None), ").alias("ids"))
    rec = rec.with_columns(prompt_tokens=pl.when(pl.col("ids") == "None").then(None)
                           .otherwise(pl.col("ids").str.count_matches(",") + 1).cast(pl.Int32)) \
        .with_row_index("request_index").drop("ids")
    fin = text.filter(pl.col("text").str.contains(r"\] Finished request \S+\.$")).select(
        pl.col("line_no").cast(pl.Int64), stamp.alias("ts_ns"),
        pl.col("text").str.extract(r"Finished request (\S+?)\.$").alias("request_id"))
    return rec, fin


def _add_server_source(store, rec: pl.DataFrame, fin: pl.DataFrame | None, name: str = "mimic.log") -> int:
    con = store.con
    sid = con.execute("SELECT coalesce(max(source_id), 0) + 1 FROM sources").fetchone()[0]
    con.execute("INSERT INTO sources (source_id, path, format, parser, sha256) VALUES (?, ?, 'vllm_log', "
                "'mimic', ?)", [sid, f"/tmp/{name}", f"mimic-{sid}"])
    req = rec.select(pl.lit(sid).alias("source_id"), "line_no", "request_id",
                     pl.col("request_index").cast(pl.Int32), pl.col("request_id").alias("server_request_id"),
                     pl.lit("vllm").alias("engine"), pl.lit("server").alias("kind"), "arrival_ns", "prompt_tokens")
    con.register("_srv", req.to_arrow())
    con.execute("INSERT INTO requests BY NAME SELECT * FROM _srv")
    con.unregister("_srv")
    if fin is not None:
        ev = fin.select(pl.lit(sid).alias("source_id"), "line_no", "request_id", pl.lit("finished").alias("event"),
                        "ts_ns")
        con.register("_ev", ev.to_arrow())
        con.execute("INSERT INTO request_events BY NAME SELECT * FROM _ev")
        con.unregister("_ev")
    return sid


def test_server_rows_without_finish_lines_still_join_every_request(joined_one_call):
    """V1 logs have no `Finished request` line: matching uses lengths and arrival order only."""
    _, with_fin, _, _ = joined_one_call
    rec, _ = _server_rows(real(LOG))
    s = stallscope.open(":memory:")
    s.ingest(_bench_paths())
    _add_server_source(s, rec, None)
    notes = align.align_store(s.con)
    assert len(notes) == 4
    j = s.sql(JOINED)
    assert j["server_request_id"].null_count() == 0 and (j["bench_len"] == j["server_len"]).all()
    assert ((j["arrival_ns"] - j["server_ns"] - 500_000_000).abs() <= 500_000_000).all()
    # Where the order is unambiguous the pairs are the same as with finish lines.
    key = ["q", "request_index", "server_request_id"]
    for q in ("01", "04"):
        assert j.filter(q=q).select(key).sort(key).equals(with_fin.filter(q=q).select(key).sort(key))


def test_a_wrong_client_zone_is_absorbed_in_whole_hours():
    s = stallscope.open(":memory:")
    s.ingest([real(LOG)])  # the log read as UTC
    s.ingest(_bench_paths(), options=Options(tz="America/New_York"))  # dates read 4 h later than they were
    j = s.sql(JOINED)
    assert j["server_request_id"].null_count() == 0 and (j["bench_len"] == j["server_len"]).all()
    notes = s.sql("SELECT clock_note FROM sources WHERE parser = 'bench_json'").to_series()
    assert all("-4.00 h shift" in n for n in notes)


def test_a_duplicate_run_does_not_steal_another_window(tmp_path):
    """Two files of the same run compete for one window: the first gets it, the copy stays on its date."""
    obj = json.loads(real(BENCH["04"]).read_text())
    obj["label"] = "copy"
    copy = tmp_path / "copy.json"
    copy.write_text(json.dumps(obj))
    s = stallscope.open(":memory:")
    s.ingest(_bench_paths(["04"]) + [copy, real(LOG)])
    rows = s.sql("SELECT s.path, s.clock_method, count(r.server_request_id) FROM sources s JOIN requests r "
                 "USING (source_id) WHERE s.parser = 'bench_json' GROUP BY ALL ORDER BY 3").rows()
    assert [r[1:] for r in rows] == [("bench_date_minus_duration", 0), ("matched_server_log", 200)]


# -- synthetic runs with a known clock --------------------------------------------------------------------------

T0 = 1_744_647_384_123_456_789  # true epoch ns of the first send
PERF0 = 81_234.5678  # perf_counter value of the first send


def _simulate(seed: int, n: int = 80, rate: float = 4.0):
    """A small continuous-batching engine: one prefill per step (longer steps), decodes every step; the client
    receives each chunk 1 ms + Exp(0.5 ms) after its step ends. Returns the bench run and the step ends."""
    rng = np.random.default_rng(seed)
    send = np.concatenate([[0.0], np.cumsum(rng.exponential(1 / rate, n - 1))])
    plen, olen = rng.integers(50, 1500, n), rng.integers(10, 120, n)
    t, ends, waiting, running, nxt, done = 0.0, [], [], {}, 0, 0
    toks: list[list[float]] = [[] for _ in range(n)]
    while done < n:  # test fixture: one iteration per engine step
        while nxt < n and send[nxt] + 5e-4 <= t:
            waiting.append(nxt)
            nxt += 1
        if not waiting and not running:
            t = send[nxt] + 5e-4
            continue
        pre = waiting.pop(0) if waiting else None
        t += 0.018 + 5e-5 * len(running) + rng.normal(0, 3e-4) + (4e-5 * plen[pre] if pre is not None else 0.0)
        ends.append(t)
        for r in list(running):
            toks[r].append(t)
            running[r] -= 1
            if running[r] == 0:
                del running[r]
                done += 1
        if pre is not None:
            toks[pre].append(t)
            running[pre] = olen[pre] - 1
            if running[pre] == 0:
                del running[pre]
                done += 1
    delays = [1e-3 + rng.exponential(5e-4, len(x)) for x in toks]
    client = [np.asarray(x) + d for x, d in zip(toks, delays)]
    duration = float(max(c[-1] for c in client))
    end = dt.datetime.fromtimestamp((T0 + duration * 1e9 + 0.3e9) / 1e9, dt.timezone.utc)  # saved 0.3 s later
    run = {"date": end.strftime("%Y%m%d-%H%M%S"), "backend": "vllm", "label": "synthetic", "model_id": "m",
           "tokenizer_id": "m", "num_prompts": n, "request_rate": rate, "burstiness": 1.0, "max_concurrency": None,
           "duration": duration, "completed": n, "failed": 0, "total_input_tokens": int(plen.sum()),
           "total_output_tokens": int(olen.sum()), "request_throughput": n / duration, "request_goodput": None,
           "output_throughput": 1.0, "total_token_throughput": 1.0,
           "input_lens": plen.tolist(), "output_lens": olen.tolist(),
           "ttfts": [float(c[0] - s) for c, s in zip(client, send)],
           "itls": [np.diff(c).tolist() for c in client],
           "latencies": [float(c[-1] - s) for c, s in zip(client, send)],
           "start_times": (PERF0 + send).tolist(), "errors": [""] * n, "generated_texts": [""] * n}
    return {"run": run, "send_s": send, "plen": plen,
            "step_end_ns": T0 + np.round(np.asarray(ends) * 1e9).astype(np.int64),
            "true_offset_ns": T0 - round(PERF0 * 1e9), "mean_delay_ns": float(np.mean(np.concatenate(delays))) * 1e9,
            "finish_s": np.array([c[-1] for c in client])}


def _add_steps(store, step_end_ns: np.ndarray) -> int:
    con = store.con
    sid = con.execute("SELECT coalesce(max(source_id), 0) + 1 FROM sources").fetchone()[0]
    con.execute("INSERT INTO sources (source_id, path, format, parser, sha256) VALUES (?, '/tmp/trace.json', "
                "'kineto_trace', 'kineto', ?)", [sid, f"trace-{sid}"])
    steps = pl.DataFrame({"source_id": sid, "step_id": sid * 10**9 + np.arange(step_end_ns.size),
                          "step_index": np.arange(step_end_ns.size, dtype=np.int32),
                          "gpu_start_ns": step_end_ns - 15_000_000, "gpu_end_ns": step_end_ns})
    con.register("_steps", steps.to_arrow())
    con.execute("INSERT INTO steps BY NAME SELECT * FROM _steps")
    con.unregister("_steps")
    return sid


def test_start_times_offset_from_server_buckets(tmp_path):
    sim = _simulate(1)
    p = tmp_path / "synthetic.json"
    p.write_text(json.dumps(sim["run"]))
    s = stallscope.open(":memory:")
    # The server sees each request 0.5 ms after the send and logs it at 1-s resolution.
    arrival = T0 + np.round(sim["send_s"] * 1e9).astype(np.int64) + 500_000
    rec = pl.DataFrame({"line_no": np.arange(arrival.size) + 1, "arrival_ns": arrival // 10**9 * 10**9,
                        "request_id": [f"cmpl-{i:032x}-0" for i in range(arrival.size)],
                        "prompt_tokens": sim["plen"].astype(np.int32), "request_index": np.arange(arrival.size)})
    _add_server_source(s, rec, None)
    s.ingest([p])
    method, offset, residual = s.sql("SELECT clock_method, clock_offset_ns, clock_residual_ns FROM sources "
                                     "WHERE parser = 'bench_json'").row(0)
    assert method == "matched_server_log"
    # 80 one-second buckets intersected: the offset is known to a few tens of ms (0.5 ms network delay aside).
    assert abs(offset - sim["true_offset_ns"]) < 50_000_000
    assert residual < 600_000_000
    ids = s.sql("SELECT request_index, server_request_id FROM requests WHERE kind = 'client' ORDER BY 1").rows()
    assert all(sid == f"cmpl-{i:032x}-0" for i, sid in ids)


def test_trace_steps_refine_the_date_anchor(tmp_path):
    sim = _simulate(2)
    p = tmp_path / "synthetic.json"
    p.write_text(json.dumps(sim["run"]))
    s = stallscope.open(":memory:")
    ends = sim["step_end_ns"]
    # A profiler window of 5 s in the middle of the run.
    _add_steps(s, ends[(ends > T0 + 4 * 10**9) & (ends < T0 + 9 * 10**9)])
    rep = s.ingest([p])
    method, offset, residual, note = s.sql(
        "SELECT clock_method, clock_offset_ns, clock_residual_ns, clock_note FROM sources WHERE parser = 'bench_json'"
    ).row(0)
    assert method == "matched_trace_steps", note
    coarse = s.sql("SELECT CAST(value AS BIGINT) FROM engine_config WHERE key = 'run_start_anchor_ns'").item() \
        - round(PERF0 * 1e9)
    want = sim["true_offset_ns"] - sim["mean_delay_ns"]  # tokens land on step ends: the delay is absorbed
    assert abs(coarse - want) > 50_000_000  # the date alone is off by a lot more
    assert abs(offset - want) < 1_000_000
    assert residual < 2_000_000
    assert any("matched_trace_steps" in n for n in rep.notes)
    # Token instants on the trace clock: most chunk arrivals sit within 2 ms of a step end.
    ends_in = np.sort(ends)
    tok = s.sql("SELECT end_ns FROM token_gaps WHERE end_ns BETWEEN ? AND ?",
                [int(T0 + 4.5e9), int(T0 + 8.5e9)]).to_series().to_numpy()
    pos = np.clip(np.searchsorted(ends_in, tok), 1, ends_in.size - 1)
    dist = np.minimum(np.abs(tok - ends_in[pos - 1]), np.abs(ends_in[pos] - tok))
    assert np.quantile(dist, 0.9) < 2_000_000


def test_no_trace_overlap_leaves_the_anchor_alone(tmp_path):
    sim = _simulate(3)
    p = tmp_path / "synthetic.json"
    p.write_text(json.dumps(sim["run"]))
    s = stallscope.open(":memory:")
    _add_steps(s, sim["step_end_ns"] + 3600 * 10**9)  # an hour later: another run
    s.ingest([p])
    assert s.sql("SELECT clock_method FROM sources WHERE parser = 'bench_json'").item() == "bench_date_minus_duration"


# -- pure functions -----------------------------------------------------------------------------------------------

S = 10**9


def test_fit_offset_to_steps_recovers_a_known_shift():
    sim = _simulate(4)
    run = sim["run"]
    native = np.concatenate([round(st * 1e9) + np.round(np.concatenate([[tt], tt + np.cumsum(itl)]) * 1e9)
                             for st, tt, itl in zip(run["start_times"], run["ttfts"], run["itls"])]).astype(np.int64)
    ends = sim["step_end_ns"]
    window = ends[(ends > T0 + 3 * S) & (ends < T0 + 8 * S)]
    for err in (-700_000_000, 1_300_000_000):
        fit = align.fit_offset_to_steps(native + sim["true_offset_ns"] + err, window, int(2.5 * S))
        assert fit.accepted and fit.ratio < 0.85
        assert abs(fit.offset_ns + err + sim["mean_delay_ns"]) < 1_000_000
    # Regular steps alone (no prefill, no gap) give no clear minimum: refused, not guessed.
    regular = T0 + np.arange(300) * 20_000_000
    tokens = np.repeat(regular, 8) + 1_500_000
    fit = align.fit_offset_to_steps(tokens + 400_000_000, regular, S)
    assert not fit.accepted and fit.offset_ns == 0


def test_find_run_window_prefers_the_anchor_among_identical_runs():
    lens = np.array([13, 25, 27, 10, 329])
    # Three identical runs 100 s apart, a warm-up (same length as request 0) 5 s before each.
    arrivals, server_len = [], []
    for k in range(3):
        base = 1000 * S + k * 100 * S
        arrivals += [base - 5 * S] + [base + i * S for i in range(5)]
        server_len += [13] + lens.tolist()
    arrivals, server_len = np.array(arrivals), np.array(server_len)
    w = align.find_run_window(arrivals, server_len, lens, 5 * S, anchor_ns=1100 * S + 300_000_000)
    assert w.start_ns == 1100 * S and w.score == 5 and w.extras == 0 and w.ties == 0
    assert w.rows.tolist() == [7, 8, 9, 10, 11]
    # Seven hours of zone error: the same window, and the shift is reported.
    w = align.find_run_window(arrivals, server_len, lens, 5 * S, anchor_ns=1100 * S + 7 * 3600 * S)
    assert w.start_ns == 1100 * S and w.zone_shift_ns == -7 * 3600 * S
    # No window near the anchor: no match rather than another run's window.
    assert align.find_run_window(arrivals, server_len, lens, 5 * S, anchor_ns=1150 * S,
                                 max_anchor_gap_ns=30 * S) is None


def test_assign_in_window_separates_same_second_requests_by_finish():
    # Three requests of length 10 reach the server in the same second; their latencies differ.
    bench_len = np.array([10, 10, 10, 7])
    latency = np.array([30, 2, 11, 5]) * S
    server_len = np.array([10, 7, 10, 10])
    arrival = np.array([50, 50, 50, 50]) * S
    finish = np.array([52, 55, 80, 61]) * S  # server finish lines (1-s resolution)
    bi, sj = align.assign_in_window(bench_len, server_len, arrival, bench_latency_ns=latency,
                                    server_finish_ns=finish)
    pairs = dict(zip(bi.tolist(), sj.tolist()))
    assert pairs == {0: 2, 1: 0, 2: 3, 3: 1}
    # Without finish lines: send order follows log order.
    bi, sj = align.assign_in_window(bench_len, server_len, arrival)
    assert dict(zip(bi.tolist(), sj.tolist())) == {0: 0, 1: 2, 2: 3, 3: 1}


def test_fit_common_offset_intersects_the_buckets():
    rng = np.random.default_rng(7)
    send = np.sort(rng.uniform(0, 120, 200)) * S + 5_000 * S
    true = 1_744_000_000 * S + 123_456_789 - 5_000 * S
    buckets = (send + true) // S * S
    offset, resid, kept = align.fit_common_offset(send.astype(np.int64), buckets.astype(np.int64))
    assert kept.all() and abs(offset - true) < 20_000_000
    assert np.abs(resid).max() <= S // 2 + 20_000_000


def test_place_without_send_times_uses_the_finish_line():
    # Sent at 10.7 s (server second 10), finished at 14.2 s on the server (second 14), latency 3.5 s:
    # send >= 14 - 3.5 = 10.5 and < 15 - 3.5 = 11.5, so the send lies in [10.5, 11): midpoint 10.75.
    send, start, resid = align.place_without_send_times(np.array([10 * S]), np.array([0]),
                                                        server_finish_ns=np.array([14 * S]),
                                                        latency_ns=np.array([3.5 * S]), duration_ns=int(3.6 * S))
    assert send.tolist() == [int(10.75 * S)] and start == int(10.75 * S)
    assert resid.tolist() == [250_000_000]


def test_anchor_needs_a_known_zone():
    with pytest.raises(stallscope.errors.InputError):
        align.run_start_anchor_ns("20250414-162000", 10.0, "Mars/Olympus")
    assert align.run_start_anchor_ns("2025-04-14", 10.0, "UTC")[0] is None
    start, note = align.run_start_anchor_ns("20250414-162000", 216.0, "UTC")
    assert start == (int(dt.datetime(2025, 4, 14, 16, 20, tzinfo=dt.timezone.utc).timestamp()) * S
                     + S // 2 - 216 * S)
    assert "coarse" in note


def test_json_lines_runs_align_one_by_one(tmp_path):
    """An --append-result file holding two runs: each run (line) finds its own window in the log."""
    p = tmp_path / "appended.json"
    p.write_text(real(BENCH["04"]).read_text() + "\n" + real(BENCH["inf"]).read_text())
    s = stallscope.open(":memory:")
    s.ingest([p, real(LOG)])
    rows = s.sql("""SELECT b.line_no, count(*), count(b.server_request_id),
                           count(*) FILTER (WHERE b.prompt_tokens = r.prompt_tokens)
                    FROM requests b LEFT JOIN requests r ON r.kind = 'server' AND r.request_id = b.server_request_id
                    WHERE b.kind = 'client' GROUP BY 1 ORDER BY 1""").rows()
    assert rows == [(1, 200, 200, 200), (2, 200, 200, 200)]
    clocks = s.sql("SELECT line_no, value FROM engine_config WHERE origin = 'bench_clock' AND key = 'clock_method' "
                   "ORDER BY 1").rows()
    assert clocks == [(1, "matched_server_log"), (2, "matched_server_log")]
    method, note = s.sql("SELECT clock_method, clock_note FROM sources WHERE parser = 'bench_json'").row(0)
    assert method == "matched_server_log" and note.startswith("2 runs")


def test_same_length_burst_pairs_by_output_length():
    """A burst sent in one order and received in another: equal prompt lengths, one second, no finish lines.
    Send order cannot tell them apart; output lengths equal to the server's max_tokens can."""
    from stallscope.ingest.align import assign_in_window

    sec = 1_000_000_000
    bench_len = np.array([543, 100, 543, 200])
    bench_send = np.array([0, 10_000, 20_000, 30_000])  # bench 0 sent before bench 2
    bench_out = np.array([252, 10, 196, 20])
    server_len = np.array([100, 543, 543, 200])  # log order: the 196-token request arrived first
    server_arr = np.full(4, 5 * sec)
    server_max = np.array([10, 196, 252, 20])
    bi, sj = assign_in_window(bench_len, server_len, server_arr, bench_send_ns=bench_send,
                              bench_out_len=bench_out, server_max_tokens=server_max)
    pairs = dict(zip(bi.tolist(), sj.tolist()))
    assert pairs == {0: 2, 1: 0, 2: 1, 3: 3}
    # Without the lengths the pairing follows send order and swaps the two 543-token requests.
    bi, sj = assign_in_window(bench_len, server_len, server_arr, bench_send_ns=bench_send)
    assert dict(zip(bi.tolist(), sj.tolist()))[0] == 1
