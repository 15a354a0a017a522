"""SGLang batch-line layouts and heads seen in public logs that `../shared/real/` does not hold, each line as the
log printed it (the source named beside it): the parser reads them whole, on the fast path and the generic one."""
from __future__ import annotations

import pytest

import stallscope
from stallscope.parsers.base import fast_lanes

# sglang PR 18570 (2026-02-10): prefill lines that end with the graph flag, after the throughput.
GRAPH_LAST = [
    "[2026-02-10 23:32:05] Prefill batch, #new-seq: 2, #new-token: 578, #cached-token: 0, token usage: 0.00, "
    "#running-req: 1, #queue-req: 0, input throughput (token/s): 0.14, cuda graph: False",
    "[2026-02-10 23:32:05] Prefill batch, #new-seq: 2, #new-token: 578, #cached-token: 0, token usage: 0.00, "
    "#running-req: 1, #queue-req: 0, input throughput (token/s): 9610.84, cuda graph: False",
    "[2026-02-10 23:32:06] Decode batch, #running-req: 3, #token: 1200, token usage: 0.01, cuda graph: True, "
    "gen throughput (token/s): 120.50, #queue-req: 0",
]


def _ingest(tmp_path, lines, fast: bool):
    p = tmp_path / "sglang.log"
    p.write_text("\n".join(lines) + "\n")
    s = stallscope.open(tmp_path / f"s{int(fast)}.duckdb")
    with fast_lanes(fast):
        r = s.ingest([p])[0]
    return s, r


@pytest.mark.parametrize("fast", [True, False])
def test_prefill_lines_that_end_with_the_graph_flag_are_read_whole(tmp_path, fast):
    s, r = _ingest(tmp_path, GRAPH_LAST, fast)
    assert (r.parsed, r.rejected) == (3, 0)
    rows = s.sql("SELECT line_no, kind, new_tokens, running_reqs, cuda_graph, input_throughput_tps "
                 "FROM engine_batches ORDER BY line_no").rows()
    assert rows == [(1, "prefill", 578, 1, False, 0.14), (2, "prefill", 578, 1, False, 9610.84),
                    (3, "decode", None, 3, True, None)]


# sglang-jax PR 564 (2025-12-17): decode lines with a field SGLang itself does not print, after the last one.
NEW_FIELD = [
    "[2025-12-17 05:10:47] Decode batch. #running-req: 1, #token: 64, token usage: 0.00, gen throughput (token/s): "
    f"84.{n}, #queue-req: 0, #cache_miss: 1" for n in (39, 23, 41, 92)
]
# sglang issue 22877 (2026-04-15): a user logging config's head, `[time][file:line][LEVEL]: `.
CONFIG_HEAD = [
    f"[2026-04-15 17:13:1{s}][scheduler_metrics_mixin.py:424][INFO]: Prefill batch, #new-seq: 1, #new-token: 1, "
    f"#cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0, #prealloc-req: {p}, #inflight-req: 1, "
    f"cuda graph: False, input throughput (token/s): 2.49" for s, p in ((0, 18), (1, 22), (2, 27))
]


@pytest.mark.parametrize("fast", [True, False])
def test_a_field_this_parser_does_not_know_is_read_into_extra_and_named(tmp_path, fast):
    s, r = _ingest(tmp_path, NEW_FIELD, fast)
    assert (r.parsed, r.rejected) == (4, 0), r.message
    rows = s.sql("SELECT running_reqs, kv_tokens, gen_throughput_tps, queued_reqs, extra FROM engine_batches "
                 "ORDER BY line_no").rows()
    assert rows[0] == (1, 64, 84.39, 0, "#cache_miss: 1") and len(rows) == 4
    assert any("'#cache_miss' (4 lines)" in n for n in r.notes), r.notes


@pytest.mark.parametrize("fast", [True, False])
def test_an_unknown_key_in_a_line_missing_a_core_field_is_still_a_splice(tmp_path, fast):
    # Two lines run together (sglang PR 25960): `#cached-to` + `unning-req`, and no `token usage`.
    spliced = ["[2026-05-28 02:59:50 TP0] Prefill batch, #new-seq: 1, #new-token: 896, #cached-tounning-req: " + str(i)
               + ", #queue-req: 51, #pending-token: 23787, npu graph: False, input throughput (token/s): 10.00"
               for i in range(4)]
    s, r = _ingest(tmp_path, NEW_FIELD[:1] * 3 + spliced, fast)
    assert (r.parsed, r.rejected) == (3, 4)
    assert set(s.sql("SELECT reason FROM rejects").to_series()) == {
        "Prefill batch line with unknown field '#cached-tounning-req' (spliced or mangled text); not read"}


def test_too_few_lines_ending_with_a_new_field_are_taken_as_cut(tmp_path):
    s, r = _ingest(tmp_path, NEW_FIELD[:2] + GRAPH_LAST[2:], True)
    assert (r.parsed, r.rejected) == (1, 2)
    assert s.sql("SELECT DISTINCT reason FROM rejects").item() == "Decode batch line cut off after '#cache_miss'; not read"


@pytest.mark.parametrize("fast", [True, False])
def test_the_head_of_a_user_logging_config_is_read(tmp_path, fast):
    s, r = _ingest(tmp_path, CONFIG_HEAD, fast)
    assert (r.status, r.parsed, r.rejected) == ("ingested", 3, 0), r.message
    rows = s.sql("SELECT ts_ns, kind, new_tokens, queued_reqs, cuda_graph, extra FROM engine_batches ORDER BY line_no").rows()
    assert rows[0] == (1776273190 * 10**9, "prefill", 1, 0, False, "#prealloc-req: 18, #inflight-req: 1")
    assert [t for t, *_ in rows] == [1776273190 * 10**9 + i * 10**9 for i in range(3)]
