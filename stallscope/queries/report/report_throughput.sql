-- Tokens per second against goodput over time, the picture of a generation stall: tokens/s stays flat while
-- goodput falls. Time is cut into bins of bin_s seconds from the first event; each rate is a rolling mean over
-- the last window_bins bins. Tokens are the streamed chunks of the judged requests (`report_requests`) as
-- they arrived (a chunk counts its tokens when the source says, else one), plus the output of requests
-- without chunk data at their completion; with no requests at all, the traced steps' decode tokens. Goodput
-- is good requests completing per second (NULL with no judged requests).
-- @depends report_requests, step_phase
-- @param bin_s        Bin width, s (default 1).
-- @param window_bins  Bins in the rolling window (default 10).
-- @column bin_start_ns    BIGINT   Bin start, ns since Unix epoch, UTC.
-- @column tokens_per_s    DOUBLE   Rolling output tokens per second.
-- @column goodput_rps     DOUBLE   Rolling good requests completed per second (NULL without judged requests).
-- @column completed_rps   DOUBLE   Rolling requests completed per second (NULL without judged requests).
CREATE OR REPLACE TEMP MACRO report_throughput(bin_s := 1.0, window_bins := 10) AS TABLE
WITH rq AS (SELECT r.*, m.first_token_ns, m.gaps FROM report_requests r
            JOIN request_metrics m USING (source_id, run_line, request_id)),
tok AS (
    SELECT rq.first_token_ns AS t_ns, 1 AS tokens FROM rq WHERE rq.gaps > 0 AND rq.first_token_ns IS NOT NULL
    UNION ALL
    SELECT g.end_ns, coalesce(g.tokens_in_chunk, 1) FROM token_gaps g
    JOIN rq ON rq.source_id = g.source_id AND rq.request_id = g.request_id WHERE g.end_ns IS NOT NULL
    UNION ALL
    SELECT finish_ns, output_tokens FROM rq WHERE gaps = 0 AND finish_ns IS NOT NULL AND output_tokens > 0
    UNION ALL
    SELECT end_ns, coalesce(gen_tokens, gen_reqs) FROM step_phase
    WHERE kernel_count > 0 AND coalesce(gen_tokens, gen_reqs) > 0 AND NOT EXISTS (SELECT 1 FROM rq)),
fin AS (SELECT finish_ns AS t_ns, good FROM rq WHERE finish_ns IS NOT NULL),
span AS (SELECT min(t) AS lo, max(t) AS hi FROM (SELECT t_ns AS t FROM tok UNION ALL SELECT t_ns FROM fin)),
bins AS (SELECT i AS bin FROM span, range(0, CAST(floor((span.hi - span.lo) / (bin_s * 1e9)) AS BIGINT) + 1) t(i)),
tb AS (SELECT CAST(floor((t_ns - span.lo) / (bin_s * 1e9)) AS BIGINT) AS bin, sum(tokens) AS tokens
       FROM tok, span GROUP BY ALL),
fb AS (SELECT CAST(floor((t_ns - span.lo) / (bin_s * 1e9)) AS BIGINT) AS bin, count(*) FILTER (WHERE good) AS good,
              count(*) AS done FROM fin, span GROUP BY ALL),
has AS (SELECT count(*) > 0 AS judged FROM rq)
SELECT CAST(span.lo + bins.bin * bin_s * 1e9 AS BIGINT) AS bin_start_ns,
       avg(coalesce(tb.tokens, 0)) OVER w / bin_s AS tokens_per_s,
       CASE WHEN has.judged THEN avg(coalesce(fb.good, 0)) OVER w / bin_s END AS goodput_rps,
       CASE WHEN has.judged THEN avg(coalesce(fb.done, 0)) OVER w / bin_s END AS completed_rps
FROM bins CROSS JOIN span CROSS JOIN has LEFT JOIN tb USING (bin) LEFT JOIN fb USING (bin)
WINDOW w AS (ORDER BY bins.bin ROWS BETWEEN window_bins - 1 PRECEDING AND CURRENT ROW)
ORDER BY bin_start_ns;
