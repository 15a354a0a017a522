-- Attainment of each configured SLO on its own, over the judged requests (`report_requests`): how many met
-- the TTFT, mean-TPOT, worst-gap (ITL) and end-to-end thresholds separately, so the report can say which
-- criterion the incident broke. Failed requests count as missing every SLO.
-- @depends request_verdicts, report_requests
-- @column slo            VARCHAR  `ttft`, `tpot`, `itl` or `e2el`.
-- @column threshold_ms   DOUBLE   The SLO threshold, ms.
-- @column requests       BIGINT   Judged requests.
-- @column met            BIGINT   Requests that completed within this SLO.
-- @column attainment     DOUBLE   met / requests (0..1; NULL without requests).
CREATE OR REPLACE TEMP VIEW report_slo_attainment AS
WITH v AS (SELECT v.* FROM request_verdicts v JOIN report_requests r USING (source_id, run_line, request_id)),
p AS (SELECT * FROM analysis_params),
s AS (
    SELECT 'ttft' AS slo, p.ttft_ms AS threshold_ms, count(*) AS requests,
           count(*) FILTER (WHERE v.completed AND v.ok_ttft) AS met, 1 AS o FROM v, p WHERE p.ttft_ms IS NOT NULL GROUP BY ALL
    UNION ALL
    SELECT 'tpot', p.tpot_ms, count(*), count(*) FILTER (WHERE v.completed AND v.ok_tpot), 2 FROM v, p
    WHERE p.tpot_ms IS NOT NULL GROUP BY ALL
    UNION ALL
    SELECT 'itl', p.itl_ms, count(*), count(*) FILTER (WHERE v.completed AND v.ok_itl), 3 FROM v, p
    WHERE p.itl_ms IS NOT NULL GROUP BY ALL
    UNION ALL
    SELECT 'e2el', p.e2el_ms, count(*), count(*) FILTER (WHERE v.completed AND v.ok_e2el), 4 FROM v, p
    WHERE p.e2el_ms IS NOT NULL GROUP BY ALL)
SELECT slo, threshold_ms, requests, met, met / nullif(requests, 0) AS attainment FROM s ORDER BY o;
