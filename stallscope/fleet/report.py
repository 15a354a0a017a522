"""The fleet report: the rollup of a lake as the same formats as `stallscope report` (report.md, a self-contained
report.html with figures, fleet.json, one PNG per figure, and a rich terminal summary). It renders what
stallscope.fleet.rollup read from the fleet_*.sql views and computes nothing of its own."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson
from matplotlib.figure import Figure

from ..errors import StallscopeError
from ..outputs import atomic_dir
from ..report import figures as RF
from ..report.page import Bullets, Heading, Image, Para, Table, _ticks, clip, num, pct, to_html, utc, to_markdown
from .rollup import TOP, open_lake, rollup

# Above this many replicas the bar chart drops its per-replica tick labels (they would overprint).
LABELLED_REPLICAS = 48
_POOL_COLORS = ("#1f77b4", "#2a9d4a", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")
_LOST = "#d62728"

ABOUT = {
    "goodput_by_replica": ("Goodput of every replica (bars, coloured by pool) with the goodput it lost to "
                           "prefill-decode interference stacked on top in red, so a bar's full height is its "
                           "goodput without interference; replicas ordered by lost goodput, worst first (view "
                           "`fleet_replicas`)."),
    "lost_over_time": ("Fleet goodput and the goodput lost to interference over time: requests that would have been "
                       "good without interference, per second, binned by completion time and summed over every "
                       "replica (macro `fleet_lost_timeline`), next to the fleet's good requests per second."),
}
TITLES = {"goodput_by_replica": "Goodput by replica", "lost_over_time": "Lost goodput over time"}


@dataclass
class FleetReport:
    """What `build` wrote: the folder, each file, the page blocks and the rollup object."""
    out_dir: Path
    files: dict[str, Path] = field(default_factory=dict)
    blocks: list = field(default_factory=list)
    fleet: dict = field(default_factory=dict)


def _n(v, noun: str) -> str:
    return f"{num(v)} {noun}" + ("" if v == 1 else "s")


def _budget(v) -> str:
    """A budget of fleet_budgets: NULL is unchunked (the view says so only for pools with an `ok` shard)."""
    return "unchunked" if v is None else num(v)


# -- figures ------------------------------------------------------------------------------------------------------
def goodput_by_replica(fleet: dict) -> Figure:
    reps = fleet.get("replicas") or []
    fig, (ax,) = RF.new_figure()
    ax.set_title(TITLES["goodput_by_replica"])
    ax.set_ylabel("goodput (requests/s)")
    if not reps:
        ax.set_xticks([])
        RF.centred_note(ax, "No analysed shard in the lake: nothing to draw.")
        return fig
    pools = sorted({r["pool"] for r in reps})
    color = {p: _POOL_COLORS[i % len(_POOL_COLORS)] for i, p in enumerate(pools)}
    x = np.arange(len(reps))
    good = np.array([r["goodput_rps"] if r["goodput_rps"] is not None else np.nan for r in reps], float)
    lost = np.array([r["goodput_lost_rps"] if r["goodput_lost_rps"] is not None else 0.0 for r in reps], float)
    ax.bar(x, np.nan_to_num(good), color=[color[r["pool"]] for r in reps], width=0.85)
    ax.bar(x, lost, bottom=np.nan_to_num(good), color=_LOST, width=0.85, label="lost to interference")
    for p in pools:
        ax.bar([np.nan], [np.nan], color=color[p], label=f"pool {clip(p, 40)}")
    if len(reps) <= LABELLED_REPLICAS:
        ax.set_xticks(x, [clip(r["replica"], 24) for r in reps], rotation=60, ha="right", fontsize=8)
        ax.set_xlabel("replica (most lost goodput first)")
    else:
        ax.set_xticks([])
        ax.set_xlabel(f"{len(reps):,} replicas, most lost goodput first")
    ax.set_xlim(-0.6, len(reps) - 0.4)
    top = np.nanmax(np.nan_to_num(good) + lost)
    if top > 0:
        ax.set_ylim(0, top * 1.2)  # headroom for the legend
    ax.legend(loc="upper right", fontsize=8, ncols=len(pools) + 1)
    ax.grid(axis="y", alpha=0.3)
    return fig


def lost_over_time(fleet: dict) -> Figure:
    rows = fleet.get("lost_over_time") or []
    fig, (ax,) = RF.new_figure()
    ax.set_title(TITLES["lost_over_time"])
    ax.set_ylabel("requests/s (fleet)")
    if not rows:
        ax.set_xticks([])
        RF.centred_note(ax, "No judged request with a completion time in the lake: nothing to draw.")
        return fig
    t0 = rows[0]["t_ns"]
    t = np.array([(r["t_ns"] - t0) / 1e9 for r in rows])
    width = np.array([r["bin_s"] for r in rows], float)
    lost = np.array([r["goodput_lost_rps"] for r in rows], float)
    good = np.array([r["goodput_rps"] for r in rows], float)
    ax.step(t, good, where="post", color="#2a9d4a", label="goodput (good requests/s)")
    ax.fill_between(t, 0, lost, step="post", color=_LOST, alpha=0.55, label="lost goodput (requests/s)")
    ax.set_xlim(t[0], t[-1] + width[-1])
    top = max(np.nanmax(good), np.nanmax(lost))
    if top > 0:
        ax.set_ylim(0, top * 1.2)
    ax.set_xlabel(f"time since {utc(t0)} (s)")
    ax.legend(loc="upper right", fontsize=9)
    ax.grid(alpha=0.3)
    return fig


FIGURES = (("goodput_by_replica", goodput_by_replica), ("lost_over_time", lost_over_time))


# -- the page -----------------------------------------------------------------------------------------------------
def _page(f: dict, img: dict, top: int) -> list:
    s = f.get("fleet") or {}
    b: list = [Heading(1, "stallscope fleet report")]
    b.append(Para([f"Lake {clip(f.get('lake'), 200)}: {_n(s.get('pools'), 'pool')}, {_n(s.get('replicas'), 'replica')}, "
                   f"{_n(s.get('windows'), 'window')}; {num(s.get('shards_done'))} of "
                   f"{num(s.get('shards_total'))} shards analysed, {num(s.get('shards_failed'))} failed; "
                   f"{utc(s.get('start_ns'))} to {utc(s.get('end_ns'))}."]))
    if s.get("slo_sets") and s["slo_sets"] > 1:
        b.append(Para([("b", f"The shards were judged against {num(s['slo_sets'])} different SLO sets"),
                       f" (the most common: {clip(s.get('slo'), 200) or 'none'}): their goodputs count different "
                       "things and the sums below mix them; run the fleet again with one ", ("code", "--slo"), "."]))
    b.append(Heading(2, "Headline"))
    b.append(Bullets([
        [("b", "Fleet goodput"), " ", f"{num(s.get('goodput_rps'), 3)} req/s (the sum over the shards of each "
         "window, averaged over windows by their span)."],
        [("b", "Lost goodput"), " ", f"{num(s.get('goodput_lost_rps'), 3)} req/s ({pct(s.get('lost_share'))} of "
         f"the {num(s.get('goodput_counterfactual_rps'), 3)} req/s the fleet would reach without prefill-decode "
         f"interference; {num(s.get('requests_lost'))} requests)."],
        [("b", "Attainment"), " ", f"{pct(s.get('attainment'))} of {num(s.get('requests_total'))} judged requests "
         f"good (SLOs: {clip(s.get('slo'), 200) or 'none'}); {num(s.get('spike_count'))} decode-gap spikes, the worst "
         f"{num(s.get('worst_gap_ms'), 1)} ms."],
    ]))
    pools = f.get("pools") or []
    if pools:
        b.append(Table(["pool", "replicas", "shards", "requests", "attainment", "goodput (req/s)",
                        "without interference (req/s)", "lost (req/s)", "lost share", "spikes", "worst gap (ms)"],
                       [[clip(p["pool"]), num(p["replicas"]), num(p["shards"]), num(p["requests_total"]),
                         pct(p["attainment"]), num(p["goodput_rps"], 3), num(p["goodput_counterfactual_rps"], 3),
                         num(p["goodput_lost_rps"], 3), pct(p["lost_share"]), num(p["spike_count"]),
                         num(p["worst_gap_ms"], 1)] for p in pools],
                       [False] + [True] * 10))
    b.append(img["goodput_by_replica"])
    _replicas(f, b, top)
    b.append(img["lost_over_time"])
    _windows(f, b)
    _events(f, b)
    _budgets(f, b)
    _failed(f, b)
    _method(b)
    return b


def _replicas(f: dict, b: list, top: int) -> None:
    reps = f.get("replicas") or []
    b.append(Heading(2, "Replicas ranked by lost goodput"))
    if not reps:
        b.append(Para(["No analysed shard in the lake."]))
        return
    shown = reps[:top]
    which = (f"The {len(shown):,} replicas (of {len(reps):,}; all are in fleet.json) that lost the most goodput"
             if len(reps) > len(shown) else f"All {len(reps):,} replicas, the one that lost the most goodput first")
    b.append(Para([which, " to interference; ties go to more spikes (view ", ("code", "fleet_replicas"), ")."]))
    b.append(Table(["rank", "pool", "replica", "requests", "attainment", "goodput (req/s)", "lost (req/s)",
                    "spikes", "worst gap (ms)", "interference (GPU-s)"],
                   [[num(r["lost_rank"]), clip(r["pool"]), clip(r["replica"]), num(r["requests_total"]),
                     pct(r["attainment"]), num(r["goodput_rps"], 3), num(r["goodput_lost_rps"], 3),
                     num(r["spike_count"]), num(r["worst_gap_ms"], 1), num(r["interference_gpu_s"], 2)]
                    for r in shown], [True, False, False] + [True] * 7))


def _windows(f: dict, b: list) -> None:
    ws = f.get("windows") or []
    if len(ws) <= 1:
        return
    b.append(Table(["window", "start", "replicas", "requests", "goodput (req/s)", "lost (req/s)", "spikes",
                    "worst gap (ms)"],
                   [[clip(w["window"]), utc(w["start_ns"]), num(w["replicas"]), num(w["requests_total"]),
                     num(w["goodput_rps"], 3), num(w["goodput_lost_rps"], 3), num(w["spike_count"]),
                     num((w["worst_gap_ns"] or 0) / 1e6 if w["worst_gap_ns"] is not None else None, 1)]
                    for w in ws], [False, False] + [True] * 6))


def _events(f: dict, b: list) -> None:
    ev = f.get("stall_events") or []
    b.append(Heading(2, "Worst stall events fleet-wide"))
    if not ev:
        b.append(Para(["No decode-gap spikes on any replica."]))
        return
    b.append(Para([f"The {len(ev):,} longest of {num(f.get('stall_events_total'))} stall events (one stall is a "
                   "spike in every request it held up; grouped per shard as ", ("code", "report_stall_events"),
                   " groups them), with the request whose prefill added the most time to the gap (view ",
                   ("code", "fleet_stall_events"), ")."]))
    b.append(Table(["#", "pool", "replica", "when", "worst gap (ms)", "x baseline", "requests hit", "evidence",
                    "prefill share", "culprit", "culprit prompt (tokens)", "culprit prefill (ms)"],
                   [[num(e["fleet_rank"]), clip(e["pool"]), clip(e["replica"]), utc(e["start_ns"]),
                     num(e["worst_gap_ms"], 1),
                     num(e["worst_gap_ms"] / e["baseline_ms"], 1) if e["baseline_ms"] and e["worst_gap_ms"] else "-",
                     num(e["requests_hit"]) if e["requests_hit"] else "step-level", clip(e["evidence"]),
                     pct(e["share"]), clip(e["culprit_id"]), num(e["culprit_prompt_tokens"]),
                     num(e["culprit_overlap_ms"], 1)] for e in ev],
                   [True, False, False, False, True, True, True, False, True, False, True, True]))


def _budgets(f: dict, b: list) -> None:
    rows = f.get("budgets") or []
    b.append(Heading(2, "Chunk budgets"))
    b.append(Para(["Only shards with a recommendation count. A pool's current budget is the one most of them ran "
                   "with (its replicas disagree when more than one value was seen); its recommended budget is the "
                   "median of their own recommendations, taken from the values they recommended; unchunked ranks "
                   "above every budget (view ", ("code", "fleet_budgets"), ")."]))
    if not rows:
        b.append(Para(["No shard carries a recommendation."]))
        return
    flagged = [r for r in rows if r["differs"]]
    b.append(Para([("b", f"{len(flagged):,} of {len(rows):,} pools"),
                   " run a budget other than the one their own data recommends; the predicted gain is what the "
                   "what-if replay of their shards expects from the change."]))
    rows_out = []
    for r in rows:
        if not r["shards_ok"]:
            rows_out.append([clip(r["pool"]), "-", "-", "-", "-", "-", f"0 of {num(r['shards'])}", "-", "-", "-", "-"])
            continue
        rng = (_budget(r["recommended_min_tokens"]) if r["recommended_min_tokens"] == r["recommended_max_tokens"]
               else f"{_budget(r['recommended_min_tokens'])} to {_budget(r['recommended_max_tokens'])}")
        rows_out.append([clip(r["pool"]), "change" if r["differs"] else "ok", _budget(r["current_budget_tokens"]),
                         ", ".join(_budget(v) for v in r["current_budgets"] or []),
                         _budget(r["recommended_budget_tokens"]), rng, f"{num(r['shards_ok'])} of {num(r['shards'])}",
                         num(r["shards_differing"]), num(r["predicted_goodput_current_rps"], 3),
                         num(r["predicted_gain_rps"], 3), clip(r["placement"])])
    b.append(Table(["pool", "flag", "current (tokens)", "values seen", "recommended (tokens)", "recommended range",
                    "shards with a recommendation", "shards differing", "predicted goodput now (req/s)",
                    "predicted gain (req/s)", "placement"], rows_out,
                   [False, False, True, False, True, False, False, True, True, True, False]))
    missing = [r for r in rows if not r["shards_ok"]]
    if missing:
        b.append(Para([f"Pools without any shard with a recommendation: {len(missing):,} (one needs an SLO and a GPU "
                       "trace of the engine steps; each shard's reason is in the lake's ", ("code", "recommendations"),
                       " table)."]))


def _failed(f: dict, b: list) -> None:
    rows = f.get("failed_shards") or []
    b.append(Heading(2, "Failed shards"))
    if not rows:
        b.append(Para(["None: every shard in ", ("code", "_shards"), " was analysed."]))
        return
    b.append(Para([f"{len(rows):,} shards failed after their retries; their replicas' windows are missing from "
                   "every number above (view ", ("code", "fleet_failed_shards"), ")."]))
    b.append(Table(["shard", "pool", "replica", "window", "files", "attempts", "reason"],
                   [[clip(r["shard_id"]), clip(r["pool"]), clip(r["replica"]), clip(r["window"]), num(r["files"]),
                     num(r["attempts"]), clip(r["error"], 200)] for r in rows],
                   [False, False, False, False, True, True, False]))


def _method(b: list) -> None:
    b.append(Heading(2, "How the numbers were computed"))
    b.append(Para(["Each shard (one replica over one window) was analysed alone by ", ("code", "stallscope analyze"),
                   " and ", ("code", "stallscope recommend"), " and written to the lake; every number here comes "
                   "from the rollup views shipped in ", ("code", "stallscope.queries"), " (", ("code", "fleet_summary"),
                   ", ", ("code", "fleet_pools"), ", ", ("code", "fleet_replicas"), " and the others named above)",
                   " over the lake's Parquet tables (", ("code", "read_parquet"), " with hive partitioning); the "
                   "full result is ", ("code", "fleet.json"), " (", ("code", "stallscope.fleet/1"), ")."]))
    for name, _ in FIGURES:
        b.append(Para([("b", TITLES[name] + "."), " "] + _ticks(ABOUT[name])))


# -- files --------------------------------------------------------------------------------------------------------
def build(lake, out_dir, *, top: int = TOP) -> FleetReport:
    """Roll the lake up and write report.md, report.html, fleet.json and the figures into out_dir."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise StallscopeError(f"--out {out} is a file, not a folder")
    with open_lake(lake) as lk:
        fleet = rollup(lk, top=top)
    rep = FleetReport(out_dir=out, fleet=fleet)
    images = {}
    with atomic_dir(out) as tmp:  # complete or not there (stallscope.outputs.atomic_dir)
        for name, fn in FIGURES:
            fig = fn(fleet)
            png = RF.png_bytes(fig)
            fig.clear()
            (tmp / f"{name}.png").write_bytes(png)
            rep.files[name] = out / f"{name}.png"
            images[name] = Image(name, TITLES[name], png, ABOUT[name])
        rep.blocks = _page(fleet, images, top)
        (tmp / "fleet.json").write_bytes(orjson.dumps(fleet, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE))
        rep.files["fleet.json"] = out / "fleet.json"
        (tmp / "report.md").write_text(to_markdown(rep.blocks), encoding="utf-8")
        rep.files["report.md"] = out / "report.md"
        (tmp / "report.html").write_text(to_html(rep.blocks, "stallscope fleet report"), encoding="utf-8")
        rep.files["report.html"] = out / "report.html"
    return rep


