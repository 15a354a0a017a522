"""Does the fitted step model explain real captured step times? One CPU capture per policy, fitted through the store.

For each policy: a `stallscope capture` run (in-process, torch.profiler on), its three files ingested into a fresh
store, the recommendation's observations (view recommend_step_obs) fitted with recommend.fit, and printed:
held-out MAPE, p99 coverage, the tile, every coefficient with whether it is identified (and why not), and
- the engine-truth check: how many steps the store rebuilt with exactly the engine's own decode count, tokens,
  KV tokens read and prefill attention units (StepRecord), and how far the trace's step time is from the
  engine's perf_counter window;
- the machine's share: the share of the steps' wall time the engine thread was on a core (a trace's step time is
  wall time: on an oversubscribed machine it holds the time the OS ran another process, which no model of the
  batch explains), the same fit on the engine's own features with each step's thread CPU time (what the model
  explains of the compute itself), the noise of back-to-back steps of the same composition, and the minor page
  faults per step;
- the machine's speed: a fixed probe (numpy, invisible to the profiler) runs after every step; every fit is
  repeated with each step time divided by the probe's local median over 5 steps (its median = 1), and the
  residuals' lag-1 autocorrelation is printed with each fit (a static step model leaves ~0 when the machine keeps
  its speed).

    .venv/bin/python bench/bench_capture_fit.py                       # chunked:256 and unchunked, 25 s each
    .venv/bin/python bench/bench_capture_fit.py --duration 20 --policies chunked:64 --json out.json

Run it on a quiet machine (on-core share near 1) to see what the model explains of the trace's step times.

Why a static model misses: the core's speed drifts, not the capture. On this 2-core KVM guest, a fixed 2-decode
step timed 3000 times in one process with the profiler off, no engine, the same slots and contexts, no page
faults (0.02 per step) and a flat RSS drifted 3.6 -> 6.6 ms of thread CPU between tenths; with the profiler on
(record_shapes, 505 events per step, 1.5 M in all) it drifted 9.0 -> 6.0 ms (down, not up with the event
count) while a 256^3 GEMM (L2-resident) and a 31 MB weight stream timed in the same thread between the steps
moved with it (correlation of the tenth medians 0.93 and 0.997; decode / GEMM ratio 2.23-2.44 over the last
nine tenths). One 50-step block to the next, the GEMM alone went 2.37 -> 5.06 ms with the guest's other vCPU
busy throughout. Denormals (torch.set_flush_denormal): no change. Page faults are the profiler's own event
storage (~110-210 per decode step with record_shapes, ~27 without, RSS +450 KB per decode step) and >32 MB
prefill temporaries: ~2 us each, a few % of a step, steady per composition; glibc malloc tuning (no trim, mmap
threshold 32 MB) left them where they were in a fresh process.

Measured (2-core shared VM, torch 2.13 CPU, 1 thread, 25 s per policy, load 10-15 from other helpers' work, so
the steps were on a core only 28-41 % of their wall time): store fit MAPE 0.787 chunked:256 / 0.518 unchunked
(coverage 0.965 / 0.995: wall time here is mostly time off the core); the engine's thread CPU time MAPE 0.156 /
0.135 (lag-1 0.84 / 0.81), divided by the machine's speed 0.096 / 0.077 (lag-1 0.55 / 0.57); the store equal
to the engine in 100 % of the steps' decode counts, tokens and KV reads. Earlier, on a quiet guest: store fit
0.136-0.185 chunked:256, 0.251-0.259 unchunked (coverage 0.976-0.992).

What the model lacks on CPU: a decode step's cost is concave in its decode count. Fixed compositions timed
round-robin (drift hits all alike), KV read held at ~3200 tokens: 6.5 ms at 1 decode, 7.3 at 2, 8.0 at 4, 9.5
at 8, 10.9 at 16 (the GEMMs alone are linear, ~0.13 ms per row), so the linear per-decode term is off by -6 %
at 1, +11 % at 8 and -7 % at 16, the pattern the captures' residuals show. An extra concave term (log1p of the
decode count) took the unchunked thread-CPU MAPE (speed-normalised) 0.114 -> 0.097 and chunked:256 nothing;
recommend.fit has no such term (its token staircase is flat over 1-16 decode tokens) and was left unchanged.
"""
from __future__ import annotations

import argparse
import json
import resource
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

INCIDENT = "long-prompts:count=4,tokens=3072,spacing=1"


def _loadavg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _features(res):
    S = res.engine.steps
    return {"wall_ms": np.array([(s.end_ns - s.start_ns) / 1e6 for s in S]),
            "cpu_ms": np.array([s.cpu_ns / 1e6 for s in S]),
            "probe_ms": np.array([s.probe_ns / 1e6 for s in S]),
            "minflt": np.array([s.minflt for s in S], float),
            "dec": np.array([s.gen_reqs for s in S], float),
            "tok": np.array([s.ctx_tokens + s.gen_reqs for s in S], float),
            "kv": np.array([s.kv_read for s in S], float),
            "att": np.array([s.attn_work for s in S], float),
            "pf": np.array([s.ctx_tokens > 0 for s in S])}


