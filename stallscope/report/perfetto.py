"""Chrome-trace (Perfetto) export: the store's original GPU/CPU timeline plus tracks for what the analysis found.

The file is Chrome's JSON trace format (`{"traceEvents": [...]}`, complete `X` events in microseconds, `M`
metadata naming processes and threads), which ui.perfetto.dev and chrome://tracing open. DuckDB writes the events
straight from the tables (`COPY ... FORMAT JSON`), so a trace of millions of events never passes through Python
objects. The events are documented views, stallscope/queries/export/export_perfetto_*.sql; this module installs them,
computes each once and writes the file. Times are microseconds since the earliest exported instant (`otherData.stallscope_origin_ns`, ns since
the Unix epoch, UTC): epoch microseconds with nanosecond fractions do not fit a double.

Processes and threads (the track names users see):
- `<trace file> GPU <device>`: one thread per stream (`stream <n>`), the trace's kernels, memcpys/memsets and
  GPU annotations as recorded.
- `<trace file> CPU pid <pid>`: one thread per OS thread, the CPU ops, user annotations, python functions and
  CUDA runtime/driver calls as recorded.
- `<trace file> engine steps`: thread `steps`, one slice per engine step (`step <i> <phase>`), with its batch
  composition in `args`.
- `stallscope: decode gaps`: one thread per request (`request <id>`), a slice per streamed-chunk gap; for traces
  no client data covers, one thread per trace (`engine step gaps <file>`), a slice per step gap.
- `stallscope: spikes`: the analysis's spikes, on the stalled request's thread (`request <id>`) or the trace's
  (`engine step spikes <file>`), named `spike <gap> ms (x<ratio>)`, with the rule, baseline, excess, prefill share,
  evidence and culprits (request, prompt tokens, prefill time in the gap) in `args`.
- `stallscope: prefill chunks`: the prefill chunks assigned to each request (`request <id>`), one slice per step
  that computed part of its prompt (`prefill chunk <n> tok`; `inferred prefill` windows when no trace covers the
  request), and per trace the steps that ran prefill work (`prefill steps <file>`: `prefill <n> tok`), plus the
  steps that stalled a spike where the trace cannot split prefill from decode work (`stalling step (prefill not
  split)`).
"""
from __future__ import annotations

import gzip
import os
import shutil
import tempfile
from pathlib import Path

from .. import sqlviews
from ..errors import StallscopeError, write_error
from ..outputs import atomic_file

# Computed once each, in this order (the metadata reads the events and the thread and file maps); the file is then
# written from the computed rows, the events in their ORDER BY.
_STEPS = ("export_perfetto_origin", "export_perfetto_cpu_pids", "export_perfetto_request_threads",
          "export_perfetto_source_files", "export_perfetto_events", "export_perfetto_metadata")


def export(store, out: str | Path) -> dict:
    """Write the analysed store as Chrome-trace JSON (gzip when `out` ends in .gz); returns counts per event category.

    The analysis runs first, on the same connection (`stallscope.analyze.prepare` or `analyze`, as `stallscope
    export perfetto` does): the export draws its spikes, gaps and prefill chunks, it does not compute them."""
    con = getattr(store, "con", store)
    have = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'analysis_params'").fetchall()[0][0]
    if not have:
        raise StallscopeError("the Perfetto export draws an analysed store: run stallscope.analyze.prepare(store.con, "
                              "...) on this connection first")
    sqlviews.install_export(con)
    sqlviews.materialise(con, _STEPS)
    out = Path(out)
    tmp = None
    try:
        t0 = con.execute("SELECT t0 FROM export_perfetto_origin").fetchall()[0][0]
        counts = dict(con.execute("SELECT cat, count(*) FROM export_perfetto_events GROUP BY cat").fetchall())
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".stallscope-perfetto-", suffix=".json", dir=out.parent)
        os.close(fd)
        # DuckDB's COPY path is SQL text: quote it as a string literal.
        lit = "'" + tmp.replace("'", "''") + "'"
        try:
            con.execute(f"""COPY (SELECT * FROM export_perfetto_metadata UNION ALL
                                  SELECT * FROM (SELECT * FROM export_perfetto_events ORDER BY pid, tid, ts, dur DESC))
                            TO {lit} (FORMAT JSON, ARRAY true)""")
        except Exception as e:  # DuckDB's IOException: the disk is full, the folder is not writable
            if "IO Error" in str(e) or isinstance(e, OSError):
                raise write_error(out, e) from None
            raise
        import orjson

        tail = orjson.dumps({"stallscope_origin_ns": int(t0), "exported_by": "stallscope export perfetto",
                             "clock": "ts in microseconds since stallscope_origin_ns (ns since the Unix epoch, UTC)"})
        opener = (lambda p: gzip.open(p, "wb", compresslevel=6)) if out.name.endswith(".gz") else (lambda p: open(p, "wb"))
        with atomic_file(out) as part, opener(part) as f, open(tmp, "rb") as src:  # the old file or the whole new one
            f.write(b'{"displayTimeUnit":"ms","traceEvents":')
            shutil.copyfileobj(src, f, 1 << 20)
            f.write(b',"otherData":' + tail + b"}\n")
    finally:
        if tmp is not None:
            os.unlink(tmp)
        # The computed events can be millions of rows: free them, and leave the views as they were installed.
        for name in _STEPS:
            con.execute(f"DROP VIEW IF EXISTS {name}")
            con.execute(f"DROP TABLE IF EXISTS _m_{name}")
        sqlviews.install_export(con)
    return counts
