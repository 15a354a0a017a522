-- SGLang scheduler batch lines (`engine_batches`) arranged as step-time evidence, one row per line, in file order
-- per scheduler. SGLang prints one `Prefill batch` line per prefill forward (at its scheduling) and one `Decode
-- batch` line every `decode_log_interval` (default 40) decode forwards; the lines' stamps have 1-s resolution, but
-- their order is exact, and two fields time what ran between lines: a decode line's `gen throughput` is the decode
-- tokens generated since the previous decode line over the wall time since it, a prefill line's `input throughput`
-- is the previous prefill line's `#new-token` over the wall time since that line was scheduled. Each decode line
-- closes an *interval* (the forwards since the previous decode line); the prefill lines inside it are the prefill
-- forwards of that interval. Per line: the interval it belongs to, the previous decode line's batch and KV figures
-- (for a decode line), and for a prefill line the next prefill line of the same scheduler when no decode line lies
-- between them (then the wall time between the two is `new_tokens / next_input_tps`: this forward plus any decode
-- forwards in between, none when the scheduler had prefill work waiting: `queued_reqs > 0`, or this batch left a
-- chunked request, which the next prefill batch continues). stallscope/recommend/observe.py turns these rows into
-- step observations (`sglang_observations`).
-- @column source_id        INTEGER  The SGLang log the line is from (`sources.source_id`).
-- @column sched            VARCHAR  The scheduler: process prefix and rank tags (one batch-line stream each).
-- @column line_no          BIGINT   Line of the record.
-- @column kind             VARCHAR  `prefill`, `decode` or `mixed` (0.2.x mixed-chunk prefill lines).
-- @column interval         BIGINT   Decode lines before this line in its scheduler's stream (a decode line closes interval = that count; 0 is the stretch before the first decode line, whose throughput counts from the scheduler's start).
-- @column new_seqs         INTEGER  `#new-seq`.
-- @column new_tokens       INTEGER  `#new-token`.
-- @column cached_tokens    INTEGER  `#cached-token`.
-- @column running_reqs     INTEGER  `#running-req`: decoding requests when the batch was scheduled.
-- @column queued_reqs      INTEGER  `#queue-req`.
-- @column kv_tokens        INTEGER  `#token` (decode lines): KV tokens in use.
-- @column gen_tps          DOUBLE   `gen throughput (token/s)` (decode lines).
-- @column prev_running     INTEGER  Decode lines: `#running-req` of the previous decode line of the scheduler.
-- @column prev_kv_tokens   INTEGER  Decode lines: `#token` of the previous decode line.
-- @column next_input_tps   DOUBLE   Prefill lines: `input throughput` of the next prefill line when no decode line lies between them, else NULL.
-- @column next_cached      INTEGER  Prefill lines: `#cached-token` of that next prefill line.
-- @column next_new_seqs    INTEGER  Prefill lines: `#new-seq` of that next prefill line.
CREATE OR REPLACE TEMP VIEW recommend_sglang_lines AS
WITH b AS (
    SELECT source_id, line_no,
           concat_ws('|', coalesce(process, ''), coalesce(CAST(dp_rank AS VARCHAR), ''),
                     coalesce(CAST(pp_rank AS VARCHAR), ''), coalesce(CAST(tp_rank AS VARCHAR), '')) AS sched,
           kind, new_seqs, new_tokens, cached_tokens, running_reqs, queued_reqs, kv_tokens,
           gen_throughput_tps AS gen_tps, input_throughput_tps AS input_tps
    FROM engine_batches WHERE kind IN ('prefill', 'decode', 'mixed')),
n AS (
    SELECT *,
           CAST(coalesce(sum(CASE WHEN kind = 'decode' THEN 1 ELSE 0 END) OVER (
               PARTITION BY source_id, sched ORDER BY line_no ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)
               AS BIGINT) AS interval
    FROM b),
d AS (
    SELECT source_id, sched, line_no,
           lag(running_reqs) OVER w AS prev_running, lag(kv_tokens) OVER w AS prev_kv_tokens
    FROM n WHERE kind = 'decode' WINDOW w AS (PARTITION BY source_id, sched ORDER BY line_no)),
p AS (
    SELECT source_id, sched, line_no,
           lead(interval) OVER w AS next_interval, lead(input_tps) OVER w AS next_tps,
           lead(cached_tokens) OVER w AS next_cached, lead(new_seqs) OVER w AS next_new_seqs
    FROM n WHERE kind <> 'decode' WINDOW w AS (PARTITION BY source_id, sched ORDER BY line_no))
SELECT n.source_id, n.sched, n.line_no, n.kind, n.interval, n.new_seqs, n.new_tokens, n.cached_tokens,
       n.running_reqs, n.queued_reqs, n.kv_tokens, n.gen_tps, d.prev_running, d.prev_kv_tokens,
       CASE WHEN p.next_interval = n.interval THEN p.next_tps END AS next_input_tps,
       CASE WHEN p.next_interval = n.interval THEN p.next_cached END AS next_cached,
       CASE WHEN p.next_interval = n.interval THEN p.next_new_seqs END AS next_new_seqs
FROM n LEFT JOIN d USING (source_id, sched, line_no) LEFT JOIN p USING (source_id, sched, line_no);
