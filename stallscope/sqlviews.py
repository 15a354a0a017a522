"""Install the analyses of queries/<concept>/*.sql on a connection: one documented view or table macro per file.

Each file starts with a comment header, in the manner of Perfetto's trace-processor stdlib:

    -- One paragraph saying what the view or macro is for (any number of comment lines).
    -- @depends other_view, other_macro
    -- @param name     What a macro parameter means (macros only).
    -- @column name    TYPE  What the output column means, with its unit.

followed by a single `CREATE OR REPLACE TEMP VIEW <file stem> AS ...`,
`CREATE OR REPLACE TEMP MACRO <file stem>(...) AS TABLE ...` or a scalar macro
`CREATE OR REPLACE TEMP MACRO <file stem>(...) AS <expression>`, documented with `@param`s and
`-- @returns TYPE  meaning` instead of columns. Temp objects work on read-only stores too.

A name with a leading `_` (`_kernel_rule`) is an internal helper, as in Perfetto's stdlib: read only by other
views, never by Python code, the CLI or users' documented queries, so it may change without notice.

Analysis parameters (SLOs, the spike factor, the baseline window) live in a one-row temp table
`analysis_params` that the views read, so every analysis is a plain view and one `set_params` call re-aims
all of them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources

_CREATE_RX = re.compile(r"^\s*CREATE\s+OR\s+REPLACE\s+TEMP\s+(VIEW|MACRO)\s+(\w+)", re.I | re.M)
_TABLE_MACRO_RX = re.compile(r"\)\s*AS\s+TABLE\b", re.I)


@dataclass
class QueryDef:
    name: str
    kind: str  # view | macro (a table macro) | scalar (a scalar macro)
    doc: str
    sql: str
    depends: list[str] = field(default_factory=list)
    params: dict[str, str] = field(default_factory=dict)
    columns: list[tuple[str, str, str]] = field(default_factory=list)  # (name, type, meaning)
    returns: tuple[str, str] | None = None  # (type, meaning) of a scalar macro


def parse(name: str, text: str) -> QueryDef:
    doc, depends, params, cols, returns = [], [], {}, [], None
    for line in text.splitlines():
        s = line.strip()
        if not s.startswith("--"):
            if s:
                break
            continue
        body = s[2:].strip()
        if body.startswith("@depends"):
            depends += [d.strip() for d in body[len("@depends"):].split(",") if d.strip()]
        elif body.startswith("@param"):
            parts = body.split(None, 2)
            params[parts[1]] = parts[2] if len(parts) > 2 else ""
        elif body.startswith("@column"):
            parts = body.split(None, 3)
            if len(parts) < 4:
                raise ValueError(f"{name}.sql: @column needs a name, a type and a meaning: {body!r}")
            cols.append((parts[1], parts[2], parts[3]))
        elif body.startswith("@returns"):
            parts = body.split(None, 2)
            if len(parts) < 3:
                raise ValueError(f"{name}.sql: @returns needs a type and a meaning: {body!r}")
            returns = (parts[1], parts[2])
        else:
            doc.append(body)
    m = _CREATE_RX.search(text)
    if not m or m.group(2) != name or len(_CREATE_RX.findall(text)) != 1:
        raise ValueError(f"{name}.sql must hold exactly one CREATE OR REPLACE TEMP VIEW|MACRO {name}")
    kind = m.group(1).lower()
    if kind == "macro" and not _TABLE_MACRO_RX.search(text):
        kind = "scalar"
    return QueryDef(name, kind, " ".join(doc).strip(), text, depends, params, cols, returns)


# The fleet rollup's queries (`fleet_*.sql`) read a Parquet lake through `lake_<table>` views, not a store: they
# are installed only on a lake connection (stallscope.fleet.rollup), never by `install`.
REPORT_PREFIX = "report_"
FLEET_PREFIX = "fleet_"
# The Perfetto export's views (queries/export/export_*.sql) are installed by the export alone (`install_export`):
# binding them costs about a second that no analysis should pay.
EXPORT_PREFIX = "export_"


def all_queries(*, fleet: bool = False) -> dict[str, QueryDef]:
    """Every query shipped in stallscope.queries, keyed by name: the store's analyses, or (fleet=True) the fleet
    rollup's `fleet_*` views over a lake."""
    out = {}
    for f in sorted(_sql_files(resources.files("stallscope.queries")), key=lambda p: p.name):
        if _concept_name(f.name).startswith(FLEET_PREFIX) == fleet:
            name = f.name[:-4]
            if name in out:
                raise ValueError(f"two query files define {name}")
            out[name] = parse(name, f.read_text())
    return out


def _concept_name(name: str) -> str:
    """The name without the leading `_` of an internal helper: `_fleet_span_mean` belongs to the fleet."""
    return name.lstrip("_")


def _sql_files(folder):
    """The .sql files under `folder`, one level of concept folders deep (queries/analysis/spikes.sql)."""
    for f in folder.iterdir():
        if f.is_dir() and not f.name.startswith(("_", ".")):
            yield from (g for g in f.iterdir() if g.name.endswith(".sql"))
        elif f.name.endswith(".sql"):
            yield f


