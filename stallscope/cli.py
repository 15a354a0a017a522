"""The `stallscope` command line, the package's main face: ingest, sources, sql and steps here, and every other
command (analyze, recommend, report, export, simulate, capture, fleet) registered from its face module below."""
from __future__ import annotations

import os
import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from . import __version__
from .analyze_cli import analyze_cmd
from .capture.cli import capture_cmd
from .errors import StallscopeError
from .fleet.cli import fleet_app
from .recommend.cli import recommend_cmd
from .report.cli import export_app, report_cmd
from .simulate.cli import simulate_cmd
from .store import DEFAULT_DB, Store

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="LLM-serving forensics: which prefill stalled which decodes, and what it cost.")
# Piped output gets a wide, plain console so tables are not folded into unreadable columns.
out = Console() if sys.stdout.isatty() else Console(width=240, no_color=True)
err = Console(stderr=True)


def _warning(msg: str) -> None:
    """One line on stderr for a file that could not be read while others could."""
    sys.stderr.write(f"warning: {msg}\n")
    sys.stderr.flush()


def _error(msg: str) -> None:
    """One line on stderr, never wrapped, never styled: scripts and people both read it."""
    sys.stderr.write(f"error: {msg}\n")
    sys.stderr.flush()

DbOpt = typer.Option(DEFAULT_DB, "--db", help="DuckDB store file (`:memory:` for a throwaway store).")


def _version(value: bool) -> None:
    if value:
        out.print(f"stallscope {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    pass


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


@app.command()
def ingest(paths: list[Path] = typer.Argument(..., help="Files or directories (traces, logs, benchmark results)."),
           db: str = DbOpt,
           year: Optional[int] = typer.Option(None, help="Year for log timestamps that carry none (vLLM's MM-DD)."),
           tz: str = typer.Option("UTC", help="Time zone of log timestamps that carry none."),
           no_python_functions: bool = typer.Option(False, "--no-python-functions",
                                                    help="Drop python_function trace events (except step windows)."),
           strict: bool = typer.Option(False, "--strict",
                                       help="Exit non-zero when any file could not be read (default: only when "
                                            "none could).")):
    """Load files into the store; the same content twice is a no-op, a changed file replaces its rows.

    Exits 0 when at least one file gave usable rows (each file that could not be read is one warning line);
    non-zero when nothing usable was read, or with --strict when any file failed."""
    from .ingest.orchestrate import ingest_paths
    from .parsers import Options

    opts = Options(year=year, tz=tz, keep_python_functions=not no_python_functions)
    with Store(db) as store:
        progress_ctx = _progress() if out.is_terminal else None
        if progress_ctx is not None:
            with progress_ctx as prog:
                def on_file(path: Path, size: int):
                    task = prog.add_task(path.name, total=None)
                    return lambda done: prog.update(task, completed=done)

                def on_result(r):
                    for t in prog.tasks:
                        if not t.finished:
                            prog.update(t.id, visible=False)
                            prog.stop_task(t.id)

                report = ingest_paths(store, paths, options=opts, on_file=on_file, on_result=on_result)
        else:
            report = ingest_paths(store, paths, options=opts)
    table = Table(title="ingest", show_lines=False)
    for col in ("file", "status", "format", "parsed", "skipped", "rejected", "size", "MB/s", "note"):
        table.add_column(col, justify="right" if col in ("parsed", "skipped", "rejected", "size", "MB/s") else "left",
                         overflow="fold")
    for r in report:
        speed = f"{r.raw_bytes / 1e6 / r.seconds:.0f}" if r.seconds > 0 and r.raw_bytes else ""
        note = r.message or "; ".join(r.notes)
        style = "red" if r.status == "failed" else None
        table.add_row(Path(r.path).name, r.status, r.format or "", f"{r.parsed:,}", f"{r.skipped:,}",
                      f"{r.rejected:,}", _fmt_bytes(r.raw_bytes) if r.raw_bytes else "", speed, note, style=style)
    out.print(table)
    for n in report.notes:
        out.print(f"note: {n}")
    failed = [r for r in report if r.status == "failed"]
    usable = any(r.status in ("ingested", "replaced", "unchanged") for r in report)
    if not usable:
        if len(failed) > 1:
            _error(f"nothing usable was read from {len(failed)} files: " + "; ".join(r.message for r in failed))
        else:
            _error(failed[0].message if failed else "no input files found")
        raise typer.Exit(1)
    for r in failed:
        _warning(r.message if Path(r.path).name in r.message else f"{r.path}: {r.message}")
    if failed:
        inputs = sum(r.status != "skipped" for r in report)  # skipped: a directory's non-inputs (READMEs)
        _warning(f"{len(failed)} of {inputs} files could not be read")
        if strict:
            raise typer.Exit(1)


def _progress():
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed:,} events"),
                    TimeElapsedColumn(), console=out, transient=True)


