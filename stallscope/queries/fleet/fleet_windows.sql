-- The fleet per window: every pool's shards of the window summed (fleet goodput at that time is the sum of
-- its replicas' goodput). One row (`all`) when the lake was built without --window.
-- @depends fleet_pool_windows, _fleet_sum
-- @column window                      VARCHAR  The window: `all` without --window, else its start as YYYYMMDDTHHMMSSZ (UTC).
-- @column start_ns                    BIGINT   Earliest judged-window start of its shards, ns since Unix epoch, UTC.
-- @column end_ns                      BIGINT   Latest judged-window end of its shards, ns since Unix epoch, UTC.
-- @column span_s                      DOUBLE   The window's weight in time averages, s: end_ns - start_ns over all its pools (else the longest pool span).
-- @column pools                       BIGINT   Pools with a shard in the window.
-- @column shards                      BIGINT   Shards in the window.
-- @column replicas                    BIGINT   Replicas with a shard in the window.
-- @column requests_total              BIGINT   Judged requests, failed ones included.
-- @column requests_good               BIGINT   Requests within every SLO.
-- @column requests_lost               BIGINT   Requests good only once interference is removed.
-- @column goodput_rps                 DOUBLE   Fleet goodput: sum of the shards' goodput, requests per second.
-- @column goodput_counterfactual_rps  DOUBLE   Sum of the shards' goodput without interference, requests per second.
-- @column goodput_lost_rps            DOUBLE   Sum of the shards' lost goodput, requests per second.
-- @column spike_count                 BIGINT   Decode-gap spikes in the window.
-- @column worst_gap_ns                BIGINT   The longest spiking gap in the window, ns.
CREATE OR REPLACE TEMP VIEW fleet_windows AS
SELECT "window", min(start_ns) AS start_ns, max(end_ns) AS end_ns,
       coalesce(nullif((max(end_ns) - min(start_ns)) / 1e9, 0), max(span_s)) AS span_s,
       count(*) AS pools, CAST(sum(shards) AS BIGINT) AS shards, CAST(sum(replicas) AS BIGINT) AS replicas,
       CAST(sum(requests_total) AS BIGINT) AS requests_total, CAST(sum(requests_good) AS BIGINT) AS requests_good,
       CAST(sum(requests_lost) AS BIGINT) AS requests_lost,
       _fleet_sum(goodput_rps) AS goodput_rps, _fleet_sum(goodput_counterfactual_rps) AS goodput_counterfactual_rps,
       _fleet_sum(goodput_lost_rps) AS goodput_lost_rps, CAST(sum(spike_count) AS BIGINT) AS spike_count,
       max(worst_gap_ns) AS worst_gap_ns
FROM fleet_pool_windows
GROUP BY "window"
ORDER BY start_ns NULLS LAST, "window";