def _order(qs: dict[str, QueryDef], installed: frozenset[str] = frozenset()) -> list[QueryDef]:
    done: list[QueryDef] = []
    seen: set[str] = set()

    def visit(n: str, stack: tuple[str, ...]) -> None:
        if n in seen:
            return
        if n in stack:
            raise ValueError(f"dependency cycle: {' -> '.join(stack + (n,))}")
        for d in qs[n].depends:
            if d not in qs:
                if d in installed:  # already on the connection (the report's and the export's views read the analysis')
                    continue
                raise ValueError(f"{n}.sql depends on unknown {d}")
            visit(d, stack + (n,))
        seen.add(n)
        done.append(qs[n])

    for n in qs:
        visit(n, ())
    return done


# name -> (DuckDB type, default, meaning)
PARAMS = {
    "ttft_ms": ("DOUBLE", None, "TTFT SLO, ms (NULL: not checked)"),
    "tpot_ms": ("DOUBLE", None, "mean TPOT SLO, ms, vLLM's definition (NULL: not checked)"),
    "itl_ms": ("DOUBLE", None, "worst inter-chunk gap SLO, ms (NULL: not checked); also a spike rule"),
    "e2el_ms": ("DOUBLE", None, "end-to-end latency SLO, ms (NULL: not checked)"),
    "spike_k": ("DOUBLE", 3.0, "a gap is a spike when it exceeds spike_k x the expected decode-only gap"),
    "baseline_window_s": ("DOUBLE", 30.0, "half-width of the time window for baselines that cannot tell decode "
                                          "steps apart (all-step and client-gap medians), s"),
    "baseline_steps": ("INTEGER", 16, "decode-only steps either side that make the decode-only step baseline"),
}


def set_params(con, **values) -> None:
    """Set analysis parameters (unknown names are an error); unset ones keep their defaults."""
    unknown = set(values) - set(PARAMS)
    if unknown:
        raise ValueError(f"unknown analysis parameter(s): {sorted(unknown)}")
    cols = ", ".join(f"{k} {t}" for k, (t, _, _) in PARAMS.items())
    con.execute(f"CREATE OR REPLACE TEMP TABLE analysis_params ({cols})")
    row = [values.get(k, d) for k, (_, d, _) in PARAMS.items()]
    con.execute(f"INSERT INTO analysis_params VALUES ({', '.join('?' for _ in row)})", row)


def install(con, *, report: bool = True, **params) -> dict[str, QueryDef]:
    """Create every view and macro on `con` (idempotent) and return their definitions. `report=False` leaves out
    the report's `report_*` views: nothing else reads them, and binding them is over half of an install's cost
    (~1.2 s of ~2 s), paid by every CLI analysis and every fleet shard; `install_report` adds them later."""
    set_params(con, **params)
    qs = all_queries()
    create(con, {n: q for n, q in qs.items() if not _concept_name(n).startswith(EXPORT_PREFIX)
                 and (report or not _concept_name(n).startswith(REPORT_PREFIX))})
    return qs


def install_report(con) -> None:
    """Create the `report_*` views on a connection that has the others (after `install(report=False)`), keeping
    its parameters and whatever was materialised."""
    qs = all_queries()
    create(con, {n: q for n, q in qs.items() if _concept_name(n).startswith(REPORT_PREFIX)}, installed=frozenset(qs))


def install_export(con) -> None:
    """Create the Perfetto export's `export_*` views on a connection that has the analysis views (after `install`)."""
    qs = all_queries()
    create(con, {n: q for n, q in qs.items() if _concept_name(n).startswith(EXPORT_PREFIX)}, installed=frozenset(qs))


def has_report_views(con) -> bool:
    return bool(con.execute("SELECT count(*) FROM duckdb_views() WHERE temporary AND view_name = 'report_headline'")
                .fetchall()[0][0])


def create(con, qs: dict[str, QueryDef], *, installed: frozenset[str] = frozenset()) -> None:
    """Create the given views and macros on `con`, each after the ones it depends on (`installed`: the names
    already on the connection that they may also depend on)."""
    for q in _order(qs, installed):
        con.execute(q.sql)


def materialise(con, names) -> None:
    """Compute the named views once: each becomes a view over a temp table holding its rows (in the order
    given, so later ones read the earlier results instead of recomputing them). Views with an exact fast path
    (stallscope.fastviews) are computed by it."""
    from .fastviews import FAST

    for name in names:
        if not (name in FAST and FAST[name](con, f"_m_{name}")):
            con.execute(f"CREATE OR REPLACE TEMP TABLE _m_{name} AS SELECT * FROM {name}")
        con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT * FROM _m_{name}")


def release(con, name: str) -> None:
    """Free a materialised view's rows once everything that reads it has been materialised: the view is its own
    SQL again (still queryable, computed anew when read)."""
    con.execute(all_queries()[name].sql)
    con.execute(f"DROP TABLE IF EXISTS _m_{name}")
