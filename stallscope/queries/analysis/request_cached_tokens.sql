-- The prompt tokens of each benchmark request that a prefix cache served (vLLM automatic prefix caching,
-- SGLang's radix cache), as `prefill_parts` infers them to place the step tokens: the evidence is the steps'
-- computed-token counts and context-request counts against the prompt lengths, and a server log's hit rate
-- (see prefill_parts.sql for the reasoning). Requests the replay covers appear here; cached_tokens is 0 where no
-- cache is inferred (no evidence of one, or none forced).
-- @depends prefill_parts
-- @column source_id         INTEGER  The benchmark source.
-- @column run_line          BIGINT   The run inside the benchmark source.
-- @column request_id        VARCHAR  The request (the source's own id).
-- @column report_id         VARCHAR  Server request id when known, else request_id.
-- @column prompt_tokens     INTEGER  Prompt length, tokens.
-- @column cached_tokens     BIGINT   Inferred prompt tokens served from the prefix cache at the request's first prefill.
-- @column computed_tokens   BIGINT   Prompt tokens its first prefill computed: prompt_tokens - cached_tokens.
-- @column confidence        VARCHAR  `exact`, `typical_hit` or `ambiguous` (see prefill_parts.cache_confidence); NULL when the request is in no group with cached tokens (its prompt counted in full).
-- @column cache_group       BIGINT   Requests whose cached tokens were inferred together (prefill_parts.cache_group).
CREATE OR REPLACE TEMP VIEW request_cached_tokens AS
SELECT source_id, run_line, request_id, any_value(report_id) AS report_id, any_value(prompt_tokens) AS prompt_tokens,
       arg_min(cached_tokens, context_before) AS cached_tokens,
       any_value(prompt_tokens) - arg_min(cached_tokens, context_before) AS computed_tokens,
       arg_min(cache_confidence, context_before) AS confidence, arg_min(cache_group, context_before) AS cache_group
FROM prefill_parts
WHERE basis IN ('fcfs_replay', 'token_after_prefill') AND context_before = cached_tokens
GROUP BY source_id, run_line, request_id;
