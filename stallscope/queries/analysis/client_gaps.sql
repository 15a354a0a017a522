-- Streamed-chunk gaps of client-side requests (benchmark `itls`) placed on the common clock: each gap ends
-- when chunk k+1 arrived and starts when chunk k did. Gaps of requests whose send time is unknown (no clock
-- alignment yet) have no instants and are left out.
-- @column source_id     INTEGER  The benchmark source.
-- @column run_line      BIGINT   The run inside the source.
-- @column request_id    VARCHAR  The source's own request id (send-order index).
-- @column report_id     VARCHAR  Server request id when alignment matched one, else request_id.
-- @column gap_index     INTEGER  0-based gap index k (between chunk k and chunk k+1).
-- @column token_index   INTEGER  Index of the chunk that ended the gap (k+1; chunk 0 carries the first token).
-- @column start_ns      BIGINT   Arrival of chunk k, ns since Unix epoch, UTC.
-- @column end_ns        BIGINT   Arrival of chunk k+1, ns since Unix epoch, UTC.
-- @column gap_ns        BIGINT   Gap length, ns.
CREATE OR REPLACE TEMP VIEW client_gaps AS
SELECT g.source_id, r.line_no AS run_line, g.request_id, coalesce(r.server_request_id, g.request_id) AS report_id,
       g.gap_index, g.gap_index + 1 AS token_index, g.end_ns - g.gap_ns AS start_ns, g.end_ns, g.gap_ns
FROM token_gaps g
JOIN requests r ON r.source_id = g.source_id AND r.request_id = g.request_id
WHERE r.kind = 'client' AND g.end_ns IS NOT NULL;
