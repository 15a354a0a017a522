-- Spikes grouped into stall events: one stall shows up as a spike in every request it held up, so spikes that
-- share a stalling (or spiking) traced step are one event; untraced spikes group by their top culprit within
-- 200 ms. Each event carries its worst spike's facts and its top culprit.
-- @depends spikes, spike_attribution, spike_culprits
-- @column event_id         BIGINT   1 = the event with the longest gap.
-- @column start_ns         BIGINT   Earliest spike start in the event, ns since Unix epoch, UTC.
-- @column end_ns           BIGINT   Latest spike end in the event, ns since Unix epoch, UTC.
-- @column spikes           BIGINT   Spikes in the event.
-- @column requests_hit     BIGINT   Request-level spikes in the event (0 for step-level events).
-- @column worst_gap_ms     DOUBLE   The longest gap, ms.
-- @column baseline_ms      DOUBLE   Expected decode-only gap at the worst spike, ms.
-- @column excess_ms        DOUBLE   How far the worst gap exceeds its baseline, ms.
-- @column prefill_ms       DOUBLE   Prefill time inside the worst gap, ms (NULL when unknown).
-- @column share            DOUBLE   prefill_ms / worst_gap_ms (NULL when unknown).
-- @column stalled_decodes  INTEGER  Decodes the stall held up (NULL when the evidence does not say).
-- @column evidence         VARCHAR  `kernels`, `steps` or `inferred`.
-- @column step_index       INTEGER  The stalling (or spiking) step's index in its trace (NULL when untraced).
-- @column culprit_id       VARCHAR  The worst spike's top culprit request (NULL when none).
-- @column culprit_prompt_tokens INTEGER The culprit's prompt length, tokens.
-- @column culprit_overlap_ms DOUBLE The culprit's prefill time inside the worst gap, ms.
CREATE OR REPLACE TEMP VIEW report_stall_events AS
WITH s AS (
    SELECT sp.*, a.evidence, a.prefill_overlap_ns, a.share, a.excess_ns, a.stalled_decodes,
           coalesce(sp.step_id, a.stalling_step_id) AS key_step, c.report_id AS culprit_id,
           c.prompt_tokens AS culprit_prompt_tokens, c.overlap_ns AS culprit_overlap_ns
    FROM spikes sp JOIN spike_attribution a USING (spike_id)
    LEFT JOIN spike_culprits c ON c.spike_id = sp.spike_id AND c.rank = 1),
k AS (SELECT *, CASE WHEN key_step IS NOT NULL THEN 'step:' || key_step
                     ELSE 'culprit:' || coalesce(culprit_id, '') || ':' || CAST(round(end_ns / 2e8) AS BIGINT) END AS ev
      FROM s),
g AS (
    SELECT ev, min(start_ns) AS start_ns, max(end_ns) AS end_ns, count(*) AS spikes,
           count(*) FILTER (WHERE level = 'request') AS requests_hit,
           arg_max(spike_id, (gap_ns, -spike_id)) AS worst
    FROM k GROUP BY ev)
SELECT row_number() OVER (ORDER BY w.gap_ns DESC, g.start_ns) AS event_id, g.start_ns, g.end_ns, g.spikes,
       g.requests_hit, w.gap_ns / 1e6 AS worst_gap_ms, w.baseline_ns / 1e6 AS baseline_ms,
       w.excess_ns / 1e6 AS excess_ms, w.prefill_overlap_ns / 1e6 AS prefill_ms, w.share, w.stalled_decodes,
       w.evidence, st.step_index, w.culprit_id, w.culprit_prompt_tokens, w.culprit_overlap_ns / 1e6 AS culprit_overlap_ms
FROM g JOIN k w ON w.spike_id = g.worst
LEFT JOIN steps st ON st.step_id = w.key_step
ORDER BY event_id;
