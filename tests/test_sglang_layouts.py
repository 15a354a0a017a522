"""SGLang batch-line layouts seen in public logs that `../shared/real/` does not hold, each line as the log printed
it (the source named beside it): the parser reads them whole, on the fast path and on the generic one alike."""
from __future__ import annotations

import pytest

import stallscope
from stallscope.parsers import sglang_log

# sglang PR 18570 (2026-02-10): prefill lines that end with the graph flag, after the throughput.
GRAPH_LAST = [
    "[2026-02-10 23:32:05] Prefill batch, #new-seq: 2, #new-token: 578, #cached-token: 0, token usage: 0.00, "
    "#running-req: 1, #queue-req: 0, input throughput (token/s): 0.14, cuda graph: False",
    "[2026-02-10 23:32:05] Prefill batch, #new-seq: 2, #new-token: 578, #cached-token: 0, token usage: 0.00, "
    "#running-req: 1, #queue-req: 0, input throughput (token/s): 9610.84, cuda graph: False",
    "[2026-02-10 23:32:06] Decode batch, #running-req: 3, #token: 1200, token usage: 0.01, cuda graph: True, "
    "gen throughput (token/s): 120.50, #queue-req: 0",
]


def _ingest(tmp_path, lines, fast: bool, monkeypatch):
    monkeypatch.setattr(sglang_log, "FAST_BATCHES", fast)
    p = tmp_path / "sglang.log"
    p.write_text("\n".join(lines) + "\n")
    s = stallscope.open(tmp_path / f"s{int(fast)}.duckdb")
    r = s.ingest([p])[0]
    return s, r


@pytest.mark.parametrize("fast", [True, False])
def test_prefill_lines_that_end_with_the_graph_flag_are_read_whole(tmp_path, monkeypatch, fast):
    s, r = _ingest(tmp_path, GRAPH_LAST, fast, monkeypatch)
    assert (r.parsed, r.rejected) == (3, 0)
    rows = s.sql("SELECT line_no, kind, new_tokens, running_reqs, cuda_graph, input_throughput_tps "
                 "FROM engine_batches ORDER BY line_no").rows()
    assert rows == [(1, "prefill", 578, 1, False, 0.14), (2, "prefill", 578, 1, False, 9610.84),
                    (3, "decode", None, 3, True, None)]
