-- The phase rule that labels each distinct GPU kernel name: among the rows of `phase_rules` whose pattern
-- matches the name, the one with the lowest priority. Matching runs once per distinct name (hundreds, not
-- millions of rows), and the result joins back to kernels by name.
-- @column name      VARCHAR  Kernel name.
-- @column rule_id   VARCHAR  The winning rule (`phase_rules.rule_id`).
-- @column phase     VARCHAR  `prefill`, `decode` (phase-specific kernels) or `shared` (apportioned by the step's composition).
-- @column work      VARCHAR  `attention`, `gemm`, `comm`, `memory` or `elementwise`: which share apportions a shared kernel.
CREATE OR REPLACE TEMP VIEW _kernel_rule AS
WITH names AS (SELECT DISTINCT name FROM gpu_kernels WHERE name IS NOT NULL)
SELECT n.name,
       arg_min(r.rule_id, (r.priority, r.rule_id)) AS rule_id,
       arg_min(r.phase, (r.priority, r.rule_id)) AS phase,
       arg_min(r.work, (r.priority, r.rule_id)) AS work
FROM names n JOIN phase_rules r ON regexp_matches(n.name, r.pattern)
GROUP BY n.name;
