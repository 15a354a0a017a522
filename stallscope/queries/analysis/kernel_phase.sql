-- Each GPU kernel launched inside an engine step, with its time split between prefill and decode work.
-- A phase-specific kernel (FlashInfer BatchPrefill*/BatchDecode*, V0 flash_fwd vs flash_fwd_splitkv or
-- paged_attention) goes wholly to its phase. A shared kernel (vLLM V1's single varlen attention over the
-- whole batch, GEMMs, collectives, elementwise) is apportioned by the step's composition: attention kernels
-- by attention work Σq·kv when the step annotation gives it, every other kernel (and attention without
-- Σq·kv) by token share ctx_tokens / (ctx_tokens + gen_tokens). Without a composition, the step's own
-- phase-specific kernels give the split (their prefill share of time); without either, the split is NULL.
-- @depends _kernel_rule
-- @column source_id     INTEGER  The trace (`sources.source_id`).
-- @column event_id      BIGINT   The kernel (`gpu_kernels.event_id`).
-- @column step_id       BIGINT   The step whose CPU window launched it (`steps.step_id`).
-- @column start_ns      BIGINT   Kernel start, ns since Unix epoch, UTC.
-- @column end_ns        BIGINT   Kernel end, ns since Unix epoch, UTC.
-- @column dur_ns        BIGINT   Kernel duration, ns.
-- @column name          VARCHAR  Kernel name.
-- @column rule_id       VARCHAR  Phase rule that matched the name.
-- @column rule_phase    VARCHAR  The rule's phase: `prefill`, `decode` or `shared`.
-- @column work          VARCHAR  The rule's kind of work.
-- @column prefill_frac  DOUBLE   Fraction of the kernel's time that served prefill (0..1), NULL when unknown.
-- @column prefill_ns    BIGINT   Kernel time attributed to prefill work, ns (NULL when unknown).
-- @column decode_ns     BIGINT   Kernel time attributed to decode work, ns (NULL when unknown).
-- @column basis         VARCHAR  How the split was made: `kernel_name`, `attention_work`, `token_share`, `step_phase`, `kernel_ratio`, or NULL.
CREATE OR REPLACE TEMP VIEW kernel_phase AS
WITH k AS (
    SELECT k.source_id, k.event_id, k.step_id, k.start_ns, k.end_ns, k.dur_ns, k.name,
           r.rule_id, r.phase AS rule_phase, r.work
    FROM gpu_kernels k LEFT JOIN _kernel_rule r ON r.name = k.name
    WHERE k.step_id IS NOT NULL),
ratio AS (
    -- Per step: the prefill share of time among its phase-specific kernels.
    SELECT step_id,
           coalesce(sum(dur_ns) FILTER (WHERE rule_phase = 'prefill'), 0)
               / nullif(sum(dur_ns) FILTER (WHERE rule_phase IN ('prefill', 'decode')), 0) AS kfrac
    FROM k GROUP BY step_id),
c AS (
    SELECT k.*, s.phase AS step_phase, s.ctx_tokens, s.gen_tokens, s.ctx_sum_qkv, s.gen_sum_qkv, ratio.kfrac
    FROM k JOIN steps s ON s.step_id = k.step_id LEFT JOIN ratio ON ratio.step_id = k.step_id),
f AS (
    SELECT *,
        CASE
            WHEN rule_phase = 'prefill' THEN 1.0
            WHEN rule_phase = 'decode' THEN 0.0
            WHEN step_phase = 'prefill' THEN 1.0
            WHEN step_phase IN ('decode', 'empty') THEN 0.0
            WHEN step_phase = 'mixed' AND work = 'attention' AND ctx_sum_qkv IS NOT NULL AND gen_sum_qkv IS NOT NULL
                 AND ctx_sum_qkv + gen_sum_qkv > 0 THEN ctx_sum_qkv / (ctx_sum_qkv + gen_sum_qkv)
            WHEN step_phase = 'mixed' AND ctx_tokens + gen_tokens > 0 THEN ctx_tokens / (ctx_tokens + gen_tokens)
            WHEN kfrac IS NOT NULL THEN kfrac
        END AS prefill_frac,
        CASE
            WHEN rule_phase IN ('prefill', 'decode') THEN 'kernel_name'
            WHEN step_phase IN ('prefill', 'decode', 'empty') THEN 'step_phase'
            WHEN step_phase = 'mixed' AND work = 'attention' AND ctx_sum_qkv IS NOT NULL AND gen_sum_qkv IS NOT NULL
                 AND ctx_sum_qkv + gen_sum_qkv > 0 THEN 'attention_work'
            WHEN step_phase = 'mixed' AND ctx_tokens + gen_tokens > 0 THEN 'token_share'
            WHEN kfrac IS NOT NULL THEN 'kernel_ratio'
        END AS basis
    FROM c)
SELECT source_id, event_id, step_id, start_ns, end_ns, dur_ns, name, rule_id, rule_phase, work, prefill_frac,
       CAST(round(dur_ns * prefill_frac) AS BIGINT) AS prefill_ns,
       dur_ns - CAST(round(dur_ns * prefill_frac) AS BIGINT) AS decode_ns,
       basis
FROM f;
