-- The cumulative prefill work curve of each GPU stream: kernels with prefill time, in start order, with the
-- prefill time of all earlier kernels on the same stream. The prefill time a stream spent inside any window
-- [t0, t1] is F(t1) - F(t0), with F(t) = cum_before_ns + prefill_ns x clamp((t - start) / dur, 0, 1) for
-- the last kernel starting at or before t: exact at kernel granularity, found by one ASOF join per bound
-- instead of joining every gap with every kernel.
-- @depends kernel_phase
-- @column source_id       INTEGER  The trace.
-- @column stream          INTEGER  GPU stream id.
-- @column event_id        BIGINT   The kernel.
-- @column step_id         BIGINT   The step that launched it.
-- @column start_ns        BIGINT   Kernel start, ns since Unix epoch, UTC.
-- @column end_ns          BIGINT   Kernel end, ns since Unix epoch, UTC.
-- @column prefill_ns      BIGINT   The kernel's prefill time, ns.
-- @column cum_before_ns   BIGINT   Prefill time of earlier kernels on the stream, ns.
CREATE OR REPLACE TEMP VIEW _prefill_curve AS
SELECT p.source_id, k.stream, p.event_id, p.step_id, p.start_ns, p.end_ns, p.prefill_ns,
       CAST(coalesce(sum(p.prefill_ns) OVER (PARTITION BY p.source_id, k.stream ORDER BY p.start_ns, p.event_id
                                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS BIGINT)
           AS cum_before_ns
FROM kernel_phase p
JOIN gpu_kernels k ON k.source_id = p.source_id AND k.event_id = p.event_id
WHERE p.prefill_ns > 0;