@app.command()
def sources(db: str = DbOpt):
    """List ingested sources with their record accounting and clock."""
    with Store(db, read_only=True) as store:
        df = store.sql("""SELECT source_id AS id, path, format, records_parsed AS parsed, records_skipped AS skipped,
                                 records_rejected AS rejected, clock_method AS clock, clock_offset_ns, clock_note
                          FROM sources ORDER BY source_id""")
    _print_df(df, "sources")


class OutFormat(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"
    parquet = "parquet"


@app.command()
def sql(query: str = typer.Argument(..., help="A SQL query over the store."), db: str = DbOpt,
        format: OutFormat = typer.Option(OutFormat.table, "--format", "-f"),
        out_file: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the result here instead of stdout.")):
    """Run SQL against the store (read-only) and print or save the result."""
    import duckdb

    with Store(db, read_only=True) as store:
        try:
            df = store.sql(query)
        except duckdb.Error as e:
            raise StallscopeError(f"SQL error: {str(e).splitlines()[0]}") from None
    if format == OutFormat.parquet:
        if out_file is None:
            raise StallscopeError("--format parquet needs --out FILE")
        from .outputs import atomic_file

        with atomic_file(out_file) as part:  # the old file or the whole new one (stallscope.outputs)
            df.write_parquet(part)
        return
    if format == OutFormat.table:
        if out_file:
            from .outputs import write_text

            write_text(out_file, str(df))
        else:
            _print_df(df, None)
        return
    text = df.write_csv() if format == OutFormat.csv else df.write_json()
    if out_file:
        from .outputs import write_text

        write_text(out_file, text)
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")


@app.command()
def steps(db: str = DbOpt, limit: int = typer.Option(50, help="Rows to show (0 = all).")):
    """Per-step summary of the engine iterations found in GPU traces."""
    with Store(db, read_only=True) as store:
        df = store.sql(f"""
            SELECT s.source_id AS src, s.step_index AS step, s.marker, s.phase,
                   round(s.cpu_dur_ns / 1e6, 2) AS cpu_ms, round(s.gpu_dur_ns / 1e6, 2) AS gpu_ms,
                   round(s.gpu_busy_ns / 1e6, 2) AS busy_ms, s.kernel_count AS kernels, s.graph_launches AS graphs,
                   s.ctx_reqs, s.ctx_tokens, s.gen_reqs, s.gen_tokens
            FROM steps s ORDER BY s.source_id, s.step_index {'' if limit == 0 else f'LIMIT {int(limit)}'}""")
    _print_df(df, "steps")


# The commands of the other faces, registered here by plain imports: this list and the @app.command functions
# above are every command there is (a face module that fails to import fails the CLI at once). Optional extras
# (torch for capture, ray for `fleet run --engine ray`) are imported inside their commands, which say how to
# install them. The order is the --help order.
app.command("simulate")(simulate_cmd)
app.command("analyze")(analyze_cmd)
app.command("recommend")(recommend_cmd)
app.command("capture")(capture_cmd)
app.command("report")(report_cmd)
app.add_typer(export_app, name="export")  # export perfetto
app.add_typer(fleet_app, name="fleet")    # fleet run, fleet simulate, fleet report


def _print_df(df, title: str | None) -> None:
    t = Table(title=title)
    for c in df.columns:
        t.add_column(c, overflow="fold")
    for row in df.iter_rows():
        t.add_row(*["" if v is None else str(v) for v in row])
    out.print(t)


def main() -> None:
    """Entry point: every failure is one clear line on stderr and a non-zero exit, never a traceback."""
    from . import interrupts

    interrupts.install()
    try:
        rc = app(standalone_mode=False)
        if rc == interrupts.EXIT_INTERRUPTED:  # the CLI framework turns a KeyboardInterrupt into this status
            _interrupted()
        if isinstance(rc, int) and rc:  # click hands typer.Exit codes back instead of raising them
            sys.exit(rc)
    except (typer.Abort, KeyboardInterrupt):
        _interrupted()
    except StallscopeError as e:
        if interrupts.requested():
            _interrupted()
        _error(str(e))
        sys.exit(1)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except Exception as e:  # noqa: BLE001 - the promise is one line, not a traceback
        if interrupts.requested():  # a query that Ctrl-C interrupted fails with DuckDB's own error
            _interrupted()
        # Usage errors from the CLI framework (typer vendors click): recognised by shape, not by import path.
        if hasattr(e, "format_message") and hasattr(e, "exit_code"):
            if type(e).__name__ == "NoArgsIsHelpError":  # the help text is already printed
                sys.exit(0)
            _error(" ".join(str(e.format_message()).split()))
            sys.exit(e.exit_code or 2)
        if os.environ.get("STALLSCOPE_DEBUG"):
            raise
        _error(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''} "
               "(set STALLSCOPE_DEBUG=1 for a traceback)")
        sys.exit(2)


def _interrupted():
    """Exit 130 at once: worker threads still running (a parser's pool) must not hold the exit back."""
    from . import interrupts

    interrupts.say_interrupted()
    sys.stdout.flush()
    os._exit(interrupts.EXIT_INTERRUPTED)


if __name__ == "__main__":
    main()
