-- The decode-only step time expected at each step's moment, i.e. how long a step holding only decodes took
-- around then. When the trace says which steps are decode-only, it is the median duration (execute_model
-- window, else GPU window) of the `analysis_params.baseline_steps` (default 16) decode-only steps either side
-- of the nearest one: decode steps grow with the batch, so a tight neighbourhood follows load changes, and no
-- prefill work can pollute it. When the trace does not say, it is the median duration of all steps within
-- `analysis_params.baseline_window_s` either side: decode steps outnumber prefill steps by far, so the median
-- is still a decode step.
-- @depends step_gaps
-- @column source_id     INTEGER  The trace.
-- @column step_id       BIGINT   The step.
-- @column end_ns        BIGINT   The step's end, ns since Unix epoch, UTC.
-- @column baseline_ns   BIGINT   Expected decode-only step time at that moment, ns.
-- @column basis         VARCHAR  `decode_only_steps` or `all_steps_median`.
CREATE OR REPLACE TEMP VIEW step_baseline AS
WITH dec AS (
    SELECT source_id, end_ns,
           median(step_wall_ns) OVER (PARTITION BY source_id ORDER BY end_ns
               ROWS BETWEEN (SELECT CAST(baseline_steps AS BIGINT) FROM analysis_params) PRECEDING
                        AND (SELECT CAST(baseline_steps AS BIGINT) FROM analysis_params) FOLLOWING) AS med
    FROM step_gaps WHERE decode_only),
allm AS (
    SELECT source_id, step_id, end_ns,
           median(step_wall_ns) OVER (PARTITION BY source_id ORDER BY end_ns
               RANGE BETWEEN (SELECT CAST(baseline_window_s * 1e9 AS BIGINT) FROM analysis_params) PRECEDING
                         AND (SELECT CAST(baseline_window_s * 1e9 AS BIGINT) FROM analysis_params) FOLLOWING) AS med
    FROM step_gaps),
near AS (
    -- The nearest decode-only step at or after each step, else the nearest before it.
    SELECT a.source_id, a.step_id, coalesce(f.med, b.med) AS med
    FROM allm a
    ASOF LEFT JOIN (SELECT source_id, -end_ns AS neg_end, med FROM dec) f
      ON f.source_id = a.source_id AND -a.end_ns >= f.neg_end
    ASOF LEFT JOIN dec b ON b.source_id = a.source_id AND a.end_ns >= b.end_ns)
SELECT a.source_id, a.step_id, a.end_ns,
       CAST(coalesce(n.med, a.med) AS BIGINT) AS baseline_ns,
       CASE WHEN n.med IS NOT NULL THEN 'decode_only_steps' ELSE 'all_steps_median' END AS basis
FROM allm a JOIN near n USING (source_id, step_id);
