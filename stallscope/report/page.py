"""The report page as plain blocks, and its two writers (Markdown and self-contained HTML).

Blocks hold plain text only; each writer escapes every string it prints, in one place, so nothing that came from
an input (a request id, a model name, a path, a kernel name) can become markup. Long input strings are clipped
for display (the analysis JSON keeps them whole).
"""
from __future__ import annotations

import base64
import html
import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone

CLIP = 96  # characters of an input string shown in a table cell


@dataclass
class Heading:
    level: int
    text: str


@dataclass
class Para:
    """Text runs: a str is plain text, ("b", s) bold, ("code", s) a name of ours (a view, a key, a flag)."""
    runs: list


@dataclass
class Bullets:
    items: list[list]  # each item is a list of runs, as in Para


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]
    numeric: list[bool] = field(default_factory=list)


@dataclass
class Image:
    name: str  # file stem: <name>.png next to the page
    alt: str
    png: bytes
    caption: str


def clip(s, n: int = CLIP) -> str:
    """An input string for display: one line, at most n characters (the rest replaced by a count)."""
    if s is None:
        return "-"
    s = re.sub(r"[\x00-\x1f\x7f]+", " ", str(s))
    if len(s) <= n:
        return s
    return f"{s[:n - 1]}… (+{len(s) - n + 1:,} chars)"


def num(v, digits: int = 1, unit: str = "") -> str:
    """A number for display; missing, NaN and infinite values read as '-'."""
    if v is None or isinstance(v, bool):
        return "-" if v is None else str(v)
    if isinstance(v, (int,)) and not isinstance(v, bool):
        return f"{v:,}{unit}"
    try:
        f = float(v)
    except (TypeError, ValueError):
        return "-"
    if not math.isfinite(f):
        return "-"
    return f"{f:,.{digits}f}{unit}"


def utc(ns) -> str:
    """An int64 ns instant as UTC wall time for display; missing reads as '-'."""
    if ns is None:
        return "-"
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def pct(v) -> str:
    """A fraction as a percentage for display; missing, NaN and infinite values read as '-'."""
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{100 * v:.1f}%"


def _ticks(text: str) -> list:
    """Our own prose with `names` in backticks, as runs (names become code)."""
    parts = re.split(r"`([^`]+)`", text)
    return [("code", p) if i % 2 else p for i, p in enumerate(parts) if p]


# -- Markdown -----------------------------------------------------------------------------------------------------
# Characters that open Markdown (or GFM) inline constructs anywhere in a line; block constructs (headings, lists)
# only start a line, and every line we write starts with our own text or a table pipe.
_MD_PUNCT = re.compile(r"([\\`*_\[\]|~])")


def md_escape(s: str) -> str:
    """Plain text for Markdown: HTML-significant characters as entities, inline Markdown punctuation
    backslash-escaped, so the text renders literally on GitHub/CommonMark and never opens a tag, link, emphasis,
    code span or table cell."""
    s = re.sub(r"[\x00-\x1f\x7f]+", " ", str(s))
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    return _MD_PUNCT.sub(r"\\\1", s)


def _md_runs(runs) -> str:
    out = []
    for r in runs:
        if isinstance(r, tuple):
            style, text = r
            if style == "b":
                out.append(f"**{md_escape(text)}**")
            else:  # our own identifiers only: no backticks or pipes in them
                out.append(f"`{text}`" if re.fullmatch(r"[A-Za-z0-9_./=:, -]+", text) else md_escape(text))
        else:
            out.append(md_escape(r))
    return "".join(out)


def to_markdown(blocks) -> str:
    lines: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            lines += ["#" * b.level + " " + md_escape(b.text), ""]
        elif isinstance(b, Para):
            lines += [_md_runs(b.runs), ""]
        elif isinstance(b, Bullets):
            lines += ["- " + _md_runs(item) for item in b.items] + [""]
        elif isinstance(b, Table):
            num_cols = b.numeric or [False] * len(b.header)
            lines.append("| " + " | ".join(md_escape(h) for h in b.header) + " |")
            lines.append("|" + "|".join("---:" if n else "---" for n in num_cols) + "|")
            for row in b.rows:
                lines.append("| " + " | ".join(md_escape(c) for c in row) + " |")
            lines.append("")
        elif isinstance(b, Image):
            lines += [f"![{md_escape(b.alt)}]({b.name}.png)", "", _md_runs(_ticks(b.caption)), ""]
    return "\n".join(lines).rstrip() + "\n"


# -- HTML ---------------------------------------------------------------------------------------------------------
# No script, no external font, stylesheet or image: the page is one file that opens offline. The CSP forbids
# everything but inline styles and data: images, so even a mistake in escaping could not run or fetch anything.
_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
_CSS = """
body{font:15px/1.45 -apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;color:#1d1d1f;
     max-width:1060px;margin:24px auto;padding:0 20px;background:#fff}
h1{font-size:26px;margin:0 0 4px}h2{font-size:20px;margin:32px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:16px;margin:20px 0 6px}
p,li{max-width:100%;overflow-wrap:anywhere}
code{font:13px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#f3f3f5;padding:1px 4px;border-radius:3px}
table{border-collapse:collapse;width:100%;margin:8px 0 16px;font-size:13px;table-layout:auto}
th,td{border:1px solid #ddd;padding:4px 6px;text-align:left;vertical-align:top;max-width:360px}
td.w{overflow-wrap:anywhere}
th{background:#f5f5f7}td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
figure{margin:12px 0 24px}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:13px;color:#555;margin-top:4px}
.muted{color:#666}
"""


def _html_runs(runs) -> str:
    out = []
    for r in runs:
        if isinstance(r, tuple):
            style, text = r
            tag = "strong" if style == "b" else "code"
            out.append(f"<{tag}>{html.escape(text, quote=True)}</{tag}>")
        else:
            out.append(html.escape(str(r), quote=True))
    return "".join(out)


def to_html(blocks, title: str) -> str:
    parts = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>{html.escape(title, quote=True)}</title>", f"<style>{_CSS}</style>", "</head>", "<body>"]
    for b in blocks:
        if isinstance(b, Heading):
            lvl = min(max(b.level, 1), 4)
            parts.append(f"<h{lvl}>{html.escape(b.text, quote=True)}</h{lvl}>")
        elif isinstance(b, Para):
            parts.append(f"<p>{_html_runs(b.runs)}</p>")
        elif isinstance(b, Bullets):
            parts.append("<ul>" + "".join(f"<li>{_html_runs(i)}</li>" for i in b.items) + "</ul>")
        elif isinstance(b, Table):
            num_cols = b.numeric or [False] * len(b.header)
            head = "".join(f"<th>{html.escape(h, quote=True)}</th>" for h in b.header)
            body = "".join(
                "<tr>" + "".join(f'<td class="n">{html.escape(c, quote=True)}</td>' if num_cols[i]
                                 else f'<td class="w">{html.escape(c, quote=True)}</td>' if len(c) > 24
                                 else f"<td>{html.escape(c, quote=True)}</td>" for i, c in enumerate(row)) + "</tr>"
                for row in b.rows)
            parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        elif isinstance(b, Image):
            data = base64.b64encode(b.png).decode("ascii")
            parts.append(f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(b.alt, quote=True)}"'
                         f' width="1000"><figcaption>{_html_runs(_ticks(b.caption))}</figcaption></figure>')
    parts += ["</body>", "</html>"]
    return "\n".join(parts) + "\n"
