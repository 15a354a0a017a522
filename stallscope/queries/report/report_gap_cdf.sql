-- The empirical distribution of decode gaps for the report's ITL figure, thinned to at most 2000 points per
-- series (every k-th value in sorted order, plus the extremes): streamed-chunk gaps of the judged client
-- requests (`itl`), their mean TPOT (`tpot`), and, where no client gaps exist, the traces' engine step gaps
-- (`step_gap`). Exact at every point it keeps.
-- @depends client_gaps, step_gaps, report_requests
-- @column series      VARCHAR  `itl`, `tpot` or `step_gap`.
-- @column value_ms    DOUBLE   The gap (or mean TPOT), ms.
-- @column fraction    DOUBLE   Share of the series at or below value_ms (0..1].
-- @column n           BIGINT   Values in the whole series.
CREATE OR REPLACE TEMP VIEW report_gap_cdf AS
WITH v AS (
    SELECT 'itl' AS series, g.gap_ns / 1e6 AS value_ms FROM client_gaps g
    WHERE g.gap_ns >= 0 AND EXISTS (SELECT 1 FROM report_requests r WHERE r.kind = 'client')
    UNION ALL
    SELECT 'tpot', tpot_ms FROM report_requests WHERE tpot_ms > 0 AND output_tokens > 1
    UNION ALL
    SELECT 'step_gap', gap_ns / 1e6 FROM step_gaps
    WHERE gap_ns >= 0 AND NOT EXISTS (SELECT 1 FROM client_gaps)),
r AS (SELECT series, value_ms, row_number() OVER (PARTITION BY series ORDER BY value_ms) AS rn,
             cume_dist() OVER (PARTITION BY series ORDER BY value_ms) AS fraction,
             count(*) OVER (PARTITION BY series) AS n FROM v WHERE isfinite(value_ms))
SELECT series, value_ms, fraction, n FROM r
WHERE rn = 1 OR rn = n OR rn % CAST(ceil(n / 2000.0) AS BIGINT) = 0
ORDER BY series, rn;
