-- Goodput bounds per replica over its whole scraped range, from the marginal TTFT and per-request TPOT histograms:
-- A requests surely (A_lo) or possibly (A_hi) within the TTFT SLO, B likewise for TPOT, N finished; the requests
-- meeting both lie in the Fréchet bounds [max(0, A_lo + B_lo - N), min(A_hi, B_hi)] (N the larger of the TTFT and
-- TPOT counts, which differ only when the range cuts requests' lives), and nothing tighter follows
-- without a joint source (spans, logs, a benchmark file). Sound when the range covers the requests' lives (the
-- first scrape before their arrival, the last after their finish): TTFT is counted at the first token, TPOT at the
-- finish. A missing SLO counts every request as meeting it; a set SLO without its histogram (TGI has no TTFT one)
-- bounds it by [0, N].
-- @depends metric_windows
-- @column source_id         INTEGER  Source of the samples.
-- @column replica           VARCHAR  `instance/engine/dp_rank`.
-- @column start_ns          BIGINT   First scrape, ns since Unix epoch, UTC.
-- @column end_ns            BIGINT   Last scrape, ns since Unix epoch, UTC.
-- @column finished          DOUBLE   N: requests finished (TPOT observations, else finished-request counter).
-- @column ttft_ok_lo        DOUBLE   A_lo: requests surely within the TTFT SLO.
-- @column ttft_ok_hi        DOUBLE   A_hi: requests possibly within the TTFT SLO.
-- @column tpot_ok_lo        DOUBLE   B_lo: requests surely within the TPOT SLO.
-- @column tpot_ok_hi        DOUBLE   B_hi: requests possibly within the TPOT SLO.
-- @column good_lo           DOUBLE   Lower bound of the requests meeting both SLOs.
-- @column good_hi           DOUBLE   Upper bound.
-- @column has_ttft          BOOLEAN  A TTFT histogram was exported.
-- @column has_tpot          BOOLEAN  A per-request TPOT histogram was exported.
CREATE OR REPLACE TEMP VIEW metric_goodput AS
WITH t AS (
    SELECT source_id, replica, min(start_ns) AS start_ns, max(end_ns) AS end_ns,
           coalesce(sum(tpot_count), sum(requests_finished)) AS n, coalesce(sum(ttft_count), 0) AS n_ttft,
           sum(ttft_ok_lo) AS a_lo, sum(ttft_ok_hi) AS a_hi, sum(tpot_ok_lo) AS b_lo, sum(tpot_ok_hi) AS b_hi,
           sum(ttft_count) IS NOT NULL AS has_ttft, sum(tpot_count) IS NOT NULL AS has_tpot
    FROM metric_windows GROUP BY source_id, replica),
ab AS (
    SELECT t.*,
           CASE WHEN p.ttft_ms IS NULL THEN n WHEN has_ttft THEN a_lo ELSE 0 END AS al,
           CASE WHEN p.ttft_ms IS NULL OR NOT has_ttft THEN n ELSE a_hi END AS ah,
           CASE WHEN p.tpot_ms IS NULL THEN n WHEN has_tpot THEN b_lo ELSE 0 END AS bl,
           CASE WHEN p.tpot_ms IS NULL OR NOT has_tpot THEN n ELSE b_hi END AS bh
    FROM t, analysis_params p)
SELECT source_id, replica, start_ns, end_ns, n AS finished, al AS ttft_ok_lo, ah AS ttft_ok_hi,
       bl AS tpot_ok_lo, bh AS tpot_ok_hi, greatest(0, al + bl - greatest(n, n_ttft)) AS good_lo, least(ah, bh) AS good_hi,
       has_ttft, has_tpot
FROM ab;
