-- Per pool: the chunked-prefill budget it runs against the one its own data recommends (`lake_recommendations`,
-- one row per shard; only shards whose recommendation is `ok` count). Replicas of a pool can disagree, so: the
-- pool's current budget is the one most of those shards ran with (ties: the smaller), every value seen is listed;
-- its recommended budget is the median of their recommendations taken from the values they recommended
-- (quantile_disc: an actual recommendation, ties low), with their range. Unchunked (a V0 prefill-first engine, or
-- a recommendation that no prefill needs chunking) is NULL and ranks above every budget. A pool is flagged
-- (`differs`) when the two differ; the predicted goodputs say what the change is worth.
-- @depends _fleet_sum
-- @column pool                              VARCHAR  The pool.
-- @column shards                            BIGINT   Shards of the pool with a recommendation row.
-- @column shards_ok                         BIGINT   Shards whose recommendation is `ok` (the ones that count).
-- @column current_budget_tokens             BIGINT   The pool's current budget, tokens (NULL: unchunked, or no `ok` shard).
-- @column current_budgets                   BIGINT[] Distinct current budgets of its `ok` shards, ascending (NULL element: unchunked).
-- @column current_policy                    VARCHAR  The scheduling policy most of its `ok` shards ran (`chunked`, `prefill_first`, ...; ties: the first by name).
-- @column recommended_budget_tokens         BIGINT   The pool's recommended budget, tokens (NULL: unchunked, or no `ok` shard).
-- @column recommended_min_tokens            BIGINT   Smallest budget an `ok` shard recommended, tokens (NULL: unchunked).
-- @column recommended_max_tokens            BIGINT   Largest budget an `ok` shard recommended, tokens (NULL: unchunked).
-- @column shards_differing                  BIGINT   `ok` shards whose own recommendation differs from their own budget.
-- @column predicted_goodput_current_rps     DOUBLE   Sum over `ok` shards of the replay's goodput at their current budget, requests per second.
-- @column predicted_goodput_recommended_rps DOUBLE   Sum over `ok` shards of the replay's goodput at their recommended budget, requests per second.
-- @column predicted_gain_rps                DOUBLE   predicted_goodput_recommended_rps - predicted_goodput_current_rps, requests per second.
-- @column placement                         VARCHAR  The placement most of its `ok` shards were recommended (`aggregated` or `disaggregated`; ties: `aggregated`).
-- @column differs                           BOOLEAN  The recommended budget differs from the current one (NULL when no shard is `ok`).
CREATE OR REPLACE TEMP VIEW fleet_budgets AS
WITH r AS (
    -- unchunked as the largest key, so that it takes part in the mode, the median and the range
    SELECT *, status = 'ok' AS ok, coalesce(current_budget_tokens, 9223372036854775807) AS cur_key,
           coalesce(recommended_budget_tokens, 9223372036854775807) AS rec_key
    FROM lake_recommendations),
cur AS (
    SELECT pool, cur_key, row_number() OVER (PARTITION BY pool ORDER BY count(*) DESC, cur_key) AS k
    FROM r WHERE ok GROUP BY pool, cur_key),
p AS (
    SELECT pool, count(*) AS shards, count(*) FILTER (WHERE ok) AS shards_ok,
           list_sort(list_distinct(list(cur_key) FILTER (WHERE ok))) AS cur_keys,
           mode(policy ORDER BY policy) FILTER (WHERE ok) AS current_policy,
           quantile_disc(rec_key, 0.5) FILTER (WHERE ok) AS rec_key,
           min(rec_key) FILTER (WHERE ok) AS rec_min, max(rec_key) FILTER (WHERE ok) AS rec_max,
           count(*) FILTER (WHERE ok AND rec_key <> cur_key) AS shards_differing,
           _fleet_sum(CASE WHEN ok THEN goodput_current_rps END) AS predicted_goodput_current_rps,
           _fleet_sum(CASE WHEN ok THEN goodput_recommended_rps END) AS predicted_goodput_recommended_rps,
           mode(placement ORDER BY placement) FILTER (WHERE ok) AS placement
    FROM r GROUP BY pool)
SELECT p.pool, p.shards, p.shards_ok, nullif(c.cur_key, 9223372036854775807) AS current_budget_tokens,
       CASE WHEN p.shards_ok > 0 THEN list_transform(p.cur_keys, lambda x: nullif(x, 9223372036854775807)) END
           AS current_budgets,
       p.current_policy, nullif(p.rec_key, 9223372036854775807) AS recommended_budget_tokens,
       nullif(p.rec_min, 9223372036854775807) AS recommended_min_tokens,
       nullif(p.rec_max, 9223372036854775807) AS recommended_max_tokens,
       p.shards_differing, p.predicted_goodput_current_rps, p.predicted_goodput_recommended_rps,
       p.predicted_goodput_recommended_rps - p.predicted_goodput_current_rps AS predicted_gain_rps, p.placement,
       CASE WHEN p.shards_ok > 0 THEN p.rec_key <> c.cur_key END AS differs
FROM p LEFT JOIN cur c ON c.pool = p.pool AND c.k = 1
ORDER BY differs DESC NULLS LAST, p.pool;
