"""The report's terminal summary: the headline, the top stall events and where the page is, with rich."""
from __future__ import annotations

import sys

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .build import Report
from .page import Bullets, Heading, Table as PageTable, clip


def _plain(runs) -> str:
    return "".join(r[1] if isinstance(r, tuple) else r for r in runs)


def summary(rep: Report, console: Console | None = None) -> None:
    """Print the headline bullets and the stall-event table of the page, then the page's path."""
    out = console or (Console() if sys.stdout.isatty() else Console(width=200, no_color=True))
    blocks = rep.blocks
    i = next((k for k, b in enumerate(blocks) if isinstance(b, Heading) and b.text == "Headline"), None)
    if i is not None:
        for b in blocks[i + 1:]:
            if isinstance(b, Heading):
                break
            if isinstance(b, Bullets):
                for item in b.items:
                    out.print(escape(_plain(item)), highlight=False)
    spikes = rep.analysis.get("spikes") or []
    out.print(f"spikes: {len(spikes):,}", highlight=False)
    k = next((k for k, b in enumerate(blocks) if isinstance(b, Heading) and b.text == "Top stall events"), None)
    if k is not None:
        tbl = next((b for b in blocks[k + 1:] if isinstance(b, (PageTable, Heading))), None)
        if isinstance(tbl, PageTable):
            t = Table(title="top stall events")
            for h in tbl.header:
                t.add_column(escape(h), overflow="fold")
            for row in tbl.rows:
                t.add_row(*[escape(clip(c, 48)) for c in row])
            out.print(t)
    rec = rep.analysis.get("recommendation")
    if isinstance(rec, dict) and rec.get("setting"):
        out.print(f"recommendation: {escape(clip(rec['setting'], 120))}", highlight=False)
    elif isinstance(rec, dict):
        missing = rec.get("missing_evidence") or ["no budget could be chosen"]
        out.print(f"recommendation: none; missing evidence: {escape(clip(missing[0], 200))}", highlight=False)
    else:
        out.print("recommendation: not computed", highlight=False)
    out.print(f"report: {escape(str(rep.files['report.html']))}", highlight=False)
