"""The store: idempotent ingest, replacement of changed sources, one-line lock errors, notebook API, schema docs."""
from __future__ import annotations

import shutil
import subprocess
import sys
import time

import polars as pl
import pytest

import stallscope
from stallscope.errors import StoreLocked
from stallscope.schema import TABLES, render_markdown
from conftest import ROOT, real
from helpers import cli, load_trace, write_trace

SMALL = "traces/vllm_mi300x_mixed_step_ctx9_gen37.json.gz"


def _counts(s) -> dict[str, int]:
    return {t: s.sql(f"SELECT count(*) FROM {t}").item() for t in TABLES}


def test_schema_doc_is_generated_and_current():
    assert (ROOT / "docs" / "schema.md").read_text() == render_markdown()


def test_every_column_documented_with_unit_convention():
    for t in TABLES.values():
        assert t.doc
        for c in t.cols:
            assert c.doc, f"{t.name}.{c.name} undocumented"
            if c.name.endswith("_ns") and c.type == "BIGINT":
                assert c.unit.startswith("ns"), f"{t.name}.{c.name} must say ns"
        if t.per_source:
            assert "source_id" in t.names


def test_schema_creation_is_idempotent(tmp_path):
    db = tmp_path / "x.duckdb"
    stallscope.open(db).close()
    with stallscope.open(db) as s:
        assert s.sql("SELECT value FROM meta WHERE key = 'schema_version'").item() == "1"
        assert set(TABLES) <= set(s.sql("SELECT table_name FROM information_schema.tables")["table_name"])


def test_opening_a_store_of_an_older_schema_adds_the_new_columns(tmp_path):
    """A store written before a column existed (here: dropped again) gets it back, empty, on open; its rows stay."""
    import duckdb

    db = tmp_path / "old.duckdb"
    with stallscope.open(db) as s:
        s.ingest(real(SMALL))
        n = s.sql("SELECT count(*) FROM gpu_kernels").item()
    with duckdb.connect(str(db)) as con:
        con.execute("ALTER TABLE requests DROP COLUMN shared_prefix_tokens")
        con.execute("ALTER TABLE gpu_kernels DROP COLUMN occupancy_pct")
    with stallscope.open(db) as s:
        cols = set(s.sql("SELECT table_name || '.' || column_name AS c FROM information_schema.columns")["c"])
        assert {"requests.shared_prefix_tokens", "gpu_kernels.occupancy_pct"} <= cols
        assert s.sql("SELECT count(*) FROM gpu_kernels").item() == n > 0


def test_a_store_of_an_older_schema_reads_read_only_with_its_newer_tables_empty(tmp_path):
    """A store written before a table existed cannot be altered when opened read-only (`report --db`, `analyze
    --db`): the table reads as empty instead of failing every view that names it."""
    import duckdb

    from stallscope.store import Store

    db = tmp_path / "old.duckdb"
    with stallscope.open(db) as s:
        s.ingest(real(SMALL))
    with duckdb.connect(str(db)) as con:
        con.execute("DROP TABLE metric_samples")
        con.execute("DROP TABLE engine_steps")
    with Store(db, read_only=True) as s:
        assert s.sql("SELECT count(*) FROM metric_samples").item() == 0
        assert s.sql("SELECT count(*) FROM engine_steps").item() == 0
        assert s.sql("SELECT count(*) FROM gpu_kernels").item() > 0


def test_reingest_same_content_is_a_noop(tmp_path):
    src = tmp_path / "a.json.gz"
    shutil.copy(real(SMALL), src)
    with stallscope.open(tmp_path / "s.duckdb") as s:
        r1 = s.ingest(src)
        before = _counts(s)
        r2 = s.ingest(src)
        assert r1[0].status == "ingested" and r2[0].status == "unchanged"
        assert _counts(s) == before
        # The same bytes under another name are recognised too.
        dup = tmp_path / "copy.bin"
        shutil.copy(src, dup)
        assert s.ingest(dup)[0].status == "unchanged"
        assert _counts(s) == before


