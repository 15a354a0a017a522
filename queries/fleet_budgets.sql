-- Per pool: the chunked-prefill budget it runs against the one its own data recommends (`lake_recommendations`,
-- one row per shard). Replicas of a pool can disagree: the pool's current budget is the one most of its
-- recommended shards ran with (ties: the smaller), all values seen are listed; its recommended budget is the
-- median of its shards' recommendations taken from the values they recommended (quantile_disc, ties low), with
-- their range. Only shards whose recommendation is `ok` count. A pool is flagged (`differs`) when the two differ;
-- an unchunked current budget (NULL) differs from any recommended one.
-- @column pool                              VARCHAR  The pool.
-- @column shards                            BIGINT   Shards of the pool with a recommendation row.
-- @column shards_ok                         BIGINT   Shards whose recommendation is `ok` (the ones that count).
-- @column current_budget_tokens             BIGINT   The pool's current budget, tokens (NULL: unchunked or unknown).
-- @column current_budgets                   BIGINT[] Distinct current budgets its shards ran with, ascending (NULL: unchunked).
-- @column current_policy                    VARCHAR  The scheduling policy most of its shards ran.
-- @column recommended_budget_tokens         BIGINT   The pool's recommended budget, tokens (NULL when no shard is `ok`).
-- @column recommended_min_tokens            BIGINT   Smallest budget a shard of the pool recommended, tokens.
-- @column recommended_max_tokens            BIGINT   Largest budget a shard of the pool recommended, tokens.
-- @column shards_differing                  BIGINT   `ok` shards whose own recommendation differs from their own budget.
-- @column predicted_goodput_current_rps     DOUBLE   Sum over `ok` shards of the predicted goodput at their current budget, requests per second.
-- @column predicted_goodput_recommended_rps DOUBLE   Sum over `ok` shards of the predicted goodput at their recommended budget, requests per second.
-- @column placement                         VARCHAR  The placement most of its shards were recommended (`aggregated` or `disaggregated`).
-- @column differs                           BOOLEAN  The recommended budget differs from the current one (NULL when no shard is `ok`).
CREATE OR REPLACE TEMP VIEW fleet_budgets AS
WITH r AS (SELECT *, status = 'ok' AS ok FROM lake_recommendations),
cur AS (
    SELECT pool, current_budget_tokens AS budget, count(*) AS n,
           row_number() OVER (PARTITION BY pool ORDER BY count(*) DESC, current_budget_tokens NULLS FIRST) AS k
    FROM r WHERE ok GROUP BY pool, current_budget_tokens),
p AS (
    SELECT pool, count(*) AS shards, count(*) FILTER (WHERE ok) AS shards_ok,
           list_sort(list_distinct(list(CAST(current_budget_tokens AS BIGINT)) FILTER (WHERE ok))) AS current_budgets,
           mode(policy) FILTER (WHERE ok) AS current_policy,
           CAST(quantile_disc(recommended_budget_tokens, 0.5) FILTER (WHERE ok) AS BIGINT) AS recommended_budget_tokens,
           CAST(min(recommended_budget_tokens) FILTER (WHERE ok) AS BIGINT) AS recommended_min_tokens,
           CAST(max(recommended_budget_tokens) FILTER (WHERE ok) AS BIGINT) AS recommended_max_tokens,
           count(*) FILTER (WHERE ok AND recommended_budget_tokens IS DISTINCT FROM current_budget_tokens)
               AS shards_differing,
           sum(predicted_goodput_current_rps) FILTER (WHERE ok) AS predicted_goodput_current_rps,
           sum(predicted_goodput_recommended_rps) FILTER (WHERE ok) AS predicted_goodput_recommended_rps,
           mode(placement) FILTER (WHERE ok) AS placement
    FROM r GROUP BY pool)
SELECT p.pool, p.shards, p.shards_ok, CAST(c.budget AS BIGINT) AS current_budget_tokens, p.current_budgets,
       p.current_policy, p.recommended_budget_tokens, p.recommended_min_tokens, p.recommended_max_tokens,
       p.shards_differing, p.predicted_goodput_current_rps, p.predicted_goodput_recommended_rps, p.placement,
       CASE WHEN p.shards_ok = 0 THEN NULL
            ELSE p.recommended_budget_tokens IS DISTINCT FROM CAST(c.budget AS BIGINT) END AS differs
FROM p LEFT JOIN cur c ON c.pool = p.pool AND c.k = 1
ORDER BY differs DESC NULLS LAST, p.pool;
