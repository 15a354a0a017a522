-- Which request's prefill tokens ran in which traced step: a replay of the engine's first-come-first-served
-- prefill order. Requests of a benchmark run, in arrival order, form one stream of prompt tokens
-- (cumulative C_r); the trace's steps, in order, consume prefill tokens (cumulative S_k, from the step
-- annotations' ctx_tokens). The two streams are aligned by one offset O, fixed by the requests whose first
-- token arrives while the trace runs: request r finished its prefill in the last prefill step ending before
-- its first token, so C_r + O falls in that step's token range; O is the value most requests agree on. A
-- step's chunk of request r is then the overlap of (S_k-1, S_k] with (C_r-1 + O, C_r + O]. Exact under FCFS
-- without prefix caching or preemption; `agreement` says how well the run fits (below 0.8 no parts are given).
-- When the trace has no token counts but shows a step did prefill work (vLLM V0's flash_fwd kernels, an SGLang
-- MIXED marker), the step's prefill belongs to the next requests to finish prefill, weighted by prompt length
-- (`basis` `next_completion`): exact for unchunked prefill, and the chunked request's own steps otherwise.
-- client clocks aligned to a trace can sit a few hundred µs before the step end that produced the token,
-- and steps are tens of ms apart.
-- @depends request_metrics, step_phase
-- @column trace_source_id   INTEGER  The trace.
-- @column step_id           BIGINT   The step.
-- @column source_id         INTEGER  The benchmark source of the request.
-- @column run_line          BIGINT   The run inside the benchmark source.
-- @column request_id        VARCHAR  The request (the source's own id).
-- @column report_id         VARCHAR  Server request id when known, else request_id.
-- @column prompt_tokens     INTEGER  The request's prompt length, tokens.
-- @column tokens            BIGINT   Prefill tokens of this request computed in this step.
-- @column agreement         DOUBLE   Share of the run's anchoring requests consistent with the chosen offset (0..1; NULL for `next_completion`).
-- @column basis             VARCHAR  `fcfs_replay` (token streams aligned) or `next_completion` (the requests finishing prefill next).
CREATE OR REPLACE TEMP VIEW prefill_parts AS
WITH st AS (
    SELECT source_id AS tsrc, step_id, start_ns, end_ns, ctx_tokens,
           CAST(sum(ctx_tokens) OVER (PARTITION BY source_id ORDER BY end_ns, step_index) AS BIGINT) AS s_hi
    FROM step_phase WHERE ctx_tokens > 0),
tspan AS (SELECT source_id AS tsrc, min(start_ns) AS lo, max(end_ns) AS hi FROM step_phase
          WHERE kernel_count > 0 GROUP BY source_id),
rq0 AS (
    SELECT m.source_id, m.run_line, m.request_id, m.report_id, m.prompt_tokens, m.arrival_ns, m.first_token_ns,
           m.request_index, srv.request_index AS server_index
    FROM request_metrics m
    LEFT JOIN requests srv ON srv.kind = 'server' AND srv.request_id = m.report_id AND m.report_id <> m.request_id
    WHERE m.kind = 'client' AND coalesce(m.status, 'ok') = 'ok' AND m.arrival_ns IS NOT NULL
      AND m.first_token_ns IS NOT NULL AND m.prompt_tokens > 0),
runs AS (SELECT source_id, run_line, min(arrival_ns) AS lo, max(first_token_ns) AS hi FROM rq0 GROUP BY ALL),
pair AS (
    SELECT r.source_id, r.run_line, t.tsrc FROM runs r JOIN tspan t ON r.lo <= t.hi AND r.hi >= t.lo),
ref AS (SELECT source_id, run_line, min(tsrc) AS tsrc FROM pair GROUP BY ALL),
bucketed AS (
    -- The step (of one reference trace) each request finished its prefill in; outside the trace, its own time.
    SELECT q.*, coalesce(k.end_ns, q.first_token_ns) AS bucket
    FROM rq0 q LEFT JOIN ref USING (source_id, run_line)
    ASOF LEFT JOIN (SELECT source_id, end_ns FROM step_phase WHERE kernel_count > 0) k
      ON k.source_id = ref.tsrc AND q.first_token_ns + 2000000 >= k.end_ns),
rq AS (
    -- Engine admission order: by the step that completed the prefill, then by the server's log order (its
    -- arrival order) when the request was matched to a server log, then by send order.
    SELECT source_id, run_line, request_id, report_id, prompt_tokens, arrival_ns, first_token_ns,
           CAST(sum(prompt_tokens) OVER (PARTITION BY source_id, run_line
                                         ORDER BY bucket, server_index NULLS LAST, request_index) AS BIGINT) AS c_hi
    FROM bucketed),
