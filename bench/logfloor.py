"""The floor of a log ingest in this project's stack: the least work any parser of the engine's main record kind
must do, written the cheapest way polars, numpy and DuckDB allow, on both cores. `bench_logs.py` runs it beside
stallscope and the Python line loop.

Per engine it reads the file in 8 MB frames (`parsers.lines.iter_line_frames`, stallscope's own front end: numpy
finds the lines, an Arrow string-view array over the block, no copy), keeps the lines of the main kind by literal
tests, reads their fields by literal position (find, slice, split, cast: no capture groups), turns timestamps into
int64 ns once per distinct text, and inserts the rows into a DuckDB file. Two frames are worked at once on a thread pool (polars releases the
GIL; `parsers.lines.ordered_map`) while the main thread inserts, as stallscope does.

It does less than a parser: one field layout per label (the first seen; other layouts are skipped, not read), no
wrapper prefixes, no multi-line records, no rejects, no record accounting, no content hash, and for vLLM no
shared-prefix block keys (the prompt's token ids are only counted). So what it costs is a lower bound on what
stallscope can cost for the same file, and a target beyond it is beyond this stack on this machine.

    .venv/bin/python bench/logfloor.py sglang /tmp/stallscope-bench/sglang_200MB.log /tmp/floor.duckdb
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Iterator

import duckdb
import polars as pl

from stallscope.parsers.base import InputFile
from stallscope.parsers.lines import iter_line_frames, ordered_map

FRAME = 8 << 20
T = pl.col("text")


def frames(path: str) -> Iterator[pl.DataFrame]:
    return iter_line_frames(InputFile(Path(path)), block_bytes=FRAME)


def _ns(ts: pl.Series, fmt: str) -> pl.Series:
    """int64 ns of each timestamp text, parsed once per distinct text (a log has one per second or per line)."""
    u = ts.drop_nulls().unique()
    ns = u.str.to_datetime(fmt, strict=False, time_unit="ns").dt.epoch("ns")
    return ts.replace_strict(u, ns, default=None, return_dtype=pl.Int64)


_SGL_FIELDS = 16  # value columns v0..v15: the i-th field of the line's layout (the real parser names them by key)


def sglang(df: pl.DataFrame) -> pl.DataFrame | None:
    """Prefill/Decode batch lines: time, kind and every field of the label's first layout in the frame."""
    close = T.str.find("] ", literal=True)
    d = df.filter(T.str.starts_with("[") & T.str.contains(" batch, ", literal=True)).with_columns(close.alias("c"))
    d = d.with_columns(T.str.slice(pl.col("c") + 2).alias("m"), T.str.slice(1, 19).alias("ts"))
    out = []
    for label, kind in (("Prefill batch, ", "prefill"), ("Decode batch, ", "decode")):
        g = d.filter(pl.col("m").str.starts_with(label))
        if g.height == 0:
            continue
        keys = [kv.split(": ")[0] for kv in g["m"][0][len(label):].rstrip(", ").split(", ")]
        parts = pl.col("m").str.slice(len(label)).str.split(", ")
        vals = [parts.list.get(i, null_on_oob=True).str.slice(len(k) + 2).cast(pl.Float64, strict=False).alias(f"v{i}")
                for i, k in enumerate(keys[:_SGL_FIELDS])]
        out.append(g.select("line_no", pl.lit(kind).alias("kind"), "ts", *vals))
    if not out:
        return None
    b = pl.concat(out, how="diagonal_relaxed")
    b = b.with_columns(*[pl.lit(None, pl.Float64).alias(f"v{i}") for i in range(_SGL_FIELDS) if f"v{i}" not in b.columns])
    return b.select("line_no", "kind", _ns(b["ts"], "%Y-%m-%d %H:%M:%S").alias("ts"),
                    *[f"v{i}" for i in range(_SGL_FIELDS)])


_TGI_TIMES = ("total_time", "validation_time", "queue_time", "inference_time", "time_per_token")
_UNITS = {"ns": 1e-6, "µs": 1e-3, "us": 1e-3, "ms": 1.0, "s": 1e3}


