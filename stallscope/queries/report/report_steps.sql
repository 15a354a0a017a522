-- Each traced engine step with the composition a step-time model reads, for the report's step-time figure
-- and its prefill overlay: prefill tokens, decode sequences, KV tokens the decodes read, and the prefill
-- attention work (sum over the step's prefill chunks of tokens x (context before + tokens / 2), i.e.
-- sum(q x kv) - sum(q^2) / 2 from the step annotation). NULL where the trace does not say.
-- @depends step_phase, prefill_parts
-- @column source_id         INTEGER  The trace.
-- @column step_id           BIGINT   `steps.step_id`.
-- @column step_index        INTEGER  Order of the step in its trace.
-- @column start_ns          BIGINT   Step start (GPU start, else CPU window start), ns since Unix epoch, UTC.
-- @column end_ns            BIGINT   Step end (GPU end, else CPU window end), ns since Unix epoch, UTC.
-- @column step_ms           DOUBLE   end_ns - start_ns, ms.
-- @column phase             VARCHAR  `prefill`, `decode`, `mixed`, `empty` or NULL when unknown.
-- @column prefill_tokens    BIGINT   Prefill tokens computed in the step (NULL when unknown).
-- @column decode_seqs       INTEGER  Decode sequences in the step (NULL when unknown).
-- @column kv_tokens_read    BIGINT   KV-cache tokens the step's decodes read (NULL when unknown).
-- @column attention_units   DOUBLE   Prefill attention work, tokens^2 (NULL when unknown).
-- @column prefill_gpu_ms    DOUBLE   Kernel time attributed to prefill work, ms (NULL when the split is unknown).
-- @column assigned_tokens   BIGINT   Prefill tokens `prefill_parts` assigned to requests in this step (NULL when none).
-- @column chunk_requests    BIGINT   Requests with a prefill chunk in this step per `prefill_parts` (NULL when none).
CREATE OR REPLACE TEMP VIEW report_steps AS
SELECT p.source_id, p.step_id, p.step_index, p.start_ns, p.end_ns, (p.end_ns - p.start_ns) / 1e6 AS step_ms,
       p.phase, p.ctx_tokens AS prefill_tokens, p.gen_reqs AS decode_seqs, s.gen_sum_kv AS kv_tokens_read,
       s.ctx_sum_qkv - s.ctx_sum_qq / 2.0 AS attention_units, p.prefill_gpu_ns / 1e6 AS prefill_gpu_ms,
       pp.tokens AS assigned_tokens, pp.requests AS chunk_requests
FROM step_phase p JOIN steps s USING (step_id)
LEFT JOIN (SELECT step_id, CAST(sum(tokens) AS BIGINT) AS tokens, count(DISTINCT (source_id, run_line, request_id)) AS requests
           FROM prefill_parts GROUP BY step_id) pp USING (step_id)
WHERE p.kernel_count > 0;
