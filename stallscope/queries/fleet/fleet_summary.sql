-- The fleet in one row: its extent, the shards' fate (from `lake_shards`), and fleet goodput and lost goodput.
-- Fleet goodput within a window is the sum over its shards of goodput_rps; over several windows it is the mean
-- of the window sums weighted by each window's span, so without --window it is exactly the sum over all shards.
-- @depends fleet_windows, _fleet_span_mean
-- @column pools                       BIGINT   Pools with an analysed shard.
-- @column replicas                    BIGINT   Replicas (pool, replica) with an analysed shard.
-- @column windows                     BIGINT   Windows with an analysed shard.
-- @column shards_total                BIGINT   Shards in `_shards`, whatever their state.
-- @column shards_done                 BIGINT   Shards analysed (status `done`).
-- @column shards_failed               BIGINT   Shards that failed after their retries (status `failed`).
-- @column start_ns                    BIGINT   Earliest judged-window start, ns since Unix epoch, UTC.
-- @column end_ns                      BIGINT   Latest judged-window end, ns since Unix epoch, UTC.
-- @column requests_total              BIGINT   Judged requests, failed ones included.
-- @column requests_good               BIGINT   Requests within every SLO.
-- @column requests_lost               BIGINT   Requests good only once interference is removed.
-- @column attainment                  DOUBLE   requests_good / requests_total (0..1).
-- @column goodput_rps                 DOUBLE   Fleet goodput, requests per second (see above).
-- @column goodput_counterfactual_rps  DOUBLE   Fleet goodput without interference, requests per second.
-- @column goodput_lost_rps            DOUBLE   Fleet goodput lost to prefill-decode interference, requests per second.
-- @column lost_share                  DOUBLE   goodput_lost_rps / goodput_counterfactual_rps (0..1).
-- @column spike_count                 BIGINT   Decode-gap spikes fleet-wide.
-- @column worst_gap_ms                DOUBLE   The fleet's longest spiking gap, ms.
-- @column slo                         VARCHAR  The SLOs the shards were judged against, e.g. `TTFT 2000 ms, ITL 200 ms` (the most common set; ties: the first by name).
-- @column slo_sets                    BIGINT   Distinct SLO sets among the shards (above 1 their goodputs measure different things).
CREATE OR REPLACE TEMP VIEW fleet_summary AS
WITH w AS (
    SELECT count(*) AS windows, min(start_ns) AS start_ns, max(end_ns) AS end_ns,
           CAST(sum(requests_total) AS BIGINT) AS requests_total, CAST(sum(requests_good) AS BIGINT) AS requests_good,
           CAST(sum(requests_lost) AS BIGINT) AS requests_lost,
           _fleet_span_mean(goodput_rps, span_s) AS goodput_rps,
           _fleet_span_mean(goodput_counterfactual_rps, span_s) AS goodput_counterfactual_rps,
           _fleet_span_mean(goodput_lost_rps, span_s) AS goodput_lost_rps,
           CAST(sum(spike_count) AS BIGINT) AS spike_count, max(worst_gap_ns) / 1e6 AS worst_gap_ms
    FROM fleet_windows),
g AS (SELECT count(DISTINCT pool) AS pools, count(DISTINCT (pool, replica)) AS replicas FROM lake_goodput),
o AS (SELECT mode(k ORDER BY k) AS slo, count(DISTINCT k) AS slo_sets
      FROM (SELECT concat_ws(', ', 'TTFT ' || printf('%g', slo_ttft_ms) || ' ms',
                             'TPOT ' || printf('%g', slo_tpot_ms) || ' ms',
                             'ITL ' || printf('%g', slo_itl_ms) || ' ms',
                             'E2EL ' || printf('%g', slo_e2el_ms) || ' ms') AS k
            FROM lake_goodput)),
s AS (SELECT count(*) AS shards_total, count(*) FILTER (WHERE status = 'done') AS shards_done,
             count(*) FILTER (WHERE status = 'failed') AS shards_failed FROM lake_shards)
SELECT g.pools, g.replicas, w.windows, s.shards_total, s.shards_done, s.shards_failed, w.start_ns, w.end_ns,
       w.requests_total, w.requests_good, w.requests_lost, w.requests_good / nullif(w.requests_total, 0) AS attainment,
       w.goodput_rps, w.goodput_counterfactual_rps, w.goodput_lost_rps,
       w.goodput_lost_rps / nullif(w.goodput_counterfactual_rps, 0) AS lost_share, w.spike_count, w.worst_gap_ms,
       o.slo, o.slo_sets
FROM w, g, s, o;
