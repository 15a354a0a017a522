"""SGLang server logs, 0.1 to 0.5.x, into the canonical tables: scheduler `Prefill batch` / `Decode batch` lines into
`engine_batches`, `server_args=ServerArgs(…)` (and the scheduler's `max_total_num_tokens=…` line) into
`engine_config`, `--log-requests` `Finish:` records into `requests`, uvicorn access lines, bench_serving console
summaries and every other record into `log_events`.

A record starts at a `[time( rank tags)] ` head (after an optional Ray actor prefix, tqdm debris or a docker-compose
prefix), at a bare batch or access line pasted without the head, at a bench_serving summary header or at a tqdm bar;
lines that start nothing belong to the record before them (tracebacks, hard-wrapped `Finish:` reprs), except after
one-line records (batch, access, tqdm), where they form a record of their own. Records are formed with polars
(start flags, cumulative-sum group ids, `group_by` + `str.join`); no Python loop over lines.

Batch lines are validated against the known field set: a line with an unknown field (a terminal splice such as
`#cached-tounning-req`) or cut before its last field is rejected with the reason, never half-read into wrong numbers.
They are most of a long log's bytes, so they are read by layout first (`_fast_batches`): per label, the key list of
the first line of each layout in a frame gives one capture-free regex that validates whole lines; the lines it
matches are split at `, ` and sliced at known offsets, and lines of a shape the generic reader would reject whole get
its reason there. Everything else (other labels, SWA values, 0.1 layouts, lines no tried layout fits) goes to the
generic reader, which finds each field by its key.

Lean lane: most of a long log is one-line batch and access records behind a plain dated head. `_lean_prepare` picks
out, by literal tests at known offsets on the raw line, those the generic path would read as exactly that with
nothing changed by unwrapping (no wrapper can start with a dated head; no ANSI code, no dedup marker), reads their
heads once per distinct head text, and sends them past unwrapping, P_HEAD, the category chain, record formation and
the per-record readers: batch lines by layout on the raw line, access lines at their quotes. `_lean_frames` keeps them
beside the generic records of the same stretch of the file (a line after a one-line record starts a record; untimed
records inherit the latest timed line of either).

Both lanes follow the one switch of every parser, `base.FAST_LANES`: STALLSCOPE_FAST_LANES=0 (or
`base.fast_lanes(False)`) sends every line the generic way; `tests/test_sglang_lean.py` and `test_sglang_fast.py`
check both give the same store. The regexes, their real sample lines and the batch-line keys live in
`sglang_log_patterns.py`.

Times: `YYYY-MM-DD HH:MM:SS` is local time without zone (`--tz`, default UTC). 0.2.x-0.3.0 print only `HH:MM:SS`:
the date then comes from another source in the store (the latest with an absolute clock: nearest date, so ±12 h
coarse) or else the file's modification time (the last line is put at or before it), midnight roll-overs counted
in file order; the choice is recorded with `ctx.set_clock`. Lines without a timestamp inherit the previous timed
record's time (NULL when none precedes). (`parsers/logtime` has year logic only; the date logic is here.)
"""
from __future__ import annotations

import datetime as _dt
import re
from zoneinfo import ZoneInfo

import numpy as np
import polars as pl

from . import sglang_log_patterns
from .base import InputFile, ParseContext, Parser, fast_lanes_on
from .logtime import check_zone, full_date_ns
from .prefixes import ANSI_MARK, unwrap_text
from .sglang_log_patterns import (CORE_KEYS, FINISH_FIELDS, KNOWN_KEYS, NEW_KEY, PLAIN_VALUE_RX, P_ACCESS, P_BATCH,
                                  P_BATCH_LEAD, P_LEAD_ONLY, P_LEAN_ACCESS, P_LEAN_HEAD,
                                  P_CFG_PAIR, P_FINISH, P_HEAD, P_KV_GRAMMAR, P_OLD_PREFILL, P_SCHED_CFG,
                                  P_SERVER_ARGS_PAIR, P_SUMMARY, P_TQDM, RANK_TAGS, TERMINAL_KEYS, TQDM_DEBRIS,
                                  VALUE_RX, kv_grammar, rx_escape)
from .lines import ordered_map
from .logrecords import (Deferred, ANSI_RX, WRAPS_RX, MSG_MAX, unwrap, wrap_names, config_rows, event_message, looks_like_traceback,
                         note_rows, record_frames, BufferedWrites, span_of_times, with_body, write_config,
                         RecordSplitter, collapse, dedup_note, line_frames, trim_trailing_blanks)

VERSION = "1.0"
NS_PER_S = 1_000_000_000
DAY_NS = 86400 * NS_PER_S
# Rows of a time-only log are first written with "day index × 1 day + time of day" (small numbers) and moved onto
# the calendar at the end, once the date is chosen; anything below this bound (1973) is such a relative time.
REL_BOUND = 100_000_000_000_000_000
PATTERNS = sglang_log_patterns.PATTERNS  # the formats this parser reads (tests/test_patterns.py)

# A layout whose last key is a new field ends a complete line there when at least this many lines of a frame have
# it: a format's end repeats line after line, a cut after that same field does not.
NEW_LAST_MIN = 3


def _new_last(label: str, keys: list[str]) -> bool:
    """Whether the layout's last key is a new field (`new_fields`), which may end a line (NEW_LAST_MIN)."""
    return keys[-1] not in KNOWN_KEYS and new_fields(label, keys) is not None


def new_fields(label: str, keys: list[str]) -> list[str] | None:
    """The keys of a batch-line layout that this parser does not know, when they are new fields (CORE_KEYS);
    None when the layout is not readable that way (a core field missing, a key twice, a key of odd characters)."""
    unknown = [k for k in keys if k not in KNOWN_KEYS]
    if not unknown:
        return []
    core = CORE_KEYS["Prefill" if label.startswith("Prefill") else "Decode"]
    if (len(set(keys)) != len(keys) or not all(any(k in keys for k in alts) for alts in core)
            or not all(NEW_KEY.fullmatch(k) for k in unknown)):
        return None
    return unknown


INT_FIELDS = [("#new-seq", "new_seqs"), ("#new-token", "new_tokens"), ("#cached-token", "cached_tokens"),
              ("#running-req", "running_reqs"), ("#queue-req", "queued_reqs"), ("#pending-token", "pending_tokens")]
FLOAT_FIELDS = [("gen throughput (token/s)", "gen_throughput_tps"), ("input throughput (token/s)", "input_throughput_tps"),
                ("cache hit rate", "cache_hit_rate_pct"), ("accept len", "accept_len"), ("accept rate", "accept_rate"),
                ("mamba usage", "mamba_usage")]
# Keys with a column (plain values only: an SWA `full=…, swa=…` value stays in `extra` whole).
MAPPED_KEYS = [k for k, _ in INT_FIELDS + FLOAT_FIELDS] + ["token usage", "full token usage", "#token", "#full token",
                                                            "cuda graph", "npu graph", "cpu graph"]
# A field that has no column (it goes to `extra`).
_UNMAPPED_RX = "(?:^|, )(?:" + "|".join(rx_escape(k) for k in sorted(set(KNOWN_KEYS) - set(MAPPED_KEYS), key=len,
                                                                      reverse=True)) + "): "
CONFIG_ALIASES = {"model_path": "model", "tp_size": "tensor_parallel_size", "dp_size": "data_parallel_size",
                  "pp_size": "pipeline_parallel_size", "max_running_requests": "max_num_seqs",
                  "max_total_num_tokens": "kv_cache_tokens"}

# -- sniffing (Python `re` over the first 64 KB only) -------------------------------------------------------------
_HEAD_PY = (r"^" + WRAPS_RX + r"(?:[^\[\n]*%\|[^\[\n]*)?"
            r"\[(?:\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2}(?:\.\d{3})?(?: (?:" + RANK_TAGS + r")\d+)*\]"
            r"(?:\[[A-Za-z0-9_.-]+:\d+\]\[[A-Z]+\]:)? ")
_SNIFF_STRONG = re.compile(_HEAD_PY + r"(?:Prefill batch|Decode batch|server_args=ServerArgs\(|Finish: obj=|"
                                      r"Receive: obj=|max_total_num_tokens=)", re.M)
_SNIFF_BARE = re.compile(r"^" + WRAPS_RX + r"(?:\[gpu_id=\d+\] )?(?:(?:Prefill|Decode) batch(?: \[\d+\])?[.,(] |new fill batch\. #seq: )",
                         re.M)
_SNIFF_WEAK = re.compile(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{3})?(?: (?:" + RANK_TAGS + r")\d+)*\] ", re.M)
_SNIFF_BENCH = re.compile(r"^=+ Serving Benchmark Result =+\s*$", re.M)
_SNIFF_BENCH_SGL = re.compile(r"^(?:Backend:\s+\S|Total generated tokens \(retokenized\):|Max reqeuest concurrency:)",
                              re.M)


def sniff_sglang(head: bytes) -> tuple[str, float] | None:
    text = unwrap_text(head.decode("utf-8", "replace"))
    if _SNIFF_STRONG.search(text):
        return "sglang_log", 0.95
    if _SNIFF_BARE.search(text):
        return "sglang_log", 0.9
    if _SNIFF_BENCH.search(text) and _SNIFF_BENCH_SGL.search(text):
        return "sglang_log", 0.6
    if _SNIFF_WEAK.search(text):
        return "sglang_log", 0.4
    return None


# =====================================================================================================================
# Parsing
# =====================================================================================================================

