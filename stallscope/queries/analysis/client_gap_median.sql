-- The median of all client gaps of the same run that ended within `analysis_params.baseline_window_s` either
-- side of each client gap's end (bounds included): the decode-only gap expected at that moment when no trace
-- says (most gaps are decode-only, so the median is one). `gap_baseline` reads it. When materialised,
-- stallscope.fastviews computes the same rows without DuckDB's RANGE-framed window (slow over ~150k-row frames).
-- @depends client_gaps
-- @column source_id     INTEGER  The benchmark source.
-- @column run_line      BIGINT   The run inside the benchmark source.
-- @column request_id    VARCHAR  The request (the source's own id).
-- @column gap_index     INTEGER  The gap index k within the request.
-- @column end_ns        BIGINT   The gap's end, ns since Unix epoch, UTC.
-- @column med_ns        DOUBLE   Median gap length in the window, ns.
CREATE OR REPLACE TEMP VIEW client_gap_median AS
SELECT source_id, run_line, request_id, gap_index, end_ns,
       median(gap_ns) OVER (PARTITION BY source_id, run_line ORDER BY end_ns
           RANGE BETWEEN (SELECT CAST(baseline_window_s * 1e9 AS BIGINT) FROM analysis_params) PRECEDING
                     AND (SELECT CAST(baseline_window_s * 1e9 AS BIGINT) FROM analysis_params) FOLLOWING) AS med_ns
FROM client_gaps;
