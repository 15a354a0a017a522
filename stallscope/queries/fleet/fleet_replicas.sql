-- Replicas ranked by the goodput they lost to prefill-decode interference: each replica's goodput over its
-- windows (good requests per second of its judged time), what it would be without interference, the spikes
-- behind the loss, and its worst gap. Rank 1 lost the most; ties go to more spikes, then the longer worst gap.
-- @depends _fleet_sum
-- @column lost_rank                   BIGINT   1 = the replica that lost the most goodput.
-- @column pool                        VARCHAR  The replica's pool.
-- @column replica                     VARCHAR  The replica.
-- @column windows                     BIGINT   Analysed windows (shards) of the replica.
-- @column duration_s                  DOUBLE   Judged time summed over its shards, s.
-- @column requests_total              BIGINT   Judged requests, failed ones included.
-- @column requests_good               BIGINT   Requests within every SLO.
-- @column requests_lost               BIGINT   Requests good only once interference is removed.
-- @column attainment                  DOUBLE   requests_good / requests_total (0..1).
-- @column goodput_rps                 DOUBLE   Goodput: the shards' goodput_rps weighted by their duration_s, requests per second.
-- @column goodput_counterfactual_rps  DOUBLE   Goodput without interference, requests per second.
-- @column goodput_lost_rps            DOUBLE   Goodput lost to interference, requests per second.
-- @column spike_count                 BIGINT   Decode-gap spikes.
-- @column worst_gap_ms                DOUBLE   The longest spiking gap, ms (NULL without spikes).
-- @column interference_gpu_s          DOUBLE   GPU-seconds of prefill work that stalled decodes (NULL without a trace).
CREATE OR REPLACE TEMP VIEW fleet_replicas AS
WITH r AS (
    SELECT pool, replica, count(*) AS windows, _fleet_sum(duration_s) AS duration_s,
           CAST(sum(requests_total) AS BIGINT) AS requests_total, CAST(sum(requests_good) AS BIGINT) AS requests_good,
           CAST(sum(requests_lost) AS BIGINT) AS requests_lost,
           CASE WHEN count(*) = 1 THEN _fleet_sum(goodput_rps)
                ELSE _fleet_sum(goodput_rps * duration_s)
                     / nullif(_fleet_sum(CASE WHEN goodput_rps IS NOT NULL THEN duration_s END), 0)
                END AS goodput_rps,
           CASE WHEN count(*) = 1 THEN _fleet_sum(goodput_counterfactual_rps)
                ELSE _fleet_sum(goodput_counterfactual_rps * duration_s)
                     / nullif(_fleet_sum(CASE WHEN goodput_counterfactual_rps IS NOT NULL THEN duration_s END), 0) END
               AS goodput_counterfactual_rps,
           CASE WHEN count(*) = 1 THEN _fleet_sum(goodput_lost_rps)
                ELSE _fleet_sum(goodput_lost_rps * duration_s)
                     / nullif(_fleet_sum(CASE WHEN goodput_lost_rps IS NOT NULL THEN duration_s END), 0) END AS goodput_lost_rps,
           CAST(sum(spike_count) AS BIGINT) AS spike_count, max(worst_gap_ns) / 1e6 AS worst_gap_ms,
           _fleet_sum(interference_gpu_s) AS interference_gpu_s
    FROM lake_goodput GROUP BY pool, replica)
SELECT row_number() OVER (ORDER BY goodput_lost_rps DESC NULLS LAST, spike_count DESC NULLS LAST,
                                   worst_gap_ms DESC NULLS LAST, pool, replica) AS lost_rank,
       pool, replica, windows, duration_s, requests_total, requests_good, requests_lost,
       requests_good / nullif(requests_total, 0) AS attainment, goodput_rps, goodput_counterfactual_rps,
       goodput_lost_rps, spike_count, worst_gap_ms, interference_gpu_s
FROM r
ORDER BY lost_rank;
