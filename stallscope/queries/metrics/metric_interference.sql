-- The interference signature per replica and scrape window: the ITL tail (p99 estimate) against the prefill work
-- (prompt tokens per second, the share of steps above 512 tokens), relative to the replica's own medians over its
-- windows. Windows where the ITL tail rose above its median while prefill work was above its median are ranked, the
-- largest rise first (`rank`); the others have a NULL rank. `itl_prompt_corr` is the replica's correlation of the
-- two over all its windows (towards 1: stalls come with prefill bursts).
-- @depends metric_windows
-- @column source_id            INTEGER  Source of the samples.
-- @column replica              VARCHAR  `instance/engine/dp_rank`.
-- @column start_ns             BIGINT   Window start, ns since Unix epoch, UTC.
-- @column end_ns               BIGINT   Window end, ns since Unix epoch, UTC.
-- @column itl_p99_ms           DOUBLE   ITL p99 estimate, ms.
-- @column itl_p99_median_ms    DOUBLE   The replica's median of itl_p99_ms over its windows, ms.
-- @column itl_rise             DOUBLE   itl_p99_ms / itl_p99_median_ms.
-- @column prompt_tokens_per_s  DOUBLE   Prompt tokens per second in the window.
-- @column prompt_median_per_s  DOUBLE   The replica's median prompt-token rate, tokens/s.
-- @column big_step_share       DOUBLE   Share of steps above 512 tokens.
-- @column itl_prompt_corr      DOUBLE   Correlation of itl_p99_ms and prompt_tokens_per_s over the replica's windows.
-- @column rank                 BIGINT   1 = the largest ITL rise with prefill work above median; NULL otherwise.
CREATE OR REPLACE TEMP VIEW metric_interference AS
WITH w AS (
    SELECT source_id, replica, start_ns, end_ns, itl_p99_ms, prompt_tokens_per_s, big_step_share,
           median(itl_p99_ms) OVER r AS itl_p99_median_ms, median(prompt_tokens_per_s) OVER r AS prompt_median_per_s,
           median(big_step_share) OVER r AS big_median, corr(itl_p99_ms, prompt_tokens_per_s) OVER r AS itl_prompt_corr
    FROM metric_windows WHERE itl_p99_ms IS NOT NULL
    WINDOW r AS (PARTITION BY source_id, replica)),
f AS (
    SELECT *, itl_p99_ms / nullif(itl_p99_median_ms, 0) AS itl_rise,
           itl_p99_ms > itl_p99_median_ms
             AND (prompt_tokens_per_s > prompt_median_per_s OR big_step_share > big_median) AS flagged
    FROM w)
SELECT source_id, replica, start_ns, end_ns, itl_p99_ms, itl_p99_median_ms, itl_rise, prompt_tokens_per_s,
       prompt_median_per_s, big_step_share, itl_prompt_corr,
       CASE WHEN flagged THEN row_number() OVER (PARTITION BY flagged ORDER BY itl_rise DESC, start_ns) END AS rank
FROM f;
