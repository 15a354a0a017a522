-- The engine steps that overlap each spike's gap, on every trace covering it, with the part of each step's
-- prefill GPU time that fell inside the gap (the step's prefill time spread evenly over its GPU window) and
-- the decodes the step held.
-- @depends spikes, step_phase
-- @column spike_id                BIGINT   The spike.
-- @column source_id               INTEGER  The trace.
-- @column step_id                 BIGINT   The overlapping step.
-- @column overlap_ns              BIGINT   Length of step window ∩ gap, ns.
-- @column step_prefill_in_gap_ns  DOUBLE   The step's prefill GPU time inside the gap, ns (NULL when its split is unknown).
-- @column attn_share              DOUBLE   Share of the step's prefill GPU time spent in attention kernels (NULL when unknown).
-- @column ctx_tokens              BIGINT   The step's prefill tokens (NULL when unknown).
-- @column gen_reqs                INTEGER  Decodes the step held (NULL when unknown).
-- @column phase                   VARCHAR  The step's phase (NULL when unknown).
CREATE OR REPLACE TEMP VIEW spike_steps AS
SELECT s.spike_id, st.source_id, st.step_id,
       least(s.end_ns, st.end_ns) - greatest(s.start_ns, st.start_ns) AS overlap_ns,
       st.prefill_gpu_ns * (least(s.end_ns, st.end_ns) - greatest(s.start_ns, st.start_ns))
           / greatest(st.end_ns - st.start_ns, 1) AS step_prefill_in_gap_ns,
       st.prefill_attn_gpu_ns / nullif(st.prefill_gpu_ns, 0) AS attn_share,
       st.ctx_tokens, st.gen_reqs, st.phase
FROM spikes s JOIN step_phase st ON st.start_ns < s.end_ns AND st.end_ns > s.start_ns
WHERE st.kernel_count > 0;