_HEAD_SLICE = 120
# P_HEAD up to the head's `]` (`pre`), then its space or the line's end: the same match (a line holds no newline, so
# `(?: (?P<msg>.*))?$` holds exactly where this does) without a capture over the whole message (slow per byte); the
# message is the rest of the line after `pre` and its space.
_P_HEAD_TAIL = r"(?: (?P<msg>.*))?$"
assert P_HEAD.regex.startswith("^") and P_HEAD.regex.endswith(_P_HEAD_TAIL)
_P_HEAD_CUT = "^(?P<pre>" + P_HEAD.regex[1:-len(_P_HEAD_TAIL)] + ")(?: |$)"
_BATCH_START = (r"^(?:(?:\[gpu_id=\d+\] )?(?:Prefill|Decode) batch(?: \[\d+\])?[.,(]|new fill batch\. #seq: |"
                r"#running-req: \d+, #token: )")
_ACCESS_START = r'^INFO:\s+\S+ - "[A-Z]+ '


def _prepare(df: pl.DataFrame) -> pl.DataFrame:
    """Per-line columns: cleaned text, head fields, the message to classify, and the line's category."""
    df = unwrap(df)
    t = pl.col("t")
    # The head is found by its first `]` (literal search); its time and rank tags are read once per distinct head
    # text (a log has few: 1 s resolution), so no capture runs over the lines. A head followed by neither a space
    # nor the line's end, or past the first _HEAD_SLICE characters, is left to P_HEAD below.
    close = t.str.find("]", literal=True)
    whole = (t.str.starts_with("[") & (((close <= _HEAD_SLICE - 2) & (t.str.find("] ", literal=True) == close))
                                       | ((close <= _HEAD_SLICE - 1) & (t.str.len_bytes() == close + 1))))
    df = df.with_columns(pl.when(whole).then(t.str.head(close + 1)).alias("_lead"), close.alias("_c"))
    heads = df.select(pl.col("_lead").drop_nulls().unique())
    g = pl.col("_lead").str.extract_groups(P_LEAD_ONLY.regex)
    heads = heads.select("_lead", g.struct.field("ts").alias("ts"), g.struct.field("ranks").alias("ranks")
                         ).filter(pl.col("ts").is_not_null())
    df = df.join(heads, on="_lead", how="left", maintain_order="left")
    # The message is cut off the line once, below (`_off`); only P_HEAD's rare lines bring it as `hmsg`.
    df = df.with_columns(pl.when(pl.col("ts").is_not_null()).then(pl.col("_c") + 2).alias("_off"),
                         pl.lit(None, pl.String).alias("hmsg"), wrap_names(df["wrap"]),
                         pl.lit(False).alias("debris")).drop("_lead", "_c")
    rare = df.filter(pl.col("ts").is_null())
    rare = rare.filter(t.str.contains(r"\[(?:\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2}"))
    if rare.height:
        # The capture runs once (its struct as a column: in one select, each field read of it ran it again).
        rare = rare.with_columns(t.str.extract_groups(_P_HEAD_CUT).alias("_h"))
        f = pl.col("_h").struct.field
        pre = f("pre").str.len_chars()
        rare = rare.select(
            "line_no", f("ts").alias("ts"), f("ranks").alias("ranks"),
            pl.when(t.str.len_chars() > pre).then(t.str.slice(pre + 1)).alias("hmsg"),
            pl.when(f("actor").is_not_null()).then(pl.concat_str(
                [f("actor"), pl.lit(" pid="), f("pid"), pl.when(f("ip").is_not_null()).then(pl.lit(", ip=") + f("ip"))],
                ignore_nulls=True)).alias("process"),
            (f("debris") != "").alias("debris"),
            ((f("debris") == "") | f("debris").str.contains(TQDM_DEBRIS)).alias("ok"),
        ).filter(pl.col("ts").is_not_null() & pl.col("ok")).drop("ok")
        df = df.update(rare, on="line_no")
    is_head = pl.col("ts").is_not_null()
    msg = pl.coalesce(pl.col("hmsg"), t.str.slice(pl.col("_off")))
    df = df.with_columns(
        pl.when(is_head).then(msg.fill_null("")).otherwise(t).alias("msg1"),
        t.str.contains(r"^\s*$").alias("blank"),
    ).drop("hmsg", "_off")
    m = pl.col("msg1")
    cat = (pl.when(m.str.contains(_BATCH_START)).then(pl.lit("batch"))
           .when(m.str.contains(_ACCESS_START)).then(pl.lit("access"))
           .when(is_head).then(pl.lit("head"))
           .when(t.str.contains(P_SUMMARY.regex)).then(pl.lit("summary"))
           .when(t.str.contains(P_TQDM.regex)).then(pl.lit("tqdm"))
           .otherwise(pl.lit("cont")))
    return df.with_columns(cat.alias("cat"))


def _flag(df: pl.DataFrame) -> pl.DataFrame:
    single = pl.col("cat").is_in(["batch", "access", "tqdm"])
    return df.with_columns(((pl.col("cat") != "cont") | single.shift(1).fill_null(False)).alias("start"))


# -- the lean lane ---------------------------------------------------------------------------------------------------
# Most of a long log is one-line batch and access records behind a plain dated head. `_lean_prepare` picks out the
# lines the generic path would read as exactly that, by literal tests at known offsets on the raw line, and sends
# them past unwrapping, P_HEAD, the category chain, record formation and the per-record readers: their head (time,
# rank tags) is read once per distinct head text, batch lines by layout (`_fast_batches` on the raw line) and access
# lines by their quotes. `_lean_frames` keeps them beside the generic records of the same stretch of the file, for
# the start flags (the line after a one-line record starts one) and the times untimed records inherit.
_LK_ACCESS = 5  # `_lk` of a lean access line; 1-4 are the batch labels of _FAST_LABELS
_LEAN_ODD = ANSI_MARK + r"|across cluster\]"
# What the generic path keeps of a line (`_prepare`), and what the lean lane does.
_REST_COLS = ["line_no", "wrap", "t", "dedup", "ts", "ranks", "process", "debris", "msg1", "blank", "cat", "_pl"]
_LEAN_COLS = ["line_no", "t", "_c", "_lk", "ts_ff", "_ms", "ranks", "tp_rank", "dp_rank", "ep_rank", "pp_rank", "_xr",
              "_ap"]


def _lean_heads(leads: pl.Series, tz: str) -> pl.DataFrame:
    """Per distinct head text of the lean candidates: what `_prepare` and `_times` read from it (time, rank tags,
    and the rank columns and `process` the batch and access readers derive), for plain dated heads in ASCII that
    give a time; other heads are left out (their lines take the generic path). A head `P_LEAN_HEAD` holds has its
    fields at known offsets (`[YYYY-MM-DD HH:MM:SS(.mmm)( TAGn)*]`): read by slicing (a real log has thousands of
    distinct heads per frame: no capture runs over them)."""
    u = pl.DataFrame({"_lead": leads.drop_nulls().unique()}).filter(pl.col("_lead").str.contains(P_LEAN_HEAD.regex))
    h = pl.col("_lead")
    u = u.with_columns((h.str.slice(20, 1) == ".").alias("_ms_f"))
    ms = pl.col("_ms_f")
    num = lambda a, n: h.str.slice(a, n).cast(pl.Int64)  # noqa: E731
    u = u.with_columns(num(1, 4).alias("_Y"), num(6, 2).alias("_M"), num(9, 2).alias("_D"), num(12, 2).alias("_h"),
                       num(15, 2).alias("_mi"), num(18, 2).alias("_s"), pl.when(ms).then(num(21, 3)).alias("_ms"),
                       h.str.slice(pl.when(ms).then(24).otherwise(20), h.str.len_bytes() - pl.when(ms).then(25)
                                   .otherwise(21)).alias("ranks"))
    u = u.with_columns(full_date_ns(u, "_Y", "_M", "_D", "_h", "_mi", "_s", "_ms", tz).alias("ts_ff")
                       ).filter(pl.col("ts_ff").is_not_null())
    # Per distinct rank-tag string (a log has a handful): the rank columns, the other tags and `process`.
    rk = pl.DataFrame(_rank_table(u["ranks"]), schema={"ranks": pl.String, **{c: pl.Int32 for c in (
        "tp_rank", "dp_rank", "ep_rank", "pp_rank")}, "extra": pl.String})
    rk = rk.select("ranks", "tp_rank", "dp_rank", "ep_rank", "pp_rank", pl.col("extra").fill_null("").alias("_xr"),
                   pl.lit(None, pl.String).alias("process")).with_columns(_process().alias("_ap")).drop("process")
    return u.select("_lead", "ts_ff", pl.col("_ms_f").alias("_ms"), "ranks").join(rk, on="ranks", how="left")


