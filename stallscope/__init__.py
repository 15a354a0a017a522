"""stallscope: LLM-serving forensics over server logs, GPU traces and benchmark results, in one DuckDB store.

This module is the notebook API, one of the package's faces (docs/architecture.md): `stallscope.open(path)` gives
a `Store` that reads like the store below it and also ingests files, as `stallscope ingest` does."""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version as _v
from pathlib import Path
from typing import Iterable

from . import store as _store

try:
    __version__ = _v("stallscope")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+source"

__all__ = ["Store", "open", "__version__"]


class Store(_store.Store):
    """A stallscope store for a notebook: `s.ingest(...)`, then `s.table(...)`, `s.sql(...)` (polars DataFrames)."""

    def ingest(self, paths: str | Path | Iterable[str | Path], **kwargs):
        """Ingest files or directories, as `stallscope ingest` does; returns one result per file."""
        from .ingest.orchestrate import ingest_paths  # the parsers load on first use, not on `import stallscope`

        if isinstance(paths, (str, Path)):
            paths = [paths]
        return ingest_paths(self, [Path(p) for p in paths], **kwargs)


def open(path: str | Path = _store.DEFAULT_DB, *, read_only: bool = False) -> Store:  # noqa: A001 - notebook API name
    return Store(path, read_only=read_only)