def _model_dict(m) -> dict:
    return {"mape": m.mape, "p99_coverage": m.p99_coverage, "tile": m.tile, "steps": m.steps_used,
            "coefficients": m.coefficients(),
            "identified": {k: v["identified"] for k, v in m.identified.items()},
            "reasons": {k: v["reason"] for k, v in m.identified.items() if not v["identified"]}}


def _speed(probe_ms: np.ndarray, k: int = 5) -> np.ndarray | None:
    """The machine's speed factor at each step: the probe's rolling median over k steps / its median (None when the
    capture ran without the probe)."""
    if len(probe_ms) < k or not (probe_ms > 0).all():
        return None
    h = k // 2
    w = np.lib.stride_tricks.sliding_window_view(np.pad(probe_ms, h, mode="edge"), k)
    s = np.median(w, axis=1)
    return s / np.median(s)


def _lag1(m, obs) -> float:
    """Lag-1 autocorrelation of the log ratio residuals over the steps in time order (0: independent noise)."""
    r = np.log(obs.step_ms / np.maximum(m.predict(obs.tokens, obs.kv_read, obs.attn_units, obs.decode_seqs), 1e-9))
    return float(np.corrcoef(r[1:], r[:-1])[0, 1]) if len(r) > 2 else float("nan")


def _pair_noise(t: np.ndarray, f: dict) -> tuple[int, float]:
    """Mean |t_i / t_{i-1} - 1| / sqrt(2) over back-to-back decode-only steps of the same composition."""
    dec, kv, pf = f["dec"], f["kv"], f["pf"]
    ok = (~pf[1:]) & (~pf[:-1]) & (dec[1:] == dec[:-1]) & (np.abs(kv[1:] - kv[:-1]) <= 0.02 * kv[:-1] + dec[:-1] + 2)
    if not ok.any():
        return 0, float("nan")
    r = t[1:][ok] / t[:-1][ok]
    return int(ok.sum()), float(np.mean(np.abs(r - 1)) / np.sqrt(2))


def run_policy(policy: str, budget: int | None, duration: float, out: Path, seed: int, threads: int,
               probe: bool = True) -> dict:
    import stallscope
    from stallscope.analyze import Options, parse_slo, prepare
    from stallscope.capture.runner import CaptureSpec, capture
    from stallscope.recommend import observe
    from stallscope.recommend.fit import Observations, fit

    load0 = _loadavg()
    w0, c0 = time.perf_counter(), time.process_time()
    res = capture(CaptureSpec(policy=policy, budget=budget, duration_s=duration, incident=INCIDENT, seed=seed,
                              threads=threads, speed_probe=probe), out)
    cap_wall, cap_cpu = time.perf_counter() - w0, time.process_time() - c0
    load1 = _loadavg()
    store = stallscope.open(":memory:")
    rep = store.ingest([out])
    prepare(store.con, Options(slo=parse_slo("ttft=1s,itl=100ms")))
    obs, info = observe.step_observations(store.con)
    m = fit(obs)
    f = _features(res)
    rows = store.con.sql("SELECT decode_seqs, tokens, kv_tokens_read, attention_units, step_ms FROM recommend_step_obs "
                         "ORDER BY source_id, step_index").fetchnumpy()
    n = len(f["dec"])
    truth = {}
    if len(rows["step_ms"]) == n:
        for name, col, ref in (("decode_seqs", "decode_seqs", f["dec"]), ("tokens", "tokens", f["tok"]),
                               ("kv_tokens_read", "kv_tokens_read", f["kv"]),
                               ("attention_units", "attention_units", f["att"])):
            got = np.asarray(np.ma.filled(rows[col].astype(float), np.nan))
            truth[name] = float(np.mean(np.abs(got - ref) <= 1e-6 * np.maximum(ref, 1)))
        st = np.asarray(rows["step_ms"], float)
        truth["step_ms_median_rel_diff"] = float(np.median(np.abs(st / f["wall_ms"] - 1)))
    else:
        truth["note"] = f"the store has {len(rows['step_ms'])} observed steps, the engine ran {n}"
    own_obs = Observations(f["cpu_ms"], f["dec"], f["tok"], f["kv"], f["att"], f["pf"])
    own = fit(own_obs)
    pairs, noise = _pair_noise(f["cpu_ms"], f)
    speed = _speed(f["probe_ms"])
    norm = {}
    if speed is not None and len(obs) == n:
        # the same fits with every step time divided by the machine's speed at that moment
        so, co = replace(obs, step_ms=obs.step_ms / speed), replace(own_obs, step_ms=f["cpu_ms"] / speed)
        ms, mo = fit(so), fit(co)
        tenths = [float(np.median(f["probe_ms"][i])) for i in np.array_split(np.arange(n), 10)]
        norm = {"probe_ms_by_tenth": [round(x, 3) for x in tenths],
                "probe_drift_max_over_min": max(tenths) / min(tenths),
                "store_fit_speed_normalised": {**_model_dict(ms), "lag1": _lag1(ms, so)},
                "thread_cpu_fit_speed_normalised": {**_model_dict(mo), "lag1": _lag1(mo, co)}}
    return {"policy": policy, "budget": res.spec.resolved_budget(), "duration_s": duration,
            "capture": {**res.summary(), "bench_wall_s": round(cap_wall, 1), "bench_cpu_s": round(cap_cpu, 1),
                        "loadavg_1min_before": load0, "loadavg_1min_after": load1},
            "rejects": int(sum(r.rejected for r in rep)),
            "fit": {**_model_dict(m), "lag1": _lag1(m, obs)},
            "observation_bases": {k: info.get(k) for k in ("kv_basis", "composition_basis")},
            "engine_truth_match": truth,
            "machine": {"fit_on_engine_features_thread_cpu": {**_model_dict(own), "lag1": _lag1(own, own_obs)},
                        "same_composition_pairs": pairs, "back_to_back_noise": noise,
                        "on_core_share": float(f["cpu_ms"].sum() / f["wall_ms"].sum()),
                        "minflt_per_step": {"prefill": float(f["minflt"][f["pf"]].mean()) if f["pf"].any() else None,
                                            "decode": float(f["minflt"][~f["pf"]].mean()) if (~f["pf"]).any() else None},
                        "peak_rss_mb_so_far": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                        **norm}}


