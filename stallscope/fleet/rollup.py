"""The fleet rollup: open a lake written by `stallscope fleet run` as DuckDB views and run the fleet_*.sql views
(queries/fleet_*.sql) over it into the `stallscope.fleet/1` object.

The lake comes in as one `lake_<table>` view per lake table, each a `read_parquet(..., hive_partitioning = true)`
over LAKE/<table>/**/*.parquet (pool, replica and window are hive partitions, read as text); a table with no files
yet (a fleet without rejects, a lake whose shards all failed) is an empty view of its declared schema, so every
rollup view always binds. The rollup views are plain SQL over those; this module only wires them and shapes the
result.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from .. import sqlviews
from ..errors import StallscopeError

SCHEMA = "stallscope.fleet/1"
TOP = 20


@dataclass
class Lake:
    """A connection with the lake's tables and the rollup views installed."""
    con: object
    root: str
    tables: dict[str, int] = field(default_factory=dict)  # lake table -> Parquet files found

    def rows(self, sql: str) -> list[dict]:
        rel = self.con.sql(sql)
        cols = rel.columns
        return [dict(zip(cols, r)) for r in rel.fetchall()]

    def close(self) -> None:
        self.con.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _is_uri(path: str) -> bool:
    return "://" in path


def _root(lake) -> str:
    text = str(lake)
    if _is_uri(text):
        return text.rstrip("/")
    from pathlib import Path

    p = Path(text).expanduser()
    if not p.is_dir():
        raise StallscopeError(f"lake {text} is not a folder")
    return str(p.resolve())


def _lit(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _empty_view(con, view: str, schema, partitions: tuple[str, ...]) -> None:
    import pyarrow as pa

    fields = list(schema) + [pa.field(p, pa.string()) for p in partitions if p not in schema.names]
    con.register(f"_empty_{view}", pa.schema(fields).empty_table())
    con.execute(f"CREATE OR REPLACE TEMP VIEW {view} AS SELECT * FROM _empty_{view}")


def open_lake(lake) -> Lake:
    """Connect to LAKE (a folder, or an object-store URI DuckDB can read) and install the rollup views."""
    import duckdb

    from . import lake as lk

    root = _root(lake)
    con = duckdb.connect(":memory:")
    con.execute("SET enable_progress_bar = false")
    found: dict[str, int] = {}
    try:
        for table, schema in lk.SCHEMAS.items():
            view = "lake_shards" if table == "_shards" else f"lake_{table}"
            glob = f"{root}/{table}/**/*.parquet"
            n = con.execute(f"SELECT count(*) FROM glob({_lit(glob)})").fetchall()[0][0]
            found[table] = n
            parts = ("shard",) if table == "_shards" else ("pool", "replica", "window")
            if n:  # hive partitions are labels, never numbers: replica `007` stays `007`
                types = "{" + ", ".join(f"{_lit(p)}: 'VARCHAR'" for p in parts) + "}"
                con.execute(f"CREATE OR REPLACE TEMP VIEW {view} AS SELECT * FROM read_parquet({_lit(glob)}, "
                            f"hive_partitioning = true, hive_types = {types}, union_by_name = true)")
            else:
                _empty_view(con, view, schema, parts)
    except duckdb.Error as e:
        con.close()
        raise StallscopeError(f"cannot read lake {root}: {str(e).splitlines()[0]}") from None
    if not found.get("_shards"):
        con.close()
        raise StallscopeError(f"{root} is not a stallscope lake (no _shards table): "
                              "write one with `stallscope fleet run SOURCE --out LAKE`")
    sqlviews.create(con, sqlviews.all_queries(fleet=True))
    return Lake(con, root, found)


def rollup(lk: Lake, *, top: int = TOP) -> dict:
    """The fleet's numbers as the `stallscope.fleet/1` object (docs/fleet.md): every value read from a view."""
    t0 = time.perf_counter()
    summary = (lk.rows("SELECT * FROM fleet_summary") or [{}])[0]
    out = {
        "schema": SCHEMA,
        "lake": lk.root,
        "fleet": summary,
        "pools": lk.rows("SELECT * FROM fleet_pools"),
        "replicas": lk.rows("SELECT * FROM fleet_replicas ORDER BY lost_rank"),
        "windows": lk.rows("SELECT * FROM fleet_windows"),
        "stall_events": lk.rows(f"SELECT * FROM fleet_stall_events ORDER BY fleet_rank LIMIT {int(top)}"),
        "stall_events_total": lk.con.execute("SELECT count(*) FROM fleet_stall_events").fetchall()[0][0],
        "budgets": lk.rows("SELECT * FROM fleet_budgets"),
        "failed_shards": lk.rows("SELECT * FROM fleet_failed_shards"),
        "lost_over_time": lk.rows("SELECT * FROM fleet_lost_timeline()"),
    }
    out["rollup_s"] = time.perf_counter() - t0
    return out
