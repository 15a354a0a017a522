"""TGI (text-generation-inference) router and launcher logs, text and `--json-output`, v0.7 to v3.x, into the
canonical tables: per-request `Success` records (and request-level errors) into `requests`, launcher `Args` and
router startup lines into `engine_config`, the radix `Prefix N - Suffix M` line into `request_events`, errors with
their batch spans, tracebacks and every other record into `log_events`.

A record starts at a timestamped head (`2024-02-14T06:49:51.437631Z  INFO spans: target: file.rs:N: message`), at a
pasted head without a timestamp (`INFO generate{…}: text_generation_router::server: …`) or at a JSON object; lines
that start nothing belong to the record before them (pretty `Args {`, DEBUG `Input:` prompts, shard tracebacks
re-emitted by the launcher, JSON hard-wrapped by a paste). Records are formed with polars: a start flag per line,
group ids from its cumulative sum, `group_by` + `str.join`; no Python loop over lines. The generic pieces
(frames with the cut-gzip check, the record splitter, trailing blanks, config rows) live in `logrecords`, shared with
`sglang_log`.

Kind first: most of a serving log is `Success` lines and radix lines, each a record of its own. `_fast_kind` picks
out those the generic path would read as exactly that (literal finds and capture-free regexes on the raw line); they
skip the head columns and record formation and are read by position (`_fast_frames`), then merged back in file
order where order matters (the running request index, times carried to untimed records). The Success lines whose
fields all take the generic path's literal-search branches are read into their request rows straight from the line
(`_plain_success`), the others through the generic request columns. Everything else takes the generic path (its
head columns computed on its own lines only); a frame of fast lines only, as most of a long-running server's log
is, skips the record passes altogether (`_compute_fast`). The fast lanes follow the one switch of every parser,
`base.FAST_LANES` (STALLSCOPE_FAST_LANES=0 sends every line through the generic path; tests/test_tgi_fastpath.py
checks both give the same store; bench/compare_ingest.py checks a checkout against another). The regexes and their
real sample lines live in `tgi_log_patterns.py`.

Costs (one 8 MB frame, one thread): polars' per-row cost of a string operation (~50-100 ns) makes the ~60
operations a Success line needs most of it; each frame also pays ~20 ms of fixed per-call cost, so the frame size
(`logrecords.FRAME_BYTES`) matters. A sub-expression used twice in one eager select is computed twice (eager
polars does not eliminate common sub-expressions): such pieces are columns first.

Times: TGI prints RFC 3339 UTC with `Z`. A line pasted without its timestamp gives a request with NULL times (it
still counts); other untimed records inherit the previous timed record's time (NULL when none precedes).
"""
from __future__ import annotations

import functools
import re

import numpy as np
import polars as pl

from . import tgi_log_patterns
from .base import InputFile, ParseContext, Parser, fast_lanes_on
from .logrecords import (ANSI_RX, WRAPS_RX, MSG_MAX, unwrap, wrap_names, config_rows, event_message, looks_like_traceback,
                         note_rows, BufferedWrites, collapse, record_lines, span_of_times,
                         trim_trailing_blanks, with_body, write_config)
from .lines import ordered_map
from .prefixes import unwrap_text
from .tgi_log_patterns import (CONFIG_LEAD, CONFIG_LINES, DURATION_KEYS, HANDLERS, LEVELS, P_ARGS_PAIR,
                               P_BATCH, P_BATCH_ID, P_DURATION, P_FAST_RADIX, P_FAST_SUCCESS_HEAD, P_FAST_SUCCESS_TAIL,
                               P_FIRST_SPAN, P_HEAD, P_HEAD_LEAD, P_MAXNEW, P_PARAMS, P_RADIX, P_REQSPAN, P_REST,
                               P_SEED, P_SUCCESS_TIMINGS, P_TARGET_LEAD, P_TRACE_ID, P_UNTIMED, TS_RX, UNIT_NS)

VERSION = "1.0"
PATTERNS = tgi_log_patterns.PATTERNS  # the formats this parser reads (tests/test_patterns.py)
NS_PER_S = 1_000_000_000

# -- sniffing (Python `re` over the first 64 KB only) -------------------------------------------------------------
_SNIFF_ANSI = re.compile(ANSI_RX)
_SNIFF_TIMED = re.compile(rf"^{WRAPS_RX}{TS_RX}\s+(?:{LEVELS})\s+(?:.*?: )?text_generation_[a-z0-9_]+"
                          r"(?:::[a-z0-9_]+)*: ", re.M)
_SNIFF_JSON = re.compile(r'^' + WRAPS_RX + r'\{"timestamp":"\d{4}-\d{2}-\d{2}T[^"]*","level":"[A-Z]+"', re.M)
# A launcher `Args` record cut before its `target` (a truncated paste): the Args layout alone is TGI's.
_SNIFF_JSON_ARGS = re.compile(r'"fields":\{"message":"Args \{ model_id: \\"')
_SNIFF_UNTIMED = re.compile(rf"^{WRAPS_RX}(?:{LEVELS}) (?:[a-z_]+\{{parameters=GenerateParameters \{{|(?:.*?: )?"
                            r"text_generation_[a-z0-9_]+(?:::[a-z0-9_]+)*: )", re.M)


def sniff_tgi(head: bytes) -> tuple[str, float] | None:
    text = unwrap_text(head.decode("utf-8", "replace"))
    if _SNIFF_TIMED.search(text):
        return "tgi_log", 0.95
    if _SNIFF_JSON.search(text) and ('"target":"text_generation_' in text
                                     or _SNIFF_JSON_ARGS.search(text) is not None):
        return "tgi_log", 0.95
    if _SNIFF_UNTIMED.search(text):
        return "tgi_log", 0.85
    return None


# =====================================================================================================================
# Parsing
# =====================================================================================================================

def _prepare(df: pl.DataFrame) -> pl.DataFrame:
    """Per-line columns: cleaned text, `kind` (FAST_SUCCESS / FAST_RADIX for lines read by the fast path, NULL for the
    rest), and for the rest the blank flag, head fields (timed or pasted), JSON start and self-contained JSON (NULL
    on fast lines: the generic expressions skip them)."""
    df = unwrap(df)
    kind = _fast_kind(df)
    if kind.null_count() == df.height:
        return _prepare_generic(df).with_columns(kind)
    # The generic columns of the generic lines only, put back in file order by a gather whose index is NULL on the
    # fast lines (a gather costs far less than the generic expressions on every line).
    gen = kind.is_null()
    g = _prepare_generic(df.filter(gen)) if gen.any() else _no_generic(tuple(df.schema.items()))
    at = pl.select(pl.when(gen).then(gen.cum_sum() - 1)).to_series()
    cols = [c for c in g.columns if c not in df.columns]
    return df.with_columns(kind, *g.select(pl.col(cols).gather(at)).get_columns()).with_columns(
        *[pl.col(c).fill_null(False) for c in ("blank", "is_json", "json_ok")]).select(*g.columns, "kind")


