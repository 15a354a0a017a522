"""The `stallscope fleet report` command (registered on the `fleet` sub-app by rollup.register_report)."""
from __future__ import annotations

from pathlib import Path

import typer

from .. import cliopts


def report_cmd(
        lake: str = typer.Argument(..., help="The lake `stallscope fleet run` wrote (a directory or URI)."),
        out: Path = typer.Option(Path("stallscope-fleet-report"), "--out",
                                 help="Folder for report.md, report.html, fleet.json and the figures."),
        top: int = typer.Option(20, "--top", callback=cliopts.non_negative, help="Replicas and stall events to list.")):
    """The fleet rollup: goodput and lost goodput per fleet, pool and replica, the worst stalls, pools whose chunk
    budget differs from their own data's recommendation, failed shards; terminal, report.md/.html, fleet.json."""
    from .report import build, summary

    summary(build(lake, out, top=top))
