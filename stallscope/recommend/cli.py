"""The `stallscope recommend` command: the chunk budget and placement for an SLO, with the replayed evidence."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from .. import cliopts
from rich.console import Console
from rich.table import Table


def recommend_cmd(
        paths: Optional[list[Path]] = typer.Argument(None, help="Input files or directories: ingested into a fresh "
                                                                "store first (or into --db when given)."),
        db: Optional[str] = typer.Option(None, "--db", help="Store to read (default stallscope.duckdb)."),
        slo: Optional[str] = typer.Option(None, "--slo", callback=cliopts.slo,
                                          help="SLOs, e.g. ttft=1s,itl=100ms or tpot=50ms (ms or s)."),
        attainment: float = typer.Option(0.9, "--attainment", callback=cliopts.attainment,
                                         help="Target share of good requests."),
        gpus: Optional[int] = typer.Option(None, "--gpus", callback=cliopts.positive,
                                           help="GPUs to place (default: two replicas' worth)."),
        kv_link: Optional[str] = typer.Option(None, "--kv-link", help="KV-transfer link: nvlink, ib, roce, pcie or "
                                                                      "a bandwidth in GB/s per GPU."),
        model_config: Optional[str] = typer.Option(None, "--model-config", help="KV geometry: a known model name "
                                                   "or LAYERS,KV_HEADS,HEAD_DIM[,DTYPE_BYTES]."),
        replays: int = typer.Option(3, "--replays", callback=cliopts.positive,
                                    help="Replays per budget (the fitted model plus coefficient "
                                         "draws from its uncertainty)."),
        json_out: Optional[Path] = typer.Option(None, "--json", help="Write the recommendation object here."),
        memory_limit: Optional[str] = typer.Option(None, "--memory-limit", help=cliopts.MEMORY_LIMIT_HELP),
        year: Optional[int] = typer.Option(None, help="Year for log timestamps that carry none."),
        tz: str = typer.Option("UTC", help="Time zone of log timestamps that carry none.")):
    """Recommend the chunked-prefill budget and aggregated vs disaggregated serving for an SLO, from the incident."""
    from stallscope.analyze import parse_slo
    from stallscope.errors import StallscopeError
    from stallscope.ingest.memory import analysis_memory
    from stallscope.ingest.stores import open_store

    from . import Options, check_slo, recommend

    parsed = parse_slo(slo)
    check_slo(parsed)
    if replays < 1:
        raise StallscopeError("--replays must be at least 1")
    if gpus is not None and gpus < 1:
        raise StallscopeError("--gpus must be positive")
    store = open_store(paths, db, year, tz)
    out = Console() if sys.stdout.isatty() else Console(width=200, no_color=True)
    opts = Options(slo=parsed, attainment=attainment, gpus=gpus, kv_link=kv_link, model_config=model_config,
                   replays=replays)
    with store:
        analysis_memory(store.con, memory_limit)
        if out.is_terminal:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            with Progress(TextColumn("replaying budgets"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                          TimeElapsedColumn(), console=out, transient=True) as prog:
                task = prog.add_task("replay", total=None)
                opts.on_progress = lambda done, total: prog.update(task, completed=done, total=total)
                rec = recommend(store.con, opts)
        else:
            rec = recommend(store.con, opts)
    if json_out:
        json_out.write_text(json.dumps(rec, indent=1, default=float) + "\n")
    show(rec, out)


def _f(v, d=1):
    return "-" if v is None else f"{v:.{d}f}"


def show(rec: dict, out: Console) -> None:
    """The answer first, then the evidence (goodput by budget, the fit), then what is missing."""
    if rec.get("evidence") == "metrics" or "chunk_tokens_band" in rec:
        from .metrics_model import describe
        out.print(describe(rec), highlight=False, soft_wrap=True)
        return
    if rec["setting"] is None:
        out.print(f"cannot recommend a budget: missing evidence: {'; '.join(rec['missing_evidence'])}",
                  highlight=False, soft_wrap=True)
        m = rec.get("model")
        if m:
            out.print(f"step model fitted on {m['steps_used']} steps (held-out MAPE {_f(100 * m['mape'])} %)",
                      highlight=False)
        return
    band = rec["goodput_band_rps"]
    out.print(f"recommended ({rec['engine']}): {rec['setting']}", highlight=False, soft_wrap=True)
    out.print(f"goodput {_f(rec['goodput_rps'], 2)} req/s (band {_f(band[0], 2)}-{_f(band[1], 2)}), attainment "
              f"{_f(100 * rec['attainment'], 0)} %, p99 ITL {_f(rec['predicted_p99_itl_ms'])} ms, mean TPOT "
              f"{_f(rec['predicted_mean_tpot_ms'])} ms, p90 TTFT {_f(rec['predicted_p90_ttft_ms'], 0)} ms; "
              f"current budget {rec['current_chunk_tokens'] or '-'} ({rec['policy_observed']})", highlight=False,
              soft_wrap=True)
    cf = rec["closed_form"]
    out.print(f"closed-form rule: {cf['chunk_tokens'] if cf['chunk_tokens'] is not None else 'unchunked or none'}"
              + ("" if cf["agrees"] else f" (disagrees: {cf['why']})"), highlight=False, soft_wrap=True)
    if rec["placement"]:
        split = rec["prefill_decode_split"]
        out.print(f"placement: {rec['placement']}" + (f" {split[0]}P:{split[1]}D" if rec["placement"] ==
                                                      "disaggregated" and split else "")
                  + f" ({rec['placement_reason']})", highlight=False, soft_wrap=True)
    t = Table(title="replayed goodput by budget")
    for c in ("budget", "goodput req/s", "band", "p99 ITL ms", "mean TPOT ms", "p90 TTFT ms"):
        t.add_column(c, justify="right")
    for r in rec["goodput_by_chunk"]:
        chosen = r["chunk_tokens"] == rec["chunk_tokens"]
        t.add_row("unchunked" if r["chunk_tokens"] is None else str(r["chunk_tokens"]), _f(r["goodput_rps"], 2),
                  f"{_f(r['lo'], 2)}-{_f(r['hi'], 2)}", _f(r["p99_itl_ms"]), _f(r["mean_tpot_ms"]),
                  _f(r["p90_ttft_ms"], 0), style="bold green" if chosen else None)
    out.print(t)
    m = rec["model"]
    ids = [k for k, v in m["identified"].items() if v]
    out.print(f"step model: {m['steps_used']} steps, held-out MAPE {_f(100 * m['mape'])} %, p99 band coverage "
              f"{_f(100 * m['p99_coverage'])} %, tile {m['tile_tokens']}; identified: {', '.join(ids) or 'none'}",
              highlight=False, soft_wrap=True)
    for k, why in m["unidentified_reasons"].items():
        out.print(f"  not identified: {k}: {why}", highlight=False, soft_wrap=True)
    for n in rec.get("notes", []):
        out.print(f"note: {n}", highlight=False, soft_wrap=True)
    if rec["missing_evidence"]:
        out.print(f"missing evidence: {'; '.join(rec['missing_evidence'])}", highlight=False, soft_wrap=True)
