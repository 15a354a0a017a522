"""Bench: a fleet's Prometheus export (query_range answers, one per replica per line) → ingest → analyze --json.

Generates into /tmp (never committed) what 200 vLLM replicas scraped every 15 s would export: per replica the
metric set the analysis reads (TTFT, ITL, per-request TPOT and iteration-token histograms with vLLM's default buckets,
prompt/generation/success counters: 88 series), cumulative, with a restart in one replica. The span is sized to the
sample budget (default 10M samples: 200 replicas x 88 series x ~570 scrapes, about 2.4 h of 15 s scrapes; a week of
15 s scrapes is 40,320 points per series, so "a week, 200 replicas, ~10M samples" holds only with about one series
per replica: `--hours 168 --series-per-replica` is not offered, the analysis needs the histograms). Times the CLI as a
user runs it (`stallscope ingest`, then `stallscope analyze --json`), each in its own process for its peak RSS,
against a plain polars read of the same export into one row per sample; prints the ratio.

    python bench/bench_metrics.py [--samples 10000000] [--replicas 200] [--step 15] [--keep]
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from stallscope.simulate.emit_metrics import ITER_BUCKETS, ITL_BUCKETS, TTFT_BUCKETS  # noqa: E402

T0 = 1_767_225_600  # 2026-01-01T00:00:00Z
HISTS = (("vllm:time_to_first_token_seconds", TTFT_BUCKETS, 0.25), ("vllm:inter_token_latency_seconds", ITL_BUCKETS,
         0.03), ("vllm:request_time_per_output_token_seconds", ITL_BUCKETS, 0.03),
         ("vllm:iteration_tokens_total", ITER_BUCKETS, 64.0))
N_SERIES = sum(len(b) + 3 for _, b, _ in HISTS) + 3


def _fmt(v: np.ndarray) -> list[str]:
    return [repr(float(x)) if x != int(x) else str(int(x)) for x in v.tolist()]


def replica_answer(rng, r: int, n_pts: int, step: float, restart: bool) -> str:
    """One query_range answer (a JSON line) with the replica's 88 series."""
    ts = [f"{T0 + k * step:.3f}".rstrip("0").rstrip(".") for k in range(n_pts)]
    base = f'"engine":"0","instance":"10.1.{r // 250}.{r % 250}:8000","job":"vllm","model_name":"m"'
    reqs = rng.poisson(3.0 * step, n_pts)
    if restart:
        reqs[n_pts // 2] = 0
    out = []

    def series(name: str, extra: str, cum: np.ndarray) -> None:
        vals = _fmt(cum)
        pts = ",".join(f'[{t},"{v}"]' for t, v in zip(ts, vals))
        out.append(f'{{"metric":{{"__name__":"{name}",{base}{extra}}},"values":[{pts}]}}')

    def cumulative(inc: np.ndarray) -> np.ndarray:
        c = np.cumsum(inc, axis=-1)
        if restart:  # the server restarts at the middle scrape: every cumulative series begins again
            c[..., n_pts // 2:] -= c[..., n_pts // 2 - 1: n_pts // 2]
        return c

    for name, edges, scale in HISTS:
        per = reqs * (40 if "inter_token" in name or "iteration" in name else 1)
        obs_edges = np.asarray(edges, dtype=float)
        share = 1 - np.exp(-obs_edges / scale)  # an exponential latency mix: every bucket fills
        below = np.floor(per[None, :] * share[:, None])
        buckets = cumulative(np.vstack([below, per[None, :]]))
        for le, b in zip([*map(str, edges), "+Inf"], buckets):
            series(name + "_bucket", f',"le":"{le}"', b)
        series(name + "_sum", "", cumulative(per * scale))
        series(name + "_count", "", cumulative(per))
    series("vllm:prompt_tokens_total", "", cumulative(reqs * 800))
    series("vllm:generation_tokens_total", "", cumulative(reqs * 200))
    series("vllm:request_success_total", ',"finished_reason":"length"', cumulative(reqs))
    return '{"status":"success","data":{"resultType":"matrix","result":[' + ",".join(out) + "]}}"


def generate(path: Path, samples: int, replicas: int, step: float) -> int:
    n_pts = max(2, samples // (replicas * N_SERIES))
    rng = np.random.default_rng(7)
    with open(path, "w") as f:
        for r in range(replicas):
            f.write(replica_answer(rng, r, n_pts, step, restart=r == 0) + "\n")
    return n_pts


def timed(cmd: list[str]) -> tuple[float, float, str]:
    """Wall seconds and peak RSS (MB) of a command run in its own process."""
    wrapper = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
               "p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
               "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, "
               "p.returncode); sys.stderr.write(p.stdout[-2000:] + p.stderr[-2000:])")
    p = subprocess.run([sys.executable, "-c", wrapper, *cmd], capture_output=True, text=True)
    secs, rss, rc = p.stdout.split()
    if rc != "0":
        raise SystemExit(f"{' '.join(cmd[:4])} failed:\n{p.stderr}")
    return float(secs), float(rss), p.stderr


POLARS_READ = """
import sys, polars as pl
df = pl.read_ndjson(sys.argv[1]).select(pl.col("data").struct.field("result")).explode("result").unnest("result")
df = df.explode("values").with_columns(pl.col("values").list.get(0).cast(pl.Float64).alias("t"),
                                       pl.col("values").list.get(1).cast(pl.Float64).alias("v")).drop("values")
print(df.height)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=10_000_000)
    ap.add_argument("--replicas", type=int, default=200)
    ap.add_argument("--step", type=float, default=15.0)
    ap.add_argument("--keep", action="store_true", help="keep the generated export and store in /tmp")
    a = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="bench_metrics_"))
    src = d / "fleet_query_range.jsonl"
    t = time.perf_counter()
    n_pts = generate(src, a.samples, a.replicas, a.step)
    total = n_pts * a.replicas * N_SERIES
    print(f"export: {a.replicas} replicas x {N_SERIES} series x {n_pts} scrapes ({n_pts * a.step / 3600:.1f} h of "
          f"{a.step:g} s) = {total:,} samples, {src.stat().st_size / 1e6:.0f} MB, generated in "
          f"{time.perf_counter() - t:.1f} s")
    exe = [sys.executable, "-m", "stallscope.cli"]
    db = d / "store.duckdb"
    t_pl, rss_pl, _ = timed([sys.executable, "-c", POLARS_READ, str(src)])
    t_in, rss_in, _ = timed([*exe, "ingest", str(src), "--db", str(db)])
    t_an, rss_an, _ = timed([*exe, "analyze", "--db", str(db), "--slo", "ttft=500ms,tpot=50ms,itl=200ms",
                             "--json", str(d / "analysis.json")])
    m = json.loads((d / "analysis.json").read_text())["metrics"]
    print(f"polars read (one row per sample): {t_pl:6.1f} s  peak RSS {rss_pl:6.0f} MB")
    print(f"stallscope ingest:                {t_in:6.1f} s  peak RSS {rss_in:6.0f} MB")
    print(f"stallscope analyze --json:        {t_an:6.1f} s  peak RSS {rss_an:6.0f} MB")
    print(f"ingest + analyze: {t_in + t_an:.1f} s = {(t_in + t_an) / t_pl:.1f}x the polars read "
          f"({'within' if t_in + t_an < 120 else 'OVER'} the 2-minute target); metrics: {m['replicas']} replicas, "
          f"{len(m['windows'])} windows, goodput bounds {m['goodput_rps_bounds']}")
    if a.keep:
        print(f"kept in {d}")
    else:
        shutil.rmtree(d)


if __name__ == "__main__":
    main()
