"""Shared machinery of the line-record log parsers (TGI, SGLang): frames with the cut-gzip check, records formed from
their physical lines (a start flag per line, group ids from its cumulative sum, `group_by` + `str.join`), the
known-noise and reject bookkeeping, and startup-configuration rows. Every piece is a polars expression or frame
operation; none loops over lines.
"""
from __future__ import annotations

from typing import Callable, Iterator

import polars as pl

from . import prefixes as X
from .base import InputFile, ParseContext
from .lines import iter_line_frames, prefetch

MSG_MAX = 4096  # characters of a message kept in log_events
# Bytes per frame: a frame's derived text columns (cleaned line, rest, message, spans, ...) hold several copies of
# it and ~4 frames are in flight (read ahead, carried, worked on by two threads), so the peak grows ~30 MB per MB of
# frame. Measured at 200 MB (2 cores, shared): 4 MB frames peak ~580 MB RSS against ~770 MB at 8 MB, but the
# parsers' fixed cost per frame made them cost TGI +12% and SGLang +20% CPU-s; 8 MB until that cost is gone.
FRAME_BYTES = 8 << 20


ANSI_RX = X.ANSI_RX
WRAPS_RX = X.WRAPS  # the wrapper prefixes of every log (compose, kubectl, journald, Ray actors), unanchored


def unwrap(df: pl.DataFrame, col: str = "text") -> pl.DataFrame:
    """(line_no, t, wrap, dedup): the line without ANSI codes, its wrapper prefixes (`prefixes.WRAPS`) cut off
    into `wrap`, and Ray's dedup marker cut off the end with its count in `dedup` (NULL without one)."""
    t = pl.col(col)
    if df[col].str.contains(X.ANSI_MARK).any():
        t = X.strip_ansi(t)
    df = df.select("line_no", t.alias("t"))
    # The capture runs only on lines that start with a wrapper (a capture-free test first: most logs have none).
    has = df["t"].str.contains("^" + X.ONE)
    if has.any():
        w, rest = X.split(pl.col("t"))
        sub = df.filter(has).select("line_no", w.alias("wrap"), rest.alias("t"))
        df = df.with_columns(pl.lit(None, pl.String).alias("wrap")).update(sub, on="line_no")
    else:
        df = df.with_columns(pl.lit(None, pl.String).alias("wrap"))
    df = df.select("line_no", "wrap", "t")
    if df["t"].str.contains("across cluster]", literal=True).any():
        return df.with_columns(X.dedup_count(pl.col("t")).alias("dedup"), X.strip_dedup(pl.col("t")).alias("t"))
    return df.with_columns(pl.lit(None, pl.Int64).alias("dedup"))


def wrap_names(wrap: pl.Series) -> pl.Series:
    """log_events.process from the wrapper prefixes (`prefixes.names`)."""
    return X.names(wrap)


class _CountingInput:
    """The input as iter_line_frames sees it, counting the decompressed bytes that pass through."""

    def __init__(self, inp: InputFile):
        self.inp = inp
        self.nbytes = 0

    def iter_blocks(self, size: int = 8 << 20) -> Iterator[bytes]:
        for block in self.inp.iter_blocks(size):
            self.nbytes += len(block)
            yield block


def line_frames(ctx: ParseContext, prepare: Callable[[pl.DataFrame], pl.DataFrame] | None = None
                ) -> Iterator[tuple[pl.DataFrame, bool]]:
    """(frame, is_last) in file order; one frame of look-ahead so that a gzip cut is known before the last frame.

    With `prepare`, frames are read, split into lines, stripped of undecodable lines (rejected here) and prepared
    in a background thread (polars releases the GIL: the next frame is prepared while this one is parsed on the
    other core). The last line of a cut gzip is rejected (with the cut's reason), since the cut may fall inside
    it. Sets `ctx.raw_bytes` to the decompressed size.
    """
    counting = _CountingInput(ctx.input)

    def work(df: pl.DataFrame):
        bad = df.filter(pl.col("bad_utf8")).select("line_no", "text") if df["bad_utf8"].any() else None
        good = df if bad is None else df.filter(~pl.col("bad_utf8"))
        return bad, (prepare(good) if prepare else good), df.tail(1).select("line_no", "text")

    prev = None
    for item in prefetch(map(work, iter_line_frames(counting, block_bytes=FRAME_BYTES)), depth=1):
        if prev is not None:
            yield _reject_bad(ctx, prev), False
        prev = item
    ctx.raw_bytes = counting.nbytes
    cut = ctx.input.cut_error
    if prev is None:
        if cut:
            ctx.reject(cut)
        return
    bad, df, last_line = prev
    if cut:
        ctx.write_rejects(last_line.select(
            "line_no", pl.lit(f"{cut}; the last line may be incomplete").alias("reason"),
            pl.col("text").alias("raw")).to_arrow())
        n = int(last_line["line_no"][0])
        df = df.filter(pl.col("line_no") != n)
        if bad is not None:
            bad = bad.filter(pl.col("line_no") != n)
    yield _reject_bad(ctx, (bad, df, last_line)), True


