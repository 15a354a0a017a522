"""The store a command reads: input files ingested into a fresh store (or into --db), else --db opened read-only.

Shared by analyze, recommend, report and export; it sits in the ingest layer (below every command) so that no
command module imports another."""
from __future__ import annotations

import sys
from pathlib import Path

from ..errors import StallscopeError
from ..parsers import Options
from ..store import DEFAULT_DB, Store
from .orchestrate import ingest_paths


def open_store(paths, db, year, tz) -> Store:
    """`paths` ingested into a fresh in-memory store (or into `db`), else `db` read-only. Files that fail are one
    line each on stderr; nothing ingested at all is an error."""
    if not paths:
        return Store(db or DEFAULT_DB, read_only=True)
    store = Store(db or ":memory:")
    report = ingest_paths(store, [Path(p) for p in paths], options=Options(year=year, tz=tz))
    for r in report:
        if not r.ok:
            sys.stderr.write(f"error: {r.message}\n")
            sys.stderr.flush()
    if not any(r.ok for r in report):
        store.close()
        raise StallscopeError("nothing could be ingested")
    return store
