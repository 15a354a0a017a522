"""Attribution at scale: 1M client token gaps against 10M GPU kernels, timed with peak memory.

Builds (once, cached under bench/out/) a store with the shape of a long traced serving run: 11,000 engine
steps of 1,000 kernels each (11M kernels: FA3-style attention, GEMMs, collectives, elementwise). Every tenth
step is a mixed step that prefills one new request's 2,048-token prompt next to 100 running decodes; each
request then streams 1,001 tokens whose chunk gaps follow the step ends: 1,000 requests, 1M gaps, and a
spike (150 ms against 25 ms) in every tenth gap, caused by the request whose prompt that mixed step ran. Then runs the whole analysis (`stallscope analyze --db`,
with an ITL SLO) in a fresh process and prints wall time, peak RSS and what it found.

Target (issue: stall forensics): at most 60 s and 4 GB on 2 cores.

Usage: python bench/bench_attribution.py [--steps 11000] [--kernels-per-step 1000] [--requests 1000]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"

T0 = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z

BUILD = """
CREATE TABLE _st AS
SELECT i AS k,
       CASE WHEN i % 10 = 5 THEN 150000000 ELSE 25000000 END AS dur_ns
FROM range({steps}) t(i);
CREATE TABLE _st2 AS
SELECT k, dur_ns, {t0} + sum(dur_ns + 300000) OVER (ORDER BY k ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
          AS start_ns
FROM _st;
UPDATE _st2 SET start_ns = {t0} WHERE start_ns IS NULL;
INSERT INTO sources (source_id, path, format, parser, parser_version, sha256, size_bytes, records_parsed,
                     records_skipped, records_rejected, clock_offset_ns, clock_method)
VALUES (1, 'synthetic-trace', 'kineto_trace', 'kineto', 'bench', 'x1', 0, 0, 0, 0, 0, 'trace_base_time'),
       (2, 'synthetic-bench', 'vllm_bench_json', 'bench_json', 'bench', 'x2', 0, 0, 0, 0, 0, 'matched_trace_steps');
INSERT INTO trace_meta (source_id, schema_version, base_time_ns, ts_mode, vendor, rank, world_size, events,
                        truncated, start_ns, end_ns)
SELECT 1, 1, {t0}, 'relative_to_base', 'nvidia', 0, 1, {steps} * {kps}, false, min(start_ns),
       max(start_ns + dur_ns) FROM _st2;
INSERT INTO steps (source_id, rank, step_id, step_index, marker, marker_name, annotation, annotation_kind, phase,
                   cpu_start_ns, cpu_end_ns, cpu_dur_ns, gpu_start_ns, gpu_end_ns, gpu_dur_ns, gpu_busy_ns,
                   kernel_count, graph_launches, ctx_reqs, ctx_tokens, gen_reqs, gen_tokens, total_tokens)
SELECT 1, 0, 1000000000 + k, k, 'vllm_execute_model', 'gpu_model_runner.py(1): execute_model',
       CASE WHEN k % 10 = 5 THEN 'execute_context_1(2048)_generation_100(100)'
            ELSE 'execute_context_0(0)_generation_100(100)' END, 'context_generation',
       CASE WHEN k % 10 = 5 THEN 'mixed' ELSE 'decode' END,
       start_ns - 200000, start_ns + dur_ns - 100000, dur_ns + 100000, start_ns, start_ns + dur_ns, dur_ns, dur_ns,
       {kps}, 0, CASE WHEN k % 10 = 5 THEN 1 ELSE 0 END, CASE WHEN k % 10 = 5 THEN 2048 ELSE 0 END, 100, 100,
       CASE WHEN k % 10 = 5 THEN 2148 ELSE 100 END
FROM _st2;
INSERT INTO gpu_kernels (source_id, event_id, rank, device, stream, start_ns, end_ns, dur_ns, name, correlation,
                         launch_event_id, step_id)
SELECT 1, s.k * {kps} + j, 0, 0, 7,
       s.start_ns + j * (s.dur_ns // {kps}), s.start_ns + (j + 1) * (s.dur_ns // {kps}), s.dur_ns // {kps},
       CASE j % 8 WHEN 0 THEN 'void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<>>>(Params)'
                  WHEN 1 THEN 'sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1'
                  WHEN 2 THEN 'nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNN'
                  WHEN 3 THEN 'void vllm::cross_device_reduce_1stage<__nv_bfloat16, 4>(...)'
                  WHEN 4 THEN 'void vllm::rms_norm_kernel<c10::BFloat16>(...)'
                  WHEN 5 THEN 'void vllm::act_and_mul_kernel<c10::BFloat16>(...)'
                  WHEN 6 THEN 'void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16>(...)'
                  ELSE 'void vllm::rotary_embedding_kernel<c10::BFloat16, true>(...)' END,
       s.k * {kps} + j, s.k * {kps} + j, 1000000000 + s.k
FROM _st2 s, range({kps}) t(j);
-- Request r is prefilled by mixed step 10r + 5, then decodes in the next {out} steps.
CREATE TABLE _rq AS SELECT r, 10 * r + 5 AS k0 FROM range({reqs}) t(r);
INSERT INTO requests (source_id, line_no, request_id, request_index, server_request_id, engine, kind, arrival_ns,
                      first_token_ns, finish_ns, prompt_tokens, output_tokens, ttft_ns, e2e_latency_ns, status)
SELECT 2, 1, CAST(r AS VARCHAR), r, NULL, 'vllm_bench', 'client', a.start_ns - 50000000,
       a.start_ns + a.dur_ns + 1000000, b.start_ns + b.dur_ns + 1000000, 2048, {out} + 1,
       a.dur_ns + 51000000, (b.start_ns + b.dur_ns + 1000000) - (a.start_ns - 50000000), 'ok'
FROM _rq JOIN _st2 a ON a.k = _rq.k0 JOIN _st2 b ON b.k = _rq.k0 + {out};
INSERT INTO token_gaps (source_id, request_id, gap_index, gap_ns, end_ns)
SELECT 2, CAST(q.r AS VARCHAR), s.k - q.k0 - 1,
       (s.start_ns + s.dur_ns) - (p.start_ns + p.dur_ns), s.start_ns + s.dur_ns + 1000000
FROM _rq q JOIN _st2 s ON s.k > q.k0 AND s.k <= q.k0 + {out} JOIN _st2 p ON p.k = s.k - 1;
INSERT INTO engine_config (source_id, line_no, key, value, value_num, origin)
SELECT 2, 1, 'duration', CAST(duration_s AS VARCHAR), duration_s, 'bench_summary' FROM
  (SELECT (max(finish_ns) - min(arrival_ns)) / 1e9 AS duration_s FROM requests);
DROP TABLE _st; DROP TABLE _st2; DROP TABLE _rq;
"""

RUN = """
import json, sys, time
import stallscope
from stallscope.analyze import Options, Slo, analyze
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
s = stallscope.open(sys.argv[1], read_only=True)
t = time.perf_counter()
r = analyze(s.con, Options(slo=Slo(itl_ms=float(sys.argv[2]))))
dt = time.perf_counter() - t
n = lambda q: s.con.execute(q).fetchall()[0][0]
print(json.dumps({"seconds": dt, "peak_rss": hwm(), "spikes": len(r["spikes"]),
                  "with_culprits": sum(1 for x in r["spikes"] if x["culprits"]),
                  "evidence": sorted({x["evidence"] for x in r["spikes"]}),
                  "goodput_rps": r["goodput_rps"], "goodput_lost_rps": r["goodput_lost_rps"]}))
"""


def build(db: Path, steps: int, kps: int, reqs: int, out: int) -> None:
    import stallscope

    t = time.perf_counter()
    with stallscope.open(db) as s:
        for stmt in BUILD.format(t0=T0, steps=steps, kps=kps, reqs=reqs, out=out).split(";\n"):
            if stmt.strip():
                s.con.execute(stmt)
        k = s.con.execute("SELECT count(*) FROM gpu_kernels").fetchall()[0][0]
        g = s.con.execute("SELECT count(*) FROM token_gaps").fetchall()[0][0]
    print(f"built {db.name}: {k:,} kernels, {g:,} token gaps in {time.perf_counter() - t:.1f} s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=11_000)
    ap.add_argument("--kernels-per-step", type=int, default=1_000)
    ap.add_argument("--requests", type=int, default=1_000)
    ap.add_argument("--output-tokens", type=int, default=1_000, help="decode steps per request")
    ap.add_argument("--itl-ms", type=float, default=100.0)
    args = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    if args.steps < 10 * args.requests + args.output_tokens:
        ap.error("--steps must cover every request: steps >= 10 x requests + output tokens")
    db = OUT / f"attr_{args.steps}x{args.kernels_per_step}_{args.requests}x{args.output_tokens}.duckdb"
    if not db.exists():
        build(db, args.steps, args.kernels_per_step, args.requests, args.output_tokens)
    r = subprocess.run([sys.executable, "-c", RUN, str(db), str(args.itl_ms)], capture_output=True, text=True)
    if r.returncode:
        sys.exit(r.stderr.strip().splitlines()[-1])
    res = json.loads(r.stdout.strip().splitlines()[-1])
    print(f"analyze: {res['seconds']:.1f} s, peak RSS {res['peak_rss'] / 1e9:.2f} GB "
          f"(target: <= 60 s, <= 4 GB on 2 cores)")
    print(f"  spikes {res['spikes']:,} ({res['with_culprits']:,} with culprits), evidence {res['evidence']}, "
          f"goodput {res['goodput_rps']:.3f} req/s, lost to interference {res['goodput_lost_rps']:.3f} req/s")
    (OUT / "bench_attribution.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
