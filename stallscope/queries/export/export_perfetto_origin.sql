-- The Perfetto export's time origin: the earliest instant it exports (kernels, memory ops, GPU annotations, CPU
-- ops, runtime calls, engine steps, streamed-chunk gaps, inferred prefill windows); every event's `ts` is
-- microseconds since this instant, because epoch microseconds with nanosecond fractions do not fit a double.
-- 0 for an empty store.
-- @depends step_phase, client_gaps, request_prefill_windows
-- @column t0          BIGINT   The origin, ns since Unix epoch, UTC (`otherData.stallscope_origin_ns`).
CREATE OR REPLACE TEMP VIEW export_perfetto_origin AS
SELECT coalesce(least(
    (SELECT min(start_ns) FROM gpu_kernels), (SELECT min(start_ns) FROM cpu_ops),
    (SELECT min(start_ns) FROM runtime_calls), (SELECT min(start_ns) FROM gpu_memops),
    (SELECT min(start_ns) FROM gpu_annotations), (SELECT min(start_ns) FROM step_phase),
    (SELECT min(start_ns) FROM client_gaps), (SELECT min(window_start_ns) FROM request_prefill_windows)), 0) AS t0;
