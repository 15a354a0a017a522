"""The `stallscope fleet` commands, one typer sub-app (`fleet_app`, added to the root by stallscope/cli.py): `run`
(shards into the lake), `simulate` (a simulated fleet) and `report` (the rollup of a lake). Ray, the `fleet`
extra, is imported only by `run --engine ray`, which says how to install it when it is missing."""
from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from .. import cliopts

fleet_app = typer.Typer(add_completion=False, no_args_is_help=True,
                        help="Fleet mode: analyse many replicas' files into a Parquet lake, and roll it up.")


class Engine(str, Enum):
    local = "local"
    ray = "ray"


@fleet_app.command("run")
def run_cmd(
        source: str = typer.Argument(..., help="A directory (one sub-directory per replica, or "
                                               "pool=NAME/replica=NAME/) or a manifest .csv/.json; local or a URI "
                                               "(s3://, gs://)."),
        out: str = typer.Option(..., "--out", "-o", help="The lake: a directory or URI (created if missing)."),
        engine: Engine = typer.Option(Engine.local, "--engine", help="local: in-process, one shard after the "
                                                                      "other; ray: one Ray task per shard."),
        address: Optional[str] = typer.Option(None, "--address", help="Ray cluster to join (e.g. ray://head:10001 or "
                                                                       "auto); default: a local Ray on this machine."),
        window: Optional[str] = typer.Option(None, "--window", help="Cut each replica into time windows "
                                                                     "(10m, 1h, 1d): files by their last instant."),
        retries: int = typer.Option(2, "--retries", callback=cliopts.non_negative,
                                    help="Retries of a shard whose worker died or that raised an "
                                         "unexpected error."),
        slo: Optional[str] = typer.Option(None, "--slo", callback=cliopts.slo,
                                          help="SLOs, e.g. ttft=2s,itl=200ms (as analyze)."),
        attainment: float = typer.Option(0.9, "--attainment", callback=cliopts.attainment,
                                         help="Target share of good requests."),
        spike_k: float = typer.Option(3.0, "--spike-k", callback=cliopts.spike_k,
                                      help="A gap is a spike above k x the decode-only gap."),
        recommend: bool = typer.Option(True, "--recommend/--no-recommend",
                                       help="Also run the chunk-budget recommendation per shard (needs an SLO)."),
        num_cpus: Optional[int] = typer.Option(None, "--num-cpus", callback=cliopts.positive,
                                               help="CPUs of the local Ray (default: all)."),
        task_memory: int = typer.Option(1500, "--task-memory-mb", callback=cliopts.positive,
                                        help="Memory each Ray task declares, MB."),
        object_store: Optional[int] = typer.Option(None, "--object-store-mb", callback=cliopts.positive,
                                                   help="Object store of the local Ray, MB (default Ray's)."),
        year: Optional[int] = typer.Option(None, help="Year for log timestamps that carry none."),
        tz: str = typer.Option("UTC", help="Time zone of log timestamps that carry none.")):
    """Analyse every shard (replica x window) of SOURCE into the lake; shards already done are skipped."""
    import os

    from rich.console import Console

    from .execute import FAULT_ENV, RunOptions, run_fleet

    console = Console(stderr=True)
    opts = RunOptions(slo=slo, attainment=attainment, spike_k=spike_k, recommend=recommend,
                      year=year, tz=tz, fault=os.environ.get(FAULT_ENV))
    if slo:
        from stallscope.slo import parse_slo

        parse_slo(slo)  # a bad SLO is one line before any work
    summary = run_fleet(source, out, opts, engine=engine.value, address=address, window=window, retries=retries,
                        num_cpus=num_cpus, task_memory_mb=task_memory, object_store_mb=object_store,
                        progress=_progress(console))
    for sid, reason in summary.failures:
        typer.echo(f"failed: {sid}: {reason}", err=True)
    typer.echo(f"{summary.planned} shards: {summary.done} done, {summary.failed} failed, {summary.skipped} "
               f"already done (skipped); {summary.executed} executed on {summary.engine}"
               + (f", {summary.retried} retried" if summary.retried else "") + f", {summary.wall_s:.1f} s; "
               f"lake {out}")


def _progress(console):
    """A rich bar over shards (only on a terminal), advanced as each shard is written."""
    def start(total: int):
        if not console.is_terminal:
            return None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        prog = Progress(TextColumn("shards"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                        TimeElapsedColumn(), console=console, transient=True)
        prog.start()
        task = prog.add_task("", total=total)

        def advance(sid: str, status: str) -> None:
            prog.update(task, advance=1, description=f"{sid} {status}")
            if prog.tasks[0].finished:
                prog.stop()
        return advance
    return start


@fleet_app.command("simulate")
def simulate_cmd(
        out: Path = typer.Option(..., "--out", "-o", help="Directory to write the fleet into."),
        replicas: int = typer.Option(16, "--replicas", callback=cliopts.positive, help="Number of replicas."),
        windows: int = typer.Option(1, "--windows", callback=cliopts.positive,
                                    help="Runs per replica, one per 10-minute window."),
        window_s: int = typer.Option(600, "--window-s", callback=cliopts.positive,
                                     help="Window length, s (runs start inside each window)."),
        duration: float = typer.Option(5.0, "--duration", callback=cliopts.positive,
                                       help="Seconds of arrivals per run."),
        rate: float = typer.Option(4.0, "--rate", callback=cliopts.positive, help="Request rate per replica, req/s."),
        traced: int = typer.Option(2, "--traced", callback=cliopts.non_negative,
                                   help="Replicas that also get a Kineto trace (first window)."),
        pools: int = typer.Option(3, "--pools", callback=cliopts.positive,
                                  help="Pools (1-3): chat (chunked 512), batch (chunked 8192), "
                                       "legacy (V0 unchunked)."),
        metrics: int = typer.Option(0, "--metrics", callback=cliopts.non_negative,
                                    help="Replicas that also export Prometheus metrics (a query_range JSON per "
                                         "run, scraped every second): their shards fill the lake's "
                                         "metrics_windows."),
        seed: int = typer.Option(0, "--seed", help="Seed of every random choice.")):
    """Write a simulated fleet (healthy and stalling replicas in 2-3 pools) as a `fleet run` SOURCE."""
    from .simulate import simulate_fleet

    fleet = simulate_fleet(out, replicas, windows=windows, window_s=window_s, duration_s=duration, rate=rate,
                           traced=traced, pools=pools, seed=seed, metrics=metrics)
    stalling = sum(r.stalling for r in fleet)
    sys.stdout.write(f"{len(fleet)} replicas ({stalling} stalling) x {windows} window{'s' * (windows != 1)} in "
                     f"{len({r.pool for r in fleet})} pools -> {out} (manifest {out}/fleet.csv)\n")


@fleet_app.command("report")
def report_cmd(
        lake: str = typer.Argument(..., help="The lake `stallscope fleet run` wrote (a directory or URI)."),
        out: Path = typer.Option(Path("stallscope-fleet-report"), "--out",
                                 help="Folder for report.md, report.html, fleet.json and the figures."),
        top: int = typer.Option(20, "--top", callback=cliopts.non_negative, help="Replicas and stall events to list.")):
    """The fleet rollup: goodput and lost goodput per fleet, pool and replica, the worst stalls, pools whose chunk
    budget differs from their own data's recommendation, failed shards; terminal, report.md/.html, fleet.json."""
    from .report import build, summary

    summary(build(lake, out, top=top))
