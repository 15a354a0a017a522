-- The Perfetto export's metadata (`M`) events naming every process and thread the events use (`<file> GPU <n>`,
-- `<file> CPU pid <pid>`, `<file> engine steps`, the three `stallscope: ...` processes; `stream <n>`, the
-- trace's own thread names, `request <id>`, `engine step gaps <file>`, ...), plus a sort index that keeps the
-- analysis tracks' request threads in arrival order.
-- @depends export_perfetto_events, export_perfetto_source_files, export_perfetto_cpu_pids, export_perfetto_request_threads
-- @column name        VARCHAR  `process_name`, `thread_name` or `thread_sort_index`.
-- @column cat         VARCHAR  Always `__metadata`.
-- @column ph          VARCHAR  Chrome phase: always `M` (metadata).
-- @column ts          DOUBLE   Always 0.0 (metadata has no time; microseconds).
-- @column dur         DOUBLE   Always 0.0 (microseconds).
-- @column pid         BIGINT   The process named (or holding the thread named).
-- @column tid         BIGINT   The thread named (0 for a process name).
-- @column args        JSON     `{"name": ...}` or `{"sort_index": ...}`.
CREATE OR REPLACE TEMP VIEW export_perfetto_metadata AS
WITH used AS (SELECT DISTINCT pid, tid FROM export_perfetto_events),
pname AS (
    SELECT DISTINCT k.source_id * 10000 + 1000 + coalesce(k.device, 0) AS pid, f.file || ' GPU ' || coalesce(k.device, 0) AS name
    FROM (SELECT source_id, device FROM gpu_kernels UNION SELECT source_id, device FROM gpu_memops
          UNION SELECT source_id, device FROM gpu_annotations) k JOIN export_perfetto_source_files f USING (source_id)
    UNION ALL SELECT p.xpid, f.file || ' CPU pid ' || p.pid FROM export_perfetto_cpu_pids p JOIN export_perfetto_source_files f USING (source_id)
    UNION ALL SELECT DISTINCT s.source_id * 10000 + 9999, f.file || ' engine steps' FROM steps s JOIN export_perfetto_source_files f USING (source_id)
    UNION ALL SELECT 1, 'stallscope: spikes'
    UNION ALL SELECT 2, 'stallscope: decode gaps'
    UNION ALL SELECT 3, 'stallscope: prefill chunks'),
tname AS (
    SELECT u.pid, u.tid, CASE
        WHEN u.pid IN (1, 2, 3) AND u.tid >= 1000000000 THEN
            (CASE u.pid WHEN 3 THEN 'prefill steps ' WHEN 1 THEN 'engine step spikes '
                        ELSE 'engine step gaps ' END)
            || coalesce((SELECT file FROM export_perfetto_source_files WHERE source_id = u.tid - 1000000000), '')
        WHEN u.pid IN (1, 2, 3) THEN
            'request ' || left(coalesce((SELECT report_id FROM export_perfetto_request_threads q WHERE q.tid = u.tid), '?'), 200)
        WHEN u.pid % 10000 = 9999 THEN 'steps'
        WHEN u.pid % 10000 >= 1000 THEN 'stream ' || u.tid
        ELSE coalesce((SELECT any_value(value) FROM trace_threads t
                       WHERE t.source_id = u.pid // 10000 AND t.kind = 'thread_name' AND t.tid = CAST(u.tid AS VARCHAR)),
                      'thread ' || u.tid) END AS name
    FROM used u)
SELECT 'process_name' AS name, '__metadata' AS cat, 'M' AS ph, CAST(0.0 AS DOUBLE) AS ts, CAST(0.0 AS DOUBLE) AS dur, CAST(pid AS BIGINT) AS pid,
       CAST(0 AS BIGINT) AS tid, json_object('name', name) AS args
FROM pname WHERE pid IN (SELECT pid FROM used)
UNION ALL
SELECT 'thread_name', '__metadata', 'M', 0.0, 0.0, pid, tid, json_object('name', name) FROM tname
UNION ALL
SELECT 'thread_sort_index', '__metadata', 'M', 0.0, 0.0, pid, tid, json_object('sort_index', tid) FROM tname
WHERE pid IN (1, 2, 3);
