-- Each request re-judged as if prefill-decode interference had not happened: from every one of its spikes
-- the prefill-attributed excess (`spike_attribution.prefill_excess_ns`: prefill time inside the gap, never
-- more than the gap's excess over the expected decode-only gap) is removed, then TPOT, worst gap and
-- end-to-end latency are recomputed and the SLOs applied again. TTFT is left as observed (queueing behind
-- other prefills is prefill-prefill contention, not decode interference). This is the upper bound that
-- perfect isolation (ideal disaggregation, no KV-transfer cost) would recover.
-- @depends request_verdicts, request_metrics, spikes, spike_attribution, client_gaps
-- @column source_id          INTEGER  Source of the request.
-- @column run_line           BIGINT   Run inside the source.
-- @column request_id         VARCHAR  The source's own request id.
-- @column report_id          VARCHAR  The id to show.
-- @column removed_ns         BIGINT   Interference removed from the request's gaps, ns.
-- @column tpot_cf_ns         DOUBLE   Counterfactual mean TPOT, ns.
-- @column max_itl_cf_ns      BIGINT   Counterfactual worst chunk gap, ns.
-- @column e2e_latency_cf_ns  BIGINT   Counterfactual end-to-end latency, ns.
-- @column good               BOOLEAN  Good as observed.
-- @column good_cf            BOOLEAN  Good once interference is removed.
CREATE OR REPLACE TEMP VIEW request_counterfactual AS
WITH rem AS (
    SELECT s.source_id, s.run_line, s.request_id, s.token_index, coalesce(a.prefill_excess_ns, 0) AS removed_ns
    FROM spikes s JOIN spike_attribution a USING (spike_id) WHERE s.level = 'request'),
gaps AS (
    SELECT g.source_id, g.run_line, g.request_id,
           max(g.gap_ns - coalesce(r.removed_ns, 0)) AS max_itl_cf_ns, sum(coalesce(r.removed_ns, 0)) AS removed_ns
    FROM client_gaps g LEFT JOIN rem r ON r.source_id = g.source_id AND r.run_line = g.run_line
     AND r.request_id = g.request_id AND r.token_index = g.token_index
    GROUP BY ALL),
cf AS (
    SELECT m.*, coalesce(g.removed_ns, 0) AS removed_ns,
           CASE WHEN m.tpot_ns IS NULL THEN NULL WHEN m.output_tokens > 1
                THEN m.tpot_ns - coalesce(g.removed_ns, 0) / (m.output_tokens - 1.0) ELSE m.tpot_ns END AS tpot_cf_ns,
           coalesce(g.max_itl_cf_ns, m.max_itl_ns) AS max_itl_cf_ns,
           m.e2e_latency_ns - coalesce(g.removed_ns, 0) AS e2e_latency_cf_ns
    FROM request_metrics m LEFT JOIN gaps g USING (source_id, run_line, request_id))
SELECT cf.source_id, cf.run_line, cf.request_id, cf.report_id, CAST(cf.removed_ns AS BIGINT) AS removed_ns,
       cf.tpot_cf_ns, CAST(cf.max_itl_cf_ns AS BIGINT) AS max_itl_cf_ns,
       CAST(cf.e2e_latency_cf_ns AS BIGINT) AS e2e_latency_cf_ns,
       v.good,
       v.completed AND v.judged
         AND (p.ttft_ms IS NULL OR cf.ttft_ns <= p.ttft_ms * 1e6)
         AND (p.tpot_ms IS NULL OR cf.tpot_cf_ns <= p.tpot_ms * 1e6)
         AND (p.itl_ms IS NULL OR cf.max_itl_cf_ns IS NULL OR cf.max_itl_cf_ns <= p.itl_ms * 1e6)
         AND (p.e2el_ms IS NULL OR cf.e2e_latency_cf_ns <= p.e2el_ms * 1e6) AS good_cf
FROM cf JOIN request_verdicts v USING (source_id, run_line, request_id), analysis_params p;
