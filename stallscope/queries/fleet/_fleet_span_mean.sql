-- An aggregate over windows (one row per window, within a GROUP BY or over a whole view): with one window the
-- plain sum of `x` (exact: without --window the fleet is one window and its goodput the sum over its shards),
-- with several the mean of `x` weighted by each window's span, over the windows where `x` is known. Each sum adds
-- its values in ascending order (as `_fleet_sum`, written out here so the macro stands alone), so the same windows
-- give the same bits in every rollup.
-- @param x       The per-window value, e.g. a goodput in requests per second.
-- @param span_s  The window's weight, s (`span_s` of fleet_pool_windows / fleet_windows).
-- @returns DOUBLE  sum(x) for one window, else sum(x * span_s) / sum(span_s) over the rows with x not NULL.
CREATE OR REPLACE TEMP MACRO _fleet_span_mean(x, span_s) AS
    CASE WHEN count(*) = 1 THEN sum(CAST(x AS DOUBLE) ORDER BY CAST(x AS DOUBLE))
         ELSE sum(CAST(x * span_s AS DOUBLE) ORDER BY CAST(x * span_s AS DOUBLE))
              / nullif(sum(CAST(span_s AS DOUBLE) ORDER BY CAST(span_s AS DOUBLE)) FILTER (WHERE x IS NOT NULL), 0) END;