def _reject_bad(ctx: ParseContext, item) -> pl.DataFrame:
    """Reject a frame's lines that are not valid UTF-8 (their raw text keeps U+FFFD where the bad bytes were)."""
    bad, df, _ = item
    if bad is not None and bad.height:
        ctx.write_rejects(bad.select("line_no", pl.lit("invalid UTF-8").alias("reason"),
                                     pl.col("text").alias("raw")).to_arrow())
    return df


class BufferedWrites:
    """The parse context with its `write` batched: rows of each table are gathered (as Arrow, a compact copy) and
    inserted about every FLUSH_ROWS rows or FLUSH_BYTES bytes (one INSERT costs a few ms whatever its size, and a frame gives several
    tables a few thousand rows each). Everything else is the context's own; `flush()` before reading the tables."""

    FLUSH_ROWS = 250_000
    FLUSH_BYTES = 8 << 20  # memory held per table before an insert (an insert costs a few ms: 8 MB amortises it)

    def __init__(self, ctx: ParseContext):
        self._ctx = ctx
        self._buf: dict[str, list] = {}

    def __getattr__(self, name):
        return getattr(self._ctx, name)

    def write(self, table: str, data) -> int:
        t = data.to_arrow() if isinstance(data, pl.DataFrame) else data
        if t.num_rows == 0:
            return 0
        buf = self._buf.setdefault(table, [])
        buf.append(t)
        if sum(b.num_rows for b in buf) >= self.FLUSH_ROWS or sum(b.nbytes for b in buf) >= self.FLUSH_BYTES:
            self._flush(table)
        return t.num_rows

    def _flush(self, table: str) -> None:
        import pyarrow as pa
        buf = self._buf.pop(table, [])
        if buf:
            self._ctx.write(table, pa.concat_tables(buf, promote_options="default"))

    def flush(self) -> None:
        for table in list(self._buf):
            self._flush(table)


class Deferred:
    """A stand-in parse context for a worker thread: what a frame's functions write (rows, rejects), note and count
    is recorded, and `replay` hands it to the real context later, in file order. Everything else (options, input)
    is the real context's, read-only."""

    def __init__(self, ctx: ParseContext):
        from .base import Counts
        self._ctx = ctx
        self.counts = Counts()
        self.notes: list[str] = []
        self.ops: list[tuple[str, str | None, object]] = []

    def __getattr__(self, name):
        return getattr(self._ctx, name)

    def write(self, table: str, data) -> int:
        n = data.height if isinstance(data, pl.DataFrame) else data.num_rows
        if n:
            self.ops.append(("write", table, data))
        return n

    def write_rejects(self, data) -> int:
        if data.num_rows:
            self.ops.append(("rejects", None, data))  # counted when replayed
        return data.num_rows

    def replay(self, ctx: ParseContext, out=None, patch: Callable | None = None) -> None:
        """Writes go to `out` (a BufferedWrites, else `ctx`), rejects to `ctx` (as they would have); `patch(table,
        frame)` may add the running state (a request index offset) first. Counts and notes are added."""
        out = out or ctx
        for op, table, data in self.ops:
            if op == "rejects":
                ctx.write_rejects(data)
            else:
                out.write(table, patch(table, data) if patch else data)
        ctx.counts.parsed += self.counts.parsed
        ctx.counts.skipped += self.counts.skipped
        ctx.counts.rejected += self.counts.rejected
        ctx.notes.extend(self.notes)


