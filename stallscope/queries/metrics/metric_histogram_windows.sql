-- Histogram deltas per window, per replica and concept: for each window between two consecutive samples, the
-- bucket counts as lists sorted by bucket edge (`les[i]`, `cums[i]` = observations in the window at or below
-- `les[i]`; the last edge is +Inf so its count is every observation), the window's observation count and sum.
-- Series of one replica that differ only in other labels (`model_name`) are added. A window whose buckets are not
-- monotone (a restart seen by some buckets only) is kept; its quantiles are then estimates of a mixed window.
-- @depends metric_deltas
-- @column source_id  INTEGER   Source of the samples.
-- @column replica    VARCHAR   `instance/engine/dp_rank` labels.
-- @column concept    VARCHAR   `ttft`, `itl`, `tpot`, `e2e`, `queue` or `step_tokens`.
-- @column start_ns   BIGINT    Window start (previous scrape), ns since Unix epoch, UTC.
-- @column end_ns     BIGINT    Window end (this scrape), ns since Unix epoch, UTC.
-- @column les        DOUBLE[]  Bucket upper edges, ascending, +Inf last (seconds; tokens for step_tokens).
-- @column cums       DOUBLE[]  Observations in the window at or below each edge.
-- @column count      DOUBLE    Observations in the window (the `_count` delta; the +Inf bucket when absent).
-- @column sum        DOUBLE    Sum of the observations in the window (seconds; tokens), NULL when not exported.
-- @column resets     BOOLEAN   Some series of the histogram restarted in the window.
CREATE OR REPLACE TEMP VIEW metric_histogram_windows AS
WITH b AS (
    SELECT source_id, replica, concept, start_ns, end_ns, le, sum(delta) AS cum, bool_or(reset) AS reset
    FROM metric_deltas WHERE kind = 'histogram' AND part = 'bucket'
    GROUP BY ALL),
h AS (
    SELECT source_id, replica, concept, start_ns, end_ns, list(le ORDER BY le) AS les, list(cum ORDER BY le) AS cums,
           bool_or(reset) AS resets
    FROM b GROUP BY ALL),
sc AS (
    SELECT source_id, replica, concept, start_ns, end_ns,
           sum(delta) FILTER (WHERE part = 'sum') AS sum, sum(delta) FILTER (WHERE part = 'count') AS count,
           bool_or(reset) AS resets
    FROM metric_deltas WHERE kind = 'histogram' AND part IN ('sum', 'count')
    GROUP BY ALL)
SELECT h.source_id, h.replica, h.concept, h.start_ns, h.end_ns, h.les, h.cums,
       coalesce(sc.count, h.cums[len(h.cums)]) AS count, sc.sum, h.resets OR coalesce(sc.resets, false) AS resets
FROM h LEFT JOIN sc USING (source_id, replica, concept, start_ns, end_ns);
