-- SLO verdicts per request for the SLOs set in `analysis_params` (any subset; a NULL threshold is not
-- checked). A request is good when it completed (`status` ok) and every configured metric is within its
-- threshold (`<=`, as vLLM's `--goodput` does). `itl_ms` judges the worst chunk gap: the per-token tail
-- criterion, distinct from vLLM's mean-TPOT one (one 600 ms stall passes a 50 ms mean-TPOT SLO but fails a
-- 200 ms ITL SLO).
-- @depends request_metrics
-- @column source_id     INTEGER  Source of the request.
-- @column run_line      BIGINT   Run inside the source.
-- @column request_id    VARCHAR  The source's own request id.
-- @column report_id     VARCHAR  The id to show (server id when matched).
-- @column kind          VARCHAR  `client` or `server`.
-- @column completed     BOOLEAN  The request finished without error.
-- @column ok_ttft       BOOLEAN  TTFT within its SLO (NULL when that SLO is not set or TTFT is unknown).
-- @column ok_tpot       BOOLEAN  Mean TPOT within its SLO (NULL when not set or unknown).
-- @column ok_itl        BOOLEAN  Worst chunk gap within the ITL SLO (NULL when not set or no gaps).
-- @column ok_e2el       BOOLEAN  End-to-end latency within its SLO (NULL when not set or unknown).
-- @column judged        BOOLEAN  Every configured SLO could be evaluated for this request (else it is not good).
-- @column good          BOOLEAN  Completed and within every configured SLO.
CREATE OR REPLACE TEMP VIEW request_verdicts AS
WITH v AS (
    SELECT m.source_id, m.run_line, m.request_id, m.report_id, m.kind,
           coalesce(m.status, 'ok') = 'ok' AS completed,
           CASE WHEN p.ttft_ms IS NOT NULL AND m.ttft_ns IS NOT NULL THEN m.ttft_ns <= p.ttft_ms * 1e6 END AS ok_ttft,
           CASE WHEN p.tpot_ms IS NOT NULL AND m.tpot_ns IS NOT NULL THEN m.tpot_ns <= p.tpot_ms * 1e6 END AS ok_tpot,
           CASE WHEN p.itl_ms IS NOT NULL AND m.max_itl_ns IS NOT NULL THEN m.max_itl_ns <= p.itl_ms * 1e6
                WHEN p.itl_ms IS NOT NULL AND m.gaps = 0 AND m.output_tokens <= 1 THEN true END AS ok_itl,
           CASE WHEN p.e2el_ms IS NOT NULL AND m.e2e_latency_ns IS NOT NULL THEN m.e2e_latency_ns <= p.e2el_ms * 1e6
                END AS ok_e2el,
           (p.ttft_ms IS NULL OR m.ttft_ns IS NOT NULL) AND (p.tpot_ms IS NULL OR m.tpot_ns IS NOT NULL)
               AND (p.itl_ms IS NULL OR m.max_itl_ns IS NOT NULL OR (m.gaps = 0 AND m.output_tokens <= 1))
               AND (p.e2el_ms IS NULL OR m.e2e_latency_ns IS NOT NULL) AS judged
    FROM request_metrics m, analysis_params p)
SELECT *, completed AND judged AND coalesce(ok_ttft, true) AND coalesce(ok_tpot, true) AND coalesce(ok_itl, true)
          AND coalesce(ok_e2el, true) AS good
FROM v;
