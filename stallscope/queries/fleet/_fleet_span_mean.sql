-- An aggregate over windows (one row per window, within a GROUP BY or over a whole view): with one window the
-- plain sum of `x` (exact: without --window the fleet is one window and its goodput the sum over its shards),
-- with several the mean of `x` weighted by each window's span, over the windows where `x` is known.
-- @param x       The per-window value, e.g. a goodput in requests per second.
-- @param span_s  The window's weight, s (`span_s` of fleet_pool_windows / fleet_windows).
-- @returns DOUBLE  sum(x) for one window, else sum(x * span_s) / sum(span_s) over the rows with x not NULL.
CREATE OR REPLACE TEMP MACRO _fleet_span_mean(x, span_s) AS
    CASE WHEN count(*) = 1 THEN sum(x)
         ELSE sum(x * span_s) / nullif(sum(span_s) FILTER (WHERE x IS NOT NULL), 0) END;