anchors AS (
    -- Requests whose first token lies inside the trace, each with its last prefill step before that token.
    SELECT q.source_id, q.run_line, p.tsrc, q.c_hi, q.first_token_ns
    FROM rq q JOIN pair p USING (source_id, run_line) JOIN tspan t ON t.tsrc = p.tsrc
    WHERE q.first_token_ns BETWEEN t.lo AND t.hi + 1000000000),
lastk AS (
    SELECT a.source_id, a.run_line, a.tsrc, a.c_hi, s.s_hi, s.s_hi - s.ctx_tokens AS s_lo
    FROM anchors a ASOF JOIN st s ON s.tsrc = a.tsrc AND a.first_token_ns + 2000000 >= s.end_ns),
iv AS (SELECT source_id, run_line, tsrc, s_lo - c_hi AS lo, s_hi - c_hi AS hi FROM lastk),
cand AS (
    -- The best offset stabs the most (lo, hi] intervals; an optimum sits on some interval's upper end.
    SELECT a.source_id, a.run_line, a.tsrc, a.o, count(*) AS n
    FROM (SELECT DISTINCT source_id, run_line, tsrc, hi AS o FROM iv) a
    JOIN iv b ON a.source_id = b.source_id AND a.run_line = b.run_line AND a.tsrc = b.tsrc
             AND b.lo < a.o AND a.o <= b.hi
    GROUP BY ALL),
best AS (
    SELECT c.source_id, c.run_line, c.tsrc, arg_max(c.o, (c.n, -c.o)) AS o, max(c.n) AS n,
           (SELECT count(*) FROM iv WHERE iv.source_id = c.source_id AND iv.run_line = c.run_line
                                      AND iv.tsrc = c.tsrc) AS total
    FROM cand c GROUP BY ALL),
ok AS (SELECT *, n / total AS agreement FROM best WHERE n / total >= 0.8)
SELECT s.tsrc AS trace_source_id, s.step_id, q.source_id, q.run_line, q.request_id, q.report_id, q.prompt_tokens,
       least(s.s_hi, q.c_hi + ok.o) - greatest(s.s_hi - s.ctx_tokens, q.c_hi - q.prompt_tokens + ok.o) AS tokens,
       ok.agreement, 'fcfs_replay' AS basis
FROM ok
JOIN st s ON s.tsrc = ok.tsrc
JOIN rq q ON q.source_id = ok.source_id AND q.run_line = ok.run_line
 AND q.c_hi - q.prompt_tokens + ok.o < s.s_hi AND q.c_hi + ok.o > s.s_hi - s.ctx_tokens
UNION ALL
-- Steps known to prefill (from their kernels or an SGLang MIXED marker) whose token counts the trace does not
-- give: under FCFS their prefill work belongs to the requests that finish prefill next, at the first step at or
-- after them that precedes a first token.
SELECT k.source_id, k.step_id, b.source_id, b.run_line, b.request_id, b.report_id, b.prompt_tokens,
       CAST(b.prompt_tokens AS BIGINT), NULL, 'next_completion'
FROM (SELECT * FROM step_phase
      WHERE kernel_count > 0 AND phase IN ('prefill', 'mixed') AND ctx_tokens IS NULL AND prefill_gpu_ns > 0) k
JOIN pair p ON p.tsrc = k.source_id
ASOF JOIN (SELECT DISTINCT source_id, run_line, bucket FROM bucketed) nb
  ON nb.source_id = p.source_id AND nb.run_line = p.run_line AND nb.bucket >= k.end_ns
JOIN bucketed b ON b.source_id = nb.source_id AND b.run_line = nb.run_line AND b.bucket = nb.bucket
WHERE nb.bucket - k.end_ns < 60000000000;