-- The worst stall events fleet-wide. Within each shard, spikes are grouped into stall events as
-- `report_stall_events` groups them (one stall is a spike in every request it held up): spikes that share a
-- traced step are one event, untraced spikes group by their top culprit within 200 ms. Each event carries its
-- worst spike's facts and that spike's top culprit (`lake_culprits` rank 1: the request whose prefill added the
-- most time to the gap). Reads `lake_spikes` and `lake_culprits`.
-- @column fleet_rank            BIGINT   1 = the event with the longest gap in the fleet.
-- @column pool                  VARCHAR  The replica's pool.
-- @column replica               VARCHAR  The replica that stalled.
-- @column window                VARCHAR  The shard's window (`all` without --window).
-- @column shard_id              VARCHAR  The shard.
-- @column start_ns              BIGINT   Earliest spike start in the event, ns since Unix epoch, UTC.
-- @column end_ns                BIGINT   Latest spike end in the event, ns since Unix epoch, UTC.
-- @column spikes                BIGINT   Spikes in the event.
-- @column requests_hit          BIGINT   Request-level spikes in the event (0 for step-level events).
-- @column worst_gap_ms          DOUBLE   The longest gap, ms.
-- @column baseline_ms           DOUBLE   Expected decode-only gap at the worst spike, ms.
-- @column excess_ms             DOUBLE   How far the worst gap exceeds its baseline, ms.
-- @column prefill_ms            DOUBLE   Prefill time inside the worst gap, ms (NULL when unknown).
-- @column share                 DOUBLE   prefill_ms / worst_gap_ms (NULL when unknown).
-- @column evidence              VARCHAR  `kernels`, `steps` or `inferred`.
-- @column stalled_decodes       INTEGER  Decodes the stall held up (NULL when the evidence does not say).
-- @column culprit_id            VARCHAR  The worst spike's top culprit request (NULL when none).
-- @column culprit_prompt_tokens INTEGER  The culprit's prompt length, tokens.
-- @column culprit_overlap_ms    DOUBLE   The culprit's prefill time inside the worst gap, ms.
-- @column culprit_confidence    VARCHAR  `high`, `ambiguous` or `low` (as `spike_culprits` says).
CREATE OR REPLACE TEMP VIEW fleet_stall_events AS
WITH s AS (
    SELECT sp.*, c.request_id AS culprit_id, c.prompt_tokens AS culprit_prompt_tokens,
           c.overlap_ns AS culprit_overlap_ns, c.confidence AS culprit_confidence
    FROM lake_spikes sp
    LEFT JOIN lake_culprits c ON c.shard_id = sp.shard_id AND c.spike_id = sp.spike_id AND c.rank = 1),
k AS (SELECT *, CASE WHEN step_index IS NOT NULL THEN 'step:' || coalesce(source, '') || ':' || step_index
                     ELSE 'culprit:' || coalesce(culprit_id, '') || ':' || CAST(round(end_ns / 2e8) AS BIGINT) END AS ev
      FROM s),
g AS (
    SELECT shard_id, ev, min(start_ns) AS start_ns, max(end_ns) AS end_ns, count(*) AS spikes,
           count(*) FILTER (WHERE level = 'request') AS requests_hit,
           arg_max(spike_id, (gap_ns, -spike_id)) AS worst
    FROM k GROUP BY shard_id, ev)
SELECT row_number() OVER (ORDER BY w.gap_ns DESC, g.start_ns, g.shard_id) AS fleet_rank, w.pool, w.replica,
       w."window", g.shard_id, CAST(g.start_ns AS BIGINT) AS start_ns, CAST(g.end_ns AS BIGINT) AS end_ns, g.spikes,
       g.requests_hit, w.gap_ns / 1e6 AS worst_gap_ms, w.baseline_ns / 1e6 AS baseline_ms,
       w.excess_ns / 1e6 AS excess_ms, w.prefill_overlap_ns / 1e6 AS prefill_ms,
       CAST(w.share AS DOUBLE) AS share, w.evidence, CAST(w.stalled_decodes AS INTEGER) AS stalled_decodes,
       w.culprit_id, CAST(w.culprit_prompt_tokens AS INTEGER) AS culprit_prompt_tokens,
       w.culprit_overlap_ns / 1e6 AS culprit_overlap_ms, w.culprit_confidence
FROM g JOIN k w ON w.shard_id = g.shard_id AND w.spike_id = g.worst
ORDER BY fleet_rank;