@functools.cache
def _no_generic(schema: tuple) -> pl.DataFrame:
    """`_prepare_generic` of no lines (a frame of fast lines only), once per input schema."""
    return _prepare_generic(pl.DataFrame(schema=dict(schema)))


FAST_SUCCESS, FAST_RADIX = 1, 2
_TOTAL_TIME = r"\btotal_time(?:=|\":)\""


def _fast_kind(df: pl.DataFrame) -> pl.Series:
    """Which lines the fast path reads: each test is what the generic path would conclude, made on the raw line.

    FAST_SUCCESS: a head that P_HEAD / P_UNTIMED read with level INFO and a rest starting with a request handler's
    span, the only `{parameters=` / `{total_time=` of the line (so it names the endpoint); the first
    `: text_generation_` of the line starts the target lead and `Success` ends it (so `_split_rest` cuts there
    without P_REST, and its 200-character target window holds the lead); the span chain holds `total_time=`. Such a line is a one-line record (`_flag`), a request with status ok, no log event.
    FAST_RADIX: a timed head (one space after the level, so the rest starts with the target), no other
    `: text_generation_`, the message P_RADIX: a one-line record, one `prefix_match` event.
    """
    if not fast_lanes_on() or df.height == 0:
        return pl.Series("kind", [None] * df.height, dtype=pl.UInt8)
    t = pl.col("t")
    df = df.select(t, t.str.find(": text_generation_", literal=True).alias("_p"), t.str.len_bytes().alias("_n"),
                   t.str.ends_with(": Success").alias("_e"), pl.int_range(pl.len(), dtype=pl.UInt32).alias("_i"))
    p, n, e = pl.col("_p"), pl.col("_n"), pl.col("_e")
    kind = pl.repeat(None, df.height, dtype=pl.UInt8, eager=True).alias("kind")
    # Each kind's tests run on its candidates only (lines ending `: Success`; short lines without a target lead).
    # The handler span is the only `{parameters=` / `{total_time=` of the line: P_REQSPAN's last match (the
    # endpoint) is then the head span, whatever the parameters' strings hold.
    succ = (t.str.contains(P_FAST_SUCCESS_HEAD.regex) & (t.str.find(P_FAST_SUCCESS_TAIL.regex) == p) & (n - p <= 200)
            & t.str.contains(_TOTAL_TIME) & (t.str.count_matches(r"\{(?:parameters|total_time)=") == 1))
    for cand, test, value in ((e, succ, FAST_SUCCESS), (~e & (n <= 200) & p.is_null(), t.str.contains(P_FAST_RADIX.regex),
                                                         FAST_RADIX)):
        hit = df.filter(cand).filter(test)["_i"]
        if hit.len():
            kind = kind.scatter(hit, value)
    return kind


def _prepare_generic(df: pl.DataFrame) -> pl.DataFrame:
    t = pl.col("t")
    # Heads are read off the line's first characters and the rest cut at that offset (a capture over the whole line
    # costs a pass over its bytes); pasted heads without a timestamp are tried only on lines starting with a level.
    head = t.str.slice(0, 64).str.extract_groups(P_HEAD_LEAD.regex)
    df = df.with_columns(head.alias("_h"), t.str.contains(r"^\s*$").alias("blank"),
                         t.str.starts_with('{"').alias("is_json"))
    h = pl.col("_h").struct.field
    df = df.with_columns(h("ts").alias("ts"), h("level").alias("level"),
                         pl.when(h("lead").is_not_null()).then(t.str.slice(h("lead").str.len_chars())).alias("rest"))
    df = df.drop("_h")
    un = df.filter(pl.col("level").is_null() & t.str.contains(_UNTIMED_START))
    if un.height:
        # P_UNTIMED, read off the start: the level word, then a rest that starts like a span or a target.
        lv = t.str.extract(_UNTIMED_START.replace("(?:", "(", 1), 1)
        rest = t.str.slice(lv.str.len_chars() + 1)
        ok = rest.str.slice(0, 80).str.contains(r"^(?:[a-z_][a-z0-9_-]*[{:]|text_generation_)")
        u = un.select("line_no", pl.when(ok).then(lv).alias("level"), pl.when(ok).then(rest).alias("rest"))
        df = df.update(u.filter(pl.col("level").is_not_null()), on="line_no")
    # Whether a JSON line is a whole record on its own; parsed only where JSON lines exist (text logs skip it).
    json_ok = (pl.col("is_json") & t.str.json_path_match("$.timestamp").is_not_null()) if df["is_json"].any() \
        else pl.lit(False)
    df = df.with_columns(json_ok.alias("json_ok"))
    return df.with_columns(_split_rest(df))


_UNTIMED_START = rf"^(?:{LEVELS}) "


def _split_rest(df: pl.DataFrame) -> list[pl.Series]:
    """spans, target, msg1 of every head (P_REST's fields): the span chain ends at the first `: text_generation_`
    (a literal search), the target and file:line are read from a short window after it; rows where that does not
    give a target, or where a later `: text_generation_` could be the real one, go through P_REST itself."""
    r = pl.col("rest")
    i = r.str.find(": text_generation_", literal=True)
    at0 = r.str.starts_with("text_generation_")
    # `find` gives a byte offset: cut as bytes (at an ASCII `: `, so both halves stay valid UTF-8).
    rb = r.cast(pl.Binary)
    after = pl.when(at0).then(r).otherwise(rb.bin.slice(i + 2).cast(pl.String))
    g = df.select(r, r.is_not_null().alias("_has"), at0.alias("_at0"), i.alias("_i"),
                  after.alias("_after")).with_columns(
        pl.col("_after").str.slice(0, 200).str.extract_groups(P_TARGET_LEAD.regex).alias("_g"))
    tl = pl.col("_g").struct.field("tlead")
    g = g.with_columns(
        pl.when(pl.col("_at0")).then(None).otherwise(pl.col("_i")).alias("_spans_end"),
        pl.col("_after").str.slice(tl.str.len_chars()).alias("msg1"),
        pl.col("_g").struct.field("target").alias("target"))
    # The fast reading is P_REST's unless the first `: text_generation_` gives no target, or a line starting with a
    # target also holds one later (P_REST then takes the later one as the end of a span chain).
    # (Without any `: text_generation_` after the start P_REST cannot match at all.)
    odd = pl.col("_has") & pl.col("_i").is_not_null() & (pl.col("target").is_null() | pl.col("_at0"))
    g = g.with_columns(odd.alias("_odd"))
    g = g.with_columns(pl.when(pl.col("target").is_not_null() & pl.col("_spans_end").is_not_null()).then(
        rb.bin.slice(0, pl.col("_spans_end")).cast(pl.String)).alias("spans"))
    spans_s, target_s, msg_s = g["spans"], g["target"], g["msg1"]
    if g["_odd"].any():
        idx = g["_odd"].arg_true()
        slow = df.select(r).gather(idx).select(r.str.extract_groups(P_REST.regex).alias("x")).unnest("x")
        spans_s = spans_s.scatter(idx, slow["spans"])
        target_s = target_s.scatter(idx, slow["target"])
        msg_s = msg_s.scatter(idx, slow["msg"])
    return [spans_s.alias("spans"), target_s.alias("target"), msg_s.alias("msg1")]


