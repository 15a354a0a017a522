"""The fleet rollup: open a lake written by `stallscope fleet run` as DuckDB views and run the fleet_*.sql views
(queries/fleet/*.sql) over it into the `stallscope.fleet/1` object.

The lake comes in as one `lake_<table>` view per lake table holding the rows of the shards whose `_shards` row
says `done`: on a local disk `lake.scan`'s `read_parquet(..., hive_partitioning = true)` (pool, replica and window
read as text), for a URI an Arrow dataset over the pyarrow filesystem that wrote the lake, with the same hive
partitions. A table no shard wrote (a lake whose shards all failed, or `metrics_windows` in a lake whose shards
carry no metrics) is an empty view of its declared schema, so every rollup view always binds. The rollup views are
plain SQL over those; this module only wires them and shapes the result.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from .. import sqlviews
from ..errors import StallscopeError

SCHEMA = "stallscope.fleet/1"
TOP = 20
BINS = 60  # time bins of the lost-goodput timeline


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


def _root(lake) -> str:
    from .shards import is_uri

    text = str(lake)
    if is_uri(text):
        return text.rstrip("/")
    from pathlib import Path

    p = Path(text).expanduser()
    if not p.is_dir():
        raise StallscopeError(f"lake {text} is not a folder")
    return str(p.resolve())


def _empty_view(con, view: str, schema, partitions: tuple[str, ...]) -> None:
    import pyarrow as pa

    fields = list(schema) + [pa.field(p, pa.string()) for p in partitions if p not in schema.names]
    con.register(f"_empty_{view}", pa.schema(fields).empty_table())
    con.execute(f"CREATE OR REPLACE TEMP VIEW {view} AS SELECT * FROM _empty_{view}")


def _local_table(con, root: str, table: str) -> tuple[str | None, int]:
    """(DuckDB table expression, Parquet files) of one lake table on a local disk: `lake.scan`'s read_parquet."""
    from . import lake as lk

    import glob

    # Listed here with the root escaped (a lake path may hold `[` or `*`), then handed to DuckDB as a file list.
    pattern = "_shards/*/*.parquet" if table == "_shards" else f"{table}/*/*/*/*.parquet"
    files = sorted(glob.glob(f"{glob.escape(root)}/{pattern}"))
    return (lk.scan(root, table, files) if files else None), len(files)


def _remote_table(con, root: str, table: str, schema, parts: tuple[str, ...]) -> tuple[str | None, int]:
    """The same for a URI: the lake's files through the pyarrow filesystem that wrote them (same credentials), as
    an Arrow dataset with hive partitions (as text) that DuckDB scans."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    from pyarrow import fs as pafs

    from .shards import filesystem

    fs, base = filesystem(root)
    top = f"{base.rstrip('/')}/{table}"
    if fs.get_file_info(top).type != pafs.FileType.Directory:
        return None, 0
    files = sorted(i.path for i in fs.get_file_info(pafs.FileSelector(top, recursive=True))
                   if i.type == pafs.FileType.File and i.path.endswith(".parquet"))
    if not files:
        return None, 0
    hive = ds.partitioning(pa.schema([pa.field(p, pa.string()) for p in parts]), flavor="hive") if parts else None
    full = pa.schema(list(schema) + [pa.field(p, pa.string()) for p in parts if p not in schema.names])
    name = f"_ds_{table.strip('_')}"
    con.register(name, ds.dataset(files, schema=full, filesystem=fs, format="parquet", partitioning=hive,
                                  partition_base_dir=top))
    return name, len(files)


def open_lake(lake) -> Lake:
    """Connect to LAKE (a folder, or a URI: s3://, gs://, file://) and install the rollup views: one `lake_<table>`
    view per lake table (`lake_shards` for `_shards`) holding the rows of the shards `_shards` says are done, then
    the fleet_*.sql views over them."""
    import duckdb

    from . import lake as lk
    from .shards import is_uri

    root = _root(lake)
    con = duckdb.connect(":memory:")
    con.execute("SET enable_progress_bar = false")

    def table_expr(table: str, schema, parts: tuple[str, ...]) -> tuple[str | None, int]:
        if is_uri(root):
            return _remote_table(con, root, table, schema, parts)
        return _local_table(con, root, table)

    found: dict[str, int] = {}
    try:
        expr, found["_shards"] = table_expr("_shards", lk.SHARDS, ())  # shard= repeats shard_id
        if expr is None:
            raise StallscopeError(f"{root} is not a stallscope lake (no _shards table): "
                                  "write one with `stallscope fleet run SOURCE --out LAKE`")
        con.execute(f"CREATE OR REPLACE TEMP VIEW lake_shards AS SELECT * FROM {expr}")
        for table, schema in lk.ALL_TABLES.items():
            parts = ("pool", "replica", "window")
            expr, found[table] = table_expr(table, schema, parts)
            if expr is not None:
                # a shard being rewritten, or one that failed after it was done, is not in the rollup
                con.execute(f"CREATE OR REPLACE TEMP VIEW lake_{table} AS SELECT * FROM {expr} "
                            "WHERE shard_id IN (SELECT shard_id FROM lake_shards WHERE status = 'done')")
            else:  # no shard wrote the table (all failed, or an optional one): an empty view of its declared schema
                _empty_view(con, f"lake_{table}", schema, parts)
        sqlviews.create(con, sqlviews.all_queries(fleet=True))
    except (duckdb.Error, OSError) as e:
        con.close()
        raise StallscopeError(f"cannot read lake {root}: {str(e).splitlines()[0]}") from None
    except BaseException:
        con.close()
        raise
    return Lake(con, root, found)


def rollup(lk: Lake, *, top: int = TOP, bins: int = BINS) -> dict:
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
        "lost_over_time": lk.rows(f"SELECT * FROM fleet_lost_timeline(bins := {int(bins)})"),
    }
    out["rollup_s"] = time.perf_counter() - t0
    return out
