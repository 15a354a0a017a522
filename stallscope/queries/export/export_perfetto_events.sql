-- Every complete (`X`) event of the Perfetto export, in Chrome's JSON trace format, straight from the tables: the
-- original timeline (kernels, memcpys/memsets and GPU annotations per GPU and stream, CPU ops and runtime calls
-- per CPU process and thread, one slice per engine step with its batch composition in `args`) and what the
-- analysis found, on three processes of their own: 1 `stallscope: spikes`, 2 `stallscope: decode gaps`,
-- 3 `stallscope: prefill chunks`, one thread per request (`export_perfetto_request_threads`) or, for trace-level
-- tracks, thread 1000000000 + the trace's source_id. Steps that stalled a spike although the trace cannot split
-- prefill from decode work show on the prefill-chunk track as `stalling step (prefill not split)`.
-- @depends export_perfetto_origin, export_perfetto_cpu_pids, export_perfetto_request_threads, step_phase, client_gaps, step_gaps, spikes, spike_attribution, spike_culprits, prefill_parts, request_prefill_windows
-- @column name        VARCHAR  Slice name (kernel name, `step <i> <phase>`, `gap <ms> ms`, `spike <ms> ms (x<ratio>)`, ...).
-- @column cat         VARCHAR  Category: `kernel`, `gpu_memcpy`, `cpu_op`, ..., `stallscope_step`, `stallscope_gap`, `stallscope_spike`, `stallscope_chunk`.
-- @column ph          VARCHAR  Chrome phase: always `X` (complete event).
-- @column ts          DOUBLE   Start, microseconds since `export_perfetto_origin.t0` (ns resolution).
-- @column dur         DOUBLE   Duration, microseconds.
-- @column pid         BIGINT   Exported process id (see `export_perfetto_cpu_pids`; 1-3 for the analysis tracks).
-- @column tid         BIGINT   Exported thread id (stream, OS thread, request, or 1000000000 + source_id).
-- @column args        JSON     The event's details as Perfetto shows them (ids, launch figures, batch composition, spike attribution, culprits).
CREATE OR REPLACE TEMP VIEW export_perfetto_events AS
WITH o AS (SELECT t0 FROM export_perfetto_origin)
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
FROM cpu_ops c JOIN export_perfetto_cpu_pids p USING (source_id, pid), o
UNION ALL
SELECT r.name, r.category, 'X', round((r.start_ns - o.t0) / 1000.0, 3), r.dur_ns / 1000.0, p.xpid, r.tid,
       json_object('correlation', r.correlation, 'cbid', r.cbid, 'External id', r.external_id)
FROM runtime_calls r JOIN export_perfetto_cpu_pids p USING (source_id, pid), o
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
       round((g.start_ns - o.t0) / 1000.0, 3), g.gap_ns / 1000.0, 2, q.tid,
       json_object('request_id', g.report_id, 'token_index', g.token_index, 'gap_ms', g.gap_ns / 1e6)
FROM client_gaps g JOIN export_perfetto_request_threads q USING (source_id, run_line, request_id), o
WHERE g.gap_ns >= 0
UNION ALL
SELECT 'step gap ' || CAST(round(g.gap_ns / 1e6, 1) AS VARCHAR) || ' ms', 'stallscope_gap', 'X',
       round((g.start_ns - o.t0) / 1000.0, 3), g.gap_ns / 1000.0, 2, 1000000000 + g.source_id,
       json_object('step_index', g.step_index, 'gap_ms', g.gap_ns / 1e6, 'phase', g.phase,
                   'stalled_decodes', g.stalled_decodes)
FROM step_gaps g, o
WHERE g.gap_ns >= 0 AND g.source_id IN (SELECT source_id FROM spikes WHERE level = 'step'
                                        UNION SELECT source_id FROM step_gaps
                                        WHERE NOT EXISTS (SELECT 1 FROM client_gaps))
UNION ALL
SELECT 'spike ' || CAST(round(s.gap_ns / 1e6, 1) AS VARCHAR) || ' ms (x'
           || CAST(round(s.gap_ns / nullif(s.baseline_ns, 0), 1) AS VARCHAR) || ')', 'stallscope_spike', 'X',
       round((s.start_ns - o.t0) / 1000.0, 3), s.gap_ns / 1000.0, 1,
       CASE WHEN s.level = 'request' THEN q.tid ELSE 1000000000 + s.source_id END,
       json_object('request_id', s.report_id, 'token_index', s.token_index, 'level', s.level, 'rule', s.rule,
                   'gap_ms', s.gap_ns / 1e6, 'baseline_ms', s.baseline_ns / 1e6, 'baseline_basis', s.baseline_basis,
                   'excess_ms', a.excess_ns / 1e6, 'prefill_overlap_ms', a.prefill_overlap_ns / 1e6,
                   'share', a.share, 'other_ms', a.other_ns / 1e6, 'evidence', a.evidence,
                   'stalled_decodes', a.stalled_decodes, 'prefill_tokens', a.prefill_tokens,
                   'culprits', coalesce(c.culprits, '[]'::JSON))
