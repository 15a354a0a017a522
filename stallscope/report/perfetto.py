"""Chrome-trace (Perfetto) export: the store's original GPU/CPU timeline plus tracks for what the analysis found.

The file is Chrome's JSON trace format (`{"traceEvents": [...]}`, complete `X` events in microseconds, `M`
metadata naming processes and threads), which ui.perfetto.dev and chrome://tracing open. DuckDB writes the events
straight from the tables (`COPY ... FORMAT JSON`), so a trace of millions of events never passes through Python
objects. Times are microseconds since the earliest exported instant (`otherData.stallscope_origin_ns`, ns since
the Unix epoch, UTC): epoch microseconds with nanosecond fractions do not fit a double.

Processes and threads (the track names users see):
- `<trace file> GPU <device>`: one thread per stream (`stream <n>`), the trace's kernels, memcpys/memsets and
  GPU annotations as recorded.
- `<trace file> CPU pid <pid>`: one thread per OS thread, the CPU ops, user annotations, python functions and
  CUDA runtime/driver calls as recorded.
- `<trace file> engine steps`: thread `steps`, one slice per engine step (`step <i> <phase>`), with its batch
  composition in `args`.
- `stallscope: decode gaps`: one thread per request (`request <id>`), a slice per streamed-chunk gap; for traces
  no client data covers, one thread per trace (`engine step gaps <file>`), a slice per step gap.
- `stallscope: spikes`: the analysis's spikes, on the stalled request's thread (`request <id>`) or the trace's
  (`engine step spikes <file>`), named `spike <gap> ms (x<ratio>)`, with the rule, baseline, excess, prefill share,
  evidence and culprits (request, prompt tokens, prefill time in the gap) in `args`.
- `stallscope: prefill chunks`: the prefill chunks assigned to each request (`request <id>`), one slice per step
  that computed part of its prompt (`prefill chunk <n> tok`; `inferred prefill` windows when no trace covers the
  request), and per trace the steps that ran prefill work (`prefill steps <file>`: `prefill <n> tok`), plus the
  steps that stalled a spike where the trace cannot split prefill from decode work (`stalling step (prefill not
  split)`).
"""
from __future__ import annotations

import gzip
import os
import shutil
import tempfile
from pathlib import Path

from ..errors import write_error
from ..outputs import atomic_file

PID_SPIKES, PID_GAPS, PID_CHUNKS = 1, 2, 3
STEP_TID_BASE = 1_000_000_000  # thread ids of per-trace analysis tracks, above any request thread id

