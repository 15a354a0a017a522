-- Decode gaps over time as a 2-D histogram, for the report's timeline when there are too many gaps to draw
-- one dot each: nx time bins across the gaps' span by ny bins of log(gap). Client chunk gaps when the store
-- has any, else the traces' engine step gaps.
-- @depends client_gaps, step_gaps
-- @param nx   Number of time bins (default 400).
-- @param ny   Number of log-spaced gap bins (default 80).
-- @column x0_ns     BIGINT   Time bin start, ns since Unix epoch, UTC.
-- @column x1_ns     BIGINT   Time bin end, ns since Unix epoch, UTC.
-- @column y0_ms     DOUBLE   Gap bin lower edge, ms.
-- @column y1_ms     DOUBLE   Gap bin upper edge, ms.
-- @column gaps      BIGINT   Gaps ending in the time bin whose length falls in the gap bin.
CREATE OR REPLACE TEMP MACRO report_gap_density(nx := 400, ny := 80) AS TABLE
WITH g AS (
    SELECT end_ns, gap_ns FROM client_gaps WHERE gap_ns > 0
    UNION ALL
    SELECT end_ns, gap_ns FROM step_gaps WHERE gap_ns > 0 AND NOT EXISTS (SELECT 1 FROM client_gaps)),
b AS (SELECT min(end_ns) AS lo, greatest(max(end_ns) - min(end_ns), 1) AS span, ln(min(gap_ns)) AS glo,
             greatest(ln(max(gap_ns)) - ln(min(gap_ns)), 1e-9) AS gspan FROM g),
binned AS (
    SELECT least(CAST(floor((g.end_ns - b.lo) * nx / b.span) AS BIGINT), nx - 1) AS xb,
           least(CAST(floor((ln(g.gap_ns) - b.glo) * ny / b.gspan) AS BIGINT), ny - 1) AS yb, count(*) AS gaps
    FROM g, b GROUP BY ALL)
SELECT CAST(b.lo + xb * b.span / nx AS BIGINT) AS x0_ns, CAST(b.lo + (xb + 1) * b.span / nx AS BIGINT) AS x1_ns,
       exp(b.glo + yb * b.gspan / ny) / 1e6 AS y0_ms, exp(b.glo + (yb + 1) * b.gspan / ny) / 1e6 AS y1_ms, gaps
FROM binned, b ORDER BY x0_ns, y0_ms;
