-- The report's headline throughput: output tokens per second over the judged window next to goodput. The
-- judged requests are `report_requests`; the window is the judged runs' own (`goodput_runs`, the goodput
-- denominator), so tokens/s and goodput share one clock. With no requests, the traces' decode tokens over
-- their span.
-- @depends report_requests, goodput_runs, step_phase
-- @column requests        BIGINT   Judged requests.
-- @column completed       BIGINT   Judged requests that completed.
-- @column output_tokens   BIGINT   Output tokens of the completed judged requests (or the traces' decode tokens).
-- @column duration_s      DOUBLE   The window, s.
-- @column tokens_per_s    DOUBLE   output_tokens / duration_s.
-- @column basis           VARCHAR  `requests` or `trace_steps`.
CREATE OR REPLACE TEMP VIEW report_headline AS
WITH r AS (SELECT count(*) AS requests, count(*) FILTER (WHERE verdict <> 'failed') AS completed,
                  CAST(sum(output_tokens) FILTER (WHERE verdict <> 'failed') AS BIGINT) AS toks,
                  any_value(kind) AS kind FROM report_requests),
d AS (SELECT sum(duration_s) AS dur FROM goodput_runs WHERE kind = (SELECT kind FROM r)),
t AS (SELECT CAST(sum(coalesce(gen_tokens, gen_reqs)) AS BIGINT) AS toks,
             (max(end_ns) - min(start_ns)) / 1e9 AS dur FROM step_phase WHERE kernel_count > 0)
SELECT r.requests, r.completed,
       CASE WHEN r.requests > 0 THEN r.toks ELSE t.toks END AS output_tokens,
       CASE WHEN r.requests > 0 THEN d.dur ELSE t.dur END AS duration_s,
       CASE WHEN r.requests > 0 THEN r.toks / nullif(d.dur, 0) ELSE t.toks / nullif(t.dur, 0) END AS tokens_per_s,
       CASE WHEN r.requests > 0 THEN 'requests' ELSE 'trace_steps' END AS basis
FROM r, d, t;
