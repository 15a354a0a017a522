-- Each engine step with its GPU time split into prefill and decode work (sums over `kernel_phase`), and its
-- phase: from the step's batch-composition annotation when the trace has one, else from its phase-specific
-- kernels (prefill and decode kernels both present = mixed), else NULL (the trace does not say). An SGLang
-- `step[MIXED bs=B toks=T]` marker counts every decode as one extend token, so its prefill tokens are taken as
-- T - B + 1 (one request being prefilled; off by one token per extra prefill request).
-- @depends kernel_phase
-- @column source_id        INTEGER  The trace.
-- @column step_id          BIGINT   `steps.step_id`.
-- @column step_index       INTEGER  Order of the step in its trace.
-- @column rank             INTEGER  Distributed rank of the trace.
-- @column start_ns         BIGINT   Step start: GPU start when it launched GPU work, else CPU window start; ns since Unix epoch, UTC.
-- @column end_ns           BIGINT   Step end: GPU end when it launched GPU work, else CPU window end; ns since Unix epoch, UTC.
-- @column phase            VARCHAR  `prefill`, `decode`, `mixed`, `empty`, or NULL when unknown.
-- @column phase_basis      VARCHAR  `annotation`, `kernels`, or NULL.
-- @column kernel_count     BIGINT   Kernels launched in the step.
-- @column gpu_busy_ns      BIGINT   Union of the step's GPU work intervals, ns.
-- @column prefill_gpu_ns   BIGINT   Kernel time attributed to prefill work, ns (NULL when the split is unknown).
-- @column decode_gpu_ns    BIGINT   Kernel time attributed to decode work, ns (NULL when the split is unknown).
-- @column prefill_attn_gpu_ns BIGINT The part of prefill_gpu_ns spent in attention kernels, ns (NULL when unknown).
-- @column ctx_reqs         INTEGER  Context (prefill) requests in the step, NULL when unknown.
-- @column ctx_tokens       BIGINT   Prefill tokens in the step (SGLang MIXED: estimated, see above), NULL when unknown.
-- @column gen_reqs         INTEGER  Decode requests in the step (the decodes a long step stalls), NULL when unknown.
-- @column gen_tokens       BIGINT   Decode tokens in the step, NULL when unknown.
-- @column worked           BOOLEAN  The step ran model work: it launched GPU work, or, in a trace that holds no GPU work at all (a CPU-only run), its annotation says it carried prefill or decode tokens.
CREATE OR REPLACE TEMP VIEW step_phase AS
WITH kp AS (
    SELECT step_id,
           CAST(sum(prefill_ns) AS BIGINT) AS prefill_ns, CAST(sum(decode_ns) AS BIGINT) AS decode_ns,
           CAST(sum(prefill_ns) FILTER (WHERE work = 'attention') AS BIGINT) AS prefill_attn_ns,
           count(*) FILTER (WHERE prefill_ns IS NULL) AS unknown,
           count(*) FILTER (WHERE rule_phase = 'prefill') AS pk, count(*) FILTER (WHERE rule_phase = 'decode') AS dk
    FROM kernel_phase GROUP BY step_id)
SELECT s.source_id, s.step_id, s.step_index, s.rank,
       coalesce(s.gpu_start_ns, s.cpu_start_ns) AS start_ns,
       coalesce(s.gpu_end_ns, s.cpu_end_ns) AS end_ns,
       coalesce(s.phase,
                CASE WHEN kp.pk > 0 AND kp.dk > 0 THEN 'mixed' WHEN kp.pk > 0 THEN 'prefill'
                     WHEN kp.dk > 0 THEN 'decode' WHEN s.kernel_count = 0 THEN NULL END) AS phase,
       CASE WHEN s.phase IS NOT NULL THEN 'annotation' WHEN kp.pk > 0 OR kp.dk > 0 THEN 'kernels' END AS phase_basis,
       s.kernel_count, s.gpu_busy_ns,
       CASE WHEN kp.unknown = 0 THEN kp.prefill_ns END AS prefill_gpu_ns,
       CASE WHEN kp.unknown = 0 THEN kp.decode_ns END AS decode_gpu_ns,
       CASE WHEN kp.unknown = 0 THEN coalesce(kp.prefill_attn_ns, 0) END AS prefill_attn_gpu_ns,
       s.ctx_reqs,
       coalesce(s.ctx_tokens, CASE WHEN s.annotation_kind = 'sglang' AND s.phase = 'mixed'
                                   THEN s.total_tokens - s.batch_size + 1 END) AS ctx_tokens,
       s.gen_reqs, s.gen_tokens,
       s.kernel_count > 0 OR (max(s.kernel_count) OVER (PARTITION BY s.source_id) = 0
                              AND s.phase IN ('prefill', 'decode', 'mixed')) AS worked
FROM steps s LEFT JOIN kp ON kp.step_id = s.step_id;
