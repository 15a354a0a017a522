-- Engine-side decode gaps: for every step that launched GPU work, the interval a running decode waited for
-- its next token, i.e. from the previous step's end to this step's end on the same trace (the first step
-- of a trace counts from its own start). Every running decode advances once per step, so a long step is a
-- long gap for all the decodes it held.
-- @depends step_phase
-- @column source_id        INTEGER  The trace.
-- @column step_id          BIGINT   The step whose end closes the gap.
-- @column step_index       INTEGER  Its order in the trace.
-- @column start_ns         BIGINT   Gap start (previous step's end), ns since Unix epoch, UTC.
-- @column end_ns           BIGINT   Gap end (this step's end), ns since Unix epoch, UTC.
-- @column gap_ns           BIGINT   Gap length, ns.
-- @column step_dur_ns      BIGINT   This step's own GPU (or CPU) window, ns.
-- @column phase            VARCHAR  The step's phase (`prefill`, `decode`, `mixed`), NULL when unknown.
-- @column decode_only      BOOLEAN  True when the step is known to hold decode work only.
-- @column prefill_gpu_ns   BIGINT   Prefill GPU time of the step, ns (NULL when unknown).
-- @column ctx_tokens       BIGINT   Prefill tokens of the step (NULL when unknown).
-- @column stalled_decodes  INTEGER  Decodes the step held (its generation requests); NULL when the trace does not say.
CREATE OR REPLACE TEMP VIEW step_gaps AS
SELECT source_id, step_id, step_index,
       coalesce(lag(end_ns) OVER w, start_ns) AS start_ns,
       end_ns,
       end_ns - coalesce(lag(end_ns) OVER w, start_ns) AS gap_ns,
       end_ns - start_ns AS step_dur_ns,
       phase,
       phase = 'decode' AS decode_only,
       prefill_gpu_ns, ctx_tokens,
       gen_reqs AS stalled_decodes
FROM step_phase
WHERE kernel_count > 0
WINDOW w AS (PARTITION BY source_id ORDER BY end_ns, step_index);