FROM spikes s JOIN spike_attribution a USING (spike_id)
LEFT JOIN export_perfetto_request_threads q ON q.source_id = s.source_id AND q.run_line = s.run_line AND q.request_id = s.request_id
LEFT JOIN (SELECT spike_id, to_json(list(json_object('request_id', report_id, 'prompt_tokens', prompt_tokens,
                                                   'overlap_ms', overlap_ns / 1e6) ORDER BY rank)) AS culprits
           FROM spike_culprits WHERE rank <= 5 GROUP BY spike_id) c USING (spike_id), o
WHERE s.level = 'step' OR q.tid IS NOT NULL
UNION ALL
SELECT 'prefill chunk ' || pp.tokens || ' tok', 'stallscope_chunk', 'X', round((st.start_ns - o.t0) / 1000.0, 3),
       (st.end_ns - st.start_ns) / 1000.0, 3, q.tid,
       json_object('request_id', pp.report_id, 'tokens', pp.tokens, 'context_before', pp.context_before,
                   'prompt_tokens', pp.prompt_tokens, 'basis', pp.basis, 'step_index', st.step_index)
FROM prefill_parts pp JOIN step_phase st ON st.step_id = pp.step_id
JOIN export_perfetto_request_threads q ON q.source_id = pp.source_id AND q.run_line = pp.run_line AND q.request_id = pp.request_id, o
UNION ALL
SELECT 'inferred prefill', 'stallscope_chunk', 'X', round((w.window_start_ns - o.t0) / 1000.0, 3),
       (w.window_end_ns - w.window_start_ns) / 1000.0, 3, q.tid,
       json_object('request_id', w.report_id, 'prompt_tokens', w.prompt_tokens, 'basis', 'inferred_window')
FROM request_prefill_windows w JOIN export_perfetto_request_threads q USING (source_id, run_line, request_id), o
WHERE w.window_end_ns >= w.window_start_ns
  AND NOT EXISTS (SELECT 1 FROM prefill_parts pp WHERE pp.source_id = w.source_id AND pp.run_line = w.run_line
                  AND pp.request_id = w.request_id)
UNION ALL
SELECT 'prefill ' || coalesce(CAST(p.ctx_tokens AS VARCHAR) || ' tok', CAST(round(p.prefill_gpu_ns / 1e6, 1) AS VARCHAR) || ' ms'),
       'stallscope_chunk', 'X', round((p.start_ns - o.t0) / 1000.0, 3), (p.end_ns - p.start_ns) / 1000.0,
       3, 1000000000 + p.source_id,
       json_object('step_index', p.step_index, 'prefill_tokens', p.ctx_tokens, 'prefill_requests', p.ctx_reqs,
                   'prefill_gpu_ms', p.prefill_gpu_ns / 1e6, 'phase', p.phase)
FROM step_phase p, o
WHERE p.kernel_count > 0 AND (p.ctx_tokens > 0 OR p.prefill_gpu_ns > 0 OR p.phase IN ('prefill', 'mixed'))
UNION ALL
-- Steps that stalled a spike although the trace cannot say how much of their work was prefill (evidence
-- `steps`): shown on the same track, named for what is known.
SELECT 'stalling step (prefill not split)', 'stallscope_chunk', 'X', round((p.start_ns - o.t0) / 1000.0, 3),
       (p.end_ns - p.start_ns) / 1000.0, 3, 1000000000 + p.source_id,
       json_object('step_index', p.step_index, 'spikes', x.spikes, 'evidence', 'steps', 'phase', p.phase)
FROM step_phase p
JOIN (SELECT coalesce(s.step_id, a.stalling_step_id) AS step_id, count(*) AS spikes
      FROM spikes s JOIN spike_attribution a USING (spike_id) WHERE a.evidence = 'steps' GROUP BY 1) x USING (step_id), o
WHERE p.kernel_count > 0
  AND NOT (coalesce(p.ctx_tokens, 0) > 0 OR coalesce(p.prefill_gpu_ns, 0) > 0 OR coalesce(p.phase IN ('prefill', 'mixed'), false));
