-- The sum of a DOUBLE column in a fixed order (its values, ascending), so that the same rows always give the same
-- bits: DuckDB's parallel sum adds its partial sums in the order threads finish, and floating-point addition is
-- not associative, so a plain sum of goodputs changed in the last digit from one rollup to the next (and between a
-- lake read from a folder and the same lake read as a URI). The rows of a fleet rollup are few (one per shard or
-- window), so the sort costs nothing measurable.
-- @param x  The value to add up, as DOUBLE (NULLs are skipped, as by sum).
-- @returns DOUBLE  sum(x), added in ascending order of x.
CREATE OR REPLACE TEMP MACRO _fleet_sum(x) AS sum(CAST(x AS DOUBLE) ORDER BY CAST(x AS DOUBLE));
