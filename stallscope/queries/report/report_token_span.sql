-- The span over which tokens were produced, for the throughput figure's bins: from the first of the judged
-- requests' first tokens, completions and traced step ends to the last of them (NULL for a store with none).
-- @depends report_requests, request_metrics, step_phase
-- @column start_ns    BIGINT   The first first-token, completion or step end, ns since Unix epoch, UTC.
-- @column end_ns      BIGINT   The last of them, ns since Unix epoch, UTC.
CREATE OR REPLACE TEMP VIEW report_token_span AS
SELECT min(t) AS start_ns, max(t) AS end_ns FROM (
    SELECT first_token_ns AS t FROM report_requests JOIN request_metrics USING (source_id, run_line, request_id)
    UNION ALL SELECT finish_ns FROM report_requests UNION ALL SELECT end_ns FROM step_phase);