def test_changed_file_replaces_only_its_rows(tmp_path):
    a, b = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    trace = load_trace(real(SMALL))
    write_trace(trace, a)
    shutil.copy(real("traces/vllm_b200_tp8_eager_prefill_step.json.gz"), b)
    with stallscope.open(tmp_path / "s.duckdb") as s:
        s.ingest([a, b])
        kb = s.sql("SELECT count(*) FROM gpu_kernels k JOIN sources USING (source_id) WHERE path LIKE '%b.json.gz'").item()
        # Drop half the kernels from a and re-ingest the same path.
        kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]
        drop = {id(e) for e in kernels[: len(kernels) // 2]}
        trace["traceEvents"] = [e for e in trace["traceEvents"] if id(e) not in drop]
        write_trace(trace, a)
        r = s.ingest(a)
        assert r[0].status == "replaced"
        assert s.sql("SELECT count(*) FROM sources").item() == 2
        ka = s.sql("SELECT count(*) FROM gpu_kernels k JOIN sources USING (source_id) WHERE path LIKE '%a.json.gz'").item()
        assert ka == len(kernels) - len(drop)
        assert s.sql("SELECT count(*) FROM gpu_kernels k JOIN sources USING (source_id) WHERE path LIKE '%b.json.gz'").item() == kb
        # No orphans: every per-source row belongs to a live source.
        for t in TABLES.values():
            if t.per_source:
                assert s.sql(f"SELECT count(*) FROM {t.name} WHERE source_id NOT IN (SELECT source_id FROM sources)").item() == 0


def test_second_writer_gets_one_line_lock_error(tmp_path):
    db = tmp_path / "locked.duckdb"
    stallscope.open(db).close()
    holder = subprocess.Popen([sys.executable, "-c", f"import duckdb, time; c = duckdb.connect({str(db)!r}); "
                               "print('ready', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(StoreLocked) as e:
            stallscope.open(db)
        assert f"PID {holder.pid}" in str(e.value)
        r = cli("ingest", real(SMALL), "--db", db)
        assert r.returncode == 1
        lines = [l for l in r.stderr.strip().splitlines() if l.strip()]
        assert len(lines) == 1 and "locked" in lines[0] and str(holder.pid) in lines[0]
        assert "Traceback" not in r.stderr + r.stdout
    finally:
        holder.kill()
        holder.wait()


def test_notebook_api_returns_polars(tmp_path):
    s = stallscope.open(":memory:")
    rep = s.ingest([real(SMALL)])
    assert rep.ok and len(rep) == 1
    k = s.table("gpu_kernels")
    assert isinstance(k, pl.DataFrame) and k.height == 413
    assert k.schema["start_ns"] == pl.Int64
    df = s.sql("SELECT phase, ctx_tokens FROM steps")
    assert df.row(0) == ("mixed", 8155)
    assert s.sql("SELECT count(*) AS n FROM rejects").item() == 0
    with pytest.raises(stallscope.errors.StallscopeError):
        s.table("no_such_table")


def test_a_write_in_uneven_batches_lands_as_full_row_groups(tmp_path):
    # DuckDB ends each Arrow batch with a partial row group; the next checkpoint would rewrite them all.
    import pyarrow as pa

    from stallscope.parsers.base import ROW_GROUP_ROWS, InputFile, Options, ParseContext

    n = 3 * ROW_GROUP_ROWS + 5000
    cuts = [0, 150_001, 200_000, 310_007, n]
    table = pa.Table.from_batches([
        pa.record_batch({"name": pa.array([f"op{i % 7}" for i in range(a, b)]),
                         "start_ns": pa.array(range(a, b), pa.int64())}) for a, b in zip(cuts, cuts[1:])])
    assert len(table.to_batches()) == 4
    src = tmp_path / "x.json"
    src.write_text("{}")
    s = stallscope.open(tmp_path / "s.duckdb")
    s.con.execute("BEGIN")
    ctx = ParseContext(s.con, 1, InputFile(src), Options())
    assert ctx.write("cpu_ops", table) == n
    s.con.execute("COMMIT")
    groups = s.con.execute("SELECT row_group_id, max(count) FROM pragma_storage_info('cpu_ops') "
                           "GROUP BY ALL ORDER BY 1").fetchall()
    assert [c for _, c in groups] == [ROW_GROUP_ROWS] * 3 + [5000]
    assert s.sql("SELECT count(*) AS n, sum(start_ns) AS s FROM cpu_ops").row(0) == (n, n * (n - 1) // 2)


def test_a_parsers_duckdb_threads_hold_while_it_parses_and_are_restored(tmp_path, monkeypatch):
    from stallscope.parsers import sglang_log

    seen = []
    parse = sglang_log.SglangLogParser.parse

    def spy(self, ctx, fmt):
        seen.append(ctx.con.execute("SELECT current_setting('threads')").fetchall()[0][0])
        return parse(self, ctx, fmt)

    monkeypatch.setattr(sglang_log.SglangLogParser, "parse", spy)
    monkeypatch.setattr(sglang_log.SglangLogParser, "duckdb_threads", 1)
    s = stallscope.open(tmp_path / "s.duckdb")
    s.con.execute("SET threads = 3")
    r = s.ingest([real("sglang/sglang_v0.4.4_decode_largest_len_trailing_comma_issue4407.log")])
    assert r.ok, r[0].message
    assert seen == [1]
    assert s.con.execute("SELECT current_setting('threads')").fetchall()[0][0] == 3
