-- The decode-only step time expected at each step's moment: the median gap of decode-only steps within
-- `analysis_params.baseline_window_s` (default 30 s) either side on the same trace (robust to the spikes it is compared with). When the trace does not
-- say which steps are decode-only, the median of all its step gaps in the window stands in: decode steps
-- outnumber prefill steps by far, so the median is still a decode step.
-- @depends step_gaps
-- @column source_id     INTEGER  The trace.
-- @column step_id       BIGINT   The step.
-- @column end_ns        BIGINT   The step's end, ns since Unix epoch, UTC.
-- @column baseline_ns   BIGINT   Expected decode-only gap at that moment, ns.
-- @column basis         VARCHAR  `decode_only_steps` or `all_steps_median`.
CREATE OR REPLACE TEMP VIEW step_baseline AS
WITH w AS (
    SELECT source_id, step_id, end_ns,
           median(gap_ns) FILTER (WHERE decode_only) OVER win AS dec_med,
           median(gap_ns) OVER win AS all_med
    FROM step_gaps
    WINDOW win AS (PARTITION BY source_id ORDER BY end_ns
                   RANGE BETWEEN (SELECT CAST(baseline_window_s * 1e9 AS BIGINT) FROM analysis_params) PRECEDING
                             AND (SELECT CAST(baseline_window_s * 1e9 AS BIGINT) FROM analysis_params) FOLLOWING))
SELECT source_id, step_id, end_ns,
       CAST(coalesce(dec_med, all_med) AS BIGINT) AS baseline_ns,
       CASE WHEN dec_med IS NOT NULL THEN 'decode_only_steps' ELSE 'all_steps_median' END AS basis
FROM w;
