"""vLLM stats-line layouts that STATS_V1 does not list (its optional fields in another order, a field this parser
does not know): read by key, so engine_stats keeps one row per stats line, as a grep of them counts."""
from __future__ import annotations

import stallscope

HEAD = "(APIServer pid=7) INFO 11-02 10:00:{s:02d} [loggers.py:271] Engine 000: Avg prompt throughput: {p} tokens/s, " \
       "Avg generation throughput: 50.0 tokens/s, Running: 3 reqs, Waiting: {w} reqs"
LINES = [
    HEAD.format(s=0, p="100.0", w=1) + ", GPU KV cache usage: 2.0%, Prefix cache hit rate: 10.0%",
    # A field STATS_V1 does not know, before the known ones.
    HEAD.format(s=10, p="0.0", w=0) + ", Spec accept rate: 0.7, GPU KV cache usage: 2.5%, Prefix cache hit rate: 10.0%",
    # The known optional fields in another order.
    HEAD.format(s=20, p="0.0", w=0) + ", Prefix cache hit rate: 11.0%, Preemptions: 2, GPU KV cache usage: 2.6%",
]


def test_stats_lines_of_another_layout_keep_one_row_each_and_name_the_unknown_field(tmp_path):
    p = tmp_path / "vllm.log"
    p.write_text("\n".join(LINES) + "\n")
    s = stallscope.open(tmp_path / "s.duckdb")
    r = s.ingest([p])[0]
    assert (r.format, r.parsed, r.rejected) == ("vllm_log", 3, 0)
    assert s.sql("SELECT line_no, waiting_reqs, gpu_kv_cache_usage_pct, prefix_cache_hit_rate_pct, preemptions "
                 "FROM engine_stats ORDER BY line_no").rows() == [
        (1, 1, 2.0, 10.0, None), (2, 0, 2.5, 10.0, None), (3, 0, 2.6, 11.0, 2)]
    assert s.sql("SELECT count(*) FROM log_events").item() == 0
    assert any("'Spec accept rate' (1 lines)" in n for n in r.notes), r.notes
