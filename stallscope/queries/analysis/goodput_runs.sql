-- Goodput per run (a benchmark run, or a server log's requests): good requests per second of the run's
-- window, with vLLM's window for benchmark files (their `duration`, so vLLM's own goodput is reproduced),
-- else first arrival to last completion. Also the counterfactual goodput with interference removed, the
-- goodput it cost, and the SLO attainment over all requests (failed ones included, as they should be).
-- @depends request_counterfactual, request_metrics
-- @column source_id           INTEGER  Source of the run.
-- @column run_line            BIGINT   The run inside the source.
-- @column kind                VARCHAR  `client` (benchmark) or `server` (log).
-- @column start_ns            BIGINT   Window start, ns since Unix epoch, UTC (NULL when the run has no clock).
-- @column end_ns              BIGINT   Window end, ns since Unix epoch, UTC (NULL when the run has no clock).
-- @column duration_s          DOUBLE   Window length, s (the benchmark's own `duration` when it has one).
-- @column total               BIGINT   Requests in the run, failed ones included.
-- @column completed           BIGINT   Requests that finished without error.
-- @column good                BIGINT   Requests within every configured SLO.
-- @column good_cf             BIGINT   Requests within every SLO once interference is removed.
-- @column goodput_rps         DOUBLE   good / duration_s, requests per second.
-- @column goodput_cf_rps      DOUBLE   good_cf / duration_s, requests per second.
-- @column goodput_lost_rps    DOUBLE   (good_cf - good) / duration_s, requests per second lost to interference.
-- @column attainment          DOUBLE   good / total (0..1).
-- @column removed_s           DOUBLE   Interference removed over all requests of the run, s.
CREATE OR REPLACE TEMP VIEW goodput_runs AS
WITH agg AS (
    SELECT m.source_id, m.run_line, any_value(m.kind) AS kind,
           min(m.arrival_ns) AS start_ns, max(m.finish_ns) AS end_ns, count(*) AS total,
           count(*) FILTER (WHERE coalesce(m.status, 'ok') = 'ok') AS completed,
           count(*) FILTER (WHERE c.good) AS good, count(*) FILTER (WHERE c.good_cf) AS good_cf,
           sum(c.removed_ns) / 1e9 AS removed_s
    FROM request_metrics m JOIN request_counterfactual c USING (source_id, run_line, request_id)
    GROUP BY m.source_id, m.run_line),
dur AS (
    SELECT source_id, line_no AS run_line, max(value_num) AS duration_s FROM engine_config
    WHERE origin = 'bench_summary' AND key = 'duration' GROUP BY ALL)
SELECT a.source_id, a.run_line, a.kind,
       coalesce(CAST(a.end_ns - d.duration_s * 1e9 AS BIGINT), a.start_ns) AS start_ns, a.end_ns,
       coalesce(d.duration_s, (a.end_ns - a.start_ns) / 1e9) AS duration_s,
       a.total, a.completed, a.good, a.good_cf,
       a.good / coalesce(d.duration_s, (a.end_ns - a.start_ns) / 1e9) AS goodput_rps,
       a.good_cf / coalesce(d.duration_s, (a.end_ns - a.start_ns) / 1e9) AS goodput_cf_rps,
       (a.good_cf - a.good) / coalesce(d.duration_s, (a.end_ns - a.start_ns) / 1e9) AS goodput_lost_rps,
       a.good / a.total AS attainment, a.removed_s
FROM agg a LEFT JOIN dur d ON d.source_id = a.source_id AND d.run_line = a.run_line;
