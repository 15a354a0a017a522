-- Decode-gap spikes. A gap is a spike when it exceeds the ITL SLO (`analysis_params.itl_ms`, when set) or
-- `spike_k` times the decode-only gap expected at its moment (`gap_baseline`, `step_baseline`); `rule` says
-- which fired. Request-level spikes come from client chunk gaps; where no client gaps cover a GPU trace, the
-- trace's own step gaps give step-level spikes (no request identity: `request_id` NULL).
-- @depends client_gaps, gap_baseline, step_gaps, step_baseline
-- @column spike_id         BIGINT   Row id of the spike within this result.
-- @column level            VARCHAR  `request` (a client chunk gap) or `step` (an engine step gap).
-- @column source_id        INTEGER  Source of the gap (benchmark file or trace).
-- @column run_line         BIGINT   Run inside a benchmark source (NULL for steps).
-- @column request_id       VARCHAR  The source's own request id (NULL for step-level spikes).
-- @column report_id        VARCHAR  Server request id when known, else request_id (NULL for steps).
-- @column token_index      INTEGER  Index of the chunk that ended the gap (NULL for steps).
-- @column step_id          BIGINT   The step whose end closed the gap (step-level spikes).
-- @column start_ns         BIGINT   Gap start, ns since Unix epoch, UTC.
-- @column end_ns           BIGINT   Gap end, ns since Unix epoch, UTC.
-- @column gap_ns           BIGINT   Gap length, ns.
-- @column baseline_ns      BIGINT   Expected decode-only gap at that moment, ns.
-- @column baseline_basis   VARCHAR  `trace_steps`, `client_gaps_median`, `decode_only_steps` or `all_steps_median`.
-- @column rule             VARCHAR  `itl_slo`, `relative` or `itl_slo+relative`.
CREATE OR REPLACE TEMP VIEW spikes AS
WITH p AS (SELECT * FROM analysis_params),
req AS (
    SELECT 'request' AS level, g.source_id, g.run_line, g.request_id, g.report_id, g.token_index,
           NULL::BIGINT AS step_id, g.start_ns, g.end_ns, g.gap_ns, b.baseline_ns, b.basis AS baseline_basis
    FROM client_gaps g JOIN gap_baseline b USING (source_id, run_line, request_id, gap_index)),
covered AS (
    -- Traces whose time span client gaps overlap are judged per request, not per step.
    SELECT DISTINCT m.source_id FROM trace_meta m
    WHERE EXISTS (SELECT 1 FROM client_gaps g WHERE g.end_ns >= m.start_ns AND g.start_ns <= m.end_ns)),
stp AS (
    SELECT 'step' AS level, g.source_id, NULL::BIGINT AS run_line, NULL AS request_id, NULL AS report_id,
           NULL::INTEGER AS token_index, g.step_id, g.start_ns, g.end_ns, g.gap_ns, b.baseline_ns,
           b.basis AS baseline_basis
    FROM step_gaps g JOIN step_baseline b USING (step_id)
    WHERE g.source_id NOT IN (SELECT source_id FROM covered)),
allg AS (SELECT * FROM req UNION ALL SELECT * FROM stp),
flagged AS (
    SELECT allg.*,
           p.itl_ms IS NOT NULL AND gap_ns > p.itl_ms * 1e6 AS by_slo,
           gap_ns > p.spike_k * baseline_ns AS by_rel
    FROM allg, p)
SELECT row_number() OVER (ORDER BY start_ns, level, source_id, request_id, step_id) AS spike_id,
       level, source_id, run_line, request_id, report_id, token_index, step_id, start_ns, end_ns, gap_ns,
       baseline_ns, baseline_basis,
       CASE WHEN by_slo AND by_rel THEN 'itl_slo+relative' WHEN by_slo THEN 'itl_slo' ELSE 'relative' END AS rule
FROM flagged WHERE by_slo OR by_rel;
