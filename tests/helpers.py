"""Test helpers: run the CLI as a user would, build trace variants from real traces, ingest real log samples."""
from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import orjson


def cli(*args: str, cwd: Path | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stallscope.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout)


def load_trace(path: Path) -> dict:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return orjson.loads(data)


def write_trace(obj: dict, path: Path, gz: bool = True) -> Path:
    data = orjson.dumps(obj)
    path.write_bytes(gzip.compress(data, 6) if gz else data)
    return path


def physical_lines(data: bytes) -> int:
    """Lines as a parser must account for them: a last line without a newline still counts."""
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def ingested_store(paths):
    """A store holding `paths`, every one ingested cleanly, with each file's notes under `store.notes`."""
    import stallscope
    s = stallscope.open(":memory:")
    report = s.ingest(list(paths))
    assert all(r.ok for r in report), [r.message for r in report if not r.ok]
    s.notes = {Path(r.path).name: r.notes for r in report}
    return s


def by_source(store, sql: str, name: str):
    """Run `sql` with `$sid` standing for the source id of the file called `name`."""
    from conftest import source_id
    return store.sql(sql.replace("$sid", str(source_id(store, name))))
