-- Shards that failed after their retries, with their one-line reason (from `lake_shards`, the lake's `_shards`
-- table: each shard's latest state). Their replicas' windows are missing from every other fleet view.
-- @column shard_id    VARCHAR  The shard.
-- @column pool        VARCHAR  Its pool.
-- @column replica     VARCHAR  Its replica.
-- @column window      VARCHAR  Its window (`all` without --window).
-- @column files       BIGINT   Input files of the shard.
-- @column attempts    BIGINT   Attempts made (first try and retries).
-- @column error       VARCHAR  Why it failed, one line.
-- @column engine      VARCHAR  `local` or `ray`.
-- @column worker      VARCHAR  host:pid of the worker of the last attempt (NULL when unknown).
-- @column finished_ns BIGINT   When the last attempt ended, ns since Unix epoch, UTC.
CREATE OR REPLACE TEMP VIEW fleet_failed_shards AS
SELECT shard_id, pool, replica, "window", CAST(len(files) AS BIGINT) AS files, CAST(attempts AS BIGINT) AS attempts,
       error, engine, worker, CAST(finished_ns AS BIGINT) AS finished_ns
FROM lake_shards
WHERE status = 'failed'
ORDER BY pool, replica, "window", shard_id;
