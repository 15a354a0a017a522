"""The command line as a user meets it: summaries, formats, exit codes, and one-line errors."""
from __future__ import annotations

import json

import polars as pl
import pytest

from conftest import real
from helpers import cli

MIXED = "traces/vllm_mi300x_mixed_step_ctx9_gen37.json.gz"


def test_version():
    r = cli("--version")
    assert r.returncode == 0 and r.stdout.startswith("stallscope ")


def test_ingest_sources_sql_roundtrip(tmp_path):
    db = tmp_path / "s.duckdb"
    r = cli("ingest", real(MIXED), "--db", db)
    assert r.returncode == 0, r.stderr
    assert "ingested" in r.stdout and "kineto_trace" in r.stdout
    assert "\x1b[" not in r.stdout  # piped: no colour codes, no progress bar
    r = cli("sources", "--db", db)
    assert r.returncode == 0 and "trace_base_time" in r.stdout
    r = cli("sql", "SELECT count(*) AS n FROM gpu_kernels", "--db", db, "--format", "csv")
    assert r.stdout.strip().splitlines() == ["n", "413"]
    r = cli("sql", "SELECT phase, ctx_reqs FROM steps", "--db", db, "--format", "json")
    assert json.loads(r.stdout) == [{"phase": "mixed", "ctx_reqs": 9}]
    out = tmp_path / "k.parquet"
    r = cli("sql", "SELECT name, dur_ns FROM gpu_kernels", "--db", db, "--format", "parquet", "--out", out)
    assert r.returncode == 0 and pl.read_parquet(out).height == 413
    r = cli("steps", "--db", db)
    assert r.returncode == 0 and "mixed" in r.stdout


@pytest.mark.parametrize("content,needle", [
    (b"", "empty file"),
    pytest.param(b"\x00\x01\x02\x03binary\x00" * 100, "binary file", marks=pytest.mark.slow),
    (b"hello world\nthis is not a trace or a log\n", "unknown format"),
    pytest.param(b"x" * (10 << 20), "unknown format", marks=pytest.mark.slow),
    (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "na', "not a readable trace"),
])
def test_bad_input_is_one_line_and_nonzero(tmp_path, content, needle):
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    db = tmp_path / "s.duckdb"
    r = cli("ingest", p, "--db", db)
    assert r.returncode == 1
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and needle in err[0], r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    r = cli("sql", "SELECT (SELECT count(*) FROM sources) + (SELECT count(*) FROM rejects) AS n", "--db", db,
            "--format", "csv")
    assert r.stdout.strip().splitlines()[-1] == "0"


def test_missing_path_and_bad_sql_and_missing_store(tmp_path):
    r = cli("ingest", tmp_path / "nope.json", "--db", tmp_path / "s.duckdb")
    assert r.returncode == 1 and "no such file" in r.stderr
    r = cli("sql", "SELECT * FROM sources", "--db", tmp_path / "absent.duckdb")
    assert r.returncode == 1 and "no store at" in r.stderr and r.stderr.count("\n") == 1
    cli("ingest", real(MIXED), "--db", tmp_path / "s.duckdb")
    r = cli("sql", "SELEC nonsense", "--db", tmp_path / "s.duckdb")
    assert r.returncode == 1 and r.stderr.startswith("error: SQL error") and r.stderr.count("\n") == 1
    r = cli("ingest", "--db", tmp_path / "s.duckdb")
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_partial_failure_keeps_good_files_warns_and_exits_zero(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("nothing here\n")
    db = tmp_path / "s.duckdb"
    r = cli("ingest", real(MIXED), bad, "--db", db)
    assert r.returncode == 0, r.stderr
    err = r.stderr.strip().splitlines()
    assert len(err) == 2 and "Traceback" not in r.stderr, r.stderr
    assert err[0].startswith("warning: ") and "bad.txt" in err[0] and "unknown format" in err[0]
    assert err[1] == "warning: 1 of 2 files could not be read"
    r = cli("sql", "SELECT count(*) FROM sources", "--db", db, "--format", "csv")
    assert r.stdout.strip().splitlines()[-1] == "1"


def test_strict_exits_nonzero_when_any_file_failed_and_nothing_usable_is_one_line(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("nothing here\n")
    db = tmp_path / "s.duckdb"
    r = cli("ingest", real(MIXED), bad, "--db", db, "--strict")
    assert r.returncode == 1 and "bad.txt" in r.stderr and "1 of 2 files could not be read" in r.stderr
    r = cli("sql", "SELECT count(*) FROM sources", "--db", db, "--format", "csv")
    assert r.stdout.strip().splitlines()[-1] == "1"  # the good file is kept even when --strict fails the run
    bad2 = tmp_path / "bad2.txt"
    bad2.write_text("\x00\x01 binary\n")
    r = cli("ingest", bad, bad2, "--db", tmp_path / "t.duckdb")
    err = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(err) == 1 and err[0].startswith("error: nothing usable was read from 2 files")
    assert "bad.txt" in err[0] and "bad2.txt" in err[0]
