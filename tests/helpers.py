"""Test helpers: run the CLI as a user would, and build trace variants from real traces."""
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
