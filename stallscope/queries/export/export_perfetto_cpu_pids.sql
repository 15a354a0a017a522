-- The Perfetto export's process id for each (trace, OS pid) with CPU ops or runtime calls: trace source_id x
-- 10000 + the pid's rank in its trace, so processes of different traces never collide (GPU processes are
-- source_id x 10000 + 1000 + device, the engine-steps process source_id x 10000 + 9999).
-- @column source_id   INTEGER  The trace (`sources.source_id`).
-- @column pid         BIGINT   The OS process id the trace recorded.
-- @column xpid        BIGINT   The exported process id.
CREATE OR REPLACE TEMP VIEW export_perfetto_cpu_pids AS
SELECT source_id, pid, CAST(source_id * 10000 + dense_rank() OVER (PARTITION BY source_id ORDER BY pid) AS BIGINT) AS xpid
FROM (SELECT DISTINCT source_id, pid FROM cpu_ops UNION SELECT DISTINCT source_id, pid FROM runtime_calls);