def _lean_prepare(tz: str):
    """`prepare` for `logrecords.line_frames`: a frame's lines as the generic path's prepared lines (`_prepare`)
    followed by its lean lines (`_LEAN_COLS`, `_lk` > 0). A lean line is one the generic path reads as a one-line
    batch or access record with nothing changed by unwrapping: a dated ASCII head at the line start (no wrapper
    can start with one), no ANSI code, no Ray dedup marker. `_pl` marks a generic line that follows a lean one
    (the frame's first line: the previous frame's last line; frames come in file order)."""
    prev = [False]

    def prepare(df: pl.DataFrame) -> pl.DataFrame:
        t, c = pl.col("text"), pl.col("_c")
        d = df.select("line_no", "text", t.str.find("]", literal=True).alias("_c"))
        ok = t.str.starts_with("[") & (c >= 20) & (c <= _HEAD_SLICE - 2)
        # ANSI codes and Ray dedup markers are unwrap's: lines holding either take the generic path.
        if d["text"].str.contains(_LEAN_ODD).any():
            ok = ok & ~t.str.contains(_LEAN_ODD)
        # The head's `]`, its space and the label (or `INFO: `) in one slice after the first `]`; both as columns
        # (each is read twice in one select below, which ran it twice).
        d = d.with_columns(t.str.slice(c + 1, 15).alias("_s"), ok.alias("_ok"))
        s, ok = pl.col("_s"), pl.col("_ok")
        k = d.select(pl.when(ok).then(s.replace_strict([" " + x[:14] for x in _FAST_LABELS],
                                                        range(1, len(_FAST_LABELS) + 1), default=0,
                                                        return_dtype=pl.Int8)).fill_null(0).alias("_lk"),
                     (ok & s.str.starts_with(" INFO: ")).fill_null(False).alias("_a"))
        lk = k["_lk"].to_numpy().copy()
        ia = np.flatnonzero(k["_a"].to_numpy())
        if len(ia):
            # The access regex runs only on lines that start like one.
            lk[ia[d["text"].gather(ia).str.contains(P_LEAN_ACCESS.regex).to_numpy()]] = _LK_ACCESS
        d = d.select("line_no", "text", "_c", pl.Series("_lk", lk, dtype=pl.Int8))
        d = d.with_columns(pl.when(pl.col("_lk") > 0).then(t.str.head(c + 1)).alias("_lead"))
        d = d.join(_lean_heads(d["_lead"], tz), on="_lead", how="left", maintain_order="left")
        mask = d.select(((pl.col("_lk") > 0) & pl.col("ts_ff").is_not_null()).alias("m"))["m"]
        after = mask.shift(1, fill_value=prev[0])
        if len(mask):
            prev[0] = bool(mask[-1])
        lean = d.filter(mask).rename({"text": "t"}).select(_LEAN_COLS)
        rest = _prepare(df.filter(~mask)).with_columns(after.filter(~mask).alias("_pl"), pl.lit(0, pl.Int8).alias("_lk"))
        return pl.concat([rest, lean], how="diagonal") if lean.height else rest

    return prepare


def _lean_flag(df: pl.DataFrame) -> pl.DataFrame:
    """`_flag` for the generic lines of a frame whose lean lines are elsewhere: a line right after a lean line
    (a one-line record) starts a record too."""
    single = pl.col("cat").is_in(["batch", "access", "tqdm"])
    return df.with_columns(((pl.col("cat") != "cont") | single.shift(1).fill_null(False) | pl.col("_pl"))
                           .alias("start"))


def _lean_frames(ctx: ParseContext):
    """(physical lines of whole generic records, the records, the lean lines of the same stretch of the file),
    frame by frame in file order: `logrecords.record_frames` for a frame split in two. A frame whose last line is
    lean closes every record in it (the next frame's first line starts one), so its lean lines never wait for a
    record still open; otherwise the open record waits for the next frame, after all of this frame's lean lines."""
    splitter = RecordSplitter(_lean_flag)
    markers = folded = 0
    st_tz = check_zone(ctx.options.tz)
    for frame, last in line_frames(ctx, _lean_prepare(st_tz)):
        n_lean = int((frame["_lk"] > 0).sum())
        k = frame.height - n_lean
        rest = frame.slice(0, k).select(_REST_COLS)
        lean = frame.slice(k).select(_LEAN_COLS) if n_lean else None
        done = last or (n_lean > 0 and (k == 0 or lean["line_no"][-1] > rest["line_no"][-1]))
        lines = splitter.feed(rest, done)
        d = lines["dedup"].drop_nulls()
        if d.len():
            markers, folded = markers + d.len(), folded + int(d.sum())
        lines, blanks = trim_trailing_blanks(lines)
        ctx.counts.skipped += blanks
        yield lines, collapse(lines), lean
    if markers:
        ctx.notes.append(dedup_note(markers, folded))


def _tod_ns(ts: pl.Expr) -> pl.Expr:
    m = ts.str.extract_groups(r"(?P<h>\d{2}):(?P<m>\d{2}):(?P<s>\d{2})(?:\.(?P<ms>\d{3}))?$")
    i = pl.Int64
    return ((m.struct.field("h").cast(i) * 3600 + m.struct.field("m").cast(i) * 60 + m.struct.field("s").cast(i))
            * NS_PER_S + m.struct.field("ms").cast(i).fill_null(0) * 1_000_000)


class _State:
    def __init__(self, tz: str):
        self.tz = tz
        self.last_ts: int | None = None
        self.last_tod: int | None = None  # time-only logs: time of day of the last timed record
        self.day = 0  # time-only logs: midnight roll-overs so far
        self.rel_first: int | None = None
        self.rel_last: int | None = None
        self.abs_rows = 0
        self.ms = False
        self.req_index = 0
        self.config: list[pl.DataFrame] = []
        self.rejected_batches = 0
        self.debris_lines = 0
        self.new_fields: dict[str, int] = {}  # keys this parser does not know, read as new fields: lines with each


def _abs_ns(u: pl.DataFrame, tz: str) -> pl.Series:
    """Epoch ns of each dated `ts` of `u` (local time in `tz`; NULL for time-only or impossible ones)."""
    parts = pl.col("ts").str.extract_groups(r"^(?P<Y>\d{4})-(?P<M>\d{2})-(?P<D>\d{2}) (?P<h>\d{2}):(?P<mi>\d{2}):"
                                            r"(?P<s>\d{2})(?:\.(?P<ms>\d{3}))?$")
    u = u.select(*[parts.struct.field(k).cast(pl.Int64, strict=False).alias(f"_{k}")
                   for k in ("Y", "M", "D", "h", "mi", "s", "ms")])
    return full_date_ns(u, "_Y", "_M", "_D", "_h", "_mi", "_s", "_ms", tz)


