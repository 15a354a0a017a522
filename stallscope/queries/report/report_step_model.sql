-- The traced steps as the report's step-time figure draws them, each with the prediction of a recommendation's
-- fitted step-time model for its composition (the model comes in as parameters, from the recommendation's
-- `model` object): the coefficients applied to the decode sequences, the KV tokens they read, the scheduled
-- tokens (prefill plus one per decode) rounded up to the model's GEMM tile, and the prefill attention work;
-- the p99 bound is the median times 1 + the model's split-conformal quantile for decode-only or
-- prefill-carrying steps. A step figure the trace does not give counts as 0, as a missing coefficient does;
-- without a model (no coefficient given) the predictions are NULL.
-- @depends report_steps
-- @param fixed_ms               The model's fixed cost per step, ms (NULL: no model).
-- @param per_decode_seq_ms      ms per decode sequence in the step.
-- @param per_kv_token_ms        ms per KV-cache token the decodes read.
-- @param per_prefill_token_ms   ms per scheduled token, tiled (prefill tokens plus one per decode).
-- @param per_attention_unit_ms  ms per unit of prefill attention work (tokens^2).
-- @param tile_tokens            The GEMM tile the scheduled tokens are rounded up to (default 256).
-- @param q_decode               Split-conformal 99th-percentile ratio residual of decode-only steps (NULL: no band).
-- @param q_prefill              The same for prefill-carrying steps (NULL: no band).
-- @column step_ms         DOUBLE   Step duration, ms (`report_steps.step_ms`).
-- @column tokens          BIGINT   Prefill tokens computed in the step (from the annotation, else assigned by `prefill_parts`; 0 when unknown).
-- @column decode_seqs     INTEGER  Decode sequences in the step (NULL when unknown).
-- @column phase           VARCHAR  `prefill`, `decode`, `mixed`, `empty`, or `unknown`.
-- @column predicted_ms    DOUBLE   The model's median step time for this composition, ms (NULL without a model).
-- @column p99_ms          DOUBLE   The model's p99 step time for this composition, ms (NULL without a model or band).
CREATE OR REPLACE TEMP MACRO report_step_model(fixed_ms := NULL, per_decode_seq_ms := NULL, per_kv_token_ms := NULL,
                                               per_prefill_token_ms := NULL, per_attention_unit_ms := NULL,
                                               tile_tokens := 256, q_decode := NULL, q_prefill := NULL) AS TABLE
WITH s AS (
    SELECT step_ms, coalesce(prefill_tokens, assigned_tokens, 0) AS tokens, decode_seqs,
           coalesce(phase, 'unknown') AS phase, CAST(coalesce(decode_seqs, 0) AS DOUBLE) AS d,
           CAST(coalesce(kv_tokens_read, 0) AS DOUBLE) AS kv, CAST(coalesce(attention_units, 0) AS DOUBLE) AS att
    FROM report_steps WHERE isfinite(step_ms) AND step_ms >= 0),
m AS (
    SELECT s.*, CASE WHEN fixed_ms IS NOT NULL OR per_decode_seq_ms IS NOT NULL OR per_kv_token_ms IS NOT NULL
                          OR per_prefill_token_ms IS NOT NULL OR per_attention_unit_ms IS NOT NULL THEN
               coalesce(CAST(fixed_ms AS DOUBLE), 0) + coalesce(CAST(per_decode_seq_ms AS DOUBLE), 0) * d
               + coalesce(CAST(per_kv_token_ms AS DOUBLE), 0) * kv
               + coalesce(CAST(per_prefill_token_ms AS DOUBLE), 0)
                 * (ceil((tokens + d) / CAST(tile_tokens AS DOUBLE)) * CAST(tile_tokens AS DOUBLE))
               + coalesce(CAST(per_attention_unit_ms AS DOUBLE), 0) * att END AS predicted_ms
    FROM s)
SELECT step_ms, CAST(tokens AS BIGINT) AS tokens, decode_seqs, phase, predicted_ms,
       predicted_ms * (1 + CAST(CASE WHEN tokens > 0 THEN q_prefill ELSE q_decode END AS DOUBLE)) AS p99_ms
FROM m;