def _flag(df: pl.DataFrame) -> pl.DataFrame:
    # Records that are always one line (JSON objects, Success, radix): a line after them that starts nothing
    # begins a record of its own instead of being swallowed.
    # Fast lines (`_fast_kind`) are such heads, read without the head columns.
    fast = pl.col("kind").is_not_null()
    head = pl.col("level").is_not_null()
    single = pl.col("json_ok") | (head & pl.col("msg1").is_in(["Success"])) | (
        head & pl.col("msg1").str.contains(P_RADIX.regex)) | fast
    return df.with_columns((head | fast | pl.col("is_json") | single.shift(1).fill_null(False)).alias("start"))


def _ts_ns(ts: pl.Expr) -> pl.Expr:
    return (ts.str.strptime(pl.Datetime("ns"), "%Y-%m-%dT%H:%M:%S%.fZ", strict=False)
            .dt.replace_time_zone("UTC").dt.epoch("ns"))


_GEN_PARAMS = "parameters=GenerateParameters {"


def _params(req: pl.DataFrame) -> pl.Series:
    """The request's `parameters` (P_PARAMS): an unquoted `GenerateParameters { … }` followed by the next span field
    is cut out by literal search (as bytes: `find` gives byte offsets, the cut is at ASCII); the other rows (quoted
    values of v3.2+ chat spans and JSON, cut lines) go through P_PARAMS."""
    f = pl.col("fields")
    # (Offsets are columns first: an eager select evaluates a repeated expression once per use.)
    az = req.select(f, f.str.find(_GEN_PARAMS, literal=True).alias("_a"),
                    f.str.find("} total_time=", literal=True).alias("_z"))
    a, z = pl.col("_a"), pl.col("_z")
    fast = pl.when(a.is_not_null() & (z > a)).then(f.cast(pl.Binary).bin.slice(a + 11, z - a - 10).cast(pl.String))
    out = az.select(fast.alias("params"))["params"]
    slow = (out.is_null() & req["fields"].str.contains("parameters", literal=True)).fill_null(False)
    if slow.any():
        idx = slow.arg_true()
        pm = req.select(f).gather(idx).select(f.str.extract_groups(P_PARAMS.regex).alias("m"))["m"]
        # A quoted value (v3.2+ chat spans, JSON) is an escaped string: undo `\\x` escapes in one pass.
        got = pl.select(pl.coalesce(pl.lit(pm).struct.field("p"),
                                    pl.lit(pm).struct.field("q").str.replace_all(r"\\(.)", "$1"))).to_series()
        out = out.scatter(idx, got)
    return out.alias("params")


def _duration_ns(fields: pl.Expr, key: str) -> pl.Expr:
    m = fields.str.extract_groups(
        rf"\b{key}(?:=|\":)\"(?P<num>\d+(?:\.\d+)?)(?P<unit>ns|µs|μs|us|ms|s)\"")
    return _ns(m.struct.field("num"), m.struct.field("unit"))


def _ns(num: pl.Expr, unit: pl.Expr) -> pl.Expr:
    mult = unit.replace_strict(UNIT_NS, default=None, return_dtype=pl.Float64)
    return (num.cast(pl.Float64, strict=False) * mult).round(0).cast(pl.Int64, strict=False)


_TIMING_START = r'[ {]total_time="'
_TIMING_LIKE = r'(?:time|token|seed)(?:=|":)"'


def _timings(req: pl.DataFrame) -> list[pl.Series]:
    """The request's durations (ns) and seed: P_DURATION's and P_SEED's first match in `fields`.

    Where `fields` ends with the text Success layout (P_SUCCESS_TIMINGS, from its first `[ {]total_time="`) and the
    first thing in it that looks like a timing field (`time="`, `token="`, `seed="` or their JSON `":"` forms) is
    that `total_time`, no P_DURATION or P_SEED match can lie before it (each holds one of those) nor straddle the
    cut (no match holds a space or `{`); the tail's layout is fixed, so each key's first match is its field there,
    and its value is the text between the quotes: split at `"`, not captured. Other rows (JSON spans, cut lines,
    other layouts) get the capture per key."""
    f = pl.col("fields")
    n = req.height
    names = list(DURATION_KEYS) + ["seed"]
    fast = pl.Series("fast", [False] * n, dtype=pl.Boolean)
    if fast_lanes_on() and n:
        jk = req.select(f, f.str.find(_TIMING_START).alias("_j"), f.str.find(_TIMING_LIKE).alias("_k"))
        j = pl.col("_j")
        tail = f.cast(pl.Binary).bin.slice(j + 1).cast(pl.String)
        g = jk.select(pl.when(j.is_not_null() & (pl.col("_k") == j + 7)).then(tail).alias("tail"))
        g = g.select(pl.when(pl.col("tail").str.contains(P_SUCCESS_TIMINGS.regex)).then(pl.col("tail")).alias("tail"))
        fast = g["tail"].is_not_null()
    got = []
    if fast.any():
        parts = g.filter(fast).select(pl.col("tail").str.split_exact('"', 11).alias("p")).unnest("p")
        got.append((fast, parts.select(_layout_values())))
    if not fast.all():
        slow = ~fast
        got.append((slow, req.filter(slow).select(_captured_timings())))
    if len(got) == 1:
        return got[0][1].get_columns()
    out = {k: pl.Series(k, [None] * n, dtype=pl.UInt64 if k == "seed" else pl.Int64) for k in names}
    for mask, vals in got:
        idx = mask.arg_true()
        for k in names:
            out[k] = out[k].scatter(idx, vals[k])
    return [out[k] for k in names]