def summary(rep: FleetReport, console=None) -> None:
    """The terminal summary: the headline, the pools, the worst replicas and stalls, budget flags, failures."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table as RichTable

    out = console or (Console() if sys.stdout.isatty() else Console(width=200, no_color=True))

    def table(title: str, block: Table, rows: int) -> None:
        t = RichTable(title=title)
        for h in block.header:
            t.add_column(escape(h), overflow="fold")
        for row in block.rows[:rows]:
            t.add_row(*[escape(clip(c, 48)) for c in row])
        out.print(t)

    blocks = rep.blocks
    heads = {b.text: i for i, b in enumerate(blocks) if isinstance(b, Heading)}

    def first_table(section: str):
        i = heads.get(section)
        for blk in blocks[i + 1:] if i is not None else []:
            if isinstance(blk, Heading):
                return None
            if isinstance(blk, Table):
                return blk
        return None

    for blk in blocks[heads["Headline"] + 1:]:
        if isinstance(blk, Heading):
            break
        if isinstance(blk, Bullets):
            for item in blk.items:
                out.print(escape("".join(r[1] if isinstance(r, tuple) else r for r in item)), highlight=False)
        elif isinstance(blk, Table):
            table("pools", blk, 50)
    for section, title, n in (("Replicas ranked by lost goodput", "replicas by lost goodput", 10),
                              ("Worst stall events fleet-wide", "worst stall events", 5),
                              ("Failed shards", "failed shards", 20)):
        blk = first_table(section)
        if blk is not None:
            table(title, blk, n)
    flagged = [r for r in rep.fleet.get("budgets") or [] if r["differs"]]
    for r in flagged:
        out.print(f"budget: pool {escape(clip(r['pool']))} runs {_budget(r['current_budget_tokens'])}, its own data "
                  f"recommends {_budget(r['recommended_budget_tokens'])} (predicted gain "
                  f"{num(r['predicted_gain_rps'], 3)} req/s)", highlight=False)
    out.print(f"report: {escape(str(rep.files['report.html']))}", highlight=False)
