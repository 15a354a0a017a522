-- The time origin of the report's figures when the analysis has no window: the first decode gap's start
-- (streamed-chunk or engine step gap) or the first request arrival, whichever is earlier; NULL for a store with
-- none of them.
-- @depends client_gaps, step_gaps, report_requests
-- @column origin_ns   BIGINT   The earliest gap start or request arrival, ns since Unix epoch, UTC.
CREATE OR REPLACE TEMP VIEW report_origin AS
SELECT min(t) AS origin_ns FROM (SELECT min(end_ns - gap_ns) AS t FROM client_gaps
                                 UNION ALL SELECT min(start_ns) FROM step_gaps
                                 UNION ALL SELECT min(arrival_ns) FROM report_requests);
