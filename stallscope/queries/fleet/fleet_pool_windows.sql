-- The fleet rollup's base: each pool's shards summed within one window (the shards of one window run side by
-- side, so their goodputs add up). Reads `lake_goodput` (one row per shard: the numbers `stallscope analyze`
-- gives for the shard alone), which stallscope.fleet.rollup creates over LAKE/goodput with hive partitioning.
-- @depends _fleet_sum
-- @column pool                        VARCHAR  The pool (a hive partition of the lake).
-- @column window                      VARCHAR  The window: `all` without --window, else its start as YYYYMMDDTHHMMSSZ (UTC).
-- @column start_ns                    BIGINT   Earliest judged-window start of the pool's shards in it, ns since Unix epoch, UTC.
-- @column end_ns                      BIGINT   Latest judged-window end of the pool's shards in it, ns since Unix epoch, UTC.
-- @column span_s                      DOUBLE   The window's weight in time averages, s: end_ns - start_ns (else the longest shard duration_s).
-- @column shards                      BIGINT   Shards (replica x window) of the pool in the window.
-- @column replicas                    BIGINT   Distinct replicas of the pool in the window.
-- @column requests_total              BIGINT   Judged requests, failed ones included, summed over the shards.
-- @column requests_good               BIGINT   Requests within every SLO, summed over the shards.
-- @column requests_good_counterfactual BIGINT  Requests good once interference is removed, summed over the shards.
-- @column requests_lost               BIGINT   requests_good_counterfactual - requests_good, summed over the shards.
-- @column requests_failed             BIGINT   Requests that did not complete, summed over the shards.
-- @column goodput_rps                 DOUBLE   Sum of the shards' goodput, requests per second.
-- @column goodput_counterfactual_rps  DOUBLE   Sum of the shards' goodput without interference, requests per second.
-- @column goodput_lost_rps            DOUBLE   Sum of the shards' goodput lost to interference, requests per second.
-- @column spike_count                 BIGINT   Decode-gap spikes, summed over the shards.
-- @column worst_gap_ns                BIGINT   The longest spiking gap of any shard, ns.
-- @column interference_gpu_s          DOUBLE   GPU-seconds of prefill work that stalled decodes, summed (NULL when no shard had a trace).
CREATE OR REPLACE TEMP VIEW fleet_pool_windows AS
SELECT pool, "window", min(window_start_ns) AS start_ns, max(window_end_ns) AS end_ns,
       coalesce(nullif((max(window_end_ns) - min(window_start_ns)) / 1e9, 0), max(duration_s)) AS span_s,
       count(*) AS shards, count(DISTINCT replica) AS replicas,
       CAST(sum(requests_total) AS BIGINT) AS requests_total, CAST(sum(requests_good) AS BIGINT) AS requests_good,
       CAST(sum(requests_good_counterfactual) AS BIGINT) AS requests_good_counterfactual,
       CAST(sum(requests_lost) AS BIGINT) AS requests_lost, CAST(sum(requests_failed) AS BIGINT) AS requests_failed,
       _fleet_sum(goodput_rps) AS goodput_rps, _fleet_sum(goodput_counterfactual_rps) AS goodput_counterfactual_rps,
       _fleet_sum(goodput_lost_rps) AS goodput_lost_rps, CAST(sum(spike_count) AS BIGINT) AS spike_count,
       CAST(max(worst_gap_ns) AS BIGINT) AS worst_gap_ns, _fleet_sum(interference_gpu_s) AS interference_gpu_s
FROM lake_goodput
GROUP BY pool, "window";