@functools.cache
def _layout_values() -> tuple[pl.Expr, ...]:
    """The durations (ns) and seed of a Success layout split at its quotes (`field_1` … `field_11`). (Expressions
    are built once per process: building them costs about as much as running them on a small frame.)"""
    vals = []
    for i, k in enumerate(DURATION_KEYS):
        # The value is `<number><unit>` (P_SUCCESS_TIMINGS): the unit read off its end, as UNIT_NS has it.
        v = pl.col(f"field_{2 * i + 1}")
        mult = (pl.when(v.str.ends_with("ms")).then(UNIT_NS["ms"]).when(v.str.ends_with("ns")).then(UNIT_NS["ns"])
                .when(v.str.ends_with("µs") | v.str.ends_with("μs") | v.str.ends_with("us")).then(UNIT_NS["us"])
                .otherwise(UNIT_NS["s"]))
        num = v.str.strip_chars_end("nsµμum").cast(pl.Float64, strict=False)
        vals.append((num * mult).round(0).cast(pl.Int64, strict=False).alias(k))
    sd = pl.col("field_11")
    vals.append(pl.when(sd.str.starts_with("Some(")).then(sd.str.slice(5).str.strip_suffix(")"))
                .cast(pl.UInt64, strict=False).alias("seed"))
    return tuple(vals)


@functools.cache
def _captured_timings() -> tuple[pl.Expr, ...]:
    """`_timings`' capture per key (P_DURATION, P_SEED) on `fields`, built once."""
    f = pl.col("fields")
    return (*[_duration_ns(f, k).alias(k) for k in DURATION_KEYS],
            f.str.extract(P_SEED.regex, 1).cast(pl.UInt64, strict=False).alias("seed"))


class _State:
    def __init__(self):
        self.last_ts: int | None = None
        self.req_index = 0
        self.config: list[pl.DataFrame] = []
        self.timed = 0


