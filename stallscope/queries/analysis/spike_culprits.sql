-- The requests whose prefill ran inside each spike's gap, ranked by how much of their prefill time fell in
-- it. With a GPU trace: every overlapping step's in-gap prefill time (`spike_steps`) split over the
-- requests whose chunks it computed (`prefill_parts`): the attention kernels' part by attention work
-- (tokens x (context before + tokens / 2): a chunk at the end of a long prompt, or one after a long cached
-- prefix, attends to all of it), the rest by tokens (evidence `kernels`). Where the trace's attention kernel
-- serves prefill and decode at once and the annotation gives no attention work, its prefill part is what it
-- spent beyond the previous decode-only step's attention time. Without one: other
-- requests of the same run whose inferred prefill window (`request_prefill_windows`) overlaps the gap,
-- ranked by overlap (evidence `inferred`).
-- @depends spikes, spike_steps, prefill_parts, spike_prefill_window_pairs, kernel_phase, step_phase
-- @column spike_id        BIGINT   The spike.
-- @column rank            BIGINT   1 = the culprit with the most prefill time in the gap (ties: the longer prompt).
-- @column source_id       INTEGER  Source of the culprit request (its benchmark file).
-- @column run_line        BIGINT   The culprit's run.
-- @column request_id      VARCHAR  The culprit (the source's own id).
-- @column report_id       VARCHAR  The culprit's server request id when known, else request_id.
-- @column prompt_tokens   INTEGER  The culprit's prompt length, tokens.
-- @column overlap_ns      BIGINT   Culprit's prefill time inside the gap (traced) or window overlap (inferred), ns.
-- @column evidence        VARCHAR  `kernels` (traced steps) or `inferred` (request windows).
-- @column confidence      VARCHAR  `high` (traced, the step counts fix the culprit's computed tokens), `ambiguous` (the counts leave open which of this culprit and those in ambiguous_with held a cached prefix, so their computed tokens and ranks could swap), `low` (no trace: inferred prefill windows).
-- @column ambiguous_with  VARCHAR[] Report ids of the spike's other culprits the evidence cannot separate from this one (empty when none).
CREATE OR REPLACE TEMP VIEW spike_culprits AS
WITH attn_k AS (
    SELECT step_id, sum(dur_ns) AS attn_ns, bool_or(basis = 'token_share') AS by_tokens
    FROM kernel_phase WHERE work = 'attention' GROUP BY ALL),
step_attn AS (
    SELECT sp.source_id, sp.step_id, sp.end_ns, sp.phase, sp.prefill_gpu_ns, sp.gen_reqs, a.attn_ns, a.by_tokens
    FROM step_phase sp JOIN attn_k a USING (step_id)),
attn_fix AS (
    -- A mixed step's single attention kernel also reads every decode's KV cache, and a token share of it
    -- (all a basic annotation allows) credits nearly all of that to the prefill. The decode-only step just
    -- before holds nearly the same decodes, so its attention time per decode, times this step's decodes, is the
    -- decode part; the rest is prefill attention.
    SELECT s.step_id,
           least(greatest(s.attn_ns - d.attn_ns * s.gen_reqs / d.gen_reqs, 0) / nullif(s.prefill_gpu_ns, 0), 1.0)
               AS attn_share
    FROM step_attn s
    ASOF JOIN (SELECT source_id, end_ns, attn_ns, gen_reqs FROM step_attn WHERE phase = 'decode' AND gen_reqs > 0) d
      ON d.source_id = s.source_id AND s.end_ns > d.end_ns
    WHERE s.phase = 'mixed' AND s.by_tokens),
parts AS (
    -- Token and attention-work shares of each part within its step.
    SELECT *, sum(tokens) OVER (PARTITION BY trace_source_id, step_id) AS part_tokens,
           tokens * (context_before + tokens / 2.0)
               / nullif(sum(tokens * (context_before + tokens / 2.0)) OVER (PARTITION BY trace_source_id, step_id), 0)
               AS attn_work_share
    FROM prefill_parts),
traced AS (
    SELECT spike_id, source_id, run_line, request_id, report_id, prompt_tokens,
           sum(step_prefill_in_gap_ns * (attn * coalesce(attn_work_share, token_share) + (1 - attn) * token_share))
               AS overlap_ns,
           'kernels' AS evidence,
           list(DISTINCT cache_group) FILTER (WHERE cache_confidence = 'ambiguous') AS open_groups
    FROM (SELECT ss.spike_id, ss.step_prefill_in_gap_ns, coalesce(af.attn_share, ss.attn_share, 0) AS attn, pp.*,
                 -- Of the step's own token count when the trace gives it (tokens no part accounts for stay
                 -- unassigned), else of the parts found.
                 pp.tokens / coalesce(ss.ctx_tokens, pp.part_tokens) AS token_share
          FROM spike_steps ss
          JOIN spikes s ON s.spike_id = ss.spike_id
          JOIN parts pp ON pp.trace_source_id = ss.source_id AND pp.step_id = ss.step_id
          LEFT JOIN attn_fix af ON af.step_id = ss.step_id
          WHERE ss.step_prefill_in_gap_ns > 0
            AND (s.level = 'step' OR (pp.source_id = s.source_id AND pp.run_line = s.run_line
                                      AND pp.request_id <> s.request_id)))
    GROUP BY ALL),
inferred AS (
    SELECT spike_id, source_id, run_line, request_id, report_id, prompt_tokens,
           least(end_ns, window_end_ns) - greatest(start_ns, window_start_ns) AS overlap_ns,
           'inferred' AS evidence, CAST([] AS BIGINT[]) AS open_groups
    FROM spike_prefill_window_pairs
    WHERE spike_id NOT IN (SELECT spike_id FROM spike_steps)),
allc AS (SELECT * FROM traced UNION ALL SELECT * FROM inferred),
ranked AS (
    SELECT spike_id, -- Equal overlaps (inferred windows that each span the whole gap) go to the longer prompt: more
           -- prefill work in the same window.
           row_number() OVER (PARTITION BY spike_id ORDER BY overlap_ns DESC, prompt_tokens DESC NULLS LAST, report_id)
               AS rank,
           source_id, run_line, request_id, report_id, prompt_tokens,
           CAST(round(overlap_ns) AS BIGINT) AS overlap_ns, evidence, open_groups
    FROM allc WHERE overlap_ns > 0),
rivals AS (
    -- Culprits of one spike whose chunks sit in the same open cache group: the step counts allow moving the
    -- cached prefix between them, which changes how much each computed.
    SELECT a.spike_id, a.rank, list(DISTINCT b.report_id ORDER BY b.report_id) AS ambiguous_with
    FROM ranked a JOIN ranked b ON b.spike_id = a.spike_id AND b.rank <> a.rank
     AND len(list_intersect(a.open_groups, b.open_groups)) > 0
    GROUP BY ALL)
SELECT r.spike_id, r.rank, r.source_id, r.run_line, r.request_id, r.report_id, r.prompt_tokens, r.overlap_ns,
       r.evidence,
       CASE WHEN r.evidence = 'inferred' THEN 'low' WHEN v.ambiguous_with IS NOT NULL THEN 'ambiguous' ELSE 'high' END
           AS confidence,
       coalesce(v.ambiguous_with, CAST([] AS VARCHAR[])) AS ambiguous_with
FROM ranked r LEFT JOIN rivals v USING (spike_id, rank);
