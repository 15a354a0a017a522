"""Recommendation speed, side by side with one `analyze` of the same store (the ratio is the figure to keep).

Two workloads (issue 10: a 40 s / 250-request incident in under 20 s, a 1-hour / 70k-request one in under 3 minutes,
on 2 cores):

- `incident`: `stallscope simulate` writes a 40 s incident (trace, benchmark file, server log); it is ingested
  into a store file, then `analyze` and `recommend` each run on a fresh connection to it.
- `hour`: a simulated hour at 19.5 req/s. An hour of Kineto trace would be gigabytes, so the store is written
  from the simulated run the way the parsers would write it: one `steps` row per iteration with the detailed
  annotation's composition sums, the benchmark's client `requests` and every `token_gaps` row.

Prints wall and CPU seconds of each phase, the recommend/analyze ratio and peak RSS. The machine may be shared:
read CPU seconds next to wall time.

    .venv/bin/python bench/bench_recommend.py [--workload incident|hour|both] [--replays 3]

Measured 2026-12-01 on the 2-core development VM while five other sessions shared it (load average 8-12, so wall
time was 2-6x CPU time; CPU seconds are the comparable figure), 3 replays per budget, 13 budgets:
- incident (261 requests, 40 s): recommend 2.3 s CPU / 6.0 s wall; analyze 1.2 s CPU; ratio 2.0x.
- 5 min at 19.5 req/s (5,946 requests, 21,242 steps, 1.5M gaps): recommend 8.8 s CPU; analyze 27.9 s CPU; 0.32x.
- 1 hour at 19.5 req/s (~70k requests, ~250k steps, ~18M gaps): recommend 61.3 s CPU (371 s wall under that
  load); analyze had used more than 160 s CPU without finishing when the run was stopped (ratio < 0.38x).
"""
from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SLO = "ttft=1s,itl=100ms"


def _clock():
    return time.perf_counter(), time.process_time()


def _since(t):
    return time.perf_counter() - t[0], time.process_time() - t[1]


def _say(msg: str) -> None:
    print(msg, flush=True)


def _run_both(db: Path, replays: int) -> dict:
    import stallscope
    from stallscope.analyze import Options as AOptions, analyze, parse_slo
    from stallscope.recommend import Options, recommend

    slo = parse_slo(SLO)
    # The recommendation first: on a long store the analysis takes much longer, and its figure comes second.
    with stallscope.open(db, read_only=True) as s:
        t = _clock()
        rec = recommend(s.con, Options(slo=slo, replays=replays))
        r = _since(t)
    _say(f"  (recommend done: wall {r[0]:.1f} s, cpu {r[1]:.1f} s: {rec['setting']})")
    with stallscope.open(db, read_only=True) as s:
        t = _clock()
        analyze(s.con, AOptions(slo=slo))
        a = _since(t)
    _say(f"  (analyze done: wall {a[0]:.1f} s, cpu {a[1]:.1f} s)")
    return {"analyze": a, "recommend": r, "rec": rec}


def incident(tmp: Path, replays: int) -> dict:
    out = tmp / "incident"
    subprocess.run([sys.executable, "-m", "stallscope.cli", "simulate", "--out", str(out), "--rate", "6.25",
                    "--duration", "40", "--incident", "long-prompts", "--seed", "3"], check=True, capture_output=True)
    import stallscope

    db = tmp / "incident.duckdb"
    t = _clock()
    with stallscope.open(db) as s:
        s.ingest([out / "trace.pt.trace.json.gz", out / "bench_serve.json", out / "vllm_server.log"])
    ing = _since(t)
    res = _run_both(db, replays)
    res["ingest"] = ing
    return res


