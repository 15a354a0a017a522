-- The Perfetto export's thread id for each client request on the analysis tracks (decode gaps, spikes,
-- prefill chunks): 2, 3, ... in arrival order, so the tracks read top to bottom as the requests came.
-- @depends request_metrics
-- @column source_id   INTEGER  The benchmark file (`sources.source_id`).
-- @column run_line    BIGINT   The run within the file.
-- @column request_id  VARCHAR  The request within the run.
-- @column report_id   VARCHAR  The request's id as reports show it.
-- @column tid         BIGINT   The exported thread id (`request <report_id>`).
CREATE OR REPLACE TEMP VIEW export_perfetto_request_threads AS
SELECT source_id, run_line, request_id, report_id,
       CAST(1 + row_number() OVER (ORDER BY arrival_ns NULLS LAST, source_id, run_line, request_id) AS BIGINT) AS tid
FROM (SELECT source_id, run_line, request_id, any_value(report_id) AS report_id, min(arrival_ns) AS arrival_ns
      FROM request_metrics WHERE kind = 'client' GROUP BY source_id, run_line, request_id);
