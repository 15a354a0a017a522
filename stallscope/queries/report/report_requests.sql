-- One row per judged request for the report's request figures and tables: its latencies, its SLO verdict
-- (the first criterion it missed, in the order failed, TTFT, mean TPOT, worst gap, end-to-end) and what
-- prefill-decode interference cost it. The judged requests are the ones `analyze` judges goodput on: the
-- client (benchmark) rows when the store has any, else the server rows.
-- @depends request_metrics, request_verdicts, request_counterfactual
-- @column source_id       INTEGER  Source of the request row.
-- @column run_line        BIGINT   Run inside the source.
-- @column request_id      VARCHAR  The source's own request id.
-- @column report_id       VARCHAR  The id to show (the server's id when clock alignment matched one).
-- @column kind            VARCHAR  `client` or `server`.
-- @column arrival_ns      BIGINT   Send / receive instant, ns since Unix epoch, UTC (NULL when unknown).
-- @column finish_ns       BIGINT   Completion instant, ns since Unix epoch, UTC (NULL when unknown).
-- @column prompt_tokens   INTEGER  Prompt length, tokens.
-- @column output_tokens   INTEGER  Output length, tokens.
-- @column ttft_ms         DOUBLE   Time to first token, ms.
-- @column tpot_ms         DOUBLE   Mean time per output token after the first, ms (vLLM's TPOT).
-- @column max_itl_ms      DOUBLE   Worst streamed-chunk gap, ms (NULL without gaps).
-- @column removed_ms      DOUBLE   Interference removed from the request's gaps in the counterfactual, ms.
-- @column good            BOOLEAN  Completed and within every configured SLO.
-- @column good_cf         BOOLEAN  Good once interference is removed.
-- @column verdict         VARCHAR  `good`, `failed`, `unjudged` (a configured SLO could not be evaluated), or the first missed SLO: `ttft`, `tpot`, `itl`, `e2el`.
CREATE OR REPLACE TEMP VIEW report_requests AS
WITH k AS (SELECT CASE WHEN count(*) FILTER (WHERE kind = 'client') > 0 THEN 'client' ELSE 'server' END AS kind
           FROM request_metrics)
SELECT m.source_id, m.run_line, m.request_id, m.report_id, m.kind, m.arrival_ns, m.finish_ns, m.prompt_tokens,
       m.output_tokens, m.ttft_ns / 1e6 AS ttft_ms, m.tpot_ns / 1e6 AS tpot_ms, m.max_itl_ns / 1e6 AS max_itl_ms,
       coalesce(c.removed_ns, 0) / 1e6 AS removed_ms, v.good, c.good_cf,
       CASE WHEN v.good THEN 'good' WHEN NOT v.completed THEN 'failed' WHEN NOT v.judged THEN 'unjudged'
            WHEN v.ok_ttft = false THEN 'ttft' WHEN v.ok_tpot = false THEN 'tpot' WHEN v.ok_itl = false THEN 'itl'
            WHEN v.ok_e2el = false THEN 'e2el' ELSE 'unjudged' END AS verdict
FROM request_metrics m
JOIN request_verdicts v USING (source_id, run_line, request_id)
LEFT JOIN request_counterfactual c USING (source_id, run_line, request_id)
WHERE m.kind = (SELECT kind FROM k);
