"""A simulated fleet: the project's engine simulator run once per replica (and window), written as a fleet SOURCE.

Layout (what `stallscope fleet run` reads, see shards.py):

    OUT/<replica>/pool                  the replica's pool name
    OUT/<replica>/run-<k>/...           window k's artifacts: bench_serve.json, vllm_server.log (+ a Kineto trace
                                        for traced replicas in their first window, + prometheus_query_range.json
                                        for the replicas with --metrics)
    OUT/fleet.csv                       the same fleet as a manifest (replica, pool, window, files), window k
                                        labelled as --window labels it

Pools differ in engine policy and chunk budget (`POOLS`); odd replicas stall (an incident of long prompts in
every window), even ones are healthy. Runs are short so that a test fleet of 16 shards takes seconds; for the same
reason the replicas with metrics are scraped every METRICS_INTERVAL_S (a run lasts seconds, not minutes).
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from stallscope.errors import StallscopeError

# (pool, engine policy, budget): a small-budget chunked pool, a large-budget chunked pool, an unchunked V0 pool.
POOLS = (("chat", "chunked", 512), ("batch", "chunked", 8192), ("legacy", "v0", None))
FIRST_WINDOW = "2025-04-01T16:00:00Z"
METRICS_INTERVAL_S = 1.0


@dataclass
class SimReplica:
    replica: str
    pool: str
    policy: str
    budget: int | None
    stalling: bool
    traced: bool
    runs: list[Path]          # one directory per window
    windows: list[str]        # their --window labels


def simulate_fleet(out: Path, replicas: int = 16, *, windows: int = 1, window_s: int = 600, duration_s: float = 5.0,
                   rate: float = 4.0, traced: int = 2, pools: int = 3, seed: int = 0,
                   offset_s: float = 180.0, metrics: int = 0) -> list[SimReplica]:
    """Write `replicas` replicas x `windows` runs; run k starts `offset_s` after the k-th window boundary (the
    server log begins 150 s before its benchmark, so every file ends inside its window). The first `traced`
    replicas also get a Kineto trace in their first window (the step evidence `recommend` needs); the first
    `metrics` replicas a Prometheus query_range export of every run (`simulate --metrics`)."""
    from stallscope.simulate import artifacts
    from stallscope.simulate.runner import RunSpec, execute, parse_start

    from .shards import window_label

    if replicas < 1 or windows < 1 or not 1 <= pools <= len(POOLS):
        raise StallscopeError(f"--replicas and --windows must be >= 1 and --pools 1..{len(POOLS)}")
    if metrics < 0:
        raise StallscopeError("--metrics must be 0 or more")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise StallscopeError(f"--out {out} exists and is not a directory")
    t0 = parse_start(FIRST_WINDOW)
    fleet: list[SimReplica] = []
    rows = []
    for i in range(replicas):
        pool, policy, budget = POOLS[i % pools]
        name = f"r{i:03d}"
        stalling = i % 2 == 1
        rep = SimReplica(name, pool, policy, budget, stalling, i < traced, [], [])
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "pool").write_text(pool + "\n")
        for k in range(windows):
            start_ns = t0 + k * window_s * 1_000_000_000 + int(offset_s * 1e9)
            start = datetime.fromtimestamp(start_ns / 1e9, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            # Long prompts an unchunked engine must prefill in one step: the decodes of that step stall.
            incident = f"long-prompts:count=3,tokens=6144,at={duration_s / 3:.2f},spacing=0.7" if stalling else None
            spec = RunSpec(policy=policy, budget=budget, rate=rate, duration_s=duration_s, incident=incident,
                           seed=seed * 100_003 + i * 101 + k, start=start, prompt_len="384:0.5",
                           output_len="96:0.4")
            run = execute(spec)
            kinds = ("bench", "vllm") + (("trace",) if rep.traced and k == 0 else ())
            extras = ("metrics",) if i < metrics else ()
            rd = d / f"run-{k:02d}"
            written = artifacts.write_all(run, rd, only=kinds, extras=extras, metrics_interval_s=METRICS_INTERVAL_S)
            rep.runs.append(rd)
            label = window_label(t0 + k * window_s * 1_000_000_000)
            rep.windows.append(label)
            rows.append({"replica": name, "pool": pool, "window": label,
                         "files": ";".join(str(p.relative_to(out)) for p in sorted(written.values()))})
        fleet.append(rep)
    with open(out / "fleet.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["replica", "pool", "window", "files"])
        w.writeheader()
        w.writerows(rows)
    return fleet