def _normalise(rec: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Text, JSON and orphan records → one frame (ts, level, spans, fields, target, msg, origin, ...); also the
    JSON records that do not parse (cut or corrupt)."""
    j = pl.col("joined")
    is_json = pl.col("is_json")
    jrec = rec.filter(is_json)
    ok = j.str.json_path_match("$.timestamp").is_not_null()
    bad_json = jrec.filter(~ok)
    common = [pl.col("gid"), pl.col("line_no"), pl.col("line_count"), pl.col("wrap")]

    # A head whose target is missing was cut inside its span fields: the rest of the line is that span chain.
    spans = pl.coalesce(pl.col("spans"), pl.when(pl.col("target").is_null() & pl.col("rest").str.contains(r"^[a-z_]+\{"))
                        .then(pl.col("rest")))
    text = rec.filter(pl.col("level").is_not_null() & ~is_json).with_columns(spans.alias("_sp"))
    spans = pl.col("_sp")
    text = text.select(
        *common, pl.col("ts"), pl.col("level"), spans.alias("spans"), spans.alias("fields"),
        pl.col("target"),
        with_body(pl.coalesce(pl.col("msg1"), pl.col("rest")), pl.col("cont")).alias("msg"),
        spans.str.extract_all(P_REQSPAN.regex).list.last().str.extract(r"([a-z_]+)\{", 1).alias("hspan"),
        pl.when(pl.col("target").is_null()).then(pl.lit("cut")).otherwise(pl.lit("text")).alias("origin"),
    )

    js = jrec.filter(ok)
    span = j.str.json_path_match("$.span")
    spans = j.str.json_path_match("$.spans")
    json = js.select(
        *common, j.str.json_path_match("$.timestamp").alias("ts"), j.str.json_path_match("$.level").alias("level"),
        spans.str.extract_all(r'"name":"[^"]*"').list.eval(pl.element().str.slice(8).str.strip_suffix('"'))
        .list.join(":").alias("spans"),
        pl.concat_str([span, spans], separator=" ", ignore_nulls=True).alias("fields"),
        j.str.json_path_match("$.target").alias("target"),
        pl.coalesce(j.str.json_path_match("$.message"), j.str.json_path_match("$.fields.message"))
        .str.strip_suffix("\n").alias("msg"),
        pl.when(span.str.contains(r'"(?:total_time|parameters)":')).then(j.str.json_path_match("$.span.name"))
        .alias("hspan"),
        pl.lit("json").alias("origin"),
    )

    orphan = rec.filter(pl.col("level").is_null() & ~is_json).select(
        *common, pl.lit(None, pl.String).alias("ts"), pl.lit(None, pl.String).alias("level"),
        pl.lit(None, pl.String).alias("spans"), pl.lit(None, pl.String).alias("fields"),
        pl.lit(None, pl.String).alias("target"), with_body(pl.col("t"), pl.col("cont")).alias("msg"),
        pl.lit(None, pl.String).alias("hspan"), pl.lit("orphan").alias("origin"),
    )
    out = pl.concat([text, json, orphan], how="vertical").sort("gid")
    return out, bad_json


def _salvage_json(bad: pl.DataFrame) -> pl.DataFrame:
    """A JSON record cut off before its end: its timestamp, level and (escaped) message prefix, when they are there."""
    m = pl.col("joined").str.extract_groups(
        r'^\{"timestamp":"(?P<ts>[^"]+)","level":"(?P<level>[A-Z]+)",(?:"fields":\{)?"message":"'
        r'(?P<msg>(?:[^"\\]|\\.)*)')
    msg = (m.struct.field("msg").str.replace_all('\\"', '"', literal=True)
           .str.replace_all("\\n", "\n", literal=True).str.replace_all("\\\\", "\\", literal=True))
    return bad.select("gid", "line_no", "line_count", m.struct.field("ts").alias("ts"),
                      m.struct.field("level").alias("level"), msg.alias("msg"))


def _args_pairs(rec: pl.DataFrame, origin: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(config rows, per-record summary with the number of fields and whether the record was complete).

    Each distinct message is read once (a log that restarts prints the same Args again, a paste repeats one) and its
    rows repeated for every record that holds it, in the order the per-record reading gives (by line, then field)."""
    # Each record's first record with the same text: the one read.
    a = rec.select("line_no", pl.col("line_no").first().over("msg").alias("first"), "msg")
    u = a.filter(pl.col("line_no") == pl.col("first"))
    folded = (pl.col("msg").str.replace_all(r"\s*\n\s*", " ").str.replace_all(r"([(\[]) ", "$1")
              .str.replace_all(r",? ([)\]])", "$1"))
    u = u.select("line_no", folded.alias("f"))
    pairs = u.select("line_no", pl.col("f").str.extract_all(P_ARGS_PAIR.regex).alias("p")).explode("p").drop_nulls("p")
    kv = pairs.select("line_no", pl.col("p").str.extract_groups(P_ARGS_PAIR.regex).alias("m")).select(
        "line_no", pl.col("m").struct.field("key").alias("key"), pl.col("m").struct.field("value").alias("value"),
        pl.lit(origin).alias("origin"))
    summary = u.select("line_no", pl.col("f").str.contains(r"\}\s*$").alias("complete")).join(
        kv.group_by("line_no").len(), on="line_no", how="left")
    rows = config_rows(kv)
    if u.height == a.height:
        return rows, summary
    links = a.select("line_no", "first")
    rows = (links.join(rows.with_row_index("_j").rename({"line_no": "first"}), on="first", how="inner")
            .sort("line_no", "_j").select(rows.columns))
    summary = links.join(summary.rename({"line_no": "first"}), on="first", how="left").select(summary.columns)
    return rows, summary


def _record_frames(ctx: ParseContext):
    """The input frame by frame as whole records' physical lines (`logrecords.record_lines`: forming the records
    is `_work`'s, on the generic lines only)."""
    return record_lines(ctx, _flag, _prepare)


def _work(lines: pl.DataFrame) -> dict:
    """Everything one frame's records give, computed without the parse's running state (so frames are worked on in
    parallel): `_apply` adds that state (the time carried from the previous frame, the running request index) and
    writes, in file order. Fast lines (one-line records, `_fast_kind`) are split off first; the others form records
    (trailing blank lines cut, multi-line records joined) and take the generic path."""
    fast = None
    if lines["kind"].null_count() < lines.height:
        fast = lines.filter(pl.col("kind").is_not_null()).select("line_no", "t", "kind")
        lines = lines.filter(pl.col("kind").is_null())
    lines, blanks = trim_trailing_blanks(lines)
    plan: dict = {"bad": None, "blanks": blanks}
    # A frame of fast lines only (most of a long-running server's log) skips the record passes altogether.
    recs, bad = _normalise(collapse(lines)) if lines.height else (None, None)
    if bad is not None and bad.height:
        salv = _salvage_json(bad)
        args = salv.filter(pl.col("msg").str.starts_with("Args {").fill_null(False))
        cut_args = _args_pairs(args, "Args (cut JSON record)") if args.height else None
        lost = bad.filter(~pl.col("gid").is_in(args["gid"].implode()))
        rej = lines.filter(pl.col("gid").is_in(lost["gid"].implode())).select(
            "line_no", pl.concat_str([
                pl.lit("JSON record that does not parse (cut off or corrupt), starting at line "),
                pl.col("gid").replace_strict(lost["gid"], lost["line_no"].cast(pl.String), default="?")]).alias("reason"),
            pl.col("t").alias("raw"))
        plan["bad"] = (cut_args, int(args["line_count"].sum()) if args.height else 0, rej)
    plan["emit"] = _compute(recs, fast)
    plan["parsed"] = (int(recs["line_count"].sum()) if recs is not None and recs.height else 0) + (
        fast.height if fast is not None else 0)
    return plan


def _apply(ctx: ParseContext, out, plan: dict, st: _State) -> None:
    if plan["bad"] is not None:
        cut_args, n_args, rej = plan["bad"]
        if cut_args is not None:
            rows, summary = cut_args
            st.config.append(rows)
            note_rows(ctx, summary, lambda r: f"line {r['line_no']}: JSON record cut off; kept "
                      f"{r['len'] or 0} complete Args fields from its message")
            ctx.counts.parsed += n_args
        if rej.height:
            ctx.write_rejects(rej.to_arrow())
    _emit(out, plan["emit"], st)
    ctx.counts.parsed += plan["parsed"]
    ctx.counts.skipped += plan["blanks"]


def _request_rows(req: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(requests rows, their success/error events, the cut Success records' timings) of request records, in file
    order; `request_index` counts from 0 (`_compute` merges, `_emit` adds the running index)."""
    msg, fields = pl.col("msg"), pl.col("fields")
    req = req.with_columns(_params(req), *_timings(req), fields.str.extract(P_TRACE_ID.regex, 1).alias("trace_id"))
    total, inf, tpt = pl.col("total_time"), pl.col("inference_time"), pl.col("time_per_token")
    req = req.with_columns(
        (inf.cast(pl.Float64, strict=False) / tpt.cast(pl.Float64, strict=False)).round(0).cast(pl.Int64, strict=False)
        .alias("_n_out"),
        pl.when(pl.col("is_success")).then(pl.col("ts_ns") - total).alias("_arrival"),
        pl.coalesce(pl.col("trace_id"), pl.lit("L") + pl.col("line_no").cast(pl.String)).alias("_rid"))
    n_out, arrival, rid = pl.col("_n_out"), pl.col("_arrival"), pl.col("_rid")
    # time_per_token is inference_time / generated_tokens truncated to whole ns (Rust Duration / u32): keep the
    # count only when it reproduces the printed quotient.
    n_ok = (n_out >= 1) & ((inf // n_out.clip(lower_bound=1) - tpt).abs() <= 1)
    finish = pl.when(pl.col("is_req_error") | pl.col("is_success")).then(pl.col("ts_ns"))
    out = req.select(
        pl.col("line_no"), rid.alias("request_id"),
        pl.int_range(pl.len()).cast(pl.Int32).alias("request_index"),  # + the running index, in `_emit`
        rid.alias("server_request_id"), pl.lit("tgi").alias("engine"), pl.lit("server").alias("kind"),
        arrival.alias("arrival_ns"), finish.alias("finish_ns"),
        (arrival + pl.col("validation_time") + pl.col("queue_time")).alias("scheduled_ns"),
        pl.when(n_ok).then(n_out).cast(pl.Int32, strict=False).alias("output_tokens"),
        pl.col("params").str.extract(P_MAXNEW.regex, 1).cast(pl.Int32, strict=False).alias("max_tokens"),
        total.alias("e2e_latency_ns"), pl.col("queue_time").alias("queue_ns"),
        pl.col("validation_time").alias("validation_ns"), inf.alias("inference_ns"),
        tpt.alias("time_per_token_ns"),
        pl.when(pl.col("is_success")).then(pl.lit("ok")).when(pl.col("is_req_error")).then(pl.lit("failed"))
        .alias("status"),
        pl.when(pl.col("is_req_error")).then(msg.str.extract(r"^([^\n]*)", 1)).alias("error"),
        pl.coalesce(pl.col("hspan"), pl.col("first_span")).alias("endpoint"),
        pl.col("params"), pl.col("seed"),
    )
    ev = out.filter(pl.col("status").is_not_null()).select(
        "line_no", "request_id",
        pl.when(pl.col("status") == "ok").then(pl.lit("success")).otherwise(pl.lit("error")).alias("event"),
        pl.col("finish_ns").alias("ts_ns"), pl.col("error").alias("detail"))
    return out, ev, req.filter(pl.col("is_cut")).select("line_no", *DURATION_KEYS)




def _plain_success(fs: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, pl.Series]:
    """(requests rows, their success events, which rows they are) of the fast Success lines (`_fast_kind`) whose
    every field the generic path reads by its literal-search branch: `_timings`' split of the Success layout,
    `_params`' cut of an unquoted `GenerateParameters { … }`, no `trace_id=`. Each test and offset is the generic
    one made on the line instead of the span chain `fields` (the head before it holds no quote, brace or
    `parameters`, and the target after it none of the searched texts), so the values are the generic ones; the
    other rows (the mask false) take `_fast_frames` + `_request_rows`. Read straight from the line, in a few
    selects: no `fields` column, no scatter, no record columns."""
    x = _plain_exprs()
    got = fs.select(x["pos"]).select(x["got"])
    mask = got.select(x["ok"]).to_series()
    rows = got.filter(mask).select(x["parts"]).unnest("_s").select(x["rows"])
    rows = rows.with_columns(_max_tokens(rows["params"])).with_columns(x["n_out"])
    out = rows.select(x["out"])
    return out, out.select(x["ev"]), mask


@functools.cache
def _plain_exprs() -> dict:
    """`_plain_success`'s expressions, built once."""
    t = pl.col("t")
    p, j, k, a, z, w = (pl.col(c) for c in ("_p", "_j", "_k", "_a", "_z", "_w"))
    x: dict = {}
    x["pos"] = (
        "line_no", t, t.str.find(": text_generation_", literal=True).alias("_p"),
        t.str.find(_TIMING_START).alias("_j"), t.str.find(_TIMING_LIKE).alias("_k"),
        t.str.find(_GEN_PARAMS, literal=True).alias("_a"), t.str.find("} total_time=", literal=True).alias("_z"),
        t.str.find("parameters", literal=True).alias("_w"),
        (t.str.find("INFO ", literal=True) + 5).alias("_h"), t.str.find("{", literal=True).alias("_b"),
        t.str.find("trace_id=", literal=True).alias("_tr"))
    tb = t.cast(pl.Binary)
    params = pl.when(a.is_not_null() & (z > a)).then(tb.bin.slice(a + 11, z - a - 10).cast(pl.String))
    # `_timings`' test: the first timing-like field of the span chain is the `total_time` that starts its
    # Success layout, which runs to the chain's end (the first `: text_generation_`).
    tail = pl.when(k == j + 7).then(tb.bin.slice(j + 1, p - j - 1).cast(pl.String))
    h = pl.col("_h")
    x["got"] = (
        "line_no", t, params.alias("params"), tail.alias("_tail"),
        # `_params` reads `parameters` with P_PARAMS where its cut gives nothing; `trace_id=` takes P_TRACE_ID.
        ((a.is_not_null() & (z > a)) | w.is_null() | (w >= p)).alias("_pok"),
        (pl.col("_tr").is_null() | (pl.col("_tr") >= p)).alias("_tok"),
        t.str.slice(h, pl.col("_b") - h).alias("endpoint"))
    tail = pl.col("_tail")
    x["ok"] = (tail.str.contains(P_SUCCESS_TIMINGS.regex) & pl.col("_pok") & pl.col("_tok")).fill_null(False)
    x["parts"] = ("line_no", "t", "params", "endpoint", tail.str.split_exact('"', 11).alias("_s"))
    ts = pl.when(~t.str.starts_with("INFO ")).then(t.str.slice(0, t.str.find("Z", literal=True) + 1))
    x["rows"] = ("line_no", "params", "endpoint", *_layout_values(), _ts_ns(ts).alias("ts_ns"))
    total, inf, tpt, ts_ns = pl.col("total_time"), pl.col("inference_time"), pl.col("time_per_token"), pl.col("ts_ns")
    x["n_out"] = ((inf.cast(pl.Float64) / tpt.cast(pl.Float64)).round(0).cast(pl.Int64, strict=False).alias("_n_out"),
                  (ts_ns - total).alias("arrival_ns"), (pl.lit("L") + pl.col("line_no").cast(pl.String)).alias("_rid"))
    n_out, arrival, rid = pl.col("_n_out"), pl.col("arrival_ns"), pl.col("_rid")
    n_ok = (n_out >= 1) & ((inf // n_out.clip(lower_bound=1) - tpt).abs() <= 1)
    x["out"] = (
        "line_no", rid.alias("request_id"), pl.int_range(pl.len()).cast(pl.Int32).alias("request_index"),
        rid.alias("server_request_id"), pl.lit("tgi").alias("engine"), pl.lit("server").alias("kind"),
        arrival, ts_ns.alias("finish_ns"),
        (arrival + pl.col("validation_time") + pl.col("queue_time")).alias("scheduled_ns"),
        pl.when(n_ok).then(n_out).cast(pl.Int32, strict=False).alias("output_tokens"), "max_tokens",
        total.alias("e2e_latency_ns"), pl.col("queue_time").alias("queue_ns"),
        pl.col("validation_time").alias("validation_ns"), inf.alias("inference_ns"),
        tpt.alias("time_per_token_ns"), pl.lit("ok").alias("status"), pl.lit(None, pl.String).alias("error"),
        "endpoint", "params", "seed")
    x["ev"] = ("line_no", "request_id", pl.lit("success").alias("event"), pl.col("finish_ns").alias("ts_ns"),
               pl.lit(None, pl.String).alias("detail"))
    return x


def _max_tokens(params: pl.Series) -> pl.Series:
    """P_MAXNEW of each `parameters` text, read once per distinct text (a log repeats a client's parameters)."""
    u = params.unique().drop_nulls()
    n = u.to_frame("params").select(pl.col("params").str.extract(P_MAXNEW.regex, 1).cast(pl.Int32, strict=False))
    return params.replace_strict(u, n.to_series(), default=None, return_dtype=pl.Int32).alias("max_tokens")


def _fast_frames(fast: pl.DataFrame | None):
    """The fast lines as the generic path would have read them: (Success lines as request records (the columns
    `_request_rows` reads), radix lines as (line_no, ts_ns, detail), the plain Success lines' (requests rows,
    events) from `_plain_success` or None). Offsets from `find` are bytes: cuts at ASCII
    are made on the bytes; the lead (time, level, handler name) is ASCII by `_fast_kind`, so its offsets are
    characters too."""
    if fast is None:
        return None, None, None
    t = pl.col("t")
    ts = pl.when(~t.str.starts_with("INFO ")).then(t.str.slice(0, t.str.find("Z", literal=True) + 1))
    kind = fast["kind"]
    fsucc = frad = plain = None
    if (kind == FAST_SUCCESS).any():
        fsucc = fast.filter(kind == FAST_SUCCESS)
        if fast_lanes_on():
            *plain, mask = _plain_success(fsucc)
            fsucc = fsucc.filter(~mask)
    if fsucc is not None and fsucc.height:
        fsucc = fsucc.with_columns(
            (t.str.find("INFO ", literal=True) + 5).alias("_a"), t.str.find(": text_generation_", literal=True).alias("_p"),
            t.str.find("{", literal=True).alias("_b"))
        a, p = pl.col("_a"), pl.col("_p")
        name = t.str.slice(a, pl.col("_b") - a)
        spans = t.cast(pl.Binary).bin.slice(a, p - a).cast(pl.String)
        fsucc = fsucc.select(
            "line_no", _ts_ns(ts).alias("ts_ns"), pl.lit("INFO").alias("level"), spans.alias("fields"),
            pl.lit("Success").alias("msg"), name.alias("hspan"), name.alias("first_span"),
            pl.lit(True).alias("is_success"), pl.lit(False).alias("is_cut"), pl.lit(False).alias("is_req_error"))
    if (kind == FAST_RADIX).any():
        m = pl.col("_m")
        frad = fast.filter(kind == FAST_RADIX).with_columns(
            t.str.extract_groups(r"Prefix (?P<prefix>\d+) - Suffix (?P<suffix>\d+)$").alias("_m")).select(
            "line_no", _ts_ns(ts).alias("ts_ns"),
            pl.concat_str([pl.lit("prefix="), m.struct.field("prefix"), pl.lit(" suffix="),
                           m.struct.field("suffix")]).alias("detail"))
    return (fsucc if fsucc is not None and fsucc.height else None), frad, plain


def _compute(recs: pl.DataFrame, fast: pl.DataFrame | None) -> dict | None:
    """The rows of one frame's records: requests, request events, config, log events (`_emit` writes them). `fast`:
    the frame's fast lines (`_fast_kind`), each a record of its own, merged with the others in file order; `recs`
    None or empty: the generic parts are skipped."""
    has = recs is not None and recs.height > 0
    if not has and fast is None:
        return None
    plan: dict = {"radix": [], "args": None, "config": [], "events": None}
    fsucc, frad, plain = _fast_frames(fast)
    if not has:
        return _compute_fast(plan, fsucc, frad, plain)
    msg, lvl, fields, spans = pl.col("msg"), pl.col("level"), pl.col("fields"), pl.col("spans")
    recs = recs.with_columns(spans.str.extract(P_FIRST_SPAN.regex, 1).alias("first_span"))
    first_span = pl.col("first_span")
    recs = recs.with_columns(
        _ts_ns(pl.col("ts")).alias("ts_ns"),
        ((msg == "Success") & fields.str.contains(r"\btotal_time(?:=|\":)\"")).alias("is_success"),
        ((pl.col("origin") == "cut") & (lvl == "INFO") & fields.str.contains(r"\btotal_time=\"")).alias("is_cut"),
        ((lvl == "ERROR") & first_span.is_in(HANDLERS)).alias("is_req_error"),
        msg.str.contains(P_RADIX.regex).fill_null(False).alias("is_radix"),
        msg.str.starts_with("Args {").fill_null(False).alias("is_args"),
    )
    # Forward-filled over the frame's records in file order; the leading NULLs get the previous frame's last time in
    # `_emit`. Fast radix events take that time too (as their generic records would).
    if fsucc is None and frad is None and plain is None:
        recs = recs.with_columns(pl.col("ts_ns").forward_fill().alias("ts_ff"))
        times = recs["ts_ns"]
    else:
        timed = (recs, fsucc, frad,
                 plain[0].select("line_no", pl.col("finish_ns").alias("ts_ns")) if plain is not None else None)
        seq = pl.concat([d.select("line_no", "ts_ns", pl.lit(i, pl.UInt8).alias("src"))
                         for i, d in enumerate(timed) if d is not None and d.height]).sort("line_no")
        seq = seq.with_columns(pl.col("ts_ns").forward_fill().alias("ts_ff"))
        src = seq["src"]
        recs = recs.with_columns(seq.filter(src == 0)["ts_ff"])
        if frad is not None:
            frad = frad.with_columns(seq.filter(src == 2)["ts_ff"].alias("ts_ns"))
        times = seq["ts_ns"]
    last = times.drop_nulls()
    plan["last_ts"] = int(last[-1]) if last.len() else None
    plan["timed"] = last.len()

    # -- requests: Success, a Success cut before its message, request-level errors ------------------------------
    req = recs.filter(pl.col("is_success") | pl.col("is_cut") | pl.col("is_req_error"))
    plan["requests"] = _request_parts(req, fsucc, plain)

    # -- radix prefix-cache admissions ----------------------------------------------------------------------------
    rad = recs.filter(pl.col("is_radix"))
    if rad.height:
        m = msg.str.extract_groups(P_RADIX.regex)
        rad = rad.select("line_no", pl.col("ts_ff").alias("ts_ns"), pl.concat_str(
            [pl.lit("prefix="), m.struct.field("prefix"), pl.lit(" suffix="), m.struct.field("suffix")]).alias("detail"))
    for r in (rad, frad):
        if r is not None and r.height:
            plan["radix"].append(r.select("line_no", pl.lit(None, pl.String).alias("request_id"),
                                          pl.lit("prefix_match").alias("event"), "ts_ns", "detail"))

    # -- configuration ----------------------------------------------------------------------------------------------
    args = recs.filter(pl.col("is_args"))
    plan["args"] = _args_pairs(args, "Args") if args.height else None
    config = []
    # Only records whose message starts like one of the patterns can match one (most records do not).
    cand = recs.filter(msg.str.contains(CONFIG_LEAD).fill_null(False))
    hits = []
    for key, pat in CONFIG_LINES:
        hit = msg.str.contains(pat.regex).fill_null(False)
        got = cand.filter(hit)
        hits.append(got["line_no"])
        if got.height:
            m = msg.str.extract_groups(pat.regex)
            config.append(config_rows(got.select(
                "line_no", pl.lit(key).alias("key"), m.struct.field("v").alias("value"),
                pl.lit(pat.name).alias("origin"))))
            if "attention" in pat.regex:
                config.append(config_rows(got.select(
                    "line_no", pl.lit("attention").alias("key"), m.struct.field("attention").alias("value"),
                    pl.lit(pat.name).alias("origin"))))
    plan["config"] = config
    cfg_hit = pl.col("line_no").is_in(pl.concat(hits).implode())

    # -- everything else (and request errors, which are errors too) → log_events -----------------------------------
    ev = recs.filter(~(pl.col("is_success") | pl.col("is_cut") | pl.col("is_radix") | pl.col("is_args") | cfg_hit)
                     | pl.col("is_req_error"))
    plan["events"] = None
    if ev.height:
        # (A sub-expression used twice in one select is computed twice: the traceback test and the batch span
        # capture are columns first.)
        ev = ev.with_columns(wrap_names(ev["wrap"]), looks_like_traceback(msg).fill_null(False).alias("_tb"),
                             spans.str.extract_groups(P_BATCH.regex).alias("_bm"))
        tb, bk = pl.col("_tb"), pl.col("_bm").struct.field("kind")
        level = pl.when(lvl == "WARN").then(pl.lit("WARNING")).otherwise(lvl)
        kind = (pl.when(tb).then(pl.lit("traceback")).when(lvl == "ERROR").then(pl.lit("error"))
                .when(lvl == "WARN").then(pl.lit("warning")).otherwise(pl.lit("message")))
        out = ev.select(
            "line_no", pl.col("line_count").cast(pl.Int32), pl.col("ts_ff").alias("ts_ns"), level.alias("level"),
            "process",
            # (event_message of a record that is no traceback: its text, cut at MSG_MAX)
            kind.alias("kind"), msg.fill_null("").str.slice(0, MSG_MAX).alias("message"), pl.col("target"),
            spans.str.slice(0, MSG_MAX).alias("spans"), bk.alias("batch_kind"),
            pl.when(bk.is_not_null()).then(fields.str.extract(P_BATCH_ID.regex, 1))
            .cast(pl.Int64, strict=False).alias("batch_id"),
            pl.coalesce(pl.col("_bm").struct.field("size"), pl.when(bk.is_not_null())
                        .then(fields.str.extract(r"\"batch_size\":(\d+)", 1)))
            .cast(pl.Int32, strict=False).alias("batch_size"),
        )
        # A traceback's message leads with its last line: that capture only on the tracebacks.
        if ev["_tb"].any():
            idx = ev["_tb"].arg_true()
            tbm = ev.select(msg).gather(idx).select(event_message(msg.fill_null(""), pl.lit(True))).to_series()
            out = out.with_columns(out["message"].scatter(idx, tbm))
        plan["events"] = out
    return plan


def _request_parts(req: pl.DataFrame | None, fsucc: pl.DataFrame | None, plain) -> tuple | None:
    """(requests rows, their events, cut Success timings) of a frame's request records, Success lines on the text
    path and plain Success lines, each part's `request_index` its rank among the frame's requests (file order)."""
    parts = [_request_rows(d) for d in (req, fsucc) if d is not None and d.height]
    if plain is not None and plain[0].height:
        parts.append((*plain, None))
    if not parts:
        return None
    if len(parts) > 1:
        every = np.sort(np.concatenate([p[0]["line_no"].to_numpy() for p in parts]))
        for out, _, _ in parts:
            idx = np.searchsorted(every, out["line_no"].to_numpy())
            out.replace_column(out.get_column_index("request_index"), pl.Series("request_index", idx, pl.Int32))
    cuts = [p[2] for p in parts if p[2] is not None]
    return [p[0] for p in parts], [p[1] for p in parts], pl.concat(cuts) if cuts else None


def _compute_fast(plan: dict, fsucc: pl.DataFrame | None, frad: pl.DataFrame | None, plain) -> dict:
    """`_compute` of a frame with fast lines only: no record is untimed but a pasted Success line (NULL, kept), so
    no time is carried within the frame; the last time is the timed row with the highest line number."""
    timed = [d for d in (fsucc, frad, plain[0].select("line_no", pl.col("finish_ns").alias("ts_ns"))
                         if plain is not None else None) if d is not None and d.height]
    last_line, plan["last_ts"], plan["timed"] = -1, None, 0
    for d in timed:
        t = d.select("line_no", "ts_ns").drop_nulls("ts_ns")
        plan["timed"] += t.height
        if t.height and int(t["line_no"][-1]) > last_line:
            last_line, plan["last_ts"] = int(t["line_no"][-1]), int(t["ts_ns"][-1])
    plan["requests"] = _request_parts(None, fsucc, plain)
    if frad is not None and frad.height:
        plan["radix"].append(frad.select("line_no", pl.lit(None, pl.String).alias("request_id"),
                                         pl.lit("prefix_match").alias("event"), "ts_ns", "detail"))
    return plan


def _emit(ctx: ParseContext, plan: dict | None, st: _State) -> None:
    """Write one frame's rows (`_compute`) in file order, with the running state applied."""
    if plan is None:
        return
    prev_ts = st.last_ts
    if plan["last_ts"] is not None:
        st.last_ts = plan["last_ts"]
    st.timed += plan["timed"]

    def carried(df: pl.DataFrame) -> pl.DataFrame:
        return df if prev_ts is None else df.with_columns(pl.col("ts_ns").fill_null(prev_ts))

    if plan["requests"] is not None:
        outs, evs, cut = plan["requests"]
        for out in outs:
            ctx.write("requests", out.with_columns((pl.col("request_index") + st.req_index).cast(pl.Int32)))
        st.req_index += sum(out.height for out in outs)
        for ev in evs:
            ctx.write("request_events", ev)
        if cut is not None:
            note_rows(ctx, cut, lambda r: (
                f"line {r['line_no']}: Success record cut off before its message; kept "
                f"{', '.join(k for k in DURATION_KEYS if r[k] is not None) or 'no timing'} (status NULL)"))
    for rad in plan["radix"]:
        ctx.write("request_events", carried(rad))
    if plan["args"] is not None:
        rows, summary = plan["args"]
        st.config.append(rows)
        note_rows(ctx, summary.filter(~pl.col("complete")),
                  lambda r: f"line {r['line_no']}: Args record cut off; kept its {r['len'] or 0} complete fields")
    st.config.extend(plan["config"])
    if plan["events"] is not None:
        ctx.write("log_events", carried(plan["events"]))


class TgiLogParser(Parser):
    name = "tgi_log"
    version = VERSION
    formats = ("tgi_log",)
    order = 50
    duckdb_threads = 1  # rows are only appended (Parser.duckdb_threads)

    def sniff(self, head: bytes, inp: InputFile):
        return sniff_tgi(head)

    def parse(self, ctx: ParseContext, fmt: str) -> None:
        st = _State()
        out = BufferedWrites(ctx)
        # Frames are worked on by two threads at once (`_work`, pure); their rows are written here in file order.
        for plan in ordered_map(_work, _record_frames(ctx)):
            _apply(ctx, out, plan, st)
        out.flush()
        write_config(ctx, st.config, {"model_id": "model", "num_shard": "tensor_parallel_size"}, "tgi")
        if st.timed:
            ctx.set_clock("log_wallclock_utc", "RFC 3339 UTC timestamps printed by TGI (µs); untimed records: "
                          "requests keep NULL times, other records inherit the previous timed record's time")
        else:
            ctx.set_clock("none", "no timestamps in this log (lines pasted without them): times are NULL")
        span_of_times(ctx)


PARSER = TgiLogParser()
