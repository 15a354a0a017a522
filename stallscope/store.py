"""The DuckDB store: one file (or :memory:) holding every canonical table, read through SQL and polars.

The bottom of the data path: it knows the schema, not the parsers. Ingesting files into a store is the ingest
layer's job (stallscope.ingest); the notebook API (`stallscope.open`, stallscope/__init__.py) adds it as a method."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

import duckdb
import polars as pl

from . import interrupts
from .errors import StallscopeError, StoreLocked, os_cause
from .schema import TABLES, create_all

DEFAULT_DB = "stallscope.duckdb"

_LOCK_RX = re.compile(r"Conflicting lock is held in (?P<holder>.+?) \(PID (?P<pid>\d+)\)(?: by user (?P<user>\S+))?")


def connect(path: str | Path, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """Open the DuckDB file, turning lock conflicts and unreadable files into one-line errors."""
    path = str(path)
    if path != ":memory:":
        p = Path(path)
        if read_only and not p.exists():
            raise StallscopeError(f"no store at {path}: run `stallscope ingest FILE... --db {path}` first")
        if p.exists() and p.is_dir():
            raise StallscopeError(f"{path} is a directory, not a DuckDB file")
    try:
        con = duckdb.connect(path, read_only=read_only)
        interrupts.register(con)  # Ctrl-C interrupts its queries (stallscope.interrupts)
        return con
    except duckdb.IOException as e:
        m = _LOCK_RX.search(str(e))
        if m:
            who = f"{m['holder']} (PID {m['pid']}" + (f", user {m['user']}" if m["user"] else "") + ")"
            raise StoreLocked(f"{path} is locked by another process: {who}; wait for it to finish") from None
        raise StallscopeError(f"cannot open {path}: {os_cause(e)}") from None
    except duckdb.Error as e:
        raise StallscopeError(f"cannot open {path}: {str(e).splitlines()[0]}") from None


class Store:
    """A stallscope store: `s.table(...)`, `s.sql(...)` return polars DataFrames (`stallscope.open` gives the
    notebook's Store, which also ingests)."""

    def __init__(self, path: str | Path = DEFAULT_DB, *, read_only: bool = False):
        self.path = str(path)
        self.read_only = read_only
        self.con = connect(self.path, read_only=read_only)
        if not read_only:
            try:
                create_all(self.con)
            except duckdb.Error as e:  # a full disk, a read-only file system: said as such, with the file
                self._close_quietly()
                raise StallscopeError(f"cannot write the store {self.path}: {os_cause(e)}") from None
        else:
            self._stand_in_for_newer_tables()

    def _stand_in_for_newer_tables(self) -> None:
        """A store written by an older stallscope and opened read-only lacks the tables added since (it cannot be
        altered): each gets an empty temp table of the same shape, so every view reads it as "no such rows"."""
        have = {r[0] for r in self.con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'").fetchall()}
        for t in TABLES.values():
            if t.name not in have:
                cols = ", ".join(f"{c.name} {c.type}" for c in t.cols)
                self.con.execute(f"CREATE TEMP TABLE {t.name} ({cols})")

    # -- notebook API ------------------------------------------------------------------------------
    def sql(self, query: str, params: Sequence | dict | None = None) -> pl.DataFrame:
        """Run SQL and return a polars DataFrame (through Arrow)."""
        rel = self.con.sql(query, params=params)
        if rel is None:  # a statement without a result (DDL, INSERT)
            return pl.DataFrame()
        return pl.from_arrow(rel.to_arrow_table())

    def table(self, name: str) -> pl.DataFrame:
        if name not in TABLES and not self._has_relation(name):
            raise StallscopeError(f"no table or view named {name!r}; tables: {', '.join(TABLES)}")
        return self.sql(f'SELECT * FROM "{name}"')

    def sources(self) -> pl.DataFrame:
        return self.sql("SELECT * FROM sources ORDER BY source_id")

    # -- plumbing ----------------------------------------------------------------------------------
    def _has_relation(self, name: str) -> bool:
        return bool(self.con.execute(
            "SELECT 1 FROM information_schema.tables WHERE table_name = ?", [name]).fetchall())

    def close(self) -> None:
        self.con.close()

    def _close_quietly(self) -> None:
        try:
            self.con.close()
        except Exception:  # noqa: BLE001 - an error is already on its way to the user: never mask it
            pass

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is not None:
            self._close_quietly()
        else:
            self.close()

    def __repr__(self) -> str:
        return f"Store({self.path!r})"
