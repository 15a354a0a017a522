"""The `stallscope report` command and the `export` sub-app (`export perfetto`), registered by stallscope/cli.py."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .. import cliopts
from ..faults import crash_point

export_app = typer.Typer(add_completion=False, no_args_is_help=True,
                         help="Export the store for other tools (Perfetto / chrome://tracing).")


def _open_store(paths, db, year, tz):
    from ..ingest.stores import open_store

    store = open_store(paths, db, year, tz)
    store.con.execute("SET enable_progress_bar = false")  # DuckDB's own bar would interleave with the summary
    return store


def report_cmd(
        paths: Optional[list[Path]] = typer.Argument(None, help="Input files or directories: ingested into a fresh "
                                                                "store first (or into --db when given)."),
        db: Optional[str] = typer.Option(None, "--db", help="Store to report on (default stallscope.duckdb)."),
        slo: Optional[str] = typer.Option(None, "--slo", callback=cliopts.slo,
                                          help="SLOs, e.g. ttft=500ms,tpot=50ms,itl=200ms "
                                               "(any subset; ms or s)."),
        out: Path = typer.Option(Path("stallscope-report"), "--out", help="Folder for report.md, report.html, "
                                                                          "analysis.json and the figures."),
        include_prompts: bool = typer.Option(False, "--include-prompts",
                                             help="Show raw input records (which can hold prompt text)."),
        recommend: bool = typer.Option(True, "--recommend/--no-recommend",
                                       help="Include the chunk-budget and placement recommendation (`stallscope "
                                            "recommend`; on by default, it needs an SLO with a latency term)."),
        attainment: float = typer.Option(0.9, "--attainment", callback=cliopts.attainment,
                                         help="Target share of good requests."),
        spike_k: float = typer.Option(3.0, "--spike-k", callback=cliopts.spike_k,
                                      help="A gap is a spike above k x the decode-only gap."),
        top: int = typer.Option(10, "--top", callback=cliopts.non_negative, help="Stall events and requests to list."),
        memory_limit: Optional[str] = typer.Option(None, "--memory-limit", help=cliopts.MEMORY_LIMIT_HELP),
        year: Optional[int] = typer.Option(None, help="Year for log timestamps that carry none."),
        tz: str = typer.Option("UTC", help="Time zone of log timestamps that carry none.")):
    """One incident report: terminal summary, report.md, a self-contained report.html, analysis.json, figures."""
    from ..analyze import STAGES, Options, parse_slo, prepare, summarise
    from ..ingest.memory import analysis_memory
    from .build import build
    from .terminal import summary

    opts = Options(slo=parse_slo(slo), attainment=attainment, spike_k=spike_k)
    stages = STAGES + 1 + recommend  # the analysis', "figures and page", and "recommendation" when asked
    with _open_store(paths, db, year, tz) as store, cliopts.stage_progress(stages, "reporting") as opts.progress:
        analysis_memory(store.con, memory_limit)
        prepare(store.con, opts)
        rec = None
        if recommend:  # before the analysis object: an hour's replays then run without its spike records in memory
            from ..recommend import Options as RecOptions, recommend_or_why

            opts.progress("recommendation")
            rec = recommend_or_why(store.con, RecOptions(slo=opts.slo, attainment=attainment, prepared=True))
        result = summarise(store.con, opts)
        if rec is not None:
            result["recommendation"] = rec
        crash_point("report.build")  # stallscope.faults: where fault tests crash or interrupt a report
        opts.progress("figures and page")
        rep = build(store, result, out, include_prompts=include_prompts, top=top)
    summary(rep)


@export_app.command("perfetto")
def perfetto_cmd(
        out: Path = typer.Argument(..., help="Output file: OUT.json, or OUT.json.gz for gzip."),
        paths: Optional[list[Path]] = typer.Argument(None, help="Input files to ingest first (else --db)."),
        db: Optional[str] = typer.Option(None, "--db", help="Store to export (default stallscope.duckdb)."),
        slo: Optional[str] = typer.Option(None, "--slo", callback=cliopts.slo,
                                          help="SLOs for the spike tracks, as for analyze."),
        spike_k: float = typer.Option(3.0, "--spike-k", callback=cliopts.spike_k,
                                      help="A gap is a spike above k x the decode-only gap."),
        memory_limit: Optional[str] = typer.Option(None, "--memory-limit", help=cliopts.MEMORY_LIMIT_HELP),
        year: Optional[int] = typer.Option(None, help="Year for log timestamps that carry none."),
        tz: str = typer.Option("UTC", help="Time zone of log timestamps that carry none.")):
    """Write Chrome-trace JSON for ui.perfetto.dev / chrome://tracing: kernels, CPU ops, steps, gap/spike/chunk tracks."""
    from ..analyze import Options, prepare
    from ..ingest.memory import analysis_memory
    from ..slo import parse_slo
    from .perfetto import export

    opts = Options(slo=parse_slo(slo), spike_k=spike_k, report_views=False)  # the export reads no report_* view
    with _open_store(paths, db, year, tz) as store:
        analysis_memory(store.con, memory_limit)
        prepare(store.con, opts)
        counts = export(store, out)
    total = sum(counts.values())
    detail = ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items()))
    typer.echo(f"wrote {out}: {total:,} events ({detail}); open it in https://ui.perfetto.dev (Open trace file)")