_EVENTS_SQL = r"""
CREATE OR REPLACE TEMP TABLE _pf_origin AS
SELECT coalesce(least(
    (SELECT min(start_ns) FROM gpu_kernels), (SELECT min(start_ns) FROM cpu_ops),
    (SELECT min(start_ns) FROM runtime_calls), (SELECT min(start_ns) FROM gpu_memops),
    (SELECT min(start_ns) FROM gpu_annotations), (SELECT min(start_ns) FROM step_phase),
    (SELECT min(start_ns) FROM client_gaps), (SELECT min(window_start_ns) FROM request_prefill_windows)), 0) AS t0;

CREATE OR REPLACE TEMP TABLE _pf_cpu_pid AS
SELECT source_id, pid, CAST(source_id * 10000 + dense_rank() OVER (PARTITION BY source_id ORDER BY pid) AS BIGINT) AS xpid
FROM (SELECT DISTINCT source_id, pid FROM cpu_ops UNION SELECT DISTINCT source_id, pid FROM runtime_calls);

CREATE OR REPLACE TEMP TABLE _pf_req AS
SELECT source_id, run_line, request_id, report_id,
       CAST(1 + row_number() OVER (ORDER BY arrival_ns NULLS LAST, source_id, run_line, request_id) AS BIGINT) AS tid
FROM (SELECT source_id, run_line, request_id, any_value(report_id) AS report_id, min(arrival_ns) AS arrival_ns
      FROM request_metrics WHERE kind = 'client' GROUP BY source_id, run_line, request_id);

CREATE OR REPLACE TEMP TABLE _pf_src AS
SELECT source_id, regexp_extract(path, '[^/\\]*$') AS file FROM sources;

CREATE OR REPLACE TEMP TABLE _pf_events AS
WITH o AS (SELECT t0 FROM _pf_origin)
-- the original timeline -----------------------------------------------------------------------------------
SELECT k.name, 'kernel' AS cat, 'X' AS ph, round((k.start_ns - o.t0) / 1000.0, 3) AS ts, k.dur_ns / 1000.0 AS dur,
       CAST(k.source_id * 10000 + 1000 + coalesce(k.device, 0) AS BIGINT) AS pid, CAST(coalesce(k.stream, 0) AS BIGINT) AS tid,
       json_object('device', k.device, 'stream', k.stream, 'correlation', k.correlation, 'External id', k.external_id,
                   'grid', [k.grid_x, k.grid_y, k.grid_z], 'block', [k.block_x, k.block_y, k.block_z],
                   'registers per thread', k.registers_per_thread, 'shared memory', k.shared_memory_bytes,
                   'blocks per SM', k.blocks_per_sm, 'warps per SM', k.warps_per_sm,
                   'est. achieved occupancy %', k.occupancy_pct, 'rank', k.rank) AS args
FROM gpu_kernels k, o
UNION ALL
SELECT m.name, CASE m.kind WHEN 'memset' THEN 'gpu_memset' ELSE 'gpu_memcpy' END, 'X',
       round((m.start_ns - o.t0) / 1000.0, 3), m.dur_ns / 1000.0,
       CAST(m.source_id * 10000 + 1000 + coalesce(m.device, 0) AS BIGINT), CAST(coalesce(m.stream, 0) AS BIGINT),
       json_object('device', m.device, 'stream', m.stream, 'correlation', m.correlation, 'bytes', m.bytes,
                   'memory bandwidth (GB/s)', m.bandwidth_gbps, 'External id', m.external_id)
FROM gpu_memops m, o
UNION ALL
SELECT a.name, 'gpu_user_annotation', 'X', round((a.start_ns - o.t0) / 1000.0, 3), a.dur_ns / 1000.0,
       CAST(a.source_id * 10000 + 1000 + coalesce(a.device, 0) AS BIGINT), CAST(coalesce(a.stream, 0) AS BIGINT),
       json_object('device', a.device, 'stream', a.stream, 'External id', a.external_id)
FROM gpu_annotations a, o
UNION ALL
SELECT c.name, c.category, 'X', round((c.start_ns - o.t0) / 1000.0, 3), c.dur_ns / 1000.0, p.xpid, c.tid,
       json_object('External id', c.external_id, 'Record function id', c.record_function_id,
                   'Python id', c.python_id, 'Python parent id', c.python_parent_id)
FROM cpu_ops c JOIN _pf_cpu_pid p USING (source_id, pid), o
UNION ALL
SELECT r.name, r.category, 'X', round((r.start_ns - o.t0) / 1000.0, 3), r.dur_ns / 1000.0, p.xpid, r.tid,
       json_object('correlation', r.correlation, 'cbid', r.cbid, 'External id', r.external_id)
FROM runtime_calls r JOIN _pf_cpu_pid p USING (source_id, pid), o
UNION ALL
SELECT 'step ' || s.step_index || coalesce(' ' || p.phase, ''), 'stallscope_step', 'X',
       round((p.start_ns - o.t0) / 1000.0, 3), (p.end_ns - p.start_ns) / 1000.0,
       CAST(s.source_id * 10000 + 9999 AS BIGINT), 1,
       json_object('step_index', s.step_index, 'phase', p.phase, 'marker', s.marker, 'annotation', s.annotation,
                   'prefill_tokens', p.ctx_tokens, 'prefill_requests', p.ctx_reqs, 'decode_requests', p.gen_reqs,
                   'decode_tokens', p.gen_tokens, 'kernels', p.kernel_count,
                   'prefill_gpu_ms', p.prefill_gpu_ns / 1e6, 'decode_gpu_ms', p.decode_gpu_ns / 1e6,
                   'gpu_busy_ms', p.gpu_busy_ns / 1e6)
FROM step_phase p JOIN steps s USING (step_id), o
-- what the analysis found ---------------------------------------------------------------------------------
UNION ALL
SELECT 'gap ' || CAST(round(g.gap_ns / 1e6, 1) AS VARCHAR) || ' ms', 'stallscope_gap', 'X',
       round((g.start_ns - o.t0) / 1000.0, 3), g.gap_ns / 1000.0, {PID_GAPS}, q.tid,
       json_object('request_id', g.report_id, 'token_index', g.token_index, 'gap_ms', g.gap_ns / 1e6)
FROM client_gaps g JOIN _pf_req q USING (source_id, run_line, request_id), o
WHERE g.gap_ns >= 0
UNION ALL
SELECT 'step gap ' || CAST(round(g.gap_ns / 1e6, 1) AS VARCHAR) || ' ms', 'stallscope_gap', 'X',
       round((g.start_ns - o.t0) / 1000.0, 3), g.gap_ns / 1000.0, {PID_GAPS}, {STEP_TID_BASE} + g.source_id,
       json_object('step_index', g.step_index, 'gap_ms', g.gap_ns / 1e6, 'phase', g.phase,
                   'stalled_decodes', g.stalled_decodes)
FROM step_gaps g, o
WHERE g.gap_ns >= 0 AND g.source_id IN (SELECT source_id FROM spikes WHERE level = 'step'
                                        UNION SELECT source_id FROM step_gaps
                                        WHERE NOT EXISTS (SELECT 1 FROM client_gaps))
UNION ALL
SELECT 'spike ' || CAST(round(s.gap_ns / 1e6, 1) AS VARCHAR) || ' ms (x'
           || CAST(round(s.gap_ns / nullif(s.baseline_ns, 0), 1) AS VARCHAR) || ')', 'stallscope_spike', 'X',
       round((s.start_ns - o.t0) / 1000.0, 3), s.gap_ns / 1000.0, {PID_SPIKES},
       CASE WHEN s.level = 'request' THEN q.tid ELSE {STEP_TID_BASE} + s.source_id END,
       json_object('request_id', s.report_id, 'token_index', s.token_index, 'level', s.level, 'rule', s.rule,
                   'gap_ms', s.gap_ns / 1e6, 'baseline_ms', s.baseline_ns / 1e6, 'baseline_basis', s.baseline_basis,
                   'excess_ms', a.excess_ns / 1e6, 'prefill_overlap_ms', a.prefill_overlap_ns / 1e6,
                   'share', a.share, 'other_ms', a.other_ns / 1e6, 'evidence', a.evidence,
                   'stalled_decodes', a.stalled_decodes, 'prefill_tokens', a.prefill_tokens,
                   'culprits', coalesce(c.culprits, '[]'::JSON))
FROM spikes s JOIN spike_attribution a USING (spike_id)
LEFT JOIN _pf_req q ON q.source_id = s.source_id AND q.run_line = s.run_line AND q.request_id = s.request_id
LEFT JOIN (SELECT spike_id, to_json(list(json_object('request_id', report_id, 'prompt_tokens', prompt_tokens,
                                                   'overlap_ms', overlap_ns / 1e6) ORDER BY rank)) AS culprits
           FROM spike_culprits WHERE rank <= 5 GROUP BY spike_id) c USING (spike_id), o
WHERE s.level = 'step' OR q.tid IS NOT NULL
UNION ALL
SELECT 'prefill chunk ' || pp.tokens || ' tok', 'stallscope_chunk', 'X', round((st.start_ns - o.t0) / 1000.0, 3),
       (st.end_ns - st.start_ns) / 1000.0, {PID_CHUNKS}, q.tid,
       json_object('request_id', pp.report_id, 'tokens', pp.tokens, 'context_before', pp.context_before,
                   'prompt_tokens', pp.prompt_tokens, 'basis', pp.basis, 'step_index', st.step_index)
FROM prefill_parts pp JOIN step_phase st ON st.step_id = pp.step_id
JOIN _pf_req q ON q.source_id = pp.source_id AND q.run_line = pp.run_line AND q.request_id = pp.request_id, o
UNION ALL
SELECT 'inferred prefill', 'stallscope_chunk', 'X', round((w.window_start_ns - o.t0) / 1000.0, 3),
       (w.window_end_ns - w.window_start_ns) / 1000.0, {PID_CHUNKS}, q.tid,
       json_object('request_id', w.report_id, 'prompt_tokens', w.prompt_tokens, 'basis', 'inferred_window')
FROM request_prefill_windows w JOIN _pf_req q USING (source_id, run_line, request_id), o
WHERE w.window_end_ns >= w.window_start_ns
  AND NOT EXISTS (SELECT 1 FROM prefill_parts pp WHERE pp.source_id = w.source_id AND pp.run_line = w.run_line
                  AND pp.request_id = w.request_id)
UNION ALL
SELECT 'prefill ' || coalesce(CAST(p.ctx_tokens AS VARCHAR) || ' tok', CAST(round(p.prefill_gpu_ns / 1e6, 1) AS VARCHAR) || ' ms'),
       'stallscope_chunk', 'X', round((p.start_ns - o.t0) / 1000.0, 3), (p.end_ns - p.start_ns) / 1000.0,
       {PID_CHUNKS}, {STEP_TID_BASE} + p.source_id,
       json_object('step_index', p.step_index, 'prefill_tokens', p.ctx_tokens, 'prefill_requests', p.ctx_reqs,
                   'prefill_gpu_ms', p.prefill_gpu_ns / 1e6, 'phase', p.phase)
FROM step_phase p, o
WHERE p.kernel_count > 0 AND (p.ctx_tokens > 0 OR p.prefill_gpu_ns > 0 OR p.phase IN ('prefill', 'mixed'))
UNION ALL
-- Steps that stalled a spike although the trace cannot say how much of their work was prefill (evidence
-- `steps`): shown on the same track, named for what is known.
SELECT 'stalling step (prefill not split)', 'stallscope_chunk', 'X', round((p.start_ns - o.t0) / 1000.0, 3),
       (p.end_ns - p.start_ns) / 1000.0, {PID_CHUNKS}, {STEP_TID_BASE} + p.source_id,
       json_object('step_index', p.step_index, 'spikes', x.spikes, 'evidence', 'steps', 'phase', p.phase)
FROM step_phase p
JOIN (SELECT coalesce(s.step_id, a.stalling_step_id) AS step_id, count(*) AS spikes
      FROM spikes s JOIN spike_attribution a USING (spike_id) WHERE a.evidence = 'steps' GROUP BY 1) x USING (step_id), o
WHERE p.kernel_count > 0
  AND NOT (coalesce(p.ctx_tokens, 0) > 0 OR coalesce(p.prefill_gpu_ns, 0) > 0 OR coalesce(p.phase IN ('prefill', 'mixed'), false));

CREATE OR REPLACE TEMP TABLE _pf_meta AS
WITH used AS (SELECT DISTINCT pid, tid FROM _pf_events),
pname AS (
    SELECT DISTINCT k.source_id * 10000 + 1000 + coalesce(k.device, 0) AS pid, f.file || ' GPU ' || coalesce(k.device, 0) AS name
    FROM (SELECT source_id, device FROM gpu_kernels UNION SELECT source_id, device FROM gpu_memops
          UNION SELECT source_id, device FROM gpu_annotations) k JOIN _pf_src f USING (source_id)
    UNION ALL SELECT p.xpid, f.file || ' CPU pid ' || p.pid FROM _pf_cpu_pid p JOIN _pf_src f USING (source_id)
    UNION ALL SELECT DISTINCT s.source_id * 10000 + 9999, f.file || ' engine steps' FROM steps s JOIN _pf_src f USING (source_id)
    UNION ALL SELECT {PID_SPIKES}, 'stallscope: spikes'
    UNION ALL SELECT {PID_GAPS}, 'stallscope: decode gaps'
    UNION ALL SELECT {PID_CHUNKS}, 'stallscope: prefill chunks'),
tname AS (
    SELECT u.pid, u.tid, CASE
        WHEN u.pid IN ({PID_SPIKES}, {PID_GAPS}, {PID_CHUNKS}) AND u.tid >= {STEP_TID_BASE} THEN
            (CASE u.pid WHEN {PID_CHUNKS} THEN 'prefill steps ' WHEN {PID_SPIKES} THEN 'engine step spikes '
                        ELSE 'engine step gaps ' END)
            || coalesce((SELECT file FROM _pf_src WHERE source_id = u.tid - {STEP_TID_BASE}), '')
        WHEN u.pid IN ({PID_SPIKES}, {PID_GAPS}, {PID_CHUNKS}) THEN
            'request ' || left(coalesce((SELECT report_id FROM _pf_req q WHERE q.tid = u.tid), '?'), 200)
        WHEN u.pid % 10000 = 9999 THEN 'steps'
        WHEN u.pid % 10000 >= 1000 THEN 'stream ' || u.tid
        ELSE coalesce((SELECT any_value(value) FROM trace_threads t
                       WHERE t.source_id = u.pid // 10000 AND t.kind = 'thread_name' AND t.tid = CAST(u.tid AS VARCHAR)),
                      'thread ' || u.tid) END AS name
    FROM used u)
SELECT 'process_name' AS name, '__metadata' AS cat, 'M' AS ph, 0.0 AS ts, 0.0 AS dur, CAST(pid AS BIGINT) AS pid,
       CAST(0 AS BIGINT) AS tid, json_object('name', name) AS args
FROM pname WHERE pid IN (SELECT pid FROM used)
UNION ALL
SELECT 'thread_name', '__metadata', 'M', 0.0, 0.0, pid, tid, json_object('name', name) FROM tname
UNION ALL
SELECT 'thread_sort_index', '__metadata', 'M', 0.0, 0.0, pid, tid, json_object('sort_index', tid) FROM tname
WHERE pid IN ({PID_SPIKES}, {PID_GAPS}, {PID_CHUNKS});
"""


