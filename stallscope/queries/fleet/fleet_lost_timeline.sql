-- Fleet goodput and lost goodput over time: every replica's judged requests (`lake_requests` rows that
-- count for goodput: per shard the benchmark-side rows when it has any, else the server's, as analyze judges) binned by completion time
-- into `bins` equal bins over the fleet's span, summed over the fleet. A lost request is one that is good only
-- once interference is removed, so the bins' lost requests add up to the fleet's requests_lost.
-- @param bins  Number of time bins over the span (default 120).
-- @column t_ns              BIGINT   Bin start, ns since Unix epoch, UTC.
-- @column bin_s             DOUBLE   Bin length, s.
-- @column requests_good     BIGINT   Requests completed in the bin within every SLO, fleet-wide.
-- @column requests_lost     BIGINT   Requests completed in the bin that only interference kept from being good.
-- @column goodput_rps       DOUBLE   requests_good / bin_s, requests per second.
-- @column goodput_lost_rps  DOUBLE   requests_lost / bin_s, requests per second.
-- @column replicas_losing   BIGINT   Replicas with a lost request in the bin.
CREATE OR REPLACE TEMP MACRO fleet_lost_timeline(bins := 120) AS TABLE
WITH r AS (SELECT pool, replica, finish_ns, coalesce(good, false) AS good,
                  coalesce(good_cf, false) AND NOT coalesce(good, false) AS lost
           FROM lake_requests WHERE counts_for_goodput AND finish_ns IS NOT NULL),
span AS (SELECT min(finish_ns) AS t0, greatest(max(finish_ns) - min(finish_ns), 1) AS dt FROM r),
b AS (SELECT least(CAST(floor((r.finish_ns - span.t0) * bins / span.dt) AS BIGINT), bins - 1) AS i, r.*
      FROM r, span),
grid AS (SELECT unnest(range(0, bins)) AS i)
SELECT span.t0 + (grid.i * span.dt) // bins AS t_ns, span.dt / bins / 1e9 AS bin_s,
       CAST(count(b.i) FILTER (WHERE b.good) AS BIGINT) AS requests_good,
       CAST(count(b.i) FILTER (WHERE b.lost) AS BIGINT) AS requests_lost,
       count(b.i) FILTER (WHERE b.good) / (span.dt / bins / 1e9) AS goodput_rps,
       count(b.i) FILTER (WHERE b.lost) / (span.dt / bins / 1e9) AS goodput_lost_rps,
       count(DISTINCT (b.pool, b.replica)) FILTER (WHERE b.lost) AS replicas_losing
FROM span CROSS JOIN grid LEFT JOIN b ON b.i = grid.i
WHERE span.t0 IS NOT NULL
GROUP BY grid.i, span.t0, span.dt
ORDER BY grid.i;