def _duration_ms(e: pl.Expr) -> pl.Expr:
    num = e.str.extract(r"^([0-9.]+)", 1).cast(pl.Float64, strict=False)
    unit = e.str.strip_chars_start("0123456789.")
    return num * unit.replace_strict(list(_UNITS), list(_UNITS.values()), default=None, return_dtype=pl.Float64)


def tgi(df: pl.DataFrame) -> pl.DataFrame | None:
    """`… Success` lines: time, the five span timings (with their unit) and the GenerateParameters text."""
    g = df.filter(T.str.ends_with(": Success"))
    if g.height == 0:
        return None
    # The values hold non-ASCII (`µs`), where polars' find (bytes) and slice (characters) disagree: split instead.
    cols = [_duration_ms(T.str.splitn(f' {k}="', 2).struct.field("field_1").str.splitn('"', 2).struct.field("field_0"))
            .alias(k + "_ms") for k in _TGI_TIMES]
    params = T.str.splitn("parameters=GenerateParameters { ", 2).struct.field("field_1").str.splitn(" } total_time=", 2)
    g = g.select("line_no", T.str.slice(0, 27).alias("ts"), *cols, params.struct.field("field_0").alias("params"))
    return g.with_columns(_ns(g["ts"], "%Y-%m-%dT%H:%M:%S%.fZ").alias("ts"))


def vllm(df: pl.DataFrame) -> pl.DataFrame | None:
    """Received / Added / Finished request lines and stats lines: time, kind, request id; a Received line's prompt
    token count (its ids' commas counted, not hashed into block keys)."""
    kind = (pl.when(T.str.contains("] Received request ", literal=True)).then(pl.lit("received"))
            .when(T.str.contains("] Added request ", literal=True)).then(pl.lit("added"))
            .when(T.str.contains("] Finished request ", literal=True)).then(pl.lit("finished"))
            .when(T.str.contains("Avg prompt throughput: ", literal=True)).then(pl.lit("stats")))
    g = df.with_columns(kind.alias("kind")).filter(pl.col("kind").is_not_null())
    if g.height == 0:
        return None
    at = T.str.find(" request ", literal=True) + 9
    rid = T.str.slice(at, 64)
    ids = T.str.find("prompt_token_ids: [", literal=True)
    g = g.select("line_no", "kind", T.str.slice(5, 14).alias("ts"),
                 pl.when(pl.col("kind") != "stats").then(rid.str.slice(0, rid.str.find(r"[:.]"))).alias("request_id"),
                 pl.when(ids >= 0).then(T.str.slice(ids).str.slice(0, T.str.slice(ids).str.find("]", literal=True))
                                        .str.count_matches(",", literal=True) + 1).alias("prompt_tokens"))
    return g.with_columns(_ns("2025-" + g["ts"], "%Y-%m-%d %H:%M:%S").alias("ts"))


READERS: dict[str, Callable[[pl.DataFrame], pl.DataFrame | None]] = {"sglang": sglang, "tgi": tgi, "vllm": vllm}


def run(engine: str, path: str, db: str) -> int:
    """The floor reader of `engine` over `path` into table `rows` of DuckDB file `db`; returns the rows read."""
    con = duckdb.connect(db)
    con.execute("SET threads = 1")  # the insert is one thread's work; the other core parses
    con.execute("BEGIN")
    n, made = 0, False
    for rows in ordered_map(READERS[engine], frames(path), workers=2):  # two frames at once, in file order
        if rows is None or rows.height == 0:
            continue
        a = rows.to_arrow()
        if not made:
            con.from_arrow(a).limit(0).create("rows")
            made = True
        con.from_arrow(a).insert_into("rows")
        n += rows.height
    con.execute("COMMIT")
    con.close()
    return n


if __name__ == "__main__":
    print(run(sys.argv[1], sys.argv[2], sys.argv[3]))
