"""The `stallscope analyze` command: from a store (or input files) to the stall report and its JSON."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from . import cliopts
from .faults import crash_point
from rich.console import Console
from rich.table import Table


def analyze_cmd(
        paths: Optional[list[Path]] = typer.Argument(None, help="Input files or directories: ingested into a fresh "
                                                                "store first (or into --db when given)."),
        db: Optional[str] = typer.Option(None, "--db", help="Store to analyse (default stallscope.duckdb)."),
        slo: Optional[str] = typer.Option(None, "--slo", callback=cliopts.slo,
                                          help="SLOs, e.g. ttft=500ms,tpot=50ms,itl=200ms "
                                               "(any subset; ms or s)."),
        attainment: float = typer.Option(0.9, "--attainment", callback=cliopts.attainment,
                                         help="Target share of good requests."),
        spike_k: float = typer.Option(3.0, "--spike-k", callback=cliopts.spike_k,
                                      help="A gap is a spike above k x the decode-only gap."),
        json_out: Optional[Path] = typer.Option(None, "--json", help="Write the stallscope.analysis/1 JSON here."),
        top: int = typer.Option(10, "--top", callback=cliopts.non_negative,
                                help="Spikes to show in the terminal summary."),
        recommend: bool = typer.Option(False, "--recommend", help="Add the chunk-budget and placement recommendation "
                                                                  "(`stallscope recommend`) under \"recommendation\"."),
        since: Optional[str] = typer.Option(None, "--since", help="Analyse only from this instant: ISO time (UTC "
                                                                  "unless it says) or an offset into the store (90s, 5m, 1h)."),
        until: Optional[str] = typer.Option(None, "--until", help="...and only up to this instant (same forms)."),
        memory_limit: Optional[str] = typer.Option(None, "--memory-limit", help=cliopts.MEMORY_LIMIT_HELP),
        year: Optional[int] = typer.Option(None, help="Year for log timestamps that carry none."),
        tz: str = typer.Option("UTC", help="Time zone of log timestamps that carry none.")):
    """Find decode-gap spikes, attribute them to prefill work, and measure goodput and what interference cost."""
    from .analyze import STAGES, Options, analyze, parse_slo
    from .ingest.stores import open_store

    opts = Options(slo=parse_slo(slo), attainment=attainment, spike_k=spike_k, report_views=False)
    if recommend:
        from .recommend import check_slo

        check_slo(opts.slo)
    store = open_store(paths, db, year, tz)
    with store:
        crash_point("analyze.start")  # stallscope.faults: where fault tests crash or interrupt an analysis
        configure(store.con, memory_limit)
        opts.since_ns, opts.until_ns = time_range(store.con, since, until)
        with cliopts.stage_progress(STAGES) as opts.progress:
            result = analyze(store.con, opts)
        if recommend:
            from .recommend import Options as RecOptions, recommend as run_recommend

            result["recommendation"] = run_recommend(store.con, RecOptions(slo=opts.slo, attainment=attainment,
                                                                          prepared=True))
    if json_out:
        write_json(result, json_out)
    _summary(result, top)
    rec = result.get("recommendation")
    if rec is not None:
        typer.echo(f"recommendation: {rec['setting']}" if rec["setting"] else
                   f"recommendation: missing evidence: {'; '.join(rec['missing_evidence'])}")


def write_json(doc: dict, path: Path) -> None:
    """json.dumps(doc, indent=1) + newline, streamed (an hour's analysis is ~500 MB of JSON, which as one string
    would double the command's peak memory; stallscope.jsonwrite renders the spikes by column, byte-identical)
    to a temporary file renamed into place: whole or not at all, never a cut file."""
    from . import jsonwrite
    from .outputs import atomic_file

    with atomic_file(path) as part, part.open("w") as f:
        jsonwrite.write(doc, f)
        f.write("\n")


# Above this many streamed-chunk gaps (~2 hours at 20 req/s) an analysis takes minutes: say how to cut it.
BIG_STORE_GAPS = 20_000_000


def configure(con, memory_limit: str | None) -> None:
    """DuckDB's memory bound (stallscope.ingest.memory.analysis_memory), and a hint when the store is too big to
    analyse at once."""
    from .ingest.memory import analysis_memory

    analysis_memory(con, memory_limit)
    gaps = con.execute("SELECT count(*) FROM token_gaps").fetchall()[0][0]
    if gaps > BIG_STORE_GAPS:
        typer.echo(f"hint: {gaps:,} token gaps: analyse a time range at a time (--since/--until, e.g. --since 0m "
                   f"--until 1h), as `stallscope fleet --window 1h` cuts replicas", err=True)


def time_range(con, since: str | None, until: str | None) -> tuple[int | None, int | None]:
    """--since/--until as ns on the store's clock: an ISO time (UTC unless it says), or an offset (90s, 5m, 1h)
    from the store's first request arrival or step."""
    if since is None and until is None:
        return None, None
    start = con.execute("""SELECT least((SELECT min(arrival_ns) FROM requests),
                                        (SELECT min(coalesce(gpu_start_ns, cpu_start_ns)) FROM steps))""").fetchall()[0][0]
    return _instant(since, start), _instant(until, start)


def _instant(text: str | None, start_ns: int | None) -> int | None:
    import re
    from datetime import datetime, timezone

    from .errors import StallscopeError

    if text is None:
        return None
    m = re.fullmatch(r"\+?\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|min|h)?", text.strip())
    if m:
        if start_ns is None:
            raise StallscopeError(f"{text!r} is an offset, but the store has no timed requests or steps to start from")
        unit = {"ms": 1e6, "s": 1e9, None: 1e9, "m": 60e9, "min": 60e9, "h": 3600e9}[m[2]]
        return int(start_ns + float(m[1]) * unit)
    try:
        t = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise StallscopeError(f"bad time {text!r}: use an ISO time (2025-04-01T16:05:00Z) or an offset "
                              f"into the store (90s, 5m, 1h)") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return int(t.timestamp()) * 1_000_000_000 + t.microsecond * 1000


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