def _print(r: dict) -> None:
    c, fm, mc = r["capture"], r["fit"], r["machine"]
    print(f"\n== {r['policy']} budget {r['budget']}: {c['steps']} steps, {c['requests']} requests, capture "
          f"{c['bench_wall_s']} s wall / {c['bench_cpu_s']} s CPU, load {c['loadavg_1min_before']} -> "
          f"{c['loadavg_1min_after']}, on a core {mc['on_core_share']:.0%} of the step wall time, rejects {r['rejects']}")
    print(f"   held-out MAPE {fm['mape']:.3f}   p99 coverage {fm['p99_coverage']:.3f}   tile {fm['tile']}")
    for k, v in fm["coefficients"].items():
        why = "" if fm["identified"][k] else f"   (not identified: {fm['reasons'][k]})"
        print(f"   {k:24s} {v:12.6g} {'identified' if fm['identified'][k] else ''}{why}")
    print(f"   store vs engine truth (share of steps exactly equal): {r['engine_truth_match']}")
    own = mc["fit_on_engine_features_thread_cpu"]
    print(f"   residual lag-1 autocorrelation {fm['lag1']:.2f}; minor faults per step {mc['minflt_per_step']} "
          f"; peak RSS so far {mc['peak_rss_mb_so_far']:.0f} MB")
    print(f"   engine's own features, thread CPU time: MAPE {own['mape']:.3f}, coverage {own['p99_coverage']:.3f}, "
          f"lag-1 {own['lag1']:.2f}; back-to-back noise {mc['back_to_back_noise']:.3f} "
          f"({mc['same_composition_pairs']} pairs)")
    if "probe_ms_by_tenth" in mc:
        sn, cn = mc["store_fit_speed_normalised"], mc["thread_cpu_fit_speed_normalised"]
        print(f"   machine speed probe by tenth (ms) {mc['probe_ms_by_tenth']} "
              f"(max/min {mc['probe_drift_max_over_min']:.2f})")
        print(f"   divided by the machine's speed: store fit MAPE {sn['mape']:.3f}, coverage {sn['p99_coverage']:.3f}, "
              f"lag-1 {sn['lag1']:.2f}; thread CPU MAPE {cn['mape']:.3f}, coverage {cn['p99_coverage']:.3f}, "
              f"lag-1 {cn['lag1']:.2f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=25.0, help="seconds of arrivals per capture")
    ap.add_argument("--policies", default="chunked:256,unchunked",
                    help="comma list of POLICY[:BUDGET] (default chunked:256,unchunked)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads of the capture")
    ap.add_argument("--out", type=Path, help="keep the captures here (default: a temporary directory)")
    ap.add_argument("--json", type=Path, help="write the results as JSON")
    ap.add_argument("--no-probe", action="store_true", help="run no machine-speed probe between the steps")
    a = ap.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        base = a.out or Path(tmp)
        for item in a.policies.split(","):
            pol, _, b = item.partition(":")
            r = run_policy(pol, int(b) if b else None, a.duration, base / item.replace(":", "-"), a.seed, a.threads,
                           probe=not a.no_probe)
            _print(r)
            results.append(r)
    if a.json:
        a.json.write_text(json.dumps(results, indent=1, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