class RecordSplitter:
    """Cuts a stream of line frames into whole records.

    `flag(df)` returns `df` with a Boolean `start` column (computed over the whole buffer, so a flag may look at
    the previous line). The lines from a frame's last record start onwards wait for the next frame, so a
    multi-line record never splits at a block edge. Output frames carry `gid`, a record id unique in the file.
    """

    def __init__(self, flag: Callable[[pl.DataFrame], pl.DataFrame], max_carry_lines: int = 500_000):
        self.flag = flag
        self.carry: pl.DataFrame | None = None
        self.next_gid = 0
        self.max_carry_lines = max_carry_lines

    def feed(self, df: pl.DataFrame, last: bool) -> pl.DataFrame:
        cols = df.columns
        buf = df if self.carry is None else pl.concat([self.carry, df], how="vertical")
        self.carry = None
        if buf.height == 0:
            return self.flag(buf).with_columns(pl.lit(0, pl.Int64).alias("gid"))
        buf = self.flag(buf).with_columns(pl.col("start") | (pl.int_range(pl.len()) == 0))
        buf = buf.with_columns((pl.col("start").cast(pl.Int64).cum_sum() - 1 + self.next_gid).alias("gid"))
        cut = buf.height
        if not last:
            cut = int(buf["start"].arg_true()[-1])
            if cut == 0 and buf.height > self.max_carry_lines:
                cut = buf.height  # one endless record: let it go rather than hold the whole file
        out, rest = buf.slice(0, cut), buf.slice(cut)
        if rest.height:
            self.next_gid = int(rest["gid"][0])
            self.carry = rest.select(cols)
        else:
            self.next_gid = int(buf["gid"][-1]) + 1
        return out


