-- Observed engine steps with the composition the step-time model is fitted on (one row per traced step whose
-- batch composition is known). The step time is the step's execute window (CPU window: the time the engine spends
-- on one iteration, the period decodes see). KV tokens read by decode attention: the annotation's Σkv over
-- generation requests when the trace carries it (`annotation`), else rebuilt from the client token stream
-- (`client_tokens`): every running decode reads its prompt plus the tokens it has produced, so the step's KV read
-- is the sum of (prompt + 1) over requests that got their first token before the step's midpoint, plus one per
-- later token, minus (prompt + output) for those that finished; the active-request count from the same stream is
-- kept so that a caller can check it against the annotation's decode count. Prefill attention units Σ c·(k + c/2):
-- from the annotation's Σq·kv − Σq²/2 (kv counts the chunk itself), else from the chunks `prefill_parts` assigned to
-- requests, else 0 for steps without prefill; NULL when unknown. Steps whose trace carries no composition at all
-- (vLLM V0 traces: the phase comes from the kernels) take it from the client stream too (`composition_basis`
-- `client_tokens`): a decode or mixed step runs the requests decoding at its midpoint, a prefill-only step none,
-- and its prefill tokens are the chunks `prefill_parts` assigned to it.
-- Without any traced step with a known composition, the steps of a vLLM log's `Iteration(i)` lines
-- (`engine_steps`, dummy and empty steps left out) are the evidence (`evidence` `iteration_log`): the step time is
-- the line's elapsed time (the wait for the step's output), the composition its own counts, the host gap the one
-- its sequence's placement assumed; their KV read comes from the client token stream as above (a benchmark file
-- aligned onto the placed step ends), their prefill attention units are unknown (NULL).
-- @depends step_phase, prefill_parts
-- @column source_id        INTEGER  The trace.
-- @column step_id          BIGINT   `steps.step_id`.
-- @column step_index       INTEGER  Order of the step in its trace.
-- @column start_ns         BIGINT   CPU window start, ns since Unix epoch, UTC.
-- @column end_ns           BIGINT   CPU window end, ns since Unix epoch, UTC.
-- @column step_ms          DOUBLE   Step duration (CPU execute window), ms.
-- @column host_gap_ms      DOUBLE   Idle host time before the next step of the same trace (next start − this end), ms; NULL for the last; for iteration lines the gap their placement assumed.
-- @column phase            VARCHAR  `prefill`, `decode` or `mixed`.
-- @column decode_seqs      BIGINT   Decode (generation) sequences in the step.
-- @column prefill_tokens   BIGINT   Prefill tokens in the step.
-- @column tokens           BIGINT   Scheduled tokens of the step (prefill plus decode).
-- @column kv_tokens_read   DOUBLE   KV tokens read by the decodes (Σ context over decode sequences); NULL when unknown.
-- @column kv_basis         VARCHAR  `annotation`, `client_tokens`, `none` (no decodes) or NULL (unknown).
-- @column active_decodes   BIGINT   Requests decoding at the step's midpoint by the client token stream (NULL without one).
-- @column attention_units  DOUBLE   Prefill attention work Σ c·(k + c/2) over the step's prefill chunks; NULL when unknown.
-- @column attn_basis       VARCHAR  `annotation`, `prefill_parts`, `none` (no prefill) or NULL (unknown).
-- @column composition_basis VARCHAR `annotation` (the trace's own counts), `client_tokens` (rebuilt, see above) or `iteration_line`.
-- @column evidence         VARCHAR  `trace` (profiler trace steps) or `iteration_log` (vLLM Iteration lines).
CREATE OR REPLACE TEMP VIEW recommend_step_obs AS
WITH traced AS (
    SELECT st.source_id, st.step_id, st.step_index, st.cpu_start_ns AS start_ns, st.cpu_end_ns AS end_ns,
           st.cpu_dur_ns / 1e6 AS step_ms,
           (lead(st.cpu_start_ns) OVER (PARTITION BY st.source_id ORDER BY st.step_index) - st.cpu_end_ns) / 1e6
               AS host_gap_ms,
           p.phase, p.gen_reqs, p.ctx_tokens, st.total_tokens, st.gen_tokens,
           st.gen_sum_kv, st.ctx_sum_qkv, st.ctx_sum_qq,
           st.cpu_start_ns + (st.cpu_end_ns - st.cpu_start_ns) // 2 AS mid_ns
    FROM steps st JOIN step_phase p USING (step_id)
    WHERE p.phase IN ('prefill', 'decode', 'mixed') AND st.cpu_dur_ns > 0),
logged AS (
    SELECT source_id, CAST(NULL AS BIGINT) AS step_id,
           CAST(row_number() OVER (PARTITION BY source_id ORDER BY line_no) - 1 AS INTEGER) AS step_index,
           start_ns, end_ns, elapsed_ms AS step_ms, host_gap_ms,
           CASE WHEN ctx_tokens > 0 AND gen_tokens > 0 THEN 'mixed' WHEN ctx_tokens > 0 THEN 'prefill'
                ELSE 'decode' END AS phase,
           gen_reqs, ctx_tokens, ctx_tokens + gen_tokens AS total_tokens, gen_tokens,
           CAST(NULL AS BIGINT) AS gen_sum_kv, CAST(NULL AS DOUBLE) AS ctx_sum_qkv, CAST(NULL AS DOUBLE) AS ctx_sum_qq,
           start_ns + (end_ns - start_ns) // 2 AS mid_ns
    FROM engine_steps
    WHERE NOT coalesce(dummy, false) AND elapsed_ms > 0 AND ctx_tokens + gen_tokens > 0),
s AS (
    SELECT *, 'trace' AS evidence FROM traced
    UNION ALL BY NAME
    SELECT *, 'iteration_log' AS evidence FROM logged),
rq AS (
    SELECT source_id, request_id, prompt_tokens, output_tokens, first_token_ns, finish_ns FROM requests
    WHERE kind = 'client' AND coalesce(status, 'ok') = 'ok' AND first_token_ns IS NOT NULL AND finish_ns IS NOT NULL
      AND prompt_tokens > 0 AND output_tokens > 0),
ev AS (
    SELECT first_token_ns AS ts, prompt_tokens + 1 AS dkv, CASE WHEN output_tokens > 1 THEN 1 ELSE 0 END AS dn FROM rq
    UNION ALL
    SELECT g.end_ns, coalesce(g.tokens_in_chunk, 1), 0 FROM token_gaps g
    JOIN rq ON rq.source_id = g.source_id AND rq.request_id = g.request_id WHERE g.end_ns IS NOT NULL
    UNION ALL
    SELECT finish_ns, -(prompt_tokens + output_tokens), CASE WHEN output_tokens > 1 THEN -1 ELSE 0 END FROM rq),
cum AS (
    SELECT ts, sum(sum(dkv)) OVER (ORDER BY ts) AS kv, sum(sum(dn)) OVER (ORDER BY ts) AS n
    FROM ev GROUP BY ts),
parts AS (
    SELECT step_id, sum(tokens * (context_before + tokens / 2.0)) AS attn, sum(tokens) AS tokens
    FROM prefill_parts GROUP BY step_id),
j0 AS (
    SELECT s.*, c.kv AS kv_client, CAST(c.n AS BIGINT) AS active_decodes, parts.attn AS attn_parts,
           parts.tokens AS parts_tokens
    FROM s ASOF LEFT JOIN cum c ON s.mid_ns > c.ts
    LEFT JOIN parts USING (step_id)),
j AS (
    SELECT *,
           CAST(coalesce(gen_reqs, CASE WHEN phase = 'prefill' THEN 0 ELSE active_decodes END) AS BIGINT) AS decode_seqs,
           CAST(coalesce(ctx_tokens, CASE WHEN phase = 'decode' THEN 0 ELSE parts_tokens END) AS BIGINT)
               AS prefill_tokens,
           CASE WHEN evidence = 'iteration_log' THEN 'iteration_line' WHEN gen_reqs IS NOT NULL THEN 'annotation'
                ELSE 'client_tokens' END AS composition_basis
    FROM j0),
k AS (
    SELECT *, CAST(coalesce(total_tokens, prefill_tokens + coalesce(gen_tokens, decode_seqs)) AS BIGINT) AS tokens
    FROM j WHERE decode_seqs IS NOT NULL AND prefill_tokens IS NOT NULL),
-- Traced steps are the stronger evidence: iteration lines serve only a store without them.
e AS (SELECT * FROM k WHERE evidence = 'trace' OR NOT EXISTS (SELECT 1 FROM k WHERE evidence = 'trace'))
SELECT source_id, step_id, step_index, start_ns, end_ns, step_ms, host_gap_ms, phase, decode_seqs, prefill_tokens,
       tokens,
       CAST(CASE WHEN decode_seqs = 0 THEN 0 WHEN gen_sum_kv IS NOT NULL THEN gen_sum_kv
                 WHEN kv_client IS NOT NULL AND active_decodes > 0 THEN kv_client END AS DOUBLE) AS kv_tokens_read,
       CASE WHEN decode_seqs = 0 THEN 'none' WHEN gen_sum_kv IS NOT NULL THEN 'annotation'
            WHEN kv_client IS NOT NULL AND active_decodes > 0 THEN 'client_tokens' END AS kv_basis,
       active_decodes,
       CAST(CASE WHEN prefill_tokens = 0 THEN 0 WHEN ctx_sum_qkv IS NOT NULL THEN ctx_sum_qkv - ctx_sum_qq / 2
                 WHEN attn_parts IS NOT NULL THEN attn_parts END AS DOUBLE) AS attention_units,
       CASE WHEN prefill_tokens = 0 THEN 'none' WHEN ctx_sum_qkv IS NOT NULL THEN 'annotation'
            WHEN attn_parts IS NOT NULL THEN 'prefill_parts' END AS attn_basis,
       composition_basis, evidence
FROM e;
