-- Goodput, lost goodput and SLO attainment per pool. Within one window a pool's goodput is the sum of its
-- shards'; over several windows it is the mean of those sums weighted by each window's span (so with one window,
-- as without --window, it is exactly the sum over the pool's shards). Attainment is over all judged requests.
-- @depends fleet_pool_windows, _fleet_span_mean
-- @column pool                        VARCHAR  The pool.
-- @column windows                     BIGINT   Windows with a shard of the pool.
-- @column shards                      BIGINT   Analysed shards of the pool.
-- @column replicas                    BIGINT   Largest number of the pool's replicas in one window.
-- @column requests_total              BIGINT   Judged requests, failed ones included.
-- @column requests_good               BIGINT   Requests within every SLO.
-- @column requests_lost               BIGINT   Requests good only once interference is removed.
-- @column requests_failed             BIGINT   Requests that did not complete.
-- @column attainment                  DOUBLE   requests_good / requests_total (0..1).
-- @column goodput_rps                 DOUBLE   Pool goodput, requests per second (see above).
-- @column goodput_counterfactual_rps  DOUBLE   Pool goodput without interference, requests per second.
-- @column goodput_lost_rps            DOUBLE   Pool goodput lost to prefill-decode interference, requests per second.
-- @column lost_share                  DOUBLE   goodput_lost_rps / goodput_counterfactual_rps (0..1; NULL when nothing could be good).
-- @column spike_count                 BIGINT   Decode-gap spikes in the pool.
-- @column worst_gap_ms                DOUBLE   The pool's longest spiking gap, ms.
CREATE OR REPLACE TEMP VIEW fleet_pools AS
WITH p AS (
    SELECT pool, count(*) AS windows, CAST(sum(shards) AS BIGINT) AS shards, max(replicas) AS replicas,
           CAST(sum(requests_total) AS BIGINT) AS requests_total, CAST(sum(requests_good) AS BIGINT) AS requests_good,
           CAST(sum(requests_lost) AS BIGINT) AS requests_lost,
           CAST(sum(requests_failed) AS BIGINT) AS requests_failed,
           _fleet_span_mean(goodput_rps, span_s) AS goodput_rps,
           _fleet_span_mean(goodput_counterfactual_rps, span_s) AS goodput_counterfactual_rps,
           _fleet_span_mean(goodput_lost_rps, span_s) AS goodput_lost_rps,
           CAST(sum(spike_count) AS BIGINT) AS spike_count, max(worst_gap_ns) / 1e6 AS worst_gap_ms
    FROM fleet_pool_windows GROUP BY pool)
SELECT pool, windows, shards, replicas, requests_total, requests_good, requests_lost, requests_failed,
       requests_good / nullif(requests_total, 0) AS attainment, goodput_rps, goodput_counterfactual_rps,
       goodput_lost_rps, goodput_lost_rps / nullif(goodput_counterfactual_rps, 0) AS lost_share,
       spike_count, worst_gap_ms
FROM p
ORDER BY goodput_lost_rps DESC NULLS LAST, pool;