def _times(recs: pl.DataFrame, st: _State, lean: pl.DataFrame | None = None) -> pl.DataFrame:
    """Adds ts_ns (absolute, or relative for time-only heads) and ts_ff (forward-filled) to records in file order.
    `lean`: the one-line records of the same stretch of the file read by the lean lane (`_lean_prepare`: dated,
    their `ts_ff` their own time), which untimed records may inherit from."""
    ts = pl.col("ts")
    full = ts.str.len_chars() >= 19
    # Computed once per distinct timestamp (1 s resolution: many lines share one).
    u = recs.select(ts.drop_nulls().unique())
    u = u.with_columns(_abs_ns(u, st.tz).alias("_abs"), pl.when(~full).then(_tod_ns(ts)).alias("_tod"))
    # A log has dated or time-only heads, rarely both: the lookup that would give only NULLs is skipped.
    recs = recs.with_columns(*[(ts.replace_strict(u["ts"], u[k], default=None, return_dtype=pl.Int64)
                                if u[k].is_not_null().any() else pl.lit(None, pl.Int64)).alias(k)
                               for k in ("_abs", "_tod")])
    st.abs_rows += int(recs["_abs"].is_not_null().sum())
    st.ms = st.ms or bool(u["ts"].str.contains(r"\.\d{3}$").any())
    tod = recs.filter(pl.col("_tod").is_not_null()).select("gid", "_tod")
    if tod.height:
        prev = pl.col("_tod").shift(1)
        if st.last_tod is not None:
            prev = prev.fill_null(st.last_tod)
        # A step back of more than 12 h is midnight; smaller steps back are interleaved writers, not a new day.
        roll = ((pl.col("_tod") - prev) < -(DAY_NS // 2)).fill_null(False)
        tod = tod.with_columns((pl.col("_tod") + (roll.cast(pl.Int64).cum_sum() + st.day) * DAY_NS).alias("_rel"))
        st.last_tod = int(tod["_tod"][-1])
        st.day = int(tod["_rel"][-1] // DAY_NS)
        if st.rel_first is None:
            st.rel_first = int(tod["_rel"][0])
        st.rel_last = int(tod["_rel"][-1])
        recs = recs.join(tod.select("gid", "_rel"), on="gid", how="left")
    else:
        recs = recs.with_columns(pl.lit(None, pl.Int64).alias("_rel"))
    recs = recs.with_columns(pl.coalesce("_abs", "_rel").alias("ts_ns"))
    if lean is not None and lean.height:
        return _times_with_lean(recs.drop("_abs", "_tod", "_rel"), st, lean)
    ff = pl.col("ts_ns").forward_fill()
    if st.last_ts is not None:
        ff = ff.fill_null(st.last_ts)
    recs = recs.with_columns(ff.alias("ts_ff"))
    got = recs["ts_ff"].drop_nulls()
    if got.len():
        st.last_ts = int(got[-1])
    return recs.drop("_abs", "_tod", "_rel")


def _times_with_lean(recs: pl.DataFrame, st: _State, lean: pl.DataFrame) -> pl.DataFrame:
    """ts_ff of records interleaved with lean lines: an untimed record inherits the time of the latest timed line
    before it, a timed record or a lean line, whichever comes later in the file (numpy over the line numbers;
    both are in file order)."""
    st.abs_rows += lean.height
    st.ms = st.ms or bool(lean["_ms"].any())
    l_ln = lean["line_no"].to_numpy()
    l_ts = lean["ts_ff"].to_numpy()
    if recs.height == 0:
        st.last_ts = int(l_ts[-1])
        return recs.with_columns(pl.lit(None, pl.Int64).alias("ts_ff"))
    r_ln = recs["line_no"].to_numpy()
    r_ts = recs["ts_ns"]
    timed = r_ts.is_not_null().to_numpy()
    vals = r_ts.fill_null(0).to_numpy()
    i = np.arange(len(r_ln))
    last = np.maximum.accumulate(np.where(timed, i, -1))  # the latest timed record at or before each
    j = np.searchsorted(l_ln, r_ln) - 1  # the latest lean line before each
    rec_line = np.where(last >= 0, r_ln[np.maximum(last, 0)], -1)
    lean_line = np.where(j >= 0, l_ln[np.maximum(j, 0)], -1)
    inherit = np.where(lean_line > rec_line, l_ts[np.maximum(j, 0)], vals[np.maximum(last, 0)])
    known = timed | (last >= 0) | (j >= 0) | (st.last_ts is not None)
    ff = np.where(timed, vals, np.where((last >= 0) | (j >= 0), inherit, st.last_ts or 0))
    recs = recs.with_columns(pl.when(pl.Series(known)).then(pl.Series(ff, dtype=pl.Int64)).alias("ts_ff"))
    # The latest timed line of this stretch: its last lean line or its last timed record.
    if timed.any() and r_ln[last[-1]] > l_ln[-1]:
        st.last_ts = int(vals[last[-1]])
    else:
        st.last_ts = int(l_ts[-1])
    return recs


# Keys that end another key ("token usage" ends "full token usage") need the separator before them in a search.
_SUFFIX_KEYS = {k for k in KNOWN_KEYS if any(o != k and o.endswith(k) for o in KNOWN_KEYS)}


_KEY_TOKEN = r"[#A-Za-z][^:,]*: "  # a field's key and its `: ` (values hold neither `:` nor a leading letter/#)


def _search_field(kv: pl.Expr, key: str, value_rx: str = PLAIN_VALUE_RX) -> pl.Expr:
    """The value of one field of a batch line that already passed P_KV_GRAMMAR (so values are well delimited): the
    slower path, for SWA values and the 0.1 layout (the rest read values by layout index)."""
    lead = "(?:^|, )" if key in _SUFFIX_KEYS else ""
    return kv.str.extract(rf"{lead}{rx_escape(key)}: ({value_rx})(?:, |$)", 1)




def _batches(ctx: ParseContext, lines: pl.DataFrame, recs: pl.DataFrame, st: _State) -> int:
    """engine_batches rows from batch records; invalid lines rejected with their reason. Returns lines parsed.

    Lines of a layout seen in the frame that validate against it whole go the fast way (`_fast_batches`); the
    rest (other labels, SWA values, unknown or cut fields, 0.1 layouts) the generic one, which gives the same rows
    for the lines both can read and the reasons for the others."""
    b = recs.filter(pl.col("cat") == "batch").select(
        "line_no", "gid", "msg1", "ts_ff", "ranks", "process", "debris", "line_count", "t")
    if b.height == 0:
        return 0
    parts, n = [], 0
    if fast_lanes_on():
        (out, k, debris, bad), b = _fast_batches(b, seen=st.new_fields)
        if out is not None:
            parts.append(out)
            n += k
            st.debris_lines += debris
        if bad is not None:
            ctx.write_rejects(bad.to_arrow())
            st.rejected_batches += bad.height
    return _rest_batches(ctx, lines, b, st, parts, n)


def _rest_batches(ctx: ParseContext, lines: pl.DataFrame, b: pl.DataFrame, st: _State, parts: list, n: int) -> int:
    """The batch records the fast way left (`b`) read by the generic reader, and every part's rows written in line
    order; returns the lines parsed (`n`, the fast way's, and the generic reader's)."""
    if b.height:
        out, k = _generic_batches(ctx, lines, b, st)
        if out is not None:
            parts.append(out)
        n += k
    if parts:
        ctx.write("engine_batches", pl.concat(parts).sort("line_no") if len(parts) > 1 else parts[0])
    return n


_FAST_LABELS = ("Prefill batch, ", "Prefill batch. ", "Decode batch, ", "Decode batch. ")
_FAST_TRIES = 8  # layouts tried per label in a frame; lines of further layouts go generic
_FAST_SKIPS = 64  # lines per label and frame whose own fields are unreadable, skipped before giving up
# The value of a layout's last field when the line has no trailing `, `: a format's last value (see `complete`).
_LAST_VALUE_RX = r"-?\d+%?|\d+\.\d{2}%?|True|False"
# ASCII digits: faster than Unicode `\d` (a smaller automaton), and a line they refuse still goes the generic way.
_V_ASCII = "(?:" + PLAIN_VALUE_RX.replace(r"\d", "[0-9]") + ")"
_LAST_ASCII = "(?:" + _LAST_VALUE_RX.replace(r"\d", "[0-9]") + ")"
_BATCH_COLS = ["line_no", "ts_ns", "kind", "tp_rank", "dp_rank", "ep_rank", "pp_rank", "new_seqs", "new_tokens",
               "cached_tokens", "running_reqs", "queued_reqs", "pending_tokens", "token_usage", "kv_tokens",
               *[c for _, c in FLOAT_FIELDS], "cuda_graph", "forward_iter", "process", "extra"]


def _layout_rx(label: str, keys: list[str]) -> str:
    """A capture-free regex that a batch line of exactly this label and key list matches, with well-formed plain
    values, ending as a complete line does (a trailing `,`/`, ` after any field; else a format's last field)."""
    v = _V_ASCII
    head = "^" + rx_escape(label) + "".join(rx_escape(k) + ": " + v + ", " for k in keys[:-1])
    last = rx_escape(keys[-1]) + ": "
    if keys[-1] in TERMINAL_KEYS or _new_last(label, keys):
        return head + last + f"(?:{v},[ \t]*|{_LAST_ASCII}[ \t]*)$"
    return head + last + v + ",[ \t]*$"


def _layout_keys(line: str, label: str) -> list[str] | None:
    """The keys of one batch line in order (None when its fields are not `key: value` pairs)."""
    kv = line[len(label):].rstrip(" \t").rstrip(",")
    pairs = [f.split(": ", 1) for f in kv.split(", ")]
    return [p[0] for p in pairs] if kv and all(len(p) == 2 for p in pairs) else None


def _cut_rx(line: str, label: str) -> str | None:
    """For a line cut inside its last field (`…, npu graph: False, input thr`): a regex of the lines cut the same
    way (same keys, any plain values, the same last text), which the generic reader rejects alike."""
    kv = line[len(label):]
    head, sep, tail = kv.rpartition(", ")
    keys = _layout_keys(label + head, label) if sep else None
    if not keys or ": " in tail or not tail:
        return None
    return ("^" + rx_escape(label) + "".join(rx_escape(k) + ": " + _V_ASCII + ", " for k in keys)
            + rx_escape(tail) + "$")


def _fast_batches(b: pl.DataFrame, lean: bool = False, seen: dict[str, int] | None = None
                  ) -> tuple[tuple, pl.DataFrame]:
    """Batch lines read by layout: per label the first line's key list gives a validating regex
    (no captures); the lines it matches are split at `, ` and each field sliced at its known offset; lines of a
    shape the generic reader rejects whole (an unknown or missing field) get its reason here. Returns
    ((engine_batches rows or None, lines read, of which with tqdm debris, rejects or None), the records left for
    the generic reader). `lean`: lean lines (`_LEAN_COLS`: label, rank columns and head end known), read on the
    raw line behind its head. `seen` counts the lines read with each new field (`new_fields`)."""
    text = "t" if lean else "msg1"
    if not lean:
        # The labels' first 14 characters tell them apart; the space after `Prefill batch,` is checked by the
        # regexes.
        lab = pl.col("msg1").str.head(14).replace_strict([x[:14] for x in _FAST_LABELS],
                                                         range(1, len(_FAST_LABELS) + 1), default=0, return_dtype=pl.Int8)
        # Rank tags per distinct tag string (a log has a handful), once for all the frame's layouts.
        rk = _rank_table(b["ranks"])
        ranks = pl.col("ranks").fill_null("")
        b = b.with_columns(lab.alias("_lk"), *[
            ranks.replace_strict(rk["ranks"], rk[col], default=None, return_dtype=pl.Int32).alias(col)
            for col in ("tp_rank", "dp_rank", "ep_rank", "pp_rank")],
            ranks.replace_strict(rk["ranks"], rk["extra"], default=None, return_dtype=pl.String).fill_null("")
            .alias("_xr"))
    rest, outs, bad, n, debris = [], [], [], 0, 0
    for (lk,), rows in sorted(b.partition_by("_lk", as_dict=True).items()):
        if lk == 0:
            rest.append(rows)
            continue
        label = _FAST_LABELS[lk - 1]
        # A line that fails another layout's regex fails it within a few fields: trying several costs little. The
        # layouts of a sample of the lines are tried first, the most common first (each regex pass costs about a
        # pass over the bytes of the lines still unread); then the first unread line's, one after another.
        tries = skips = 0
        planned = _common_layouts(rows, label, lean)
        while rows.height and tries < _FAST_TRIES and skips < _FAST_SKIPS:
            if planned:
                first, keys = None, planned.pop(0)
                rx = _layout_rx(label, keys)
            else:
                first = rows[text][0][rows["_c"][0] + 2:] if lean else rows["msg1"][0]
                keys = _layout_keys(first, label)
                rx = _layout_rx(label, keys) if keys else _cut_rx(first, label)
            if rx and lean:
                rx = r"^[^\]]*\] " + rx[1:]  # the head: up to the line's first `]` (it holds no other)
            hit = rows[text].str.contains(rx) if rx else None
            if first is None:
                if not hit.any():
                    continue
            elif hit is None or not hit[0]:
                # A line whose fields do not parse as `key: value` pairs (spliced, mangled): it alone goes generic.
                rest.append(rows.head(1))
                rows = rows.slice(1)
                skips += 1
                continue
            tries += 1
            every = bool(hit.all())
            got = rows if every else rows.filter(hit)
            rows = rows.clear() if every else rows.filter(~hit)
            need = "#running-req" if label.startswith("Decode") else "#new-token"
            new = new_fields(label, keys) if keys else None
            if new and _new_last(label, keys) and got.height < NEW_LAST_MIN:
                rest.append(got)  # too few to tell a format's end from a cut: the generic reader's reason
                continue
            if keys and need in keys and new is not None:
                for k in new if seen is not None else ():
                    seen[k] = seen.get(k, 0) + got.height
                outs.append(_fast_rows(got, label, keys, lean))
                n += got.height if lean else int(got["line_count"].sum())
                debris += 0 if lean else int(got["debris"].sum())
                continue
            why = _layout_reason(label, keys or _layout_keys(first.rpartition(", ")[0], label), need, bool(keys))
            if why is None or (not lean and int(got["line_count"].max()) > 1):
                rest.append(got)  # the generic reader gives their reason
            else:
                bad.append(got.select("line_no", pl.lit(why).alias("reason"), pl.col("t").alias("raw")))
        rest.append(rows)
    rest = [r for r in rest if r.height]
    rest = pl.concat(rest) if rest else b.clear()
    if not lean:
        rest = rest.drop("_lk", "tp_rank", "dp_rank", "ep_rank", "pp_rank", "_xr")
    bad = pl.concat(bad) if bad else None
    return (_fast_finish(outs) if outs else None, n, debris, bad), rest


_SAMPLE = 64  # lines per label and frame whose layouts are tried first


def _common_layouts(rows: pl.DataFrame, label: str, lean: bool) -> list[list[str]]:
    """The key lists of evenly spaced sample lines (those whose fields are `key: value` pairs), most common first."""
    n = rows.height
    idx = sorted({i * (n - 1) // (_SAMPLE - 1) for i in range(_SAMPLE)}) if n > _SAMPLE else list(range(n))
    sample = rows[idx]
    texts = sample["t" if lean else "msg1"].to_list()
    if lean:
        texts = [x[c + 2:] for x, c in zip(texts, sample["_c"].to_list())]
    seen: dict[tuple, int] = {}
    for x in texts:
        keys = _layout_keys(x, label)
        if keys:
            seen[tuple(keys)] = seen.get(tuple(keys), 0) + 1
    return [list(k) for k, _ in sorted(seen.items(), key=lambda kv: -kv[1])][:_FAST_TRIES]


def _layout_reason(label: str, keys: list[str] | None, need: str, whole: bool) -> str | None:
    """The generic reader's reject reason for every line of one matched shape that it would not read (None: leave
    them to it). `whole`: the keys are the line's (else the line was cut inside its last field, after `keys`)."""
    if not keys or any(":" in k or "," in k for k in keys):
        return None
    name = label[:-2]
    unknown = [k for k in keys if k not in KNOWN_KEYS]
    if unknown:
        return f"{name} line with unknown field '{unknown[0]}' (spliced or mangled text); not read"
    if not whole:
        return f"{name} line whose fields do not fit the known layout; not read"
    return f"{name} line without {need}; not read" if need not in keys else None


def _fast_rows(g: pl.DataFrame, label: str, keys: list[str], lean: bool = False) -> pl.DataFrame:
    """The values of lines that matched `_layout_rx(label, keys)`, as text, one column per key with a column
    (`v:` + key; a layout's fields without one joined in `_rest`), beside the line's own columns; `_fast_finish`
    reads the frame's layouts into engine_batches rows at once (few expressions per layout: each costs a fixed
    ~30 us). `lean`: the raw lines (the head, which holds no `, `, ends at `_c` + 2)."""
    comma = label.endswith(", ")
    n = len(keys)
    parts = pl.col("t" if lean else "msg1").str.splitn(", ", n + 1 if comma else n)
    unmapped = [k for k in keys if k not in MAPPED_KEYS]
    if unmapped:
        # The split as a column: read inside `_rest`'s concat_str too, it ran again per read (2 -> 1 us a line).
        g = g.with_columns(parts.alias("_sp"))
        parts = pl.col("_sp")

    def val(key: str) -> pl.Expr:
        j = keys.index(key)
        f = parts.struct.field(f"field_{j + 1 if comma else j}")
        if lean and not comma and not j:  # the head, the label and the first key
            e = f.str.slice(pl.col("_c") + (2 + len(label) + len(key) + 2))
        else:  # the field is its key, `: ` and its value (after the label for the first of a `.` label)
            e = f.str.strip_prefix(("" if comma or j else label) + key + ": ")
        return e.str.strip_chars_end(", \t") if j == n - 1 else e

    rest = [pl.concat_str([pl.lit(k + ": ") + val(k) for k in unmapped], separator=", ").alias("_rest")] if unmapped else []
    return g.select("line_no", "ts_ff", pl.lit("prefill" if label.startswith("Prefill") else "decode").alias("kind"),
                    "tp_rank", "dp_rank", "ep_rank", "pp_rank", "_xr",
                    pl.lit(None, pl.String).alias("process") if lean else pl.col("process"),
                    *[val(k).alias("v:" + k) for k in dict.fromkeys(keys) if k in MAPPED_KEYS], *rest)


def _fast_finish(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """engine_batches rows from `_fast_rows` frames: the same values `_batch_rows` reads."""
    v = pl.concat(parts, how="diagonal_relaxed") if len(parts) > 1 else parts[0]
    f64, i32 = pl.Float64, pl.Int32
    have = set(v.columns)

    def first(*ks: str) -> pl.Expr:
        es = [pl.col("v:" + k) for k in ks if "v:" + k in have]
        return (pl.coalesce(es) if len(es) > 1 else es[0]) if es else pl.lit(None, pl.String)

    extra_ranks = pl.col("_xr")
    rest = pl.col("_rest").fill_null("") if "_rest" in have else pl.lit("")
    if (v["_xr"] != "").any():
        extra = pl.concat_str([pl.when(extra_ranks != "").then(extra_ranks), pl.when(rest != "").then(rest)],
                              separator=", ", ignore_nulls=True)
        extra = pl.when(extra != "").then(extra)
    else:  # no other rank tags in the frame (the common case): `extra` is the fields without a column, if any
        extra = pl.col("_rest") if "_rest" in have else pl.lit(None, pl.String)
    graph = first("cuda graph", "npu graph", "cpu graph")
    cols = {
        "line_no": pl.col("line_no"), "ts_ns": pl.col("ts_ff"), "kind": pl.col("kind"),
        **{col: pl.col(col) for col in ("tp_rank", "dp_rank", "ep_rank", "pp_rank")},
        **{c: first(k).cast(i32, strict=False) for k, c in INT_FIELDS},
        "token_usage": first("full token usage", "token usage").cast(f64, strict=False),
        "kv_tokens": first("#full token", "#token").cast(i32, strict=False),
        **{c: first(k).str.strip_suffix("%").cast(f64, strict=False) for k, c in FLOAT_FIELDS},
        "cuda_graph": pl.when(graph.is_not_null()).then(graph == "True"),
        "forward_iter": pl.lit(None, pl.Int64), "process": pl.col("process"),
        "extra": extra,
    }
    return v.select(*[cols[c].alias(c) for c in _BATCH_COLS])


def _generic_batches(ctx: ParseContext, lines: pl.DataFrame, b: pl.DataFrame, st: _State
                     ) -> tuple[pl.DataFrame | None, int]:
    """The general batch-line reader: every label and layout, each field found by its key; rejects with reasons.
    Returns (engine_batches rows or None, lines parsed)."""
    m = pl.col("msg1")
    # The label is read off the line's first characters only; the fields are the rest (a capture over the whole
    # line costs a pass over all its bytes).
    b = b.with_columns(m.str.slice(0, 96).str.extract_groups(P_BATCH_LEAD.regex).alias("_g")).with_columns(
        m.str.slice(pl.col("_g").struct.field("lead").str.len_chars()).alias("_kv"))
    g = pl.struct(*[pl.col("_g").struct.field(k) for k in ("gpu", "label", "iter", "mixed")], pl.col("_kv").alias("kv"))
    # The 0.1.x prefill layout is rare: run its regex only when such a line is there.
    old = (m.str.extract_groups(P_OLD_PREFILL.regex) if b["msg1"].str.starts_with("new fill batch").any()
           else pl.lit(None, pl.Struct({k: pl.String for k in ("seq", "cached", "new", "queue", "running", "hit")})))
    # A trailing separator after the last field (`, `; `,` where a collector stripped the line's end, as Ray's
    # log monitor does for an SGLang actor) is the same as `, `.
    raw_kv = pl.when(g.struct.field("label").is_not_null()).then(g.struct.field("kv")).when(
        m.str.starts_with("#running-req: ")).then(m).str.strip_chars_end(" \t")
    b = b.with_columns(
        pl.when(raw_kv.str.ends_with(",")).then(raw_kv + " ").otherwise(raw_kv).alias("kv"),
        pl.when(g.struct.field("mixed").is_not_null()).then(pl.lit("mixed"))
        .when(g.struct.field("label") == "Prefill batch").then(pl.lit("prefill"))
        .when(g.struct.field("label") == "Decode batch").then(pl.lit("decode"))
        .when(old.struct.field("seq").is_not_null()).then(pl.lit("prefill"))
        .when(m.str.starts_with("#running-req: ")).then(pl.lit("decode")).alias("kind"),
        g.struct.field("label").fill_null("batch").alias("label"),
        g.struct.field("iter").cast(pl.Int64, strict=False).alias("forward_iter"),
        g.struct.field("mixed").cast(pl.Int32, strict=False).alias("mixed"),
        g.struct.field("gpu").alias("gpu"),
        old.alias("old"),
    )
    kv = pl.col("kv")
    is_old = pl.col("old").struct.field("seq").is_not_null()
    # Two passes read every field: the keys in order (their joined list is the line's layout, `_sig`; a log has a
    # handful) and the value tokens in order. In a line that passes the grammar (and has no SWA `full=…, swa=…`
    # value) the i-th value belongs to the i-th key, so each field is one list lookup at its layout's index.
    b = b.with_columns(kv.str.extract_all(_KEY_TOKEN).list.join("|").alias("_sig"),
                       kv.str.extract_all(PLAIN_VALUE_RX).alias("_vals"))
    lay = _layouts(b["_sig"])
    b = b.with_columns(pl.col("_sig").replace_strict(lay["sig"], list(range(len(lay["sig"]))), default=None,
                                                     return_dtype=pl.Int64).alias("_sid"))
    sig = pl.col("_sid")
    ids = list(range(len(lay["sig"])))
    last_key = sig.replace_strict(ids, lay["last_key"], default=None, return_dtype=pl.String)
    last_val = pl.col("_vals").list.last()
    last_val_ok = ~last_val.str.contains(".", literal=True) | last_val.str.contains(r"^\d+\.\d{2}%?$")
    complete = kv.str.ends_with(", ") | (last_key.is_in(TERMINAL_KEYS) & last_val_ok)
    # A new field ends a complete line when enough lines of the frame end with it (NEW_LAST_MIN).
    need = pl.when(pl.col("kind") == "decode").then(pl.lit("#running-req")).otherwise(pl.lit("#new-token"))
    has = lambda k: sig.replace_strict(ids, lay[k], default=False, return_dtype=pl.Boolean)  # noqa: E731
    has_need = pl.when(pl.col("kind") == "decode").then(has("has_running")).otherwise(has("has_new_token"))
    # A layout with keys this parser does not know is read when they are new fields (`new_fields`, per label).
    new = {lab: [new_fields(lab, k) for k in lay["keys"]] for lab in ("Prefill", "Decode")}
    added = sorted({k for lab in new for ks in new[lab] if ks for k in ks})
    grammar = kv.str.contains(P_KV_GRAMMAR.regex)
    ok_new = pl.lit(False)
    if added:
        ok_new = pl.when(pl.col("kind") == "decode").then(
            sig.replace_strict(ids, [x is not None for x in new["Decode"]], default=False, return_dtype=pl.Boolean)
        ).otherwise(sig.replace_strict(ids, [x is not None for x in new["Prefill"]], default=False,
                                       return_dtype=pl.Boolean))
        grammar = pl.when(ok_new).then(kv.str.contains(kv_grammar(KNOWN_KEYS + added))).otherwise(grammar)
        complete = complete | (ok_new & last_key.is_in(added) & last_val_ok
                               & (pl.len().over("_sid", "kind") >= NEW_LAST_MIN))
    b = b.with_columns(
        grammar.alias("grammar"),
        complete.alias("complete"), last_key.alias("last_key"),
        has_need.alias("has_need"), need.alias("need"), has("has_unmapped").alias("_unmapped"),
    )
    # Which field is unknown: only for the (few) lines that fail the grammar.
    keys_of = kv.str.extract_all(r"(?:^|, )[^:,]+: ").list.eval(pl.element().str.strip_prefix(", ").str.strip_suffix(": "))
    odd = b.filter(~pl.col("grammar").fill_null(True)).select(
        "gid", pl.when(ok_new).then(keys_of.list.eval(pl.element().filter(~pl.element().is_in(KNOWN_KEYS + added))))
        .otherwise(keys_of.list.eval(pl.element().filter(~pl.element().is_in(KNOWN_KEYS)))).list.first().alias("unknown"))
    b = b.join(odd, on="gid", how="left")
    reason = (pl.when(is_old).then(None)
              .when(kv.is_null()).then(pl.concat_str([pl.lit("batch line without its fields: "),
                                                       m.str.slice(0, 40)]))
              .when(pl.col("unknown").is_not_null()).then(pl.concat_str([
                  pl.col("label"), pl.lit(" line with unknown field '"), pl.col("unknown"),
                  pl.lit("' (spliced or mangled text); not read")]))
              .when(~pl.col("grammar")).then(pl.concat_str([
                  pl.col("label"), pl.lit(" line whose fields do not fit the known layout; not read")]))
              .when(~pl.col("complete")).then(pl.concat_str([
                  pl.col("label"), pl.lit(" line cut off after '"), pl.col("last_key").fill_null("?"),
                  pl.lit("'; not read")]))
              .when(~pl.col("has_need") & pl.col("mixed").is_null()).then(pl.concat_str([
                  pl.col("label"), pl.lit(" line without "), pl.col("need"), pl.lit("; not read")])))
    ok = (is_old | (kv.is_not_null() & pl.col("unknown").is_null() & pl.col("grammar") & pl.col("complete")
                    & (pl.col("has_need") | pl.col("mixed").is_not_null()))).fill_null(False)
    b = b.with_columns(ok.alias("_ok"))
    bad = b.filter(~pl.col("_ok")).with_columns(reason.alias("reason"))
    if bad.height:
        reasons = bad.select("gid", "reason")
        rej = lines.join(reasons, on="gid", how="inner")
        ctx.write_rejects(rej.select("line_no", "reason", pl.col("t").alias("raw")).to_arrow())
        st.rejected_batches += bad.height
    good = b.filter(pl.col("_ok"))
    if good.height == 0:
        return None, 0
    if added:
        for lab, kind in (("Prefill", "prefill"), ("Decode", "decode")):
            is_decode = pl.col("kind") == "decode"
            used = good.filter(is_decode if kind == "decode" else ~is_decode)["_sid"].value_counts()
            for sid, n in used.iter_rows():
                for k in new[lab][sid] or ():
                    st.new_fields[k] = st.new_fields.get(k, 0) + n
    # SWA values and old layouts take the slower per-field searches; the rest the list lookups.
    swa = good["kv"].str.contains("=", literal=True).fill_null(False) | good.select(is_old).to_series().fill_null(False)
    parts = [p for p in (_batch_rows(good.filter(~swa), lay, True), _batch_rows(good.filter(swa), lay, False))
             if p is not None]
    out = pl.concat(parts).sort("line_no") if len(parts) > 1 else parts[0]
    st.debris_lines += int(good["debris"].sum())
    return out, int(good["line_count"].sum())


def _rank_table(ranks: pl.Series) -> dict:
    """Per distinct rank-tag string: TP/DP/EP/PP ranks and the other tags (ATTN_CP, MOE_DP) as text."""
    u = pl.DataFrame({"ranks": ranks.fill_null("").unique()})
    r = pl.col("ranks")
    t = u.with_columns(*[r.str.extract(rf"(?:^| ){tag}(\d+)(?: |$)", 1).cast(pl.Int32, strict=False).alias(col)
                         for tag, col in (("TP", "tp_rank"), ("DP", "dp_rank"), ("EP", "ep_rank"), ("PP", "pp_rank"))],
                       r.str.extract_all(r"(?:ATTN_CP|MOE_DP)\d+").list.join(" ").alias("extra"))
    return {k: t[k].to_list() for k in t.columns}


def _layouts(sigs: pl.Series) -> dict:
    """Per distinct layout (keys joined by `|`): its last key, whether it has the fields a batch kind needs or a
    field without a column, and the index of every mapped key."""
    u = sigs.drop_nulls().unique().to_list()
    keys = [[k[:-2] for k in x.split("|")] if x else [] for x in u]
    out = {"sig": u, "keys": keys, "last_key": [k[-1] if k else None for k in keys],
           "has_running": ["#running-req" in k for k in keys], "has_new_token": ["#new-token" in k for k in keys],
           "has_unmapped": [any(x not in MAPPED_KEYS for x in k) for k in keys]}
    for m in MAPPED_KEYS:
        out["i:" + m] = [k.index(m) if m in k else None for k in keys]
    return out


def _batch_rows(good: pl.DataFrame, lay: dict, aligned: bool) -> pl.DataFrame | None:
    """engine_batches rows of validated batch records; `aligned`: values are read by layout index (else by key)."""
    if good.height == 0:
        return None
    kv = pl.col("kv")

    def _field(kv_: pl.Expr, key: str, value_rx: str = PLAIN_VALUE_RX) -> pl.Expr:
        if aligned and value_rx == PLAIN_VALUE_RX:
            i = pl.Series(lay["i:" + key], dtype=pl.Int64).gather(good["_sid"])
            return pl.col("_vals").list.get(pl.lit(i), null_on_oob=True)
        if aligned:
            return pl.lit(None, pl.String)
        return _search_field(kv_, key, value_rx)

    ranks = pl.col("ranks").fill_null("")
    i32, f64 = pl.Int32, pl.Float64
    o = pl.col("old")

    def num(key: str, old_field: str | None = None) -> pl.Expr:
        e = _field(kv, key)
        return (pl.coalesce(e, o.struct.field(old_field)) if old_field else e).cast(i32, strict=False)

    floats = {c: _field(kv, k).str.strip_suffix("%").cast(f64, strict=False) for k, c in FLOAT_FIELDS}
    floats["cache_hit_rate_pct"] = pl.coalesce(floats["cache_hit_rate_pct"], o.struct.field("hit").cast(f64, strict=False))
    usage = pl.coalesce(_field(kv, "full token usage"), _field(kv, "token usage"),
                        _field(kv, "token usage", VALUE_RX).str.extract(r"^full=([0-9.]+)", 1)).cast(f64, strict=False)
    kv_tokens = pl.coalesce(_field(kv, "#full token"), _field(kv, "#token"),
                            _field(kv, "#token", VALUE_RX).str.extract(r"^full=(\d+)", 1)).cast(i32, strict=False)
    graph = pl.coalesce(_field(kv, "cuda graph"), _field(kv, "npu graph"), _field(kv, "cpu graph"))
    # Fields without a column stay in `extra`; splitting on ", " leaves an SWA value's `swa=…` half as its own
    # element, which is kept, so `#token: full=…, swa=…` survives whole.
    el = pl.element()
    mapped = el.str.extract(r"^([^:]+): ", 1).is_in(MAPPED_KEYS) & el.str.contains(rf": (?:{PLAIN_VALUE_RX})$")
    # Only lines with such a field (few) are split.
    odd_fields = pl.col("_unmapped") | kv.str.contains("=", literal=True)
    good = good.with_columns(odd_fields.alias("_odd"))
    sub = good.filter(pl.col("_odd")).select(
        "gid", kv.str.strip_suffix(", ").str.split(", ").list.eval(el.filter(~mapped)).list.join(", ").alias("_rest"))
    good = good.join(sub, on="gid", how="left", maintain_order="left") if sub.height else good.with_columns(
        pl.lit(None, pl.String).alias("_rest"))
    rest = pl.col("_rest").fill_null("")
    # Rank tags per distinct tag string (a log has a handful).
    rk = _rank_table(good["ranks"])
    extra_ranks = pl.col("ranks").fill_null("").replace_strict(rk["ranks"], rk["extra"], default=None,
                                                               return_dtype=pl.String).fill_null("")
    extra = pl.concat_str([
        pl.when(extra_ranks != "").then(extra_ranks),
        pl.when(pl.col("gpu").is_not_null()).then(pl.lit("gpu_id=") + pl.col("gpu")),
        pl.when(rest != "").then(rest)], separator=", ", ignore_nulls=True)
    out = good.select(
        "line_no", pl.col("ts_ff").alias("ts_ns"), "kind",
        *[pl.col("ranks").fill_null("").replace_strict(rk["ranks"], rk[col], default=None, return_dtype=i32).alias(col)
          for col in ("tp_rank", "dp_rank", "ep_rank", "pp_rank")],
        num("#new-seq", "seq").alias("new_seqs"), num("#new-token", "new").alias("new_tokens"),
        num("#cached-token", "cached").alias("cached_tokens"),
        pl.coalesce(_field(kv, "#running-req"), pl.col("mixed").cast(pl.String), o.struct.field("running"))
        .cast(i32, strict=False).alias("running_reqs"),
        num("#queue-req", "queue").alias("queued_reqs"), num("#pending-token").alias("pending_tokens"),
        usage.alias("token_usage"), kv_tokens.alias("kv_tokens"),
        *[e.alias(c) for c, e in floats.items()],
        pl.when(graph.is_not_null()).then(graph == "True").alias("cuda_graph"),
        "forward_iter", "process", pl.when(extra != "").then(extra).alias("extra"),
    )
    return out


def _process() -> pl.Expr:
    """log_events.process: the Ray actor prefix and the rank tags, NULL when the line has neither."""
    p = pl.concat_str([pl.col("process"), pl.col("ranks").str.strip_chars()], separator=" ", ignore_nulls=True)
    return pl.when(p.str.strip_chars() != "").then(p.str.strip_chars())


def _access(ctx: ParseContext, recs: pl.DataFrame) -> int:
    a = recs.filter(pl.col("cat") == "access")
    if a.height == 0:
        return 0
    g = pl.col("msg1").str.extract_groups(P_ACCESS.regex)
    ctx.write("log_events", a.select(
        "line_no", pl.col("line_count").cast(pl.Int32), pl.col("ts_ff").alias("ts_ns"), pl.lit("INFO").alias("level"),
        _process().alias("process"),
        pl.lit("access").alias("kind"), pl.col("msg1").str.slice(0, MSG_MAX).alias("message"),
        g.struct.field("method").alias("http_method"), g.struct.field("path").alias("http_path"),
        g.struct.field("status").cast(pl.Int32, strict=False).alias("http_status"), pl.lit("uvicorn.access").alias("target")))
    return int(a["line_count"].sum())


def _lean_batches(ctx: ParseContext, lean: pl.DataFrame, st: _State) -> int:
    """engine_batches rows (and rejects) of lean batch lines: by layout (`_fast_batches`), the rest by the generic
    reader as the one-line records they are. Returns lines parsed."""
    b = lean.filter(pl.col("_lk") < _LK_ACCESS)
    if b.height == 0:
        return 0
    parts, n = [], 0
    if fast_lanes_on():
        (out, n, _, bad), b = _fast_batches(b, lean=True, seen=st.new_fields)
        if out is not None:
            parts.append(out)
        if bad is not None:
            ctx.write_rejects(bad.to_arrow())
            st.rejected_batches += bad.height
    # The rest as the one-line records they are.
    recs = b.select("line_no", pl.col("line_no").alias("gid"), pl.col("t").str.slice(pl.col("_c") + 2).alias("msg1"),
                    "ts_ff", "ranks", pl.lit(None, pl.String).alias("process"), pl.lit(False).alias("debris"),
                    pl.lit(1, pl.Int64).alias("line_count"), "t")
    return _rest_batches(ctx, recs.select("line_no", "gid", "t"), recs, st, parts, n)


def _lean_access(ctx: ParseContext, lean: pl.DataFrame) -> int:
    """log_events rows of lean access lines (`P_LEAN_ACCESS`): the request is between the line's first two quotes,
    the status right after them; the same values `_access` reads with P_ACCESS."""
    a = lean.filter(pl.col("_lk") == _LK_ACCESS)
    if a.height == 0:
        return 0
    # The splits as columns (each read twice below: in one select, each read ran it again).
    a = a.with_columns(pl.col("t").str.splitn('"', 3).alias("_q"))
    a = a.with_columns(pl.col("_q").struct.field("field_1").str.splitn(" ", 3).alias("_r"))
    q, req = pl.col("_q"), pl.col("_r")
    ctx.write("log_events", a.select(
        "line_no", pl.lit(1, pl.Int32).alias("line_count"), pl.col("ts_ff").alias("ts_ns"), pl.lit("INFO").alias("level"),
        pl.col("_ap").alias("process"), pl.lit("access").alias("kind"),
        pl.col("t").str.slice(pl.col("_c") + 2, MSG_MAX).alias("message"),
        req.struct.field("field_0").alias("http_method"), req.struct.field("field_1").alias("http_path"),
        q.struct.field("field_2").str.slice(1, 3).cast(pl.Int32, strict=False).alias("http_status"),
        pl.lit("uvicorn.access").alias("target")))
    return a.height


def _finish(ctx: ParseContext, recs: pl.DataFrame, st: _State) -> pl.DataFrame:
    """`Finish:` records → requests + request_events; returns the records it did not take."""
    body = pl.concat_str([pl.col("msg1"), pl.col("cont").str.replace_all("\n", "", literal=True)], ignore_nulls=True)
    is_fin = (pl.col("cat") == "head") & pl.col("msg1").str.starts_with("Finish: obj=")
    f = recs.filter(is_fin).with_columns(body.alias("body"))
    if f.height == 0:
        return recs
    b = pl.col("body")
    vals = {name: b.str.extract(p.regex, 1) for name, p in FINISH_FIELDS}
    rid = pl.coalesce(b.str.extract(P_FINISH.regex, 1), b.str.extract(r"\brid='([^']*)'", 1))
    e2e = (vals["e2e_latency_s"].cast(pl.Float64, strict=False) * NS_PER_S).round(0).cast(pl.Int64, strict=False)
    reason = vals["finish_reason"]
    out = f.select(
        "line_no", rid.alias("request_id"), (pl.int_range(pl.len()) + st.req_index).cast(pl.Int32).alias("request_index"),
        rid.alias("server_request_id"), pl.lit("sglang").alias("engine"), pl.lit("server").alias("kind"),
        pl.col("ts_ns").alias("finish_ns"),
        # The head has 1 s resolution: arrival = finish - e2e_latency inherits that coarseness.
        pl.when(pl.col("ts_ns") >= REL_BOUND).then(pl.col("ts_ns") - e2e).alias("arrival_ns"),
        vals["prompt_tokens"].cast(pl.Int32, strict=False).alias("prompt_tokens"),
        vals["output_tokens"].cast(pl.Int32, strict=False).alias("output_tokens"),
        vals["cached_tokens"].cast(pl.Int32, strict=False).alias("cached_tokens"),
        e2e.alias("e2e_latency_ns"),
        pl.when(reason == "abort").then(pl.lit("aborted")).otherwise(pl.lit("ok")).alias("status"),
        reason.alias("finish_reason"),
    )
    ctx.write("requests", out)
    st.req_index += out.height
    ctx.write("request_events", out.select("line_no", "request_id", pl.lit("finished").alias("event"),
                                           pl.col("finish_ns").alias("ts_ns"), pl.col("finish_reason").alias("detail")))
    ctx.counts.parsed += int(f["line_count"].sum())
    return recs.filter(~is_fin)


def _config(ctx: ParseContext, recs: pl.DataFrame, st: _State) -> pl.DataFrame:
    """server_args and the scheduler config line → engine_config rows; returns the records it did not take."""
    m = pl.col("msg1")
    is_sa = (pl.col("cat") == "head") & m.str.starts_with("server_args=ServerArgs(")
    is_sc = (pl.col("cat") == "head") & m.str.contains(P_SCHED_CFG.regex)
    body = pl.concat_str([m, pl.col("cont").str.replace_all("\n", "", literal=True)], ignore_nulls=True)
    for mask, pat, origin in ((is_sa, P_SERVER_ARGS_PAIR, "server_args"), (is_sc, P_CFG_PAIR, "scheduler init")):
        got = recs.filter(mask).with_columns(body.alias("body"))
        if got.height == 0:
            continue
        pairs = got.select("line_no", pl.col("body").str.extract_all(pat.regex).alias("p")).explode("p").drop_nulls("p")
        kv = pairs.select("line_no", pl.col("p").str.extract_groups(pat.regex).alias("m")).select(
            "line_no", pl.col("m").struct.field("key").alias("key"),
            pl.col("m").struct.field("value").str.strip_chars().str.strip_suffix(" GB").alias("value"),
            pl.lit(origin).alias("origin"))
        st.config.append(config_rows(kv))
        if origin == "server_args":
            counts = kv.group_by("line_no").len()
            cut = got.select("line_no", pl.col("body").str.strip_chars().str.ends_with(")").alias("ok")).join(
                counts, on="line_no", how="left").filter(~pl.col("ok"))
            note_rows(ctx, cut, lambda r: f"line {r['line_no']}: server_args record cut off; kept its "
                                          f"{r['len'] or 0} complete fields")
        ctx.counts.parsed += int(got["line_count"].sum())
    return recs.filter(~(is_sa | is_sc))


def _events(ctx: ParseContext, recs: pl.DataFrame) -> int:
    """Every other record (messages, tracebacks, stray text, bench summaries) → log_events."""
    e = recs.filter(pl.col("cat").is_in(["head", "summary", "cont"]))
    if e.height == 0:
        return 0
    body = with_body(pl.col("msg1"), pl.col("cont")).str.strip_chars("\n")
    tb = looks_like_traceback(body).fill_null(False)
    m = pl.col("msg1")
    kind = (pl.when(pl.col("cat") == "summary").then(pl.lit("bench_summary"))
            .when(tb).then(pl.lit("traceback"))
            .when(m.str.contains(r"(?i)^(?:ERROR|.*\bexception\b)")).then(pl.lit("error"))
            .when(m.str.contains(r"^(?:WARNING|Decode out of memory happened|KV cache pool is full)")).then(
                pl.lit("warning"))
            .when(m.str.contains(r"^(?:The server is fired up|server_args=|Load weight|Memory pool end|"
                                 r"Capture cuda graph)")).then(pl.lit("startup"))
            .otherwise(pl.lit("message")))
    level = (pl.when(m.str.contains(r"^(?:INFO|WARNING|ERROR|DEBUG)\b"))
             .then(m.str.extract(r"^(INFO|WARNING|ERROR|DEBUG)\b", 1)))
    ctx.write("log_events", e.select(
        "line_no", pl.col("line_count").cast(pl.Int32), pl.col("ts_ff").alias("ts_ns"), level.alias("level"),
        _process().alias("process"),
        kind.alias("kind"), event_message(body, tb).alias("message")))
    return int(e["line_count"].sum())


def _anchor_time_only(ctx: ParseContext, st: _State) -> str:
    """Put the relative times of a time-only log on the calendar; returns the clock note."""
    tz = st.tz
    zone = ZoneInfo(tz)

    def local_ns(utc_ns: int) -> int:
        off = _dt.datetime.fromtimestamp(utc_ns / NS_PER_S, zone).utcoffset() or _dt.timedelta(0)
        return utc_ns + int(off.total_seconds()) * NS_PER_S

    other = ctx.con.execute(
        "SELECT source_id, path, first_ns FROM sources WHERE source_id <> ? AND first_ns IS NOT NULL "
        "AND coalesce(clock_method, 'none') NOT IN ('none', 'log_wallclock') ORDER BY source_id DESC LIMIT 1",
        [ctx.source_id]).fetchall()
    other = other[0] if other else None
    if other is not None:
        sid, path, first = other
        base = round((local_ns(first) - st.rel_first) / DAY_NS) * DAY_NS
        why = (f"date from source {sid} ({str(path).rsplit('/', 1)[-1]}, first record "
               f"{_dt.datetime.fromtimestamp(first / NS_PER_S, _dt.timezone.utc):%Y-%m-%d %H:%M:%S} UTC): the date "
               "that puts this log's first line nearest to it, so coarse (±12 h)")
    else:
        mtime = ctx.input.path.stat().st_mtime_ns
        base = ((local_ns(mtime) - st.rel_last) // DAY_NS) * DAY_NS
        why = ("date from the file's modification time (last line put at or before it): coarse, wrong if the file "
               "was copied or edited later")
    day0 = _dt.datetime(1970, 1, 1) + _dt.timedelta(microseconds=base // 1000)
    conv = "({c} + {b})" if tz == "UTC" else "epoch_ns(timezone('{tz}', make_timestamp(({c} + {b}) // 1000)))"
    for table, col in (("engine_batches", "ts_ns"), ("log_events", "ts_ns"), ("request_events", "ts_ns"),
                       ("requests", "finish_ns")):
        expr = conv.format(c=col, b=base, tz=tz.replace("'", "''"))
        extra = ", arrival_ns = " + expr + " - e2e_latency_ns" if table == "requests" else ""
        ctx.con.execute(f"UPDATE {table} SET {col} = {expr}{extra} WHERE source_id = ? AND {col} < {REL_BOUND}",
                        [ctx.source_id])
    rolls = int((st.rel_last or 0) // DAY_NS - (st.rel_first or 0) // DAY_NS)
    return (f"HH:MM:SS timestamps without date: first line on {day0:%Y-%m-%d}, {why}; {rolls} midnight roll-over(s) "
            f"counted in file order; local time read as {tz}; 1 s resolution")


def _work(ctx: ParseContext, tz: str, lines: pl.DataFrame, recs: pl.DataFrame, lean: pl.DataFrame | None = None
          ) -> tuple[Deferred, _State]:
    """One frame's rows, written to a `Deferred` context, with a state of its own (request index from 0, its config
    rows and reject counts), merged in file order by the parser."""
    d, st = Deferred(ctx), _State(tz)
    if lean is not None:
        d.counts.parsed += _lean_batches(d, lean, st) + _lean_access(d, lean)
    tq = recs.filter(pl.col("cat") == "tqdm")
    d.counts.skipped += int(tq["line_count"].sum()) if tq.height else 0
    d.counts.parsed += _batches(d, lines, recs, st)
    d.counts.parsed += _access(d, recs)
    # What is left for the per-record readers: heads, summaries, stray text (not the many one-line records).
    rest = _finish(d, recs.filter(pl.col("cat").is_in(["head", "summary", "cont"])), st)
    rest = _config(d, rest, st)
    d.counts.parsed += _events(d, rest)
    return d, st


class SglangLogParser(Parser):
    name = "sglang_log"
    version = VERSION
    formats = ("sglang_log",)
    order = 50
    duckdb_threads = 1  # rows are only appended (Parser.duckdb_threads)

    def sniff(self, head: bytes, inp: InputFile):
        return sniff_sglang(head)

    def parse(self, ctx: ParseContext, fmt: str) -> None:
        st = _State(check_zone(ctx.options.tz))
        out = BufferedWrites(ctx)
        # Times carry from frame to frame (forward fill, midnight roll-overs): read here, in file order. The rest of
        # a frame's work is pure (`_work`, two frames at once on two threads); its rows are written here in order.
        def timed():
            if fast_lanes_on():
                for lines, recs, lean in _lean_frames(ctx):
                    yield lines, _times(recs, st, lean), lean
                return
            for lines, recs in record_frames(ctx, _flag, _prepare):
                yield lines, _times(recs, st)

        def work(item):
            return _work(ctx, st.tz, *item)

        for d, fst in ordered_map(work, timed()):
            base = st.req_index
            d.replay(ctx, out, lambda t, df: df.with_columns((pl.col("request_index") + base).cast(pl.Int32))
                     if t == "requests" else df)
            st.req_index += fst.req_index
            st.config.extend(fst.config)
            st.rejected_batches += fst.rejected_batches
            st.debris_lines += fst.debris_lines
            for k, n in fst.new_fields.items():
                st.new_fields[k] = st.new_fields.get(k, 0) + n
        out.flush()
        write_config(ctx, st.config, CONFIG_ALIASES, "sglang")
        if st.rel_first is not None:
            ctx.set_clock("log_wallclock", _anchor_time_only(ctx, st))
        elif st.abs_rows:
            ctx.set_clock("log_wallclock_local", f"SGLang local time without zone, read as {st.tz} (--tz); "
                          + ("ms resolution (SGLANG_LOG_MS)" if st.ms else "1 s resolution")
                          + "; untimed lines inherit the previous timed line's time")
        else:
            ctx.set_clock("none", "no timestamps in this log (lines pasted without them): times are NULL")
        if st.rejected_batches:
            ctx.notes.append(f"{st.rejected_batches} batch line(s) rejected (spliced, mangled or cut); see rejects")
        if st.debris_lines:
            ctx.notes.append(f"{st.debris_lines} batch line(s) had tqdm output glued in front (stripped)")
        if st.new_fields:
            ctx.notes.append("batch lines with field(s) this parser does not know, read and the field(s) kept in "
                             "extra: " + ", ".join(f"'{k}' ({n} lines)" for k, n in sorted(st.new_fields.items())))
        span_of_times(ctx)


PARSER = SglangLogParser()
