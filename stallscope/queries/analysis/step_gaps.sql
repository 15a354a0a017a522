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
-- @column step_wall_ns     BIGINT   This step's wall duration: its execute_model (CPU) window, else its GPU window, ns.
-- @column phase            VARCHAR  The step's phase (`prefill`, `decode`, `mixed`), NULL when unknown.
-- @column decode_only      BOOLEAN  True when the step is known to hold decode work only.
-- @column prefill_gpu_ns   BIGINT   Prefill GPU time of the step, ns (NULL when unknown).
-- @column ctx_tokens       BIGINT   Prefill tokens of the step (NULL when unknown).
-- @column stalled_decodes  INTEGER  Decodes the step held (its generation requests); NULL when the trace does not say.
CREATE OR REPLACE TEMP VIEW step_gaps AS
SELECT p.source_id, p.step_id, p.step_index,
       coalesce(lag(p.end_ns) OVER w, p.start_ns) AS start_ns,
       p.end_ns,
       p.end_ns - coalesce(lag(p.end_ns) OVER w, p.start_ns) AS gap_ns,
       p.end_ns - p.start_ns AS step_dur_ns,
       coalesce(s.cpu_dur_ns, p.end_ns - p.start_ns) AS step_wall_ns,
       p.phase,
       p.phase = 'decode' AS decode_only,
       p.prefill_gpu_ns, p.ctx_tokens,
       p.gen_reqs AS stalled_decodes
FROM step_phase p JOIN steps s ON s.step_id = p.step_id
WHERE p.kernel_count > 0
WINDOW w AS (PARTITION BY p.source_id ORDER BY p.end_ns, p.step_index);
