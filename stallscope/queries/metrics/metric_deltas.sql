-- Every sample of a mapped metric (`metric_names`) against the previous sample of its series: the window between
-- them and what happened in it. A series is one metric with one label set in one source. Counters and the
-- `_bucket`/`_sum`/`_count` samples of histograms are cumulative: `delta` is value - previous, and a decrease is a
-- restart (the counter began again from zero), so the new value itself is the increase. Gauges keep the value at the
-- window's end. The first sample of a series opens no window. A replica is the source with the `instance`, `engine`
-- and `dp_rank` labels (the other labels, such as `model_name` or `finished_reason`, are summed over).
-- @depends metric_names
-- @column source_id  INTEGER  Source of the samples.
-- @column replica    VARCHAR  `instance/engine/dp_rank` labels as printed (empty parts when absent).
-- @column concept    VARCHAR  `metric_names.concept`.
-- @column kind       VARCHAR  `histogram`, `counter` or `gauge`.
-- @column part       VARCHAR  `bucket`, `sum`, `count` (histograms) or `value`.
-- @column le         DOUBLE   Upper bound of the bucket (bucket rows; +Inf as infinity), else NULL.
-- @column start_ns   BIGINT   Previous sample of the series, ns since Unix epoch, UTC.
-- @column end_ns     BIGINT   This sample, ns since Unix epoch, UTC.
-- @column delta      DOUBLE   Increase over the window (reset-aware); for gauges the value at end_ns.
-- @column reset      BOOLEAN  The cumulative value fell: a restart inside the window.
CREATE OR REPLACE TEMP VIEW metric_deltas AS
WITH m AS (SELECT DISTINCT metric FROM metric_samples WHERE metric IS NOT NULL),
mapped AS (
    SELECT m.metric, n.concept, n.kind, regexp_extract(m.metric, '_(bucket|sum|count)$', 1) AS part
    FROM m JOIN metric_names n
      ON n.kind = 'histogram' AND n.name = regexp_replace(m.metric, '_(bucket|sum|count)$', '')
         AND regexp_matches(m.metric, '_(bucket|sum|count)$')
    UNION ALL
    SELECT m.metric, n.concept, n.kind, 'value' FROM m JOIN metric_names n ON n.kind <> 'histogram' AND n.name = m.metric),
named AS (
    SELECT hash(s.source_id, s.metric, s.labels) AS series, s.source_id,
           concat_ws('/', coalesce(s.labels['instance'], ''), coalesce(s.labels['engine'], ''),
                     coalesce(s.labels['dp_rank'], '')) AS replica, s.le, s.ts_ns, s.value,
           mp.concept, mp.kind, mp.part
    FROM metric_samples s JOIN mapped mp USING (metric)
    WHERE s.ts_ns IS NOT NULL AND isfinite(s.value) AND (mp.part <> 'bucket' OR s.le IS NOT NULL)),
w AS (
    SELECT *, lag(value) OVER ser AS prev, lag(ts_ns) OVER ser AS prev_ns
    FROM named
    -- One 64-bit hash as the series key: partitioning by the MAP itself is ~5x slower (a collision between two of
    -- a store's series, about 1e-11 for 20,000 series, would interleave them).
    WINDOW ser AS (PARTITION BY series ORDER BY ts_ns))
SELECT source_id, replica, concept, kind, part, le, prev_ns AS start_ns, ts_ns AS end_ns,
       CASE WHEN kind = 'gauge' THEN value WHEN value >= prev THEN value - prev ELSE value END AS delta,
       kind <> 'gauge' AND value < prev AS reset
FROM w
WHERE prev_ns IS NOT NULL AND ts_ns > prev_ns;
