-- Inferred prefill windows, for when no GPU trace shows the steps: under first-come-first-served scheduling
-- a request's prefill runs after it arrived and after the engine finished the prefills before it, and ends
-- when its first token comes out. So the window is [max(arrival, latest earlier first token), first token],
-- where "earlier" means a first token strictly before this one (requests prefilled in one step share a window).
-- @depends request_metrics
-- @column source_id        INTEGER  The benchmark source.
-- @column run_line         BIGINT   The run inside the benchmark source.
-- @column request_id       VARCHAR  The request (the source's own id).
-- @column report_id        VARCHAR  Server request id when known, else request_id.
-- @column prompt_tokens    INTEGER  Prompt length, tokens.
-- @column window_start_ns  BIGINT   Inferred prefill start, ns since Unix epoch, UTC.
-- @column window_end_ns    BIGINT   First token, ns since Unix epoch, UTC.
CREATE OR REPLACE TEMP VIEW request_prefill_windows AS
SELECT source_id, run_line, request_id, report_id, prompt_tokens,
       greatest(arrival_ns, coalesce(max(first_token_ns) OVER (
           PARTITION BY source_id, run_line ORDER BY first_token_ns
           RANGE BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), arrival_ns)) AS window_start_ns,
       first_token_ns AS window_end_ns
FROM request_metrics
WHERE kind = 'client' AND coalesce(status, 'ok') = 'ok' AND arrival_ns IS NOT NULL AND first_token_ns IS NOT NULL;
