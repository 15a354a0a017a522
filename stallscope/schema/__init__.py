"""The canonical schema: every table, column, unit and meaning, defined once and rendered to DDL and docs/schema.md."""
from __future__ import annotations

from .model import SCHEMA_VERSION, Col, Table
from . import analysis, core, metrics, serving, trace

__all__ = ["SCHEMA_VERSION", "Col", "Table", "TABLES", "create_all", "render_markdown"]


def _collect() -> dict[str, Table]:
    out: dict[str, Table] = {}
    for mod in (core, trace, serving, metrics, analysis):
        for t in mod.TABLES:
            if t.name in out:
                raise ValueError(f"table {t.name} defined twice")
            out[t.name] = t
    return out


TABLES: dict[str, Table] = _collect()


def render_markdown() -> str:
    """docs/schema.md, generated so the document can never drift from the DDL."""
    lines = [
        "# stallscope canonical schema",
        "",
        "Generated from `stallscope/schema/` by `python -m stallscope.schema`; a test fails when this file is stale.",
        "",
        "Conventions:",
        "- One clock: every instant is an `int64` count of **nanoseconds since the Unix epoch, UTC** "
        "(columns named `*_ns` that are instants: `start_ns`, `end_ns`, `ts_ns`, `arrival_ns`, ...).",
        "- Durations carry their unit in the name and are named as durations (`dur_ns`, `gap_ns`, `ttft_ns`, "
        "`e2e_latency_ns`, `*_ms`, `*_pct`, `*_tps` = tokens per second).",
        "- Every per-source table has `source_id` (a `sources.source_id`); re-ingesting a changed file replaces "
        "exactly those rows, in one transaction.",
        "- Each source's clock offset (added to its native times to reach the common clock) and how it was "
        "obtained are in `sources`.",
        f"- Schema version: {SCHEMA_VERSION} (stored in `meta`).",
        "",
    ]
    groups: dict[str, list[Table]] = {}
    for t in TABLES.values():
        groups.setdefault(t.group, []).append(t)
    lines.append("Tables: " + ", ".join(f"[`{t.name}`](#{t.name})" for t in TABLES.values()))
    lines.append("")
    for group, tables in groups.items():
        lines += [f"## {group}", ""]
        for t in tables:
            lines += [f"### {t.name}", "", t.doc, "", "| column | type | unit | meaning |", "|---|---|---|---|"]
            for c in t.cols:
                doc = c.doc.replace("|", "\\|")
                lines.append(f"| `{c.name}` | {c.type} | {c.unit or ''} | {doc} |")
            lines.append("")
    return "\n".join(lines)


def create_all(con) -> None:
    """Create every table idempotently and add columns that a newer schema introduced."""
    # One script and one catalogue query, not two statements per table: every store open (every test, every
    # fuzz example) pays this.
    con.execute(";\n".join(["CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)",
                             *(t.ddl().rstrip().rstrip(";") for t in TABLES.values())]))
    have = set(con.execute("SELECT table_name, column_name FROM information_schema.columns "
                           "WHERE table_schema = 'main'").fetchall())
    for t in TABLES.values():
        for c in t.cols:
            if (t.name, c.name) not in have:
                con.execute(f"ALTER TABLE {t.name} ADD COLUMN {c.name} {c.type}")
    con.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])
    _seed_phase_rules(con)


def _seed_phase_rules(con) -> None:
    """Built-in kernel phase rules: restored on open, user rows left alone."""
    have = {r[0] for r in con.execute("SELECT rule_id FROM phase_rules WHERE builtin").fetchall()}
    missing = [(*r, True) for r in analysis.DEFAULT_PHASE_RULES if r[0] not in have]
    if missing:
        con.executemany("INSERT INTO phase_rules VALUES (?, ?, ?, ?, ?, ?, ?)", missing)
