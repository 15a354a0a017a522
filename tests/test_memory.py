"""The ingest's Arrow memory pool: jemalloc while parsing where pyarrow has it, the user's choice otherwise."""
from __future__ import annotations

import pyarrow as pa
import pytest

from stallscope.ingest.memory import arrow_pool, release_freed


def _has_jemalloc() -> bool:
    try:
        pa.jemalloc_memory_pool()
        return True
    except NotImplementedError:
        return False


def test_arrow_pool_switches_to_jemalloc_and_back_even_on_error(monkeypatch):
    monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)
    before = pa.default_memory_pool().backend_name
    with pytest.raises(RuntimeError):
        with arrow_pool():
            inside = pa.default_memory_pool().backend_name
            kept = pa.array(range(100_000))  # allocated from the ingest's pool, outlives it
            raise RuntimeError("parser failed")
    assert inside == ("jemalloc" if _has_jemalloc() else before)
    assert pa.default_memory_pool().backend_name == before
    release_freed()
    assert kept[99_999].as_py() == 99_999


def test_a_pool_chosen_by_the_user_is_kept(monkeypatch):
    monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", "system")
    before = pa.default_memory_pool().backend_name
    with arrow_pool():
        assert pa.default_memory_pool().backend_name == before


def test_store_memory_bounds_duckdb_while_loading_and_restores_the_limit(tmp_path):
    import duckdb

    from stallscope.ingest.memory import INGEST_DUCKDB_BYTES, store_memory

    con = duckdb.connect(str(tmp_path / "s.duckdb"))
    limit = "SELECT current_setting('memory_limit')"
    default = con.execute(limit).fetchone()[0]
    with pytest.raises(RuntimeError):
        with store_memory(con):
            assert con.execute(limit).fetchone()[0] == f"{INGEST_DUCKDB_BYTES >> 20}.0 MiB"
            raise RuntimeError("parser failed")
    assert con.execute(limit).fetchone()[0] == default
    con.execute("SET memory_limit = '3GB'")  # a user's own limit is theirs: kept while loading too
    mine = con.execute(limit).fetchone()[0]
    with store_memory(con):
        assert con.execute(limit).fetchone()[0] == mine
    assert con.execute(limit).fetchone()[0] == mine


def test_an_ingest_leaves_the_store_memory_limit_as_it_found_it(tmp_path):
    import stallscope

    log = tmp_path / "tgi.log"
    log.write_text('2024-02-14T10:00:00.000000Z  INFO text_generation_router: router/src/main.rs:1: Connected\n')
    with stallscope.open(tmp_path / "s.duckdb") as s:
        before = s.con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
        s.ingest([log])
        assert s.con.execute("SELECT current_setting('memory_limit')").fetchone()[0] == before


def test_a_source_that_runs_out_of_the_ingest_limit_is_loaded_again_without_it(tmp_path, monkeypatch):
    # A limit far too small for the load: the first try fails inside DuckDB, the retry without it succeeds.
    import stallscope
    from stallscope.ingest import memory

    from stallscope.ingest import orchestrate as ingest

    monkeypatch.setattr(ingest, "store_memory", lambda con: memory.store_memory(con, 1 << 20))

    tries = []
    real = ingest.ingest_one
    monkeypatch.setattr(ingest, "ingest_one", lambda *a, **k: tries.append(
        s.con.execute("SELECT current_setting('memory_limit')").fetchone()[0]) or real(*a, **k))
    log = tmp_path / "tgi.log"
    log.write_text("".join(f'2024-02-14T10:00:{i % 60:02d}.000000Z  INFO text_generation_router: router/src/main.rs:1: '
                           f'Connected {i}\n' for i in range(2000)))
    with stallscope.open(tmp_path / "s.duckdb") as s:
        r = s.ingest([log])
        assert r.ok and r[0].status == "ingested", r[0].message
        assert s.con.execute("SELECT count(*) FROM log_events").fetchone()[0] == 2000
    assert len(tries) == 2 and tries[0] == "1.0 MiB" and tries[1] != tries[0], tries
