-- Per-request latency metrics, in vLLM's definitions so vLLM's own goodput is reproduced exactly on its
-- benchmark files: TTFT; TPOT = (e2e - TTFT) / (output tokens - 1), 0 when output tokens <= 1; and, from
-- the streamed-chunk gaps, the worst gap (max ITL) and the 99th-percentile gap, the tail criteria a single
-- generation stall violates while the mean TPOT hides it. Client rows (benchmark files) carry everything;
-- TGI server rows carry end-to-end latency and TGI's own time_per_token (which includes prefill) as TPOT.
-- @column source_id         INTEGER  Source of the request row.
-- @column run_line          BIGINT   The run inside the source (`requests.line_no`: the line where a benchmark run starts).
-- @column request_id        VARCHAR  The source's own id (a benchmark file's send-order index as text).
-- @column request_index     INTEGER  0-based send order (client) or log order (server).
-- @column report_id         VARCHAR  The id to show: the server's request id when clock alignment matched one, else request_id.
-- @column kind              VARCHAR  `client` or `server`.
-- @column status            VARCHAR  `ok`, `failed`, `aborted` or NULL.
-- @column arrival_ns        BIGINT   Send / receive instant, ns since Unix epoch, UTC (NULL when unknown).
-- @column first_token_ns    BIGINT   First token instant, ns since Unix epoch, UTC (NULL when unknown).
-- @column finish_ns         BIGINT   Completion instant, ns since Unix epoch, UTC (NULL when unknown).
-- @column prompt_tokens     INTEGER  Prompt length, tokens.
-- @column output_tokens     INTEGER  Output length, tokens.
-- @column ttft_ns           BIGINT   Time to first token, ns.
-- @column e2e_latency_ns    BIGINT   End-to-end latency, ns.
-- @column tpot_ns           DOUBLE   Mean time per output token after the first, ns (vLLM's TPOT).
-- @column max_itl_ns        BIGINT   Longest streamed-chunk gap, ns (NULL without gaps).
-- @column p99_itl_ns        DOUBLE   99th percentile of the request's chunk gaps, ns (NULL without gaps).
-- @column gaps              BIGINT   Number of chunk gaps recorded for the request.
CREATE OR REPLACE TEMP VIEW request_metrics AS
WITH g AS (
    SELECT source_id, request_id, count(*) AS gaps, max(gap_ns) AS max_itl_ns,
           quantile_cont(gap_ns, 0.99) AS p99_itl_ns
    FROM token_gaps GROUP BY source_id, request_id)
SELECT r.source_id, r.line_no AS run_line, r.request_id, r.request_index,
       coalesce(r.server_request_id, r.request_id) AS report_id, r.kind, r.status,
       r.arrival_ns, r.first_token_ns, r.finish_ns, r.prompt_tokens, r.output_tokens,
       r.ttft_ns, r.e2e_latency_ns,
       CASE WHEN r.kind = 'server' THEN CAST(r.time_per_token_ns AS DOUBLE)
            WHEN r.e2e_latency_ns IS NULL OR r.ttft_ns IS NULL THEN NULL
            WHEN r.output_tokens > 1 THEN (r.e2e_latency_ns - r.ttft_ns) / (r.output_tokens - 1.0)
            ELSE 0.0 END AS tpot_ns,
       g.max_itl_ns, g.p99_itl_ns, coalesce(g.gaps, 0) AS gaps
FROM requests r LEFT JOIN g ON g.source_id = r.source_id AND g.request_id = r.request_id
WHERE r.kind = 'client' OR r.e2e_latency_ns IS NOT NULL;