def hour(tmp: Path, replays: int, duration_s: float = 3600.0) -> dict:
    import pyarrow as pa

    import stallscope
    from stallscope.simulate.engine import EngineConfig, simulate
    from stallscope.simulate.stepmodel import get_preset
    from stallscope.simulate.workload import LengthDist, synthesize

    P = get_preset("llama8b-h100")
    t = _clock()
    wl = synthesize(np.random.default_rng(5), rate=19.5, duration_s=duration_s, prompt=LengthDist(512, 0.6, 2, 16000),
                    output=LengthDist(256, 0.4, 2, 4000))
    sim = simulate(wl, P, EngineConfig("chunked", 2048), 5)
    req, _, step = sim.token_steps()
    base = 1_743_523_200_000_000_000
    tok = sim.end_ns[step] + base
    # Composition sums of every step, as the detailed execute_context annotation carries them.
    n = sim.n_steps
    sq = np.bincount(sim.ch_step, weights=sim.ch_tokens, minlength=n)
    sqsq = np.bincount(sim.ch_step, weights=sim.ch_tokens.astype(float) ** 2, minlength=n)
    sqsk = np.bincount(sim.ch_step, weights=sim.ch_tokens * (sim.ch_tokens + sim.ch_ctx).astype(float), minlength=n)
    nc = np.bincount(sim.ch_step, minlength=n)
    phase = np.where(sim.kind == 0, "decode", np.where(sim.kind == 1, "prefill", "mixed"))
    steps = pa.table({
        "source_id": np.full(n, 1, np.int32), "step_id": 1_000_000_000 + np.arange(n, dtype=np.int64),
        "step_index": np.arange(n, dtype=np.int32), "marker": np.full(n, "vllm_execute_model"), "phase": phase,
        "cpu_start_ns": sim.start_ns + base, "cpu_end_ns": sim.end_ns + base, "cpu_dur_ns": sim.end_ns - sim.start_ns,
        "ctx_reqs": nc.astype(np.int32), "ctx_tokens": sq.astype(np.int64), "gen_reqs": sim.n_decode,
        "gen_tokens": sim.n_decode.astype(np.int64), "total_tokens": (sq + sim.n_decode).astype(np.int64),
        "ctx_sum_qq": sqsq, "ctx_sum_qkv": sqsk, "gen_sum_kv": sim.kv_read, "kernel_count": np.zeros(n, np.int64)})
    first = np.searchsorted(req, np.arange(len(wl)))
    last = np.searchsorted(req, np.arange(len(wl)), side="right") - 1
    arr = wl.arrival_ns + base
    requests = pa.table({
        "source_id": np.full(len(wl), 2, np.int32), "request_id": np.arange(len(wl)).astype(str),
        "request_index": np.arange(len(wl), dtype=np.int32), "engine": np.full(len(wl), "vllm_bench"),
        "kind": np.full(len(wl), "client"), "status": np.full(len(wl), "ok"), "arrival_ns": arr,
        "first_token_ns": tok[first], "finish_ns": tok[last], "prompt_tokens": wl.prompt_len.astype(np.int32),
        "output_tokens": wl.output_len.astype(np.int32), "ttft_ns": tok[first] - arr, "e2e_latency_ns": tok[last] - arr,
        "line_no": np.ones(len(wl), np.int64)})
    same = req[1:] == req[:-1]
    gi = np.arange(len(req)) - first[req]
    gaps = pa.table({"source_id": np.full(int(same.sum()), 2, np.int32), "request_id": req[1:][same].astype(str),
                     "gap_index": (gi[1:][same] - 1).astype(np.int32), "gap_ns": np.diff(tok)[same],
                     "end_ns": tok[1:][same]})
    db = tmp / "hour.duckdb"
    with stallscope.open(db) as s:
        s.con.execute("INSERT INTO sources (source_id, path, format) VALUES (1, 'sim-trace', 'kineto_trace'), "
                      "(2, 'sim-bench', 'vllm_bench')")
        for name, tbl in (("steps", steps), ("requests", requests), ("token_gaps", gaps)):
            s.con.register("_t", tbl)
            s.con.execute(f"INSERT INTO {name} BY NAME SELECT * FROM _t")
            s.con.unregister("_t")
        s.con.execute("INSERT INTO engine_config (source_id, key, value, value_num, origin) VALUES "
                      "(1, 'max_num_batched_tokens', '2048', 2048, 'bench'), (1, 'engine', 'vllm', NULL, 'bench'), "
                      "(1, 'kv_cache_tokens', '430000', 430000, 'bench'), "
                      "(1, 'model', 'meta-llama/Llama-3.1-8B-Instruct', NULL, 'bench')")
    build = _since(t)
    _say(f"  (store built: wall {build[0]:.1f} s, cpu {build[1]:.1f} s)")
    res = _run_both(db, replays)
    res["build"] = build
    res["requests"], res["steps"], res["gaps"] = len(wl), n, gaps.num_rows
    return res


def _report(name: str, r: dict, limit: float) -> bool:
    a, rc = r["analyze"], r["recommend"]
    rec = r["rec"]
    for k in ("ingest", "build"):
        if k in r:
            print(f"  {k:<10} wall {r[k][0]:7.2f} s   cpu {r[k][1]:7.2f} s")
    print(f"  analyze    wall {a[0]:7.2f} s   cpu {a[1]:7.2f} s")
    print(f"  recommend  wall {rc[0]:7.2f} s   cpu {rc[1]:7.2f} s   (limit {limit:g} s)")
    print(f"  ratio recommend / analyze: wall {rc[0] / a[0]:.2f}x, cpu {rc[1] / a[1]:.2f}x")
    print(f"  answer: {rec['setting']}  goodput {rec['goodput_rps']} req/s over "
          f"{rec.get('replay', {}).get('requests')} requests; missing: {rec['missing_evidence']}")
    return rc[0] <= limit


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=("incident", "hour", "both"), default="both")
    ap.add_argument("--replays", type=int, default=3)
    ap.add_argument("--hour-duration", type=float, default=3600.0, help="Seconds of arrivals of the `hour` run.")
    a = ap.parse_args(argv)
    ok = True
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if a.workload in ("incident", "both"):
            print("incident: 40 s, ~250 requests, trace + benchmark + server log")
            ok &= _report("incident", incident(tmp, a.replays), 20.0)
        if a.workload in ("hour", "both"):
            r = hour(tmp, a.replays, a.hour_duration)
            print(f"hour: {r['requests']:,} requests, {r['steps']:,} steps, {r['gaps']:,} token gaps")
            ok &= _report("hour", r, 180.0 * a.hour_duration / 3600)
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
