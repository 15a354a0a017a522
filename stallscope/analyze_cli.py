"""The `stallscope analyze` command: from a store (or input files) to the stall report and its JSON."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table


def register(app: typer.Typer) -> None:
    app.command("analyze")(analyze_cmd)


def open_store(paths, db, year, tz):
    """The store a command reads: `paths` ingested into a fresh in-memory store (or into --db), else --db read-only.
    Shared by analyze, recommend and report; files that fail are one line each on stderr."""
    from .errors import StallscopeError
    from .parsers import Options as IngestOptions
    from .store import DEFAULT_DB, Store

    if not paths:
        return Store(db or DEFAULT_DB, read_only=True)
    store = Store(db or ":memory:")
    report = store.ingest(paths, options=IngestOptions(year=year, tz=tz))
    for r in report:
        if not r.ok:
            typer.echo(f"error: {r.message}", err=True)
    if not any(r.ok for r in report):
        store.close()
        raise StallscopeError("nothing could be ingested")
    return store


def analyze_cmd(
        paths: Optional[list[Path]] = typer.Argument(None, help="Input files or directories: ingested into a fresh "
                                                                "store first (or into --db when given)."),
        db: Optional[str] = typer.Option(None, "--db", help="Store to analyse (default stallscope.duckdb)."),
        slo: Optional[str] = typer.Option(None, "--slo", help="SLOs, e.g. ttft=500ms,tpot=50ms,itl=200ms "
                                                             "(any subset; ms or s)."),
        attainment: float = typer.Option(0.9, "--attainment", help="Target share of good requests."),
        spike_k: float = typer.Option(3.0, "--spike-k", help="A gap is a spike above k x the decode-only gap."),
        json_out: Optional[Path] = typer.Option(None, "--json", help="Write the stallscope.analysis/1 JSON here."),
        top: int = typer.Option(10, "--top", help="Spikes to show in the terminal summary."),
        recommend: bool = typer.Option(False, "--recommend", help="Add the chunk-budget and placement recommendation "
                                                                  "(`stallscope recommend`) under \"recommendation\"."),
        year: Optional[int] = typer.Option(None, help="Year for log timestamps that carry none."),
        tz: str = typer.Option("UTC", help="Time zone of log timestamps that carry none.")):
    """Find decode-gap spikes, attribute them to prefill work, and measure goodput and what interference cost."""
    from .analyze import Options, analyze, parse_slo

    opts = Options(slo=parse_slo(slo), attainment=attainment, spike_k=spike_k, report_views=False)
    if recommend:
        from .recommend import check_slo

        check_slo(opts.slo)
    store = open_store(paths, db, year, tz)
    with store:
        result = analyze(store.con, opts)
        if recommend:
            from .recommend import Options as RecOptions, recommend as run_recommend

            result["recommendation"] = run_recommend(store.con, RecOptions(slo=opts.slo, attainment=attainment,
                                                                          prepared=True))
    if json_out:
        json_out.write_text(json.dumps(result, indent=1) + "\n")
    _summary(result, top)
    rec = result.get("recommendation")
    if rec is not None:
        typer.echo(f"recommendation: {rec['setting']}" if rec["setting"] else
                   f"recommendation: missing evidence: {'; '.join(rec['missing_evidence'])}")


def _fmt(v, digits=3):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _summary(r: dict, top: int) -> None:
    import sys

    out = Console() if sys.stdout.isatty() else Console(width=200, no_color=True)
    req = r["requests"]
    w = r["window"]
    lines = [
        f"window: {_fmt(w['duration_s'], 1)} s   requests: {req['total']} ({req['failed']} failed)   "
        f"SLO: {', '.join(f'{k}={v:g}' for k, v in r['slo'].items() if k.endswith('_ms')) or 'none'}",
        f"goodput: {_fmt(r['goodput_rps'])} req/s   attainment: {_fmt(r['attainment'])} "
        f"(target {r['slo']['attainment']:g}: {'n/a' if r['meets_attainment'] is None else 'met' if r['meets_attainment'] else 'missed'})",
        f"without prefill-decode interference: {_fmt(r['goodput_counterfactual_rps'])} req/s "
        f"(+{req['lost']} good requests, {_fmt(r['goodput_lost_rps'])} req/s lost; an upper bound: ideal "
        f"disaggregation, no KV-transfer cost)",
    ]
    m = r.get("metrics")
    if m and m.get("goodput_rps_bounds"):
        g, a = m["goodput_rps_bounds"], m["attainment_bounds"]
        lines.append(f"from metrics ({m['replicas']} replicas, {_fmt(m['duration_s'], 1)} s): goodput between "
                     f"{_fmt(g[0])} and {_fmt(g[1])} req/s, attainment between {_fmt(a[0])} and {_fmt(a[1])} "
                     "(Fréchet bounds of the TTFT and TPOT histograms)")
    if r.get("goodput_per_gpu_rps") is not None:
        lines.append(f"per GPU ({r['gpus']} GPUs): {_fmt(r['goodput_per_gpu_rps'], 4)} req/s/GPU")
    if r.get("interference_gpu_s") is not None:
        lines.append(f"prefill work that stalled decodes: {_fmt(r['interference_gpu_s'], 2)} GPU-s")
    for line in lines:
        out.print(line, highlight=False)
    spikes = r["spikes"]
    out.print(f"spikes: {len(spikes)}", highlight=False)
    if not spikes:
        return
    # One stall shows up as a spike in every request it held up: group them into stall events.
    events: dict[tuple, list[dict]] = {}
    for sp in spikes:
        c = sp["culprits"][0]["request_id"] if sp["culprits"] else None
        key = (sp["source"] if sp["level"] == "step" else "run", sp["step_index"]) if sp["step_index"] is not None \
            else (c, round(sp["end_ns"] / 2e8))
        events.setdefault(key, []).append(sp)
    ranked = sorted(events.values(), key=lambda g: -max(x["gap_ms"] for x in g))
    out.print(f"stall events: {len(events)} (largest first)", highlight=False)
    t = Table()
    for c in ("when (s)", "worst gap ms", "x base", "requests hit", "stalled", "evidence", "prefill ms",
              "step", "top culprit"):
        t.add_column(c, overflow="fold")
    t0 = r["window"]["start_ns"] or min(x["start_ns"] for x in spikes)
    for g in ranked[:top]:
        w = max(g, key=lambda x: x["gap_ms"])
        c = w["culprits"][0] if w["culprits"] else None
        hit = sum(1 for x in g if x["level"] == "request")
        t.add_row(_fmt((w["start_ns"] - t0) / 1e9, 2), _fmt(w["gap_ms"], 1),
                  _fmt(w["gap_ms"] / w["baseline_ms"], 1) if w["baseline_ms"] else "-",
                  str(hit) if hit else "step-level", _fmt(w["stalled_decodes"]), w["evidence"],
                  _fmt(w["prefill_overlap_ms"], 1), _fmt(w["step_index"]),
                  f"{c['request_id']} ({c['prompt_tokens']} tok, {c['overlap_ms']:.0f} ms)" if c else "-")
    out.print(t)
