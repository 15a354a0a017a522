-- The incident's workload, as the what-if replay feeds it to the engine: one row per request of the runs that
-- judge goodput (benchmark runs when the store has any, else server-log requests), with its arrival, prompt and
-- output length. Requests without an arrival or a prompt length cannot be replayed and are left out; a missing
-- output length is NULL (the caller fills it or names it as missing evidence). `rank_in_run` orders the requests
-- by arrival inside their run.
-- @column source_id       INTEGER  Source of the request.
-- @column run_line        BIGINT   Run inside the source (`requests.line_no`).
-- @column kind            VARCHAR  `client` or `server`.
-- @column request_id      VARCHAR  The source's own request id.
-- @column arrival_ns      BIGINT   Send (client) or receive (server) instant, ns since Unix epoch, UTC.
-- @column prompt_tokens   INTEGER  Prompt length, tokens.
-- @column output_tokens   INTEGER  Output length, tokens (NULL when unknown).
-- @column completed       BOOLEAN  The request finished without error in the incident.
-- @column rank_in_run     BIGINT   0-based arrival order inside the run.
CREATE OR REPLACE TEMP VIEW recommend_workload AS
WITH k AS (SELECT CASE WHEN count(*) FILTER (WHERE kind = 'client') > 0 THEN 'client' ELSE 'server' END AS kind
           FROM requests)
SELECT r.source_id, r.line_no AS run_line, r.kind, r.request_id, r.arrival_ns, r.prompt_tokens,
       CASE WHEN r.output_tokens > 0 THEN r.output_tokens END AS output_tokens,
       coalesce(r.status, 'ok') = 'ok' AS completed,
       row_number() OVER (PARTITION BY r.source_id, r.line_no ORDER BY r.arrival_ns, r.request_index) - 1 AS rank_in_run
FROM requests r JOIN k ON r.kind = k.kind
WHERE r.arrival_ns IS NOT NULL AND r.prompt_tokens > 0;
