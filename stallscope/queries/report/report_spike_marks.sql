-- The analysis's spikes thinned for the report's timeline when there are too many to mark one by one: the time
-- axis cut into nx bins and log(gap) into ny bins, and each occupied cell marked once, at its largest spike (the
-- marks keep every cell's worst gap, and the overall worst, where a reader looks).
-- @depends spikes
-- @param nx   Number of time bins (default 1000: about one a pixel of the report's figure).
-- @param ny   Number of log-spaced gap bins (default 300).
-- @column end_ns    BIGINT   End of the cell's largest spike, ns since Unix epoch, UTC.
-- @column gap_ms    DOUBLE   Its gap, ms.
-- @column spikes    BIGINT   Spikes in the cell.
CREATE OR REPLACE TEMP MACRO report_spike_marks(nx := 1000, ny := 300) AS TABLE
WITH s AS (SELECT spike_id, end_ns, gap_ns FROM spikes WHERE gap_ns > 0),
b AS (SELECT min(end_ns) AS lo, greatest(max(end_ns) - min(end_ns), 1) AS span, ln(min(gap_ns)) AS glo,
             greatest(ln(max(gap_ns)) - ln(min(gap_ns)), 1e-9) AS gspan FROM s),
binned AS (
    SELECT least(CAST(floor((s.end_ns - b.lo) * nx / b.span) AS BIGINT), nx - 1) AS xb,
           least(CAST(floor((ln(s.gap_ns) - b.glo) * ny / b.gspan) AS BIGINT), ny - 1) AS yb,
           arg_max(s.end_ns, (s.gap_ns, -s.spike_id)) AS end_ns, max(s.gap_ns) AS gap_ns, count(*) AS spikes
    FROM s, b GROUP BY ALL)
SELECT end_ns, gap_ns / 1e6 AS gap_ms, spikes FROM binned ORDER BY end_ns, gap_ms;
