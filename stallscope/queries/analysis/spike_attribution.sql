-- Each spike with what stalled it. Where a GPU trace covers the gap: the prefill-phase GPU time that ran
-- inside it (kernel-exact, `spike_prefill`) and the decodes the stalling step held (evidence `kernels`); when
-- the trace cannot split its steps into prefill and decode work, the prefill time stays NULL and only the
-- step facts are given (evidence `steps`). Without a trace: the union of the inferred prefill windows of
-- other requests overlapping the gap (evidence `inferred`). Stalled decodes are the stalling step's
-- generation requests when its annotation says, else the client requests decoding throughout the gap. Whatever excess prefill does not explain is `other` (preemption, host-bound steps,
-- scheduler gaps, network).
-- @depends spikes, spike_prefill, spike_steps, spike_prefill_window_pairs, request_metrics
-- @column spike_id            BIGINT   The spike.
-- @column evidence            VARCHAR  `kernels`, `steps` or `inferred`.
-- @column prefill_overlap_ns  BIGINT   Prefill time inside the gap, ns (NULL when the evidence cannot split it).
-- @column share               DOUBLE   prefill_overlap_ns / gap_ns (NULL when unknown).
-- @column excess_ns           BIGINT   How far the gap exceeds the expected decode-only gap, ns (>= 0).
-- @column prefill_excess_ns   BIGINT   The part of the excess prefill explains: min(prefill overlap, excess), ns.
-- @column other_ns            BIGINT   Excess no prefill explains, ns (NULL when prefill time is unknown).
-- @column stalled_decodes     INTEGER  Decodes held up by the stall (NULL when the evidence does not say).
-- @column prefill_tokens      BIGINT   Prefill tokens of the traced steps overlapping the gap (NULL when unknown or untraced).
-- @column stalling_step_id    BIGINT   The traced step with the most prefill time in the gap (or the longest overlap), NULL when untraced.
CREATE OR REPLACE TEMP VIEW spike_attribution AS
WITH st AS (
    SELECT spike_id,
           bool_and(step_prefill_in_gap_ns IS NOT NULL) AS split_known,
           CAST(sum(ctx_tokens) AS BIGINT) AS prefill_tokens,
           count(ctx_tokens) = count(*) AS tokens_known,
           arg_max(step_id, (coalesce(step_prefill_in_gap_ns, 0), overlap_ns)) AS stalling_step_id,
           arg_max(gen_reqs, (coalesce(step_prefill_in_gap_ns, 0), overlap_ns)) AS stall_gen_reqs
    FROM spike_steps GROUP BY spike_id),
inf AS (
    SELECT spike_id, least(sum(ov), max(gap_ns)) AS ns FROM (
        SELECT DISTINCT spike_id, gap_ns, window_start_ns, window_end_ns,
               least(end_ns, window_end_ns) - greatest(start_ns, window_start_ns) AS ov
        FROM spike_prefill_window_pairs)
    GROUP BY spike_id),
running AS (
    -- By one-second buckets, as in spike_prefill_window_pairs: a request decoding throughout a gap overlaps
    -- its span, so the pair is met in the bucket where that overlap begins (spans over an hour: directly).
    WITH sp AS (
        SELECT spike_id, source_id, run_line, start_ns, end_ns, least(start_ns, end_ns) AS lo_ns,
               least(start_ns, end_ns) // 1000000000 AS b0, greatest(start_ns, end_ns) // 1000000000 AS b1
        FROM spikes WHERE level = 'request'),
    rq AS (
        SELECT source_id, run_line, first_token_ns, finish_ns, least(first_token_ns, finish_ns) AS lo_ns,
               least(first_token_ns, finish_ns) // 1000000000 AS b0,
               greatest(first_token_ns, finish_ns) // 1000000000 AS b1
        FROM request_metrics WHERE first_token_ns IS NOT NULL AND finish_ns IS NOT NULL),
    pairs AS (
        SELECT s.spike_id FROM (SELECT *, unnest(range(b0, b1 + 1)) AS bucket FROM sp WHERE b1 - b0 <= 3600) s
        JOIN (SELECT *, unnest(range(b0, b1 + 1)) AS bucket FROM rq WHERE b1 - b0 <= 3600) m
          ON m.source_id = s.source_id AND m.run_line = s.run_line AND m.bucket = s.bucket
        WHERE greatest(s.lo_ns, m.lo_ns) // 1000000000 = s.bucket
          AND m.first_token_ns <= s.start_ns AND m.finish_ns >= s.end_ns
        UNION ALL
        SELECT s.spike_id FROM sp s JOIN rq m ON m.source_id = s.source_id AND m.run_line = s.run_line
         AND m.first_token_ns <= s.start_ns AND m.finish_ns >= s.end_ns
        WHERE m.b1 - m.b0 > 3600
        UNION ALL
        SELECT s.spike_id FROM (SELECT * FROM sp WHERE b1 - b0 > 3600) s
        JOIN rq m ON m.source_id = s.source_id AND m.run_line = s.run_line
         AND m.first_token_ns <= s.start_ns AND m.finish_ns >= s.end_ns
        WHERE m.b1 - m.b0 <= 3600)
    SELECT spike_id, count(*) AS n FROM pairs GROUP BY spike_id),
a AS (
    SELECT s.spike_id, s.gap_ns, greatest(s.gap_ns - s.baseline_ns, 0) AS excess_ns,
           CASE WHEN st.spike_id IS NOT NULL AND st.split_known THEN 'kernels'
                WHEN st.spike_id IS NOT NULL THEN 'steps' ELSE 'inferred' END AS evidence,
           CASE WHEN st.spike_id IS NOT NULL AND st.split_known THEN coalesce(sp.prefill_overlap_ns, 0)
                WHEN st.spike_id IS NOT NULL THEN NULL
                WHEN s.level = 'request' THEN CAST(coalesce(inf.ns, 0) AS BIGINT) END AS prefill_overlap_ns,
           -- The stalling step's own count when the trace gives it, else the client requests decoding
           -- throughout the gap (a measurement, not a guess); step-level spikes without either stay NULL.
           coalesce(st.stall_gen_reqs, running.n) AS stalled_decodes,
           CASE WHEN st.tokens_known THEN st.prefill_tokens END AS prefill_tokens,
           st.stalling_step_id
    FROM spikes s
    LEFT JOIN st ON st.spike_id = s.spike_id
    LEFT JOIN spike_prefill sp ON sp.spike_id = s.spike_id
    LEFT JOIN inf ON inf.spike_id = s.spike_id
    LEFT JOIN running ON running.spike_id = s.spike_id)
SELECT spike_id, evidence, prefill_overlap_ns,
       prefill_overlap_ns / gap_ns AS share,
       excess_ns,
       -- least() skips NULLs in DuckDB, so an unknown overlap is kept unknown explicitly.
       CASE WHEN prefill_overlap_ns IS NOT NULL THEN least(prefill_overlap_ns, excess_ns) END AS prefill_excess_ns,
       CASE WHEN prefill_overlap_ns IS NOT NULL THEN excess_ns - least(prefill_overlap_ns, excess_ns) END AS other_ns,
       CAST(stalled_decodes AS INTEGER) AS stalled_decodes, prefill_tokens, stalling_step_id
FROM a;
