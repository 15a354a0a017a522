-- Every request-level spike paired with each inferred prefill window (`request_prefill_windows`) of another
-- request of the same run that overlaps its gap (window start < gap end and window end > gap start), each pair
-- once. `spike_attribution` and `spike_culprits` read it when no trace covers a spike. The pairs are found by
-- one-second time buckets: each interval is listed under the buckets it spans and a pair is kept in the bucket
-- where its overlap begins, so the join is linear in spikes and windows (a plain join on the run, filtered by
-- time, compares every spike with every window of the run). Intervals spanning over an hour of buckets are
-- paired directly instead.
-- @depends spikes, request_prefill_windows
-- @column spike_id          BIGINT   The spike.
-- @column gap_ns            BIGINT   The spike's gap length, ns.
-- @column start_ns          BIGINT   The spike's gap start, ns since Unix epoch, UTC.
-- @column end_ns            BIGINT   The spike's gap end, ns since Unix epoch, UTC.
-- @column source_id         INTEGER  The window's request's source (the spike's).
-- @column run_line          BIGINT   The run of both.
-- @column request_id        VARCHAR  The window's request.
-- @column report_id         VARCHAR  Its server request id when known, else request_id.
-- @column prompt_tokens     INTEGER  Its prompt length, tokens.
-- @column window_start_ns   BIGINT   The window's start, ns since Unix epoch, UTC.
-- @column window_end_ns     BIGINT   The window's end, ns since Unix epoch, UTC.
CREATE OR REPLACE TEMP VIEW spike_prefill_window_pairs AS
WITH s AS (
    SELECT spike_id, source_id, run_line, request_id, gap_ns, start_ns, end_ns,
           least(start_ns, end_ns) // 1000000000 AS b0, greatest(start_ns, end_ns) // 1000000000 AS b1
    FROM spikes WHERE level = 'request'),
w AS (
    SELECT source_id, run_line, request_id, report_id, prompt_tokens, window_start_ns, window_end_ns,
           least(window_start_ns, window_end_ns) // 1000000000 AS b0,
           greatest(window_start_ns, window_end_ns) // 1000000000 AS b1
    FROM request_prefill_windows),
sb AS (SELECT *, unnest(range(b0, b1 + 1)) AS bucket FROM s WHERE b1 - b0 <= 3600),
wb AS (SELECT *, unnest(range(b0, b1 + 1)) AS bucket FROM w WHERE b1 - b0 <= 3600),
pairs AS (
    SELECT s.spike_id, s.gap_ns, s.start_ns, s.end_ns, s.request_id AS spike_request_id, w.*
    FROM sb s JOIN wb w ON w.source_id = s.source_id AND w.run_line = s.run_line AND w.bucket = s.bucket
    -- An overlap begins inside both intervals, so in a bucket both list: keep the pair there only.
    WHERE greatest(s.start_ns, w.window_start_ns) // 1000000000 = s.bucket
      AND w.window_start_ns < s.end_ns AND w.window_end_ns > s.start_ns
    UNION ALL
    SELECT s.spike_id, s.gap_ns, s.start_ns, s.end_ns, s.request_id, w.*, NULL
    FROM s JOIN w ON w.source_id = s.source_id AND w.run_line = s.run_line
     AND w.window_start_ns < s.end_ns AND w.window_end_ns > s.start_ns
    WHERE w.b1 - w.b0 > 3600
    UNION ALL
    SELECT s.spike_id, s.gap_ns, s.start_ns, s.end_ns, s.request_id, w.*, NULL
    FROM (SELECT * FROM s WHERE b1 - b0 > 3600) s JOIN w ON w.source_id = s.source_id AND w.run_line = s.run_line
     AND w.window_start_ns < s.end_ns AND w.window_end_ns > s.start_ns
    WHERE w.b1 - w.b0 <= 3600)
SELECT spike_id, gap_ns, start_ns, end_ns, source_id, run_line, request_id, report_id, prompt_tokens,
       window_start_ns, window_end_ns
FROM pairs WHERE request_id <> spike_request_id;
