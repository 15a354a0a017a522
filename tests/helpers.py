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


def store_tables(paths, tables, said: bool = False) -> dict:
    """Every canonical table in `tables` of a fresh store holding `paths` (sorted, without source ids), the sources'
    counts and clock, and with `said` each file's status, message and notes: two parse paths compare with `same_tables`."""
    import stallscope
    with stallscope.open(":memory:") as s:
        report = s.ingest(paths)
        out = {t: s.table(t).drop("source_id") for t in tables}
        out = {t: df.sort(df.columns, nulls_last=True) for t, df in out.items()}
        out["sources"] = s.sql("SELECT path, format, records_parsed, records_skipped, records_rejected, first_ns, "
                               "last_ns, clock_method, clock_note FROM sources ORDER BY path").rows()
        if said:
            out["said"] = [(r.status, r.message, sorted(r.notes)) for r in report]
    return out


def same_tables(a: dict, b: dict) -> None:
    import polars as pl
    for k, v in a.items():
        assert (v.equals(b[k]) if isinstance(v, pl.DataFrame) else v == b[k]), k


def true_goodput(run, slo: dict, policy: str = "chunked") -> dict:
    """Goodput at every budget of the replay grid on the engine a simulated run really had (its preset, its
    workload): the exhaustive sweep a recommendation is scored against."""
    from stallscope.recommend import replay

    sem = replay.Semantics(policy, max_num_seqs=run.spec.max_num_seqs,
                           kv_cache_tokens=run.sim.config.kv_capacity(run.preset))
    return {x.chunk_tokens: x.goodput_rps for x in
            replay.sweep([run.preset], sem, run.workload, slo, replay.grid(sem, run.workload), seed=5)}
