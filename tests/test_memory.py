"""The ingest's Arrow memory pool: jemalloc while parsing where pyarrow has it, the user's choice otherwise."""
from __future__ import annotations

import pyarrow as pa
import pytest

from stallscope.memory import arrow_pool, release_freed


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