def trim_trailing_blanks(df: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """Blank lines at the end of a record belong to no record: (the other lines, how many blank ones were cut)."""
    if not df["blank"].any():
        return df, 0
    # Records are contiguous runs of one gid: a blank line is kept when a non-blank line of its gid follows it.
    nxt = pl.when(~pl.col("blank")).then(pl.col("gid")).backward_fill()
    kept = df.filter(~pl.col("blank") | (nxt == pl.col("gid")).fill_null(False))
    return kept, df.height - kept.height


def collapse(df: pl.DataFrame, text: str = "t") -> pl.DataFrame:
    """One row per record (`gid`): the first line's columns, `line_count`, `cont` (the later lines joined with a
    newline; NULL for a one-line record) and `joined` (all lines joined with nothing: a hard-wrapped paste)."""
    # Records are contiguous runs of one gid (no group-by over the whole frame: most records are one line).
    g = pl.col("gid")
    alone = (g != g.shift(1)).fill_null(True) & (g != g.shift(-1)).fill_null(True)
    mask = df.select(alone).to_series()
    single = df.filter(mask).with_columns(pl.lit(1, pl.Int64).alias("line_count"),
                                          pl.lit(None, pl.String).alias("cont"), pl.col(text).alias("joined"))
    if mask.all():
        return single
    multi = df.filter(~mask)
    agg = multi.group_by("gid", maintain_order=True).agg(
        pl.exclude("gid").first(),
        pl.len().cast(pl.Int64).alias("line_count"),
        pl.col(text).slice(1).str.join("\n").alias("cont"),
        pl.col(text).str.join("").alias("joined"),
    )
    return pl.concat([single, agg.select(single.columns)], how="vertical").sort("gid")


def record_lines(ctx: ParseContext, flag, prepare: Callable[[pl.DataFrame], pl.DataFrame]) -> Iterator[pl.DataFrame]:
    """The input frame by frame as the physical lines of whole records: undecodable bytes dropped with a reject,
    `prepare` applied, records split by `flag` across frame edges (`gid`); Ray's dedup markers counted in a note."""
    splitter = RecordSplitter(flag)
    markers = folded = 0
    for frame, last in line_frames(ctx, prepare):
        lines = splitter.feed(frame, last)
        if lines.height == 0:
            continue
        if "dedup" in lines.columns:
            d = lines["dedup"].drop_nulls()
            markers, folded = markers + d.len(), folded + int(d.sum())
        yield lines
    if markers:
        ctx.notes.append(dedup_note(markers, folded))


def record_frames(ctx: ParseContext, flag, prepare: Callable[[pl.DataFrame], pl.DataFrame]
                  ) -> Iterator[tuple[pl.DataFrame, pl.DataFrame]]:
    """`record_lines` as (its physical lines, the records they form), trailing blank lines counted skipped."""
    for lines in record_lines(ctx, flag, prepare):
        lines, blanks = trim_trailing_blanks(lines)
        ctx.counts.skipped += blanks
        yield lines, collapse(lines)


def dedup_note(markers: int, folded: int) -> str:
    return (f"{markers} line(s) carry Ray's `[repeated Nx across cluster]` marker ({folded} repeats on other workers): "
            "each kept once, the repeats counted, not reconstructed (Ray masks numbers when it folds lines)")


def with_body(first: pl.Expr, cont: pl.Expr) -> pl.Expr:
    """A record's whole text: its first line's message plus the continuation lines."""
    return pl.when(cont.is_null()).then(first).otherwise(pl.concat_str([first.fill_null(""), cont], separator="\n"))


def event_message(body: pl.Expr, traceback: pl.Expr) -> pl.Expr:
    """log_events.message: a traceback's last line first, then the whole text; at most MSG_MAX characters."""
    last = body.str.extract(r"([^\n]*\S[^\n]*)\s*$", 1)
    return (pl.when(traceback).then(pl.concat_str([last, body], separator="\n")).otherwise(body)
            .str.slice(0, MSG_MAX))


def looks_like_traceback(body: pl.Expr) -> pl.Expr:
    return body.str.contains(r"Traceback \(most recent call last\)|(?:^|\n)\s+File \"[^\"]+\", line \d+")


def clean_value(v: pl.Expr) -> pl.Expr:
    """A printed config value as plain text: `Some(x)` → x, quotes dropped, `None` → NULL."""
    v = v.str.strip_chars().str.replace(r"^Some\((.*)\)$", "$1")
    v = v.str.replace(r'^"(.*)"$', "$1").str.replace(r"^'(.*)'$", "$1")
    return pl.when(v.is_in(["None", ""])).then(None).otherwise(v)


def value_number(v: pl.Expr) -> pl.Expr:
    return (pl.when(v.str.to_lowercase() == "true").then(1.0)
            .when(v.str.to_lowercase() == "false").then(0.0)
            .otherwise(v.cast(pl.Float64, strict=False)))


def config_rows(df: pl.DataFrame) -> pl.DataFrame:
    """engine_config rows from (line_no, key, raw value, origin): value cleaned, numeric value when it has one."""
    return df.select(
        pl.col("line_no").cast(pl.Int64), pl.col("key").cast(pl.String),
        clean_value(pl.col("value")).alias("value"), pl.col("origin").cast(pl.String),
    ).with_columns(value_number(pl.col("value")).alias("value_num"))


def write_config(ctx: ParseContext, parts: list[pl.DataFrame], aliases: dict[str, str], engine: str) -> int:
    """One engine_config row per key: a set value beats an unset (NULL) one, then the later record wins (a restart
    prints its config again). `aliases` add the normalised key next to the engine's own (`model_id` → `model`)."""
    rows = [p for p in parts if p.height]
    df = pl.concat(rows, how="vertical") if rows else config_rows(
        pl.DataFrame(schema={"line_no": pl.Int64, "key": pl.String, "value": pl.String, "origin": pl.String}))
    if aliases and df.height:
        al = df.filter(pl.col("key").is_in(list(aliases))).with_columns(
            pl.col("key").replace_strict(aliases, return_dtype=pl.String))
        df = pl.concat([df, al], how="vertical")
    eng = pl.DataFrame({"line_no": [None], "key": ["engine"], "value": [engine], "origin": ["format"],
                        "value_num": [None]}, schema=df.schema)
    df = pl.concat([df, eng], how="vertical")
    df = (df.with_columns(pl.col("value").is_not_null().alias("_set"), pl.col("line_no").fill_null(-1).alias("_ln"))
          .sort(["key", "_set", "_ln"]).group_by("key", maintain_order=True).last().drop("_set", "_ln"))
    return ctx.write("engine_config", df)


NOTE_MAX = 5  # notes written per kind of flagged record and block; the rest are counted


def note_rows(ctx: ParseContext, df: pl.DataFrame, fmt: Callable[[dict], str]) -> None:
    """A note for each of the first few flagged records (a cut Args, a cut Success, ...), then one counting the rest."""
    for r in df.head(NOTE_MAX).iter_rows(named=True):
        ctx.notes.append(fmt(r))
    if df.height > NOTE_MAX:
        ctx.notes.append(f"... and {df.height - NOTE_MAX} more record(s) like the one above")


def span_of_times(ctx: ParseContext) -> None:
    """Set ctx.first_ns / ctx.last_ns from every instant this source wrote."""
    lo, hi = ctx.con.execute(
        """SELECT min(x), max(x) FROM (
             SELECT ts_ns AS x FROM engine_batches WHERE source_id = $1
             UNION ALL SELECT ts_ns FROM log_events WHERE source_id = $1
             UNION ALL SELECT ts_ns FROM request_events WHERE source_id = $1
             UNION ALL SELECT arrival_ns FROM requests WHERE source_id = $1
             UNION ALL SELECT finish_ns FROM requests WHERE source_id = $1)""", [ctx.source_id]).fetchall()[0]
    ctx.first_ns, ctx.last_ns = lo, hi


def reject_records(ctx: ParseContext, lines: pl.DataFrame, gids: pl.Series, reason: pl.Expr) -> int:
    """Reject every physical line of the records `gids` (one rejects row per line, so the accounting stays exact)."""
    bad = lines.filter(pl.col("gid").is_in(gids.implode()))
    if bad.height == 0:
        return 0
    return ctx.write_rejects(bad.select("line_no", reason.alias("reason"), pl.col("t").alias("raw")).to_arrow())
