-- Prefill GPU time inside each spike's gap, from the kernels of every trace that covers the gap: per trace,
-- the sum over its streams of F(end) - F(start) on `_prefill_curve`; across traces (TP ranks run the same
-- steps in parallel) the largest. Spikes no trace covers are absent here.
-- @depends spikes, _prefill_curve
-- @column spike_id            BIGINT   The spike (`spikes.spike_id`).
-- @column trace_source_id     INTEGER  The trace whose kernels gave the largest prefill overlap.
-- @column prefill_overlap_ns  BIGINT   Prefill-phase GPU time that ran inside the gap, ns.
CREATE OR REPLACE TEMP VIEW spike_prefill AS
WITH streams AS (
    SELECT c.source_id, c.stream, min(c.start_ns) AS lo, max(c.end_ns) AS hi FROM _prefill_curve c GROUP BY ALL),
pairs AS (
    SELECT s.spike_id, s.start_ns, s.end_ns, st.source_id, st.stream
    FROM spikes s JOIN trace_meta m ON s.end_ns >= m.start_ns AND s.start_ns <= m.end_ns
    JOIN streams st ON st.source_id = m.source_id),
bounds AS (
    -- Both ends of every gap, so the curve is read with one ASOF join.
    SELECT spike_id, source_id, stream, start_ns AS t, -1 AS sign FROM pairs
    UNION ALL
    SELECT spike_id, source_id, stream, end_ns, 1 FROM pairs),
f AS (
    SELECT b.spike_id, b.source_id, b.stream, b.sign,
           coalesce(c.cum_before_ns + c.prefill_ns * least(greatest((b.t - c.start_ns)
                    / greatest(c.end_ns - c.start_ns, 1), 0.0), 1.0), 0) AS f
    FROM bounds b ASOF LEFT JOIN _prefill_curve c
      ON c.source_id = b.source_id AND c.stream = b.stream AND b.t >= c.start_ns),
per_trace AS (SELECT spike_id, source_id, sum(sign * f) AS ns FROM f GROUP BY spike_id, source_id)
SELECT spike_id, arg_max(source_id, ns) AS trace_source_id, CAST(round(max(ns)) AS BIGINT) AS prefill_overlap_ns
FROM per_trace GROUP BY spike_id;
