-- Engine steps rebuilt from a benchmark's token stream (vllm bench serve --save-detailed), for a store with no
-- step source of its own (no trace, no Iteration lines). On an engine without pipeline parallelism every step
-- hands one token to every running request at the step's end, so the chunk arrivals of concurrent streams cluster
-- at the step ends: arrivals of one run, in time order, start a new cluster when they follow the previous arrival
-- by more than the tolerance (0.3 x the 10th percentile of the source's inter-chunk gaps, about a third of its
-- shortest steps: one step's burst of arrivals, spread by network jitter of a few ms, stays far below it). One row
-- per cluster. Its end is its last arrival (every token of the step has arrived by then); durations are taken
-- between first arrivals (the earliest arrival carries the least network delay). A cluster is a step read *unambiguously*
-- when some request decoded in both it and the cluster before (so no idle time or hidden prefill-only step lies
-- between them), every decode arrival in it follows its request's previous arrival in the cluster before (none
-- skipped a step), every request still running got a token in it, and no request got two: then `step_ms`, the
-- time since the previous cluster, is one step plus its host gap. Its decode composition is the requests whose
-- non-first chunk arrived in it; a request's first token marks the step that ran its last prefill chunk (the
-- prefill chunks themselves are placed by the caller, by the engine's policy and budget). The KV tokens read by its
-- decodes are Σ (prompt + tokens produced so far) over them.
-- @column source_id       INTEGER  The benchmark source.
-- @column run_line        BIGINT   The run inside the source (`requests.line_no`).
-- @column step_index      BIGINT   0-based order of the cluster in its run.
-- @column end_ns          BIGINT   Step end: the last arrival of the cluster, ns since Unix epoch, UTC (client clock shifted onto the common clock).
-- @column first_ns        BIGINT   The cluster's first arrival, ns since Unix epoch, UTC.
-- @column spread_ms       DOUBLE   Last minus first arrival of the cluster, ms (the burst's jitter).
-- @column step_ms         DOUBLE   Time since the previous cluster's first arrival, ms (one step and its host gap when `unambiguous`); NULL for the first.
-- @column first_tokens    BIGINT   Requests whose first token arrived in the cluster (their last prefill chunk ran in this step).
-- @column decode_seqs     BIGINT   Requests whose later chunk arrived in the cluster (decodes of this step).
-- @column continuing      BIGINT   Of those, the ones whose previous chunk arrived in the previous cluster.
-- @column running         BIGINT   Requests past their first token and before their last at this cluster (every one should decode in it).
-- @column repeated        BIGINT   Arrivals of requests that got more than one chunk in the cluster.
-- @column kv_tokens_read  DOUBLE   Σ (prompt + chunk index) over the decodes of the cluster.
-- @column unambiguous     BOOLEAN  The cluster is one engine step, read without ambiguity (see above).
CREATE OR REPLACE TEMP VIEW recommend_client_steps AS
WITH rq AS (
    SELECT source_id, line_no AS run_line, request_id, prompt_tokens, first_token_ns FROM requests
    WHERE kind = 'client' AND coalesce(status, 'ok') = 'ok' AND first_token_ns IS NOT NULL AND prompt_tokens > 0),
arr AS (
    SELECT source_id, run_line, request_id, 0 AS chunk, first_token_ns AS ts, prompt_tokens FROM rq
    UNION ALL
    SELECT g.source_id, rq.run_line, g.request_id, g.gap_index + 1, g.end_ns, rq.prompt_tokens
    FROM token_gaps g JOIN rq ON rq.source_id = g.source_id AND rq.request_id = g.request_id
    WHERE g.end_ns IS NOT NULL),
tol AS (
    SELECT source_id, 0.3 * quantile_cont(gap_ns, 0.1) AS tol_ns FROM token_gaps WHERE gap_ns > 0
    GROUP BY source_id),
o AS (
    SELECT arr.*, ts - lag(ts) OVER (PARTITION BY source_id, run_line ORDER BY ts, request_id, chunk) AS dt,
           coalesce(tol.tol_ns, 1e6) AS tol_ns
    FROM arr LEFT JOIN tol USING (source_id)),
c AS (
    SELECT *, sum(CASE WHEN dt IS NULL OR dt > tol_ns THEN 1 ELSE 0 END)
                  OVER (PARTITION BY source_id, run_line ORDER BY ts, request_id, chunk ROWS UNBOUNDED PRECEDING) - 1
                  AS step_index
    FROM o),
-- One window per request (its chunks in order): the previous and next chunk's cluster, and its last cluster.
p AS (
    SELECT *, lag(step_index) OVER r AS prev_step,
           last_value(step_index) OVER (r ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS last_step,
           CASE WHEN lag(step_index) OVER r = step_index OR lead(step_index) OVER r = step_index THEN 2 ELSE 1 END
               AS same
    FROM c WINDOW r AS (PARTITION BY source_id, request_id ORDER BY chunk)),
s AS (
    SELECT source_id, run_line, step_index, max(ts) AS end_ns, min(ts) AS first_ns,
           (max(ts) - min(ts)) / 1e6 AS spread_ms,
           count(*) FILTER (WHERE chunk = 0) AS first_tokens,
           count(*) FILTER (WHERE chunk > 0) AS decode_seqs,
           count(*) FILTER (WHERE chunk > 0 AND prev_step = step_index - 1) AS continuing,
           count(*) FILTER (WHERE same > 1) AS repeated,
           CAST(sum(prompt_tokens + chunk) FILTER (WHERE chunk > 0) AS DOUBLE) AS kv_tokens_read
    FROM p GROUP BY source_id, run_line, step_index),
-- Running requests: +1 from the cluster after a request's first token, -1 after its last chunk's cluster.
ev AS (
    SELECT source_id, run_line, step_index + 1 AS k, 1 AS d FROM p WHERE chunk = 0 AND last_step > step_index
    UNION ALL
    SELECT source_id, run_line, last_step + 1, -1 FROM p WHERE chunk = 0 AND last_step > step_index),
run AS (
    SELECT source_id, run_line, k, sum(sum(d)) OVER (PARTITION BY source_id, run_line ORDER BY k) AS running
    FROM ev GROUP BY source_id, run_line, k),
j AS (
    SELECT s.*, CAST(coalesce(run.running, 0) AS BIGINT) AS running,
           (s.first_ns - lag(s.first_ns) OVER (PARTITION BY s.source_id, s.run_line ORDER BY s.step_index)) / 1e6
               AS step_ms
    FROM s ASOF LEFT JOIN run ON s.source_id = run.source_id AND s.run_line = run.run_line
                                 AND s.step_index >= run.k)
SELECT source_id, run_line, CAST(step_index AS BIGINT) AS step_index, end_ns, first_ns, spread_ms, step_ms, first_tokens, decode_seqs, continuing, running,
       repeated, kv_tokens_read,
       step_ms IS NOT NULL AND continuing > 0 AND continuing = decode_seqs AND decode_seqs = running
           AND repeated = 0 AS unambiguous
FROM j;
