-- What the metrics say about each window, per replica (`per_replica`) or over all replicas of all sources, in the
-- scrape windows (`width_ns` = 0) or in windows `width_ns` long from the first scrape (bucket counts and counter
-- increases add up over the scrapes and replicas merged, so the quantiles and shares stay those of the merged
-- window). Quantiles are estimates within their bucket (as Prometheus' histogram_quantile), shown with the bucket's bounds; SLO
-- shares at the thresholds of `analysis_params` are exact when the threshold is a bucket edge, else bounded by the
-- edges around it. Big steps: engine steps of more than 512 tokens (a vLLM bucket edge of
-- `iteration_tokens_total`; steps that large carry prefill chunks). Per-window goodput bounds are the Fréchet
-- bounds [max(0, A + B - N), min(A, B)] (A meeting TTFT, B meeting TPOT); TTFT is observed at the first token and
-- TPOT at the finish, so over short windows A and B cover different requests and N is the larger of the two
-- populations (which keeps lo <= hi): per-window bounds are indicative, the whole range's (`metric_goodput`) sound.
-- @depends metric_deltas
-- @param width_ns     BIGINT  Window length, ns; 0 for the scrape windows.
-- @param per_replica  BOOLEAN Keep replicas apart (else source_id and replica are NULL).
-- @column source_id               INTEGER  Source (NULL when merged).
-- @column replica                 VARCHAR  `instance/engine/dp_rank` (NULL when merged).
-- @column start_ns                BIGINT   Window start, ns since Unix epoch, UTC.
-- @column end_ns                  BIGINT   Window end, ns since Unix epoch, UTC.
-- @column duration_s              DOUBLE   end - start, s.
-- @column requests_finished       DOUBLE   Requests finished (vLLM request_success, else the TPOT or E2E count).
-- @column ttft_count              DOUBLE   TTFT observations (requests that got their first token).
-- @column tpot_count              DOUBLE   Per-request TPOT observations (requests finished).
-- @column itl_count               DOUBLE   Inter-token gaps observed.
-- @column ttft_p99_ms             DOUBLE   TTFT p99 estimate, ms (interpolated within its bucket).
-- @column ttft_p99_lo_ms          DOUBLE   Lower edge of the bucket holding the TTFT p99, ms.
-- @column ttft_p99_hi_ms          DOUBLE   Upper edge of that bucket, ms (+Inf possible).
-- @column itl_p99_ms              DOUBLE   ITL p99 estimate, ms.
-- @column itl_p99_lo_ms           DOUBLE   Lower edge of the bucket holding the ITL p99, ms.
-- @column itl_p99_hi_ms           DOUBLE   Upper edge of that bucket, ms.
-- @column tpot_p99_ms             DOUBLE   Per-request TPOT p99 estimate, ms.
-- @column tpot_p99_lo_ms          DOUBLE   Lower edge of the bucket holding the TPOT p99, ms.
-- @column tpot_p99_hi_ms          DOUBLE   Upper edge of that bucket, ms.
-- @column mean_itl_ms             DOUBLE   Mean inter-token gap (ITL sum / count), ms: about the mean step time.
-- @column prompt_tokens_per_s     DOUBLE   Prompt tokens counted per second.
-- @column generation_tokens_per_s DOUBLE   Generated tokens per second.
-- @column steps                   DOUBLE   Engine steps observed (`iteration_tokens_total` count).
-- @column mean_step_tokens        DOUBLE   Mean tokens per engine step.
-- @column big_step_share          DOUBLE   Share of steps above 512 tokens.
-- @column ttft_ok_lo              DOUBLE   TTFT observations surely within the TTFT SLO (NULL: SLO or histogram missing).
-- @column ttft_ok_hi              DOUBLE   TTFT observations possibly within it.
-- @column itl_ok_lo               DOUBLE   Gaps surely within the ITL SLO.
-- @column itl_ok_hi               DOUBLE   Gaps possibly within it.
-- @column tpot_ok_lo              DOUBLE   Finished requests surely within the TPOT SLO.
-- @column tpot_ok_hi              DOUBLE   Finished requests possibly within it.
-- @column ttft_ok_share           DOUBLE   ttft_ok_lo / ttft_count (exact when the SLO is a bucket edge).
-- @column ttft_ok_share_hi        DOUBLE   ttft_ok_hi / ttft_count.
-- @column itl_ok_share            DOUBLE   itl_ok_lo / itl_count.
-- @column itl_ok_share_hi         DOUBLE   itl_ok_hi / itl_count.
-- @column good_lo                 DOUBLE   Fréchet lower bound of requests meeting TTFT and TPOT in the window.
-- @column good_hi                 DOUBLE   Fréchet upper bound.
-- @column resets                  BOOLEAN  A counter or histogram restarted in the window.
CREATE OR REPLACE TEMP MACRO _metric_window_stats(width_ns := 0, per_replica := true) AS TABLE
WITH d AS (
    SELECT CASE WHEN per_replica THEN source_id END AS source_id, CASE WHEN per_replica THEN replica END AS replica,
           CASE WHEN width_ns > 0 THEN (end_ns - (SELECT min(start_ns) FROM metric_deltas)) // width_ns
                ELSE end_ns END AS slot,
           concept, part, le, start_ns, end_ns, delta, reset
    FROM metric_deltas WHERE kind <> 'gauge'),
bk AS (
    SELECT source_id, replica, slot, concept, le, sum(delta) AS cum FROM d WHERE part = 'bucket' GROUP BY ALL),
hl AS (
    SELECT source_id, replica, slot, concept, list(le ORDER BY le) AS les, list(cum ORDER BY le) AS cums
    FROM bk GROUP BY ALL),
-- Per histogram window: the bucket holding the p99 rank (Prometheus' histogram_quantile: the first bucket whose
-- count reaches q x count) and the threshold it is judged at (the SLO of its concept; 512 tokens for steps).
hb AS (
    SELECT hl.*, 0.99 * cums[len(cums)] AS rank,
           list_filter(range(1, len(cums) + 1), lambda i: cums[i] >= 0.99 * cums[len(cums)] AND cums[i] > 0)[1] AS b,
           CASE concept WHEN 'ttft' THEN p.ttft_ms / 1000 WHEN 'itl' THEN p.itl_ms / 1000
                        WHEN 'tpot' THEN p.tpot_ms / 1000 WHEN 'step_tokens' THEN 512 END AS x
    FROM hl, analysis_params p),
-- The p99 estimate interpolates linearly inside its bucket (lower edge 0 for the first; in the +Inf bucket the
-- highest finite edge); observations at or below x: `ok_lo` counts the buckets with an edge at or below x, `ok_hi`
-- up to the first edge at or above x (relative tolerance 1e-9: 0.05 s from 50 ms), equal when x is an edge.
hq AS (
    SELECT source_id, replica, slot, concept,
           CASE WHEN b IS NULL THEN NULL WHEN NOT isfinite(les[b]) THEN les[b - 1]
                ELSE coalesce(les[b - 1], 0.0) + (les[b] - coalesce(les[b - 1], 0.0))
                     * (rank - coalesce(cums[b - 1], 0.0)) / (cums[b] - coalesce(cums[b - 1], 0.0)) END AS q_est,
           CASE WHEN b IS NOT NULL THEN coalesce(les[b - 1], 0.0) END AS q_lo, les[b] AS q_hi,
           CASE WHEN x IS NOT NULL THEN coalesce(list_max(list_filter(cums, lambda c, i: les[i] <= x * (1 + 1e-9))), 0.0)
                END AS ok_lo,
           CASE WHEN x IS NOT NULL THEN list_filter(cums, lambda c, i: les[i] >= x * (1 - 1e-9))[1] END AS ok_hi
    FROM hb),
hp AS (
    PIVOT hq ON concept IN ('ttft', 'itl', 'tpot', 'step_tokens')
    USING any_value(q_est) AS q, any_value(q_lo) AS lo, any_value(q_hi) AS hi, any_value(ok_lo) AS ok_lo,
          any_value(ok_hi) AS ok_hi
    GROUP BY source_id, replica, slot),
sc AS (
    SELECT source_id, replica, slot, min(start_ns) AS start_ns, max(end_ns) AS end_ns,
           sum(delta) FILTER (WHERE concept = 'ttft' AND part = 'count') AS ttft_count,
           sum(delta) FILTER (WHERE concept = 'itl' AND part = 'count') AS itl_count,
           sum(delta) FILTER (WHERE concept = 'itl' AND part = 'sum') AS itl_sum,
           sum(delta) FILTER (WHERE concept = 'tpot' AND part = 'count') AS tpot_count,
           sum(delta) FILTER (WHERE concept = 'e2e' AND part = 'count') AS e2e_count,
           sum(delta) FILTER (WHERE concept = 'step_tokens' AND part = 'count') AS steps,
           sum(delta) FILTER (WHERE concept = 'step_tokens' AND part = 'sum') AS step_tokens,
           sum(delta) FILTER (WHERE concept = 'prompt_tokens') AS prompt_tokens,
           sum(delta) FILTER (WHERE concept = 'generation_tokens') AS generation_tokens,
           sum(delta) FILTER (WHERE concept = 'requests_finished') AS finished,
           bool_or(reset) AS resets
    FROM d GROUP BY ALL),
w AS (
    SELECT sc.*, hp.* EXCLUDE (source_id, replica, slot), (sc.end_ns - sc.start_ns) / 1e9 AS duration_s,
           coalesce(sc.tpot_count, sc.finished, sc.e2e_count) AS n_judged,
           p.ttft_ms IS NULL AS no_ttft_slo, p.tpot_ms IS NULL AS no_tpot_slo
    FROM sc LEFT JOIN hp ON hp.source_id IS NOT DISTINCT FROM sc.source_id
                         AND hp.replica IS NOT DISTINCT FROM sc.replica AND hp.slot = sc.slot,
         analysis_params p),
ab AS (
    SELECT *,
           coalesce(ttft_ok_lo, CASE WHEN no_ttft_slo THEN n_judged ELSE 0 END) AS a_lo,
           coalesce(ttft_ok_hi, n_judged) AS a_hi,
           coalesce(tpot_ok_lo, CASE WHEN no_tpot_slo THEN n_judged ELSE 0 END) AS b_lo,
           coalesce(tpot_ok_hi, n_judged) AS b_hi
    FROM w)
SELECT source_id, replica, start_ns, end_ns, duration_s,
       coalesce(finished, tpot_count, e2e_count) AS requests_finished, ttft_count, tpot_count, itl_count,
       ttft_q * 1000 AS ttft_p99_ms, ttft_lo * 1000 AS ttft_p99_lo_ms, ttft_hi * 1000 AS ttft_p99_hi_ms,
       itl_q * 1000 AS itl_p99_ms, itl_lo * 1000 AS itl_p99_lo_ms, itl_hi * 1000 AS itl_p99_hi_ms,
       tpot_q * 1000 AS tpot_p99_ms, tpot_lo * 1000 AS tpot_p99_lo_ms, tpot_hi * 1000 AS tpot_p99_hi_ms,
       itl_sum / nullif(itl_count, 0) * 1000 AS mean_itl_ms,
       prompt_tokens / nullif(duration_s, 0) AS prompt_tokens_per_s,
       generation_tokens / nullif(duration_s, 0) AS generation_tokens_per_s,
       steps, step_tokens / nullif(steps, 0) AS mean_step_tokens,
       1 - step_tokens_ok_lo / nullif(steps, 0) AS big_step_share,
       ttft_ok_lo, ttft_ok_hi, itl_ok_lo, itl_ok_hi, tpot_ok_lo, tpot_ok_hi,
       ttft_ok_lo / nullif(ttft_count, 0) AS ttft_ok_share, ttft_ok_hi / nullif(ttft_count, 0) AS ttft_ok_share_hi,
       itl_ok_lo / nullif(itl_count, 0) AS itl_ok_share, itl_ok_hi / nullif(itl_count, 0) AS itl_ok_share_hi,
       greatest(0, a_lo + b_lo - greatest(n_judged, ttft_count)) AS good_lo, least(a_hi, b_hi, n_judged) AS good_hi,
       resets
FROM ab;
