-- Counter rates per replica and scrape window (prompt and generated tokens, finished requests), resets handled as
-- in `metric_deltas` (a decrease is a restart: the new value is the increase).
-- @depends metric_deltas
-- @column source_id  INTEGER  Source of the samples.
-- @column replica    VARCHAR  `instance/engine/dp_rank`.
-- @column concept    VARCHAR  `prompt_tokens`, `generation_tokens` or `requests_finished`.
-- @column start_ns   BIGINT   Window start, ns since Unix epoch, UTC.
-- @column end_ns     BIGINT   Window end, ns since Unix epoch, UTC.
-- @column increase   DOUBLE   Increase over the window (summed over the replica's series of the concept).
-- @column per_s      DOUBLE   increase / window length, per second.
-- @column reset      BOOLEAN  A series restarted in the window.
CREATE OR REPLACE TEMP VIEW metric_counter_rates AS
SELECT source_id, replica, concept, start_ns, end_ns, sum(delta) AS increase,
       sum(delta) / ((end_ns - start_ns) / 1e9) AS per_s, bool_or(reset) AS reset
FROM metric_deltas WHERE kind = 'counter'
GROUP BY source_id, replica, concept, start_ns, end_ns;
