-- The decode-only gap expected at the moment of each client gap. Where a GPU trace covers that moment, it is
-- the trace's decode-only step baseline (`step_baseline`, the last step ending at or before the gap's end,
-- within one baseline of it); otherwise the median of all client gaps of the same run within
-- `analysis_params.baseline_window_s` either side (most gaps are decode-only, so the median is one).
-- @depends client_gap_median, step_baseline
-- @column source_id     INTEGER  The benchmark source.
-- @column run_line      BIGINT   The run inside the benchmark source.
-- @column request_id    VARCHAR  The request (the source's own id).
-- @column gap_index     INTEGER  The gap index k within the request.
-- @column baseline_ns   BIGINT   Expected decode-only gap at that moment, ns.
-- @column basis         VARCHAR  `trace_steps` or `client_gaps_median`.
CREATE OR REPLACE TEMP VIEW gap_baseline AS
-- One pass: each gap's window median with the last step baseline at or before its end (no join back).
SELECT m.source_id, m.run_line, m.request_id, m.gap_index,
       CAST(coalesce(CASE WHEN m.end_ns - b.end_ns <= b.baseline_ns THEN b.baseline_ns END, m.med_ns) AS BIGINT)
           AS baseline_ns,
       CASE WHEN m.end_ns - b.end_ns <= b.baseline_ns THEN 'trace_steps' ELSE 'client_gaps_median' END AS basis
FROM client_gap_median m ASOF LEFT JOIN step_baseline b ON m.end_ns >= b.end_ns;
