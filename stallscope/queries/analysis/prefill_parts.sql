-- Which request's prefill tokens ran in which traced step.
--
-- With per-step token counts (vLLM `execute_context_...` annotations, SGLang markers): a replay of the engine's
-- first-come-first-served prefill order (`basis` `fcfs_replay`). The requests of a benchmark run, in admission
-- order, form one stream of prompt tokens (cumulative C_r); the trace's steps, in order, consume prefill tokens
-- (cumulative S_k). Request r finished its prefill in the last prefill step ending before its first token, so C_r +
-- O falls in that step's token range for the offset O between the streams. O is fixed locally, as the tightest
-- value r and its 8 neighbours either side all allow, else r and its next 8 anchors, else its 2 neighbours either
-- side, else r's own: a recompute preemption re-prefills a request and shifts the step stream from then on, which
-- one global offset could not follow, and the shift only grows, so after one the anchors that follow bound it. A
-- step's chunk of r is the overlap of (S_k-1, S_k] with (C_r-1 + O, C_r + O]. Requests are put in admission order
-- by the step that finished their prefill, then by the server log's order (their arrival order) when matched to
-- one, then by send order: a burst can reach the server in an order send times cannot tell. A request that got no
-- token while steps carrying decodes ran was preempted: the token ending that gap follows its re-prefill of the
-- prompt plus the tokens generated so far, which joins the stream as one more prefill. Step tokens the replay
-- leaves to nobody are prefills cut by a preemption before any token reached the client (KV-cache thrashing): they
-- go to the request at the head of the waiting queue, where vLLM puts the request it preempted last. Exact under
-- FCFS without prefix caching and without preemption; `agreement` is the share of anchors whose close neighbourhood
-- agrees on an offset.
--
-- Without token counts, from what the trace does show: a prefill-only step (vLLM V0's flash_fwd kernels, an
-- SGLang extend forward) runs no decode, so each token reaching a client as it ends is the first token of a
-- request whose prefill, or re-prefill after a preemption, it computed (`token_after_prefill`, weighted by the
-- prompt plus the tokens generated so far). A mixed step without counts is given to the requests that finish
-- prefill next (`next_completion`).
--
-- Prefix caching (vLLM's automatic prefix caching, SGLang's radix cache): a request computes only its prompt
-- minus a cached prefix, and the annotation counts only computed tokens, so the replay streams each episode's
-- prompt minus its inferred `cached_tokens`. It is inferred only where the evidence shows a cache: a server log
-- reporting a prefix-cache hit rate above 0 (or no log that reports one) and no engine configuration saying prefix
-- caching is off (vLLM V0's default, `enable_prefix_caching=None`). The evidence each conclusion rests on:
-- (1) a step whose context-request count (`ctx_reqs`) equals the number of requests that complete in it carries no
--     chunk over to the next step, so its last completer ends exactly at the step's last token: the stream
--     offset there, `o = s_hi - c_hi`, is exact ("closing");
-- (2) between two closings the step tokens must equal the prompts of the requests completing there minus their
--     cached prefixes, so the deficit `o_prev - o_next` is the group's total cached tokens (none when <= 0:
--     the other shift, a prefill cut by a preemption, adds tokens);
-- (3) a hit is at most the member's cap: prompt - 1 tokens (vLLM and SGLang always compute one), and, when a
--     vLLM log printed the prompts' token ids, no more than the whole blocks the prompt shares with an earlier
--     one (`requests.shared_prefix_tokens`);
-- (4) each member's completion step bounds its own end, `lo < o_r <= hi` as for the anchors below, the offset
--     only falls along the stream (a hit never adds tokens), and the caps bound each fall, so o_r lies in
--     [max(o_next, later members' lo + 1, o_prev - caps so far), min(o_prev, earlier members' hi, o_next + caps
--     still to come)]. Each member takes the highest offset those bounds allow (the least cache the counts force
--     so far). A group whose members' bounds all meet is `exact`: every share of the deficit is forced.
-- (5) The run's typical hit h is the most common hit the counts force alone: requests sharing one system prompt
--     all hit the same whole blocks of it.
-- (6) In a group the counts leave open, a deficit of k typical hits goes to the k members whose cap can hold one,
--     the longest prompts first: `typical_hit` when exactly k can (the only such split), else `ambiguous`:
--     another member of the same group (`cache_group`) could hold it, which `spike_culprits` reports. A deficit
--     that is no whole number of typical hits keeps the placement of (4) and is `ambiguous`.
-- Without closings (no `ctx_reqs`, or requests missing from the client file) nothing is inferred from the counts.
-- Prefill-only steps without counts (vLLM V0 traces) take each request's shared prefix (3) as its hit
-- (`shared_prefix`), when the evidence shows a cache and a request long enough to hold that prefix had finished
-- its prefill before the step: the one request that first computed it shares nothing earlier.
--
-- Matching a client token to the step that produced it allows 2 ms of slack: client clocks aligned to a trace
-- can sit a few hundred µs before the step end, and steps are tens of ms apart.
-- @depends request_metrics, step_phase, client_gaps
-- @column trace_source_id   INTEGER  The trace.
-- @column step_id           BIGINT   The step.
-- @column source_id         INTEGER  The benchmark source of the request.
-- @column run_line          BIGINT   The run inside the benchmark source.
-- @column request_id        VARCHAR  The request (the source's own id).
-- @column report_id         VARCHAR  Server request id when known, else request_id.
-- @column prompt_tokens     INTEGER  The request's prompt length, tokens.
-- @column tokens            BIGINT   Prefill tokens of this request computed in this step.
-- @column context_before    BIGINT   Tokens of the request already in the KV cache before this chunk (its attention span grows with them).
-- @column agreement         DOUBLE   Share of the run's anchoring requests whose neighbourhood agrees on an offset (0..1; NULL for the other bases).
-- @column cached_tokens     BIGINT   Inferred prompt tokens of this episode served from the prefix cache (0 when none is inferred).
-- @column cache_confidence  VARCHAR  For a member of a group with cached tokens: `exact` (the step counts force its hit, or its having none), `typical_hit` (the only split of the group's deficit into the run's typical hit), `ambiguous` (the counts allow another split among the group's members); NULL outside such a group.
-- @column cache_group       BIGINT   The closing (its stream position) that ends the group of requests whose cached tokens were inferred together; NULL outside a group with cached tokens.
-- @column basis             VARCHAR  `fcfs_replay` (token streams aligned), `preempted_gap` (step tokens the replay left unclaimed, given to the request most recently preempted: it heads the waiting queue), `preempted_redo` (such tokens while no client gap shows a preemption, given to the next request to start a prefill), `token_after_prefill` (a token reached the client as the prefill-only step ended) or `next_completion` (the requests finishing prefill next).
CREATE OR REPLACE TEMP VIEW prefill_parts AS
WITH st AS (
    SELECT source_id AS tsrc, step_id, start_ns, end_ns, ctx_tokens, ctx_reqs,
           CAST(sum(ctx_tokens) OVER (PARTITION BY source_id ORDER BY end_ns, step_index) AS BIGINT) AS s_hi
    FROM step_phase WHERE ctx_tokens > 0),
tspan AS (SELECT source_id AS tsrc, min(start_ns) AS lo, max(end_ns) AS hi FROM step_phase
          WHERE worked GROUP BY source_id),
rq0 AS (
    SELECT m.source_id, m.run_line, m.request_id, m.report_id, m.prompt_tokens, m.arrival_ns, m.first_token_ns,
           m.request_index, srv.request_index AS server_index, srv.shared_prefix_tokens AS shared_max
    FROM request_metrics m
    LEFT JOIN requests srv ON srv.kind = 'server' AND srv.request_id = m.report_id AND m.report_id <> m.request_id
    WHERE m.kind = 'client' AND coalesce(m.status, 'ok') = 'ok' AND m.arrival_ns IS NOT NULL
      AND m.first_token_ns IS NOT NULL AND m.prompt_tokens > 0),
runs AS (SELECT source_id, run_line, min(arrival_ns) AS lo, max(first_token_ns) AS hi FROM rq0 GROUP BY ALL),
pair AS (
    SELECT r.source_id, r.run_line, t.tsrc FROM runs r JOIN tspan t ON r.lo <= t.hi AND r.hi >= t.lo),
ref AS (SELECT source_id, run_line, min(tsrc) AS tsrc FROM pair GROUP BY ALL),
dec_steps AS (
    SELECT source_id AS tsrc, end_ns, row_number() OVER (PARTITION BY source_id ORDER BY end_ns, step_index) AS n
    FROM step_phase WHERE worked AND gen_reqs > 0),
preempted AS (
    -- Recompute preemption: a request that got no token while steps carrying decodes ran was not running; the
    -- token that ends such a gap follows its re-prefill of the prompt plus the tokens generated so far.
    SELECT g.source_id, g.run_line, g.request_id, g.report_id, q.prompt_tokens, q.prompt_tokens + g.gap_index + 1 AS tokens,
           g.start_ns, g.end_ns AS done_ns, q.request_index, q.server_index, q.shared_max
    FROM client_gaps g JOIN ref USING (source_id, run_line)
    JOIN rq0 q ON q.source_id = g.source_id AND q.run_line = g.run_line AND q.request_id = g.request_id
    ASOF LEFT JOIN dec_steps a ON a.tsrc = ref.tsrc AND g.start_ns + 2000000 >= a.end_ns
    ASOF LEFT JOIN dec_steps b ON b.tsrc = ref.tsrc AND g.end_ns - 2000000 >= b.end_ns
    WHERE coalesce(b.n, 0) - coalesce(a.n, 0) >= 1),
episodes AS (
    -- Every prefill the engine ran for a request: the first, and any re-prefill after a preemption.
    SELECT source_id, run_line, request_id, report_id, prompt_tokens, prompt_tokens AS tokens,
           first_token_ns AS done_ns, request_index, server_index, shared_max FROM rq0
    UNION ALL
    SELECT source_id, run_line, request_id, report_id, prompt_tokens, tokens, done_ns, request_index, server_index,
           shared_max
    FROM preempted),
bucketed AS (
    -- The step (of one reference trace) each episode finished in; outside the trace, its own time.
    SELECT e.*, coalesce(k.end_ns, e.done_ns) AS bucket
    FROM episodes e LEFT JOIN ref USING (source_id, run_line)
    ASOF LEFT JOIN (SELECT source_id, end_ns FROM step_phase WHERE worked) k
      ON k.source_id = ref.tsrc AND e.done_ns + 2000000 >= k.end_ns),
rq_full AS (
    -- Engine admission order: by the step that completed the prefill, then by the server's log order (its
    -- arrival order) when the request was matched to a server log, then by send order.
    SELECT source_id, run_line, request_id, report_id, prompt_tokens, tokens, done_ns,
           -- The most a cache can serve: prompt - 1 tokens, and no more than the prompt shares with an earlier one.
           least(tokens - 1, coalesce(shared_max, tokens - 1)) AS cap,
           CAST(sum(tokens) OVER (PARTITION BY source_id, run_line
                                  ORDER BY bucket, server_index NULLS LAST, request_index) AS BIGINT) AS c_hi
    FROM bucketed),
cache_on AS (
    -- Evidence that a prefix cache served tokens: a log reporting a hit rate above 0, or no log reporting one;
    -- and no engine configuration saying prefix caching is off without another saying it is on (vLLM V0's
    -- default prints `enable_prefix_caching=None`; V1 prints True when on, its default).
    SELECT (SELECT count(prefix_cache_hit_rate_pct) = 0 OR max(prefix_cache_hit_rate_pct) > 0 FROM engine_stats)
           AND (coalesce(bool_or(lower(value) IN ('true', '1')), false)
                OR NOT coalesce(bool_or(lower(value) IN ('false', '0', 'none')), false)) AS on_
    FROM engine_config WHERE key LIKE '%enable_prefix_caching'),
ends0 AS (
    -- Each episode completing inside its reference trace, with its completion step and the offset bounds it sets.
    SELECT q.source_id, q.run_line, ref.tsrc, q.c_hi, s.step_id, s.ctx_reqs,
           s.s_hi - s.ctx_tokens - q.c_hi AS lo, s.s_hi - q.c_hi AS hi,
           count(*) OVER (PARTITION BY q.source_id, q.run_line, s.step_id) AS n_done,
           max(q.c_hi) OVER (PARTITION BY q.source_id, q.run_line, s.step_id) AS last_c
    FROM rq_full q JOIN ref USING (source_id, run_line) JOIN tspan t ON t.tsrc = ref.tsrc
    ASOF JOIN st s ON s.tsrc = ref.tsrc AND q.done_ns + 2000000 >= s.end_ns
    WHERE q.done_ns BETWEEN t.lo AND t.hi + 1000000000 AND (SELECT on_ FROM cache_on)),
closings AS (
    -- (1) The last completer of a step that carries no chunk over: its stream end is the step's last token.
    SELECT source_id, run_line, c_hi, hi AS o FROM ends0 WHERE c_hi = last_c AND ctx_reqs = n_done),
grouped AS (
    -- (2) Each episode between two closings, with the offsets at both ends and its own bounds.
    SELECT q.source_id, q.run_line, q.request_id, q.c_hi, q.tokens, q.cap, q.prompt_tokens, nx.c_hi AS cache_group,
           pv.o AS o_prev, nx.o AS o_next, e.lo, e.hi
    FROM rq_full q
    ASOF JOIN (SELECT source_id, run_line, -c_hi AS neg, c_hi, o FROM closings) nx
      ON nx.source_id = q.source_id AND nx.run_line = q.run_line AND -q.c_hi >= nx.neg
    ASOF JOIN closings pv ON pv.source_id = q.source_id AND pv.run_line = q.run_line AND q.c_hi - 1 >= pv.c_hi
    LEFT JOIN ends0 e ON e.source_id = q.source_id AND e.run_line = q.run_line AND e.c_hi = q.c_hi),
bounded AS (
    -- (3) The offset after each member: the highest its group's bounds allow.
    -- Each member's cap bounds the offset too: after r it is at least o_prev minus the caps so far, and at most
    -- o_next plus the caps still to come.
    SELECT *, least(o_prev, coalesce(min(hi) OVER up, o_prev), o_next + coalesce(sum(cap) OVER later, 0)) AS o_up,
           greatest(o_next, coalesce(max(lo + 1) OVER dn, o_next), o_prev - sum(cap) OVER up) AS o_dn
    FROM grouped WHERE o_prev > o_next
    WINDOW up AS (PARTITION BY source_id, run_line, cache_group ORDER BY c_hi ROWS UNBOUNDED PRECEDING),
           dn AS (PARTITION BY source_id, run_line, cache_group ORDER BY c_hi
                  ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING),
           later AS (PARTITION BY source_id, run_line, cache_group ORDER BY c_hi
                     ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING)),
greedy AS (
    SELECT source_id, run_line, request_id, c_hi, cache_group, tokens, cap, o_prev - o_next AS deficit,
           least(greatest(lag(o_up, 1, o_prev) OVER w - o_up, 0), cap) AS cached_tokens,
           o_up = o_dn AND coalesce(lag(o_up = o_dn) OVER w, true) AS forced
    FROM bounded
    WINDOW w AS (PARTITION BY source_id, run_line, cache_group ORDER BY c_hi)),
typical AS (
    -- (4) The run's typical hit: the most common hit the counts force alone (one shared system prompt gives
    -- one value).
    SELECT source_id, run_line, mode(cached_tokens) AS h
    FROM greedy WHERE forced AND cached_tokens > 0 GROUP BY ALL),