def _sql() -> str:
    return (_EVENTS_SQL.replace("{PID_SPIKES}", str(PID_SPIKES)).replace("{PID_GAPS}", str(PID_GAPS))
            .replace("{PID_CHUNKS}", str(PID_CHUNKS)).replace("{STEP_TID_BASE}", str(STEP_TID_BASE)))


def export(store, out: str | Path, analysis_options=None) -> dict:
    """Write the store as Chrome-trace JSON (gzip when `out` ends in .gz); returns counts per event category."""
    from ..analyze import Options, prepare

    con = getattr(store, "con", store)
    have = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'analysis_params'").fetchall()[0][0]
    if not have or analysis_options is not None:
        prepare(con, analysis_options or Options())
    con.execute(_sql())
    t0 = con.execute("SELECT t0 FROM _pf_origin").fetchall()[0][0]
    counts = dict(con.execute("SELECT cat, count(*) FROM _pf_events GROUP BY cat").fetchall())
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".stallscope-perfetto-", suffix=".json", dir=out.parent)
    os.close(fd)
    try:
        # DuckDB's COPY path is SQL text: quote it as a string literal.
        lit = "'" + tmp.replace("'", "''") + "'"
        try:
            con.execute(f"""COPY (SELECT * FROM _pf_meta UNION ALL
                                  SELECT * FROM (SELECT * FROM _pf_events ORDER BY pid, tid, ts, dur DESC))
                            TO {lit} (FORMAT JSON, ARRAY true)""")
        except Exception as e:  # DuckDB's IOException: the disk is full, the folder is not writable
            if "IO Error" in str(e) or isinstance(e, OSError):
                raise write_error(out, e) from None
            raise
        import orjson

        tail = orjson.dumps({"stallscope_origin_ns": int(t0), "exported_by": "stallscope export perfetto",
                             "clock": "ts in microseconds since stallscope_origin_ns (ns since the Unix epoch, UTC)"})
        opener = (lambda p: gzip.open(p, "wb", compresslevel=6)) if out.name.endswith(".gz") else (lambda p: open(p, "wb"))
        with atomic_file(out) as part, opener(part) as f, open(tmp, "rb") as src:  # the old file or the whole new one
            f.write(b'{"displayTimeUnit":"ms","traceEvents":')
            shutil.copyfileobj(src, f, 1 << 20)
            f.write(b',"otherData":' + tail + b"}\n")
    finally:
        os.unlink(tmp)
        for t in ("_pf_events", "_pf_meta", "_pf_req", "_pf_cpu_pid", "_pf_src", "_pf_origin"):
            con.execute(f"DROP TABLE IF EXISTS {t}")
    return counts