split AS (
    -- (5) A group whose deficit the counts leave open is split in typical hits when it is a whole number k of
    -- them: onto the k members long enough to hold one (prompt > h), the longest first (a shared prefix makes a
    -- prompt longer). Unique when exactly k members can hold one (`typical_hit`), else `ambiguous`.
    SELECT g.*, t.h, bool_and(g.forced) OVER grp AS all_forced,
           count(*) FILTER (WHERE g.cap >= t.h) OVER grp AS n_fit,
           CASE WHEN g.cap >= t.h THEN row_number() OVER (
               PARTITION BY g.source_id, g.run_line, g.cache_group, g.cap >= t.h
               ORDER BY g.tokens DESC, g.c_hi DESC) END AS fit_rank
    FROM greedy g LEFT JOIN typical t USING (source_id, run_line)
    WINDOW grp AS (PARTITION BY g.source_id, g.run_line, g.cache_group)),
cached AS (
    SELECT source_id, run_line, request_id, c_hi, cache_group,
           CAST(CASE WHEN all_forced OR h IS NULL OR deficit % h <> 0 OR deficit // h > n_fit THEN cached_tokens
                     WHEN fit_rank <= deficit // h THEN h ELSE 0 END AS BIGINT) AS cached_tokens,
           CASE WHEN all_forced THEN 'exact'
                WHEN h IS NOT NULL AND deficit % h = 0 AND deficit // h = n_fit THEN 'typical_hit'
                ELSE 'ambiguous' END AS cache_confidence
    FROM split),
rq AS (
    -- The stream of computed tokens: each episode's prompt (plus generated tokens) minus its cached prefix.
    SELECT q.source_id, q.run_line, q.request_id, q.report_id, q.prompt_tokens, q.tokens - coalesce(c.cached_tokens, 0) AS tokens,
           q.done_ns, coalesce(c.cached_tokens, 0) AS cached_tokens,
           c.cache_confidence, c.cache_group,
           q.c_hi - CAST(coalesce(sum(c.cached_tokens) OVER (PARTITION BY q.source_id, q.run_line ORDER BY q.c_hi
                                                        ROWS UNBOUNDED PRECEDING), 0) AS BIGINT) AS c_hi
    FROM rq_full q LEFT JOIN cached c USING (source_id, run_line, c_hi)),
anchors AS (
    -- Requests whose first token lies inside the trace, each with its last prefill step before that token.
    SELECT q.source_id, q.run_line, p.tsrc, q.c_hi, q.done_ns
    FROM rq q JOIN pair p USING (source_id, run_line) JOIN tspan t ON t.tsrc = p.tsrc
    WHERE q.done_ns BETWEEN t.lo AND t.hi + 1000000000),
lastk AS (
    SELECT a.source_id, a.run_line, a.tsrc, a.c_hi, s.s_hi, s.s_hi - s.ctx_tokens AS s_lo, s.step_id, s.ctx_reqs
    FROM anchors a ASOF JOIN st s ON s.tsrc = a.tsrc AND a.done_ns + 2000000 >= s.end_ns),
fixed AS (
    -- Closings of the computed stream, as in (1) above: the last completer of a step that carries no chunk over
    -- ends at the step's last token, so the offset there is exact.
    SELECT source_id, run_line, tsrc, c_hi, s_hi - c_hi AS o
    FROM (SELECT *, count(*) OVER (PARTITION BY source_id, run_line, tsrc, step_id) AS n_done,
                 max(c_hi) OVER (PARTITION BY source_id, run_line, tsrc, step_id) AS last_c FROM lastk)
    WHERE c_hi = last_c AND ctx_reqs = n_done),
iv AS (
    SELECT source_id, run_line, tsrc, c_hi, s_lo - c_hi AS lo, s_hi - c_hi AS hi,
           -- Over the anchor and its neighbours: the offsets every one of them allows, (max lo, min hi].
           max(s_lo - c_hi) OVER w8 AS wl8, min(s_hi - c_hi) OVER w8 AS wh8,
           max(s_lo - c_hi) OVER w2 AS wl2, min(s_hi - c_hi) OVER w2 AS wh2,
           max(s_lo - c_hi) OVER f8 AS fl8, min(s_hi - c_hi) OVER f8 AS fh8
    FROM lastk
    WINDOW w8 AS (PARTITION BY source_id, run_line, tsrc ORDER BY c_hi ROWS BETWEEN 8 PRECEDING AND 8 FOLLOWING),
           w2 AS (PARTITION BY source_id, run_line, tsrc ORDER BY c_hi ROWS BETWEEN 2 PRECEDING AND 2 FOLLOWING),
           f8 AS (PARTITION BY source_id, run_line, tsrc ORDER BY c_hi ROWS BETWEEN CURRENT ROW AND 8 FOLLOWING)),
anchored AS (
    -- A local offset per anchor: the tightest value its 8 neighbours either side all allow; where they disagree
    -- (a cut prefill shifts the stream up from there on), the tightest it and its next 8 anchors allow, else its
    -- 2 neighbours', else its own interval's upper end.
    -- Between two closings the offset lies between theirs (the stream shifts only one way in between: up at a
    -- cut prefill, down at a cache hit the inference missed), so the local value is clamped to that range;
    -- where both closings agree, that pins it even through a run of steps that all carry a chunk over.
    SELECT i.source_id, i.run_line, i.tsrc, i.c_hi,
           CASE WHEN p.o IS NULL OR n.o IS NULL THEN i.o0
                ELSE least(greatest(i.o0, least(p.o, n.o)), greatest(p.o, n.o)) END AS o,
           i.consistent
    FROM (SELECT source_id, run_line, tsrc, c_hi,
                 CASE WHEN wl8 < wh8 THEN wh8 WHEN fl8 < fh8 THEN fh8 WHEN wl2 < wh2 THEN wh2 ELSE hi END AS o0,
                 wl2 < wh2 AS consistent
          FROM iv) i
    ASOF LEFT JOIN fixed p ON p.source_id = i.source_id AND p.run_line = i.run_line AND p.tsrc = i.tsrc
                          AND i.c_hi >= p.c_hi
    ASOF LEFT JOIN (SELECT source_id, run_line, tsrc, -c_hi AS neg, o FROM fixed) n
      ON n.source_id = i.source_id AND n.run_line = i.run_line AND n.tsrc = i.tsrc AND -i.c_hi >= n.neg),
agree AS (
    SELECT source_id, run_line, tsrc, avg(CASE WHEN consistent THEN 1.0 ELSE 0.0 END) AS agreement
    FROM anchored GROUP BY ALL),
placed AS (
    -- Every request of a paired run takes the offset of the nearest anchor at or before it (else after it).
    SELECT q.*, p.tsrc, coalesce(b.o, f.o) AS o
    FROM rq q JOIN pair p USING (source_id, run_line)
    ASOF LEFT JOIN anchored b ON b.source_id = q.source_id AND b.run_line = q.run_line AND b.tsrc = p.tsrc
                             AND q.c_hi >= b.c_hi
    ASOF LEFT JOIN (SELECT source_id, run_line, tsrc, -c_hi AS neg, o FROM anchored) f
      ON f.source_id = q.source_id AND f.run_line = q.run_line AND f.tsrc = p.tsrc AND -q.c_hi >= f.neg),
replayed AS (
    -- Each episode's place in the step stream, (s_from, s_to], cut at step boundaries.
    SELECT s.tsrc AS trace_source_id, s.step_id, q.source_id, q.run_line, q.request_id, q.report_id,
           q.prompt_tokens, least(s.s_hi, q.s_to) - greatest(s.s_hi - s.ctx_tokens, q.s_from) AS tokens,
           greatest(s.s_hi - s.ctx_tokens, q.s_from) - q.s_from + q.cached_tokens AS context_before,
           a.agreement, q.cached_tokens, q.cache_confidence, q.cache_group, 'fcfs_replay' AS basis, s.end_ns, q.s_from
    FROM (SELECT *, c_hi - tokens + o AS s_from, c_hi + o AS s_to FROM placed) q
    JOIN agree a ON a.source_id = q.source_id AND a.run_line = q.run_line AND a.tsrc = q.tsrc
    JOIN st s ON s.tsrc = q.tsrc AND q.s_from < s.s_hi AND q.s_to > s.s_hi - s.ctx_tokens),
unclaimed AS (
    -- Step prefill tokens the replay gave to no request: a prefill preempted before its first token (KV-cache
    -- thrashing) reaches no client, so no episode stands for it.
    SELECT s.tsrc, s.step_id, s.end_ns, CAST(s.ctx_tokens - coalesce(sum(r.tokens), 0) AS BIGINT) AS hole
    FROM st s LEFT JOIN replayed r ON r.trace_source_id = s.tsrc AND r.step_id = s.step_id
    GROUP BY s.tsrc, s.step_id, s.end_ns, s.ctx_tokens HAVING s.ctx_tokens - coalesce(sum(r.tokens), 0) > 0),
restarts AS (
    -- Per step, the earliest episode in the stream that begins there.
    SELECT trace_source_id AS tsrc, end_ns, arg_min(source_id, s_from) AS source_id, arg_min(run_line, s_from) AS run_line,
           arg_min(request_id, s_from) AS request_id
    FROM replayed WHERE context_before = cached_tokens GROUP BY ALL),
heads AS (
    -- vLLM puts a preempted request back at the head of the waiting queue, so the head is the request whose
    -- client gap began last among those waiting in a preempted gap across the step: its prefill is the one cut.
    SELECT u.tsrc, u.step_id, u.hole, arg_max(p.request_id, p.start_ns) AS request_id,
           arg_max(p.source_id, p.start_ns) AS source_id, arg_max(p.run_line, p.start_ns) AS run_line
    FROM unclaimed u JOIN ref ON ref.tsrc = u.tsrc
    JOIN preempted p ON p.source_id = ref.source_id AND p.run_line = ref.run_line
     AND u.end_ns > p.start_ns + 2000000 AND u.end_ns < p.done_ns - 2000000
    GROUP BY ALL),
redone AS (
    -- A prefill cut before the request's first token (no gap shows it): the next episode to begin in the stream
    -- is its redo, provided the request had arrived by then.
    SELECT u.tsrc, u.step_id, u.hole, r.request_id, r.source_id, r.run_line
    FROM (FROM unclaimed ANTI JOIN heads USING (tsrc, step_id)) u
    ASOF JOIN restarts r ON r.tsrc = u.tsrc AND r.end_ns > u.end_ns
    JOIN rq0 q ON q.source_id = r.source_id AND q.run_line = r.run_line AND q.request_id = r.request_id
    WHERE q.arrival_ns < u.end_ns)
SELECT * EXCLUDE (end_ns, s_from) FROM replayed
UNION ALL
SELECT c.tsrc, c.step_id, c.source_id, c.run_line, c.request_id, q.report_id, q.prompt_tokens, c.hole, 0, NULL, 0, NULL,
       NULL, c.basis
FROM (SELECT *, 'preempted_gap' AS basis FROM heads UNION ALL SELECT *, 'preempted_redo' FROM redone) c
JOIN rq0 q USING (source_id, run_line, request_id)
UNION ALL
-- Prefill-only steps without token counts (vLLM V0 prefill-first scheduling, SGLang extend forwards): no decode
-- runs in them, so every token that reaches a client as one ends is the first token of a request whose prefill
-- (or whose re-prefill after a recompute preemption) that step computed. A re-prefill redoes the prompt and the
-- tokens generated so far.
SELECT k.source_id, k.step_id, q.source_id, q.run_line, q.request_id, q.report_id, q.prompt_tokens,
       CAST(q.prompt_tokens AS BIGINT) + t.generated - pc.cached, pc.cached, NULL, pc.cached,
       CASE WHEN pc.cached > 0 THEN 'shared_prefix' END, NULL, 'token_after_prefill'
FROM (SELECT * FROM step_phase
      WHERE kernel_count > 0 AND phase = 'prefill' AND ctx_tokens IS NULL AND prefill_gpu_ns > 0) k
JOIN pair p ON p.tsrc = k.source_id
JOIN (SELECT source_id, run_line, request_id, first_token_ns AS t_ns, 0 AS generated FROM rq0
      UNION ALL
      SELECT g.source_id, g.run_line, g.request_id, g.end_ns, g.token_index FROM client_gaps g) t
  ON t.source_id = p.source_id AND t.run_line = p.run_line
 AND t.t_ns BETWEEN k.end_ns - 2000000 AND k.end_ns + 2000000
JOIN rq0 q ON q.source_id = t.source_id AND q.run_line = t.run_line AND q.request_id = t.request_id
-- Without step counts, the cache serves what the prompt shares with an earlier one (whole blocks, as the log's
-- token ids show), when a cache is in evidence and a request long enough to hold that prefix finished its
-- prefill before this step began (a prefix is cached only once a step has computed it: the first reuse can sit
-- in the same step as the first use).
CROSS JOIN LATERAL (SELECT CASE WHEN (SELECT on_ FROM cache_on) AND q.shared_max > 0 AND EXISTS (
                                    SELECT 1 FROM rq0 e WHERE e.source_id = q.source_id AND e.run_line = q.run_line
                                      AND e.first_token_ns <= k.start_ns AND e.prompt_tokens > q.shared_max)
                                THEN CAST(least(q.shared_max, q.prompt_tokens - 1) AS BIGINT)
                                ELSE 0 END AS cached) pc
UNION ALL
-- Mixed steps without token counts (an SGLang MIXED marker): decodes finish there too, so their prefill work
-- is given to the requests that finish prefill next, at the first step at or after them that precedes a first
-- token.
SELECT k.source_id, k.step_id, b.source_id, b.run_line, b.request_id, b.report_id, b.prompt_tokens,
       CAST(b.prompt_tokens AS BIGINT), 0, NULL, 0, NULL, NULL, 'next_completion'
FROM (SELECT * FROM step_phase
      WHERE kernel_count > 0 AND phase = 'mixed' AND ctx_tokens IS NULL AND prefill_gpu_ns > 0) k
JOIN pair p ON p.tsrc = k.source_id
ASOF JOIN (SELECT DISTINCT source_id, run_line, bucket FROM bucketed) nb
  ON nb.source_id = p.source_id AND nb.run_line = p.run_line AND nb.bucket >= k.end_ns
JOIN bucketed b ON b.source_id = nb.source_id AND b.run_line = nb.run_line AND b.bucket = nb.bucket
WHERE nb.bucket - k.end_ns < 60000000000;