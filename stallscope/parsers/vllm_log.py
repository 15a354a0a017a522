"""vLLM server logs (V0 and V1 engines, 0.2 → 2026) into engine_stats, requests, request_events, engine_config, log_events.

The file streams through `iter_line_frames` in 16 MB frames (read ahead in a thread; rows go to DuckDB in
batches from another). Each frame is parsed whole on one of two worker threads (`_Run._work`), the next frame on
the other: only the hand-over between frames runs in file order (the record at the end of a frame, which may
continue in the next one, is carried over; the clock's year and roll-over run on), and the main thread applies
the results in order (`_Run._apply`: counts, the few links to an earlier frame, the writes). Per frame, polars
works column-wise: ANSI codes out; anchored regexes (`head_fast`, `uvicorn_head`, then `head` for the rest) read
docker-compose/process prefixes and the record envelope (vLLM, Ray, uvicorn, KServe); hard-wrapped pieces are
joined to their record, the lines of a traceback grouped into one event, known noise recognised; then each record
kind gets its own regexes on its own rows and columns only. The long `Received request` lines (most of a log's
bytes) are cut with literal-led searches, and their prompt's 16-token blocks are hashed from the token-id text
(`_id_blocks`). Requests are assembled in SQL at the end, because a request's Received and Finished lines can be
far apart. The regexes and their real sample lines live in `vllm_log_patterns.py`; the year and zone of the
timestamps come from `logtime.py`. The fast lanes (the `head_fast` / `uvicorn_head` envelopes and the token ids read
from their text) follow the one switch of every parser, `base.FAST_LANES` (STALLSCOPE_FAST_LANES=0: the full `head`
regex for every line and the ids split one by one); tests/test_vllm_log_fast.py checks both give the same store.
"""
from __future__ import annotations

import queue
import re
import threading
from concurrent.futures import Future
from typing import Iterator

import numpy as np
import polars as pl
import pyarrow as pa

from stallscope.errors import InputError

from . import prefixes as X
from . import vllm_log_patterns as P
from .base import ParseContext, Parser, fast_lanes_on, file_mtime_ns
from .lines import iter_line_frames, ordered_map, prefetch as _prefetch
from .logrecords import dedup_note
from .logtime import Local, WallClock, check_zone, choose_year, full_date_ns
from .vllm_log_config import ConfigCollector
from . import vllm_steps

BLOCK = 16  # vLLM's default KV-cache block (--block-size on CUDA): prefix caching shares whole blocks
# Odd 64-bit multipliers, one per token position in a block (fixed: the keys must not depend on the run).
_BLOCK_MULT = np.random.default_rng(0x5EED).integers(1, 1 << 63, BLOCK, dtype=np.uint64) | np.uint64(1)


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every input bit reaches every output bit (uint64 arrays, wrapping arithmetic)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


_HASH_SEED = 0x5EED  # polars' hash seeds: fixed, so a prompt's block hashes do not depend on the run


def _pairs(b: np.ndarray, pair: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Where in the bytes `b` the two bytes `pair` start, as masks over the even and the odd positions (compared as
    16-bit words: half the passes of a byte-wise test)."""
    w = int.from_bytes(pair, "little")
    return b[: b.size // 2 * 2].view("<u2") == w, b[1: 1 + (b.size - 1) // 2 * 2].view("<u2") == w


def _id_blocks(ids: pl.Series) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The 16-token blocks of `[a, b, c]` token-id lists read from their text, for lists in vLLM's exact print
    (`[`, decimal ids without leading zeros of at most 18 digits joined by `, `, `]`; at least one id each):
    (ids per list, a 64-bit hash of each whole block's text, whole blocks per list). None when some list is printed
    otherwise; `_split_blocks` reads those the slow way.

    In that print equal text means equal ids, so a block is hashed from its bytes (polars hashes the blocks as one
    binary array over the text itself) and no id is ever parsed or made a string of its own: numpy finds the
    commas, and every 16th of a list bounds a block. The checks are byte passes over the text."""
    arr = ids.to_arrow()
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    rows = len(arr)
    if rows == 0 or arr.null_count:
        return None
    offs = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset: arr.offset + rows + 1]
    data = arr.buffers()[2]
    b = np.frombuffer(data, dtype=np.uint8)[offs[0]: offs[-1]]
    offs = offs - offs[0]
    lo, hi = offs[:-1] + 1, offs[1:] - 1  # each list's text inside its brackets
    if not ((b[lo - 1] == 91).all() and (b[hi] == 93).all()):
        return None
    comma = np.flatnonzero(b == 44)
    # `[`, `]`, the commas and a space after each are all the non-digit bytes there are; then every id is digits.
    if (sum(np.count_nonzero(m) for m in _pairs(b, b", ")) != comma.size
            or b.size - np.count_nonzero(b < 48) - np.count_nonzero(b > 57) != b.size - 2 * rows - 2 * comma.size):
        return None
    # No id starts with 0 unless it is 0 (then text and number agree); none is wider than 18 digits (an int64).
    even, odd = _pairs(b, b" 0")
    z = lo[(b[lo] == 48) & (lo + 1 < hi)] + 1  # the byte after a leading 0 (most lists have none: counted first)
    if np.count_nonzero(even) or np.count_nonzero(odd):
        z = np.concatenate((np.flatnonzero(even) * 2 + 2, np.flatnonzero(odd) * 2 + 3, z))
        z = z[z < b.size]
    if z.size and np.count_nonzero((b[z] >= 48) & (b[z] <= 57)):
        return None
    first = np.searchsorted(comma, offs)  # index of each list's first comma (the last: how many there are)
    n_tok = np.diff(first) + 1
    del z
    gaps = np.diff(comma)  # 2 more than the width of the id between two commas
    cross = first[1:-1]
    gaps[cross[(cross > 0) & (cross < comma.size)] - 1] = 3  # from one list's last comma to a later list's first
    one = n_tok == 1
    if comma.size:
        w_first = np.where(one, hi - lo, comma[np.minimum(first[:-1], comma.size - 1)] - lo)
        w_last = np.where(one, hi - lo, hi - comma[np.maximum(first[1:] - 1, 0)] - 2)
    else:
        w_first = w_last = hi - lo
    if (min(w_first.min(), w_last.min()) < 1 or max(w_first.max(), w_last.max()) > 18
            or (gaps.size and (gaps.min() < 3 or gaps.max() > 20))):
        return None
    del gaps
    nb = n_tok // BLOCK
    if not nb.any():
        return n_tok, np.zeros(0, np.uint64), nb
    row = np.repeat(np.arange(rows), nb)
    j = np.arange(int(nb.sum())) - np.repeat(np.cumsum(nb) - nb, nb)  # block index in its list
    f = first[:-1][row]
    start = np.where(j == 0, lo[row], comma[np.maximum(f + BLOCK * j - 1, 0)] + 2)
    last_tok = BLOCK * j + BLOCK - 1
    end = np.where(last_tok < n_tok[row] - 1, comma[np.minimum(f + last_tok, comma.size - 1)], hi[row])
    # The text cut at every block's start and end: blocks and what lies between them, as one binary array.
    cuts = np.empty(2 * start.size + 2, np.int64)
    cuts[0], cuts[-1] = 0, b.size
    cuts[1:-1:2], cuts[2:-1:2] = start, end
    pieces = pa.LargeBinaryArray.from_buffers(pa.large_binary(), cuts.size - 1,
                                              [None, pa.py_buffer(cuts), pa.py_buffer(b)])
    h = pl.from_arrow(pieces).hash(_HASH_SEED).to_numpy()[1::2]
    return n_tok, h, nb


PATTERNS = P.PATTERNS
VERSION = "1.1"  # 1.1: prompt-block chain keys depend on block order (shared_prefix_tokens)
MSG_MAX = 4096  # characters of a message kept in log_events
NS_PER_S = 1_000_000_000
FLUSH_ROWS = 250_000  # rows per table buffered before an INSERT
FLUSH_BYTES = 16 << 20  # or this many bytes of them (a request row holds its sampling params: ~600 bytes)

c = pl.col
_ENV_FIELDS = ("level", "md", "hms", "ms", "env")
# The envelope columns every frame gets (NULL where a line has no such part).
_COLS = ("head", "pfx", "env", "level", "md", "hms", "ms", "wdate", "wms", "rdate", "rms", "rlevel", "ulevel", "klevel")

# -- sniffing ------------------------------------------------------------------------------------------------

_SNIFF_ENVELOPE = re.compile(P.SNIFF.regex.encode())
_VLLM_MARKERS = (b"Avg prompt throughput", b"Received request", b"Added request", b"vLLM API server version",
                 b"LLM engine (v", b"loggers.py:", b"metrics.py:", b"llm_engine.py:", b"async_llm", b"EngineCore",
                 b"non-default args", b"api_server.py:", b"vllm.entrypoints")
_OTHER_MARKERS = (b"sglang", b"Prefill batch", b"Decode batch", b"text_generation_router", b"text_generation_launcher",
                  b"server_args=ServerArgs")


def sniff_score(head: bytes) -> float:
    """Confidence that `head` (the first 64 KB) is a vLLM server log: vLLM's envelope anywhere, plus vLLM's own
    messages; an SGLang or TGI log that merely contains a few vLLM-formatted lines (SGLang once imported vLLM)
    scores low, so their parsers win."""
    n = len(_SNIFF_ENVELOPE.findall(head[: 1 << 16]))
    if n == 0:
        return 0.0
    score = 0.55 if n < 3 else 0.6
    strong = any(m in head for m in _VLLM_MARKERS)
    other = any(m in head for m in _OTHER_MARKERS)
    if strong:
        score += 0.35
    if other:
        score -= 0.35 if not strong else 0.2
    return max(0.05, min(score, 0.95))


class VllmLogParser(Parser):
    name = "vllm_log"
    version = VERSION
    formats = ("vllm_log",)
    order = 50
    duckdb_threads = 1  # it appends rows from one writer thread while two threads parse

    def sniff(self, head: bytes, inp):
        s = sniff_score(head)
        return ("vllm_log", s) if s > 0 else None

    def parse(self, ctx: ParseContext, fmt: str) -> None:
        _Run(ctx).run()


PARSER = VllmLogParser()


# -- the per-file run ----------------------------------------------------------------------------------------

def _int(s: pl.Expr) -> pl.Expr:
    return s.cast(pl.Int64, strict=False)


def _num(s: pl.Expr) -> pl.Expr:
    return s.cast(pl.Float64, strict=False)


class _Run:
    """State of one file's parse: clock, carried rows, running counts and the cross-frame collections."""

    def __init__(self, ctx: ParseContext):
        self.ctx = ctx
        self.con = ctx.con
        self.sid = ctx.source_id
        self.tz = check_zone(getattr(ctx.options, "tz", None))
        self.clock: WallClock | None = None
        self.year_note: str | None = None
        self.first_ns: int | None = None
        self.last_ns: int | None = None
        self.config = ConfigCollector()
        self.saw_stats = {"V0": 0, "V1": 0}
        self.odd_stats: dict[str, int] = {}
        self.prefix_keys: list[pa.Table] = []   # per Received line with token ids: its 16-token prompt-block keys
        self.prefix_reqs: list[pa.Table] = []   # (line_no, request_id) of those lines
        self.iter_rows: list[pl.DataFrame] = []  # per frame: its iteration lines' fields (vllm_steps.RAW_COLUMNS)
        self.lines = 0
        self.raw_bytes = 0
        self.bad_utf8_kept = 0
        self.noise: dict[str, int] = {}
        self.dedup = [0, 0]  # Ray dedup markers seen, lines they stand for
        self.last_rec: dict[str, tuple] = {}  # per process stream: its last record (key, tag, line_no, ts_ns)
        self.folds: list[pl.DataFrame] = []  # V0 prefix-cache lines and the stats line each belongs to
        self.folded_own = 0
        self.suffixed = False  # some Added/Finished id ends like a 2026 engine-id suffix
        self.buffers: dict[str, list[pa.Table]] = {}
        self.writer = _Writer(ctx)

    # .. driver ..............................................................................................
    def run(self) -> None:
        try:
            self._run()
        finally:
            self.writer.close(wait=False)

    def _run(self) -> None:
        ctx = self.ctx
        frames = _prefetch(iter_line_frames(ctx.input))
        first = next(frames, None)
        if first is None:
            raise InputError(f"{ctx.path}: no lines to read" + (f" ({ctx.input.cut_error})" if ctx.input.cut_error else ""))
        # Each frame is parsed on one of two threads (`_work`), the next one meanwhile on the other; only the
        # hand-over from one frame to the next (the carried record, the clock) runs in file order. This thread
        # applies the results in order: counts, the few cross-frame links, the writes.
        for out in ordered_map(self._work, self._tasks(first, frames), ahead=1):
            self._apply(out)
            ctx.progress(self.raw_bytes)
        self._finish()

    @staticmethod
    def _tasks(held: pl.DataFrame, frames: Iterator[pl.DataFrame]) -> Iterator[tuple]:
        """(frame, is it the last, the hand-over from the frame before, the hand-over to the next) per frame; a
        hand-over is a Future of (carried rows, last time) that the frame before sets once it has cut its frame."""
        prev: Future = Future()
        prev.set_result((None, None))
        while held is not None:
            nxt = next(frames, None)
            to_next: Future = Future()
            yield held, nxt is None, prev, to_next
            prev, held = to_next, nxt

    # .. one frame ...........................................................................................
    def _work(self, task: tuple) -> "_Out":
        """One frame, on a worker thread: classified on its own (`_classify`); then, once the frame before has
        handed over its carried tail and its last time, the records cut at the last record start (the rest is
        handed to the next frame) and their times read with the file's clock, in file order; then everything
        else, while the next frame is cut."""
        frame, last, prev, to_next = task
        out = _Out()
        try:
            df, fields = _classify(frame)
            carry, last_ts = prev.result()
            df = df if carry is None else pl.concat([carry, df])
            df, carry = self._cut(df, last)
            ts = None if df is None else self._times(df)
            after = last_ts
            if ts is not None:
                known = ts.drop_nulls()
                if known.len():
                    after = int(known[-1])
            to_next.set_result((carry, after))
        except BaseException as e:
            if not to_next.done():
                to_next.set_exception(e)
            raise
        if df is not None:
            out.lines = df.height
            out.raw_bytes = int(df["text"].str.len_bytes().sum()) + df.height
            self._process(df.with_columns(ts.alias("_ts")), last_ts, fields, out)
        return out

    def _cut(self, df: pl.DataFrame, last: bool) -> tuple[pl.DataFrame | None, pl.DataFrame | None]:
        """(the rows to parse now, the rows carried to the next frame: from the last record start on)."""
        if df.height == 0:
            return None, None
        carry = None
        if not last:
            cut = self._cut_index(df)
            if cut > 0:
                carry = df.slice(cut)
                df = df.slice(0, cut)
        if last and self.ctx.input.cut_error:
            df = df.with_columns(pl.when(pl.int_range(pl.len()) == pl.len() - 1).then(pl.lit("cut"))
                                 .otherwise(c("kind")).alias("kind"))
        return df, carry

    @staticmethod
    def _recover_torn(df: pl.DataFrame) -> pl.DataFrame:
        """A record glued behind torn output (`…NCCL INFO Connected all tre(RayWorkerWrapper pid=643) INFO 04-14 …`,
        `host:633:INFO 04-20 …`) keeps its envelope and becomes a record; the torn text before it is dropped."""
        other = (df["kind"] == "other").arg_true()
        if other.len() == 0:
            return df
        rx = "(?P<t_env>" + P.TORN.regex + ")"
        for f in _ENV_FIELDS:
            rx = rx.replace(f"(?P<{f}>", f"(?P<t_{f}>")
        sub = (df.select("msg").gather(other).with_columns(other.alias("_i"))
               .filter(c("msg").str.contains(P.TORN.regex)))
        if sub.height == 0:
            return df
        sub = (sub.select(c("_i"), c("msg").str.extract_groups(rx + r"(?P<t_msg>.*)$").alias("g")).unnest("g")
               .filter(c("t_msg").is_not_null()))
        if sub.height == 0:
            return df
        idx = sub["_i"]
        upd = [df[f].scatter(idx, sub[f"t_{f}"]) for f in _ENV_FIELDS]
        return df.with_columns(*upd, df["msg"].scatter(idx, sub["t_msg"]), df["kind"].scatter(idx, "rec"))

    def _cut_index(self, df: pl.DataFrame) -> int:
        """Index of the last record start: rows from there on may continue in the next frame and are carried."""
        tail = df.slice(max(0, df.height - 5000))
        same_record = ((c("env") == c("env").shift(1)) & c("process").eq_missing(c("process").shift(1))).fill_null(False)
        anchor = ((c("kind") != "other") & ~same_record & ~c("msg").str.contains(P.TB_HEAD.regex)
                  & ~c("msg").str.contains(P.TB_FRAME.regex) & ~c("msg").str.contains(P.TB_EXC.regex))
        idx = tail.select(pl.arg_where(anchor).last()).item()
        return 0 if idx is None else int(idx) + df.height - tail.height

    # .. the frame's records ...............................................................................
    def _process(self, df: pl.DataFrame, last_ts: int | None, fields: pl.DataFrame, out: "_Out") -> None:
        """The frame's records (with `_ts`, their own times) into `out`: rows per table, counts; `last_ts` is the
        time of the last timed line before the frame (inherited by its first untimed lines); `fields`: what
        `_received_fields` read of its Received lines (not of a carried one)."""
        # Only the columns read from here on (every later filter and gather carries them all).
        df = df.select("line_no", "text", "bad_utf8", "pfx", "env", "kind", "msg", "process", "_dd", "_ts",
                       pl.coalesce(c("level"), c("klevel"), c("rlevel"), c("ulevel")).alias("lvl"),
                       pl.lit(1, pl.Int32).alias("nlines"))
        dedup = df["_dd"]
        df = df.drop("_dd")
        if dedup.any():
            n = df.filter(dedup).select(X.dedup_count(c("msg"))).to_series().drop_nulls()
            out.dedup[0] += n.len()
            out.dedup[1] += int(n.sum())
            df = _patch(df, dedup, "msg", X.strip_dedup(c("msg")))
        df = df.with_columns(_noise(df))
        df = self._join_wrapped(df)
        df = _tracebacks(df)
        df = _python_warning_tails(df)
        ts = c("_ts").forward_fill()
        df = df.with_columns((ts if last_ts is None else ts.fill_null(last_ts)).alias("ts_ns")).drop("_ts")

        member = c("tb_event").is_not_null()
        is_rec = c("kind").is_in(["rec", "ks"]) & ~member
        starts = c("msg").str.starts_with
        tag = (pl.when(~is_rec).then(None)
               .when(c("msg").str.slice(0, 64).str.contains("Avg prompt throughput: ", literal=True))
               .then(pl.lit("stats"))
               .when(starts("Prefix cache hit rate: GPU: ")).then(pl.lit("pch"))
               .when(starts("Received request ")).then(pl.lit("recv"))
               .when(starts("Added request ") | starts("Finished request ") | starts("Aborted request ")).then(pl.lit("life"))
               .when(starts("Iteration(")).then(pl.lit("iter"))  # P.ITERATION_HEAD
               .otherwise(pl.lit("msg")))
        df = df.with_columns(tag.alias("tag"))

        self._after_stats(df, out)
        rec = ["line_no", "ts_ns", "process", "msg"]
        recv = ["line_no", "ts_ns", "msg", "nlines"]
        unused = [self._stats(df.select(*rec, "tag").filter(c("tag") == "stats"), out), self._prefix_hits(out),
                  self._received(df.select(*recv, "tag").filter(c("tag") == "recv"), fields, out),
                  self._lifecycle(df.select(*rec, "tag").filter(c("tag") == "life"), out)]
        self._iterations(df.select(*rec, "tag").filter(c("tag") == "iter"), out)
        unused = [u for u in unused if u is not None and u.len()]
        unused_lines = pl.concat(unused) if unused else pl.Series("line_no", [], pl.Int64)
        msg_cols = ["line_no", "nlines", "ts_ns", "lvl", "process", "kind", "msg"]
        msgs = df.select(*msg_cols, "tag", "tb_event").filter(
            (c("tag") == "msg") | c("line_no").is_in(unused_lines.implode()) | c("kind").is_in(["uvi", "ray"]) & ~member)
        self._messages(msgs, out)
        if df["tb_event"].is_not_null().any():
            self._traceback_events(df.select(*msg_cols, "tb_event", "_fx").filter(member), out)

        other = (c("kind") == "other") & ~member
        noise = df.select("noise", "nlines", "kind", "tb_event").filter(other & c("noise").is_not_null())
        for name, n in noise.group_by("noise").agg(c("nlines").sum()).iter_rows():
            out.noise[name] = out.noise.get(name, 0) + int(n)
        out.skipped += int(noise["nlines"].sum())
        parsed = ~other & (c("kind") != "cut")
        n, bad, lo, hi = df.select(c("nlines").filter(parsed).sum(), c("bad_utf8").filter(parsed).sum(),
                                   c("ts_ns").filter(parsed).min().alias("lo"), c("ts_ns").filter(parsed).max().alias("hi")).row(0)
        out.parsed += int(n) - out.iter_rejected
        out.bad_utf8 += int(bad)
        if lo is not None:
            out.lo, out.hi = int(lo), int(hi)
        self._rejects(df.select("line_no", "kind", "bad_utf8", "msg", "text", "noise", "tb_event")
                      .filter((other & c("noise").is_null()) | (c("kind") == "cut")), out)

    def _apply(self, out: "_Out") -> None:
        """A frame's results, in file order: the counts, the V0 prefix-cache lines' stats rows (their stream's
        previous record may be in an earlier frame), the config lines, the rows to write."""
        ctx = self.ctx
        self.lines += out.lines
        self.raw_bytes += out.raw_bytes
        self.dedup[0] += out.dedup[0]
        self.dedup[1] += out.dedup[1]
        for name, n in out.noise.items():
            self.noise[name] = self.noise.get(name, 0) + n
        ctx.counts.skipped += out.skipped
        ctx.counts.parsed += out.parsed
        self.bad_utf8_kept += out.bad_utf8
        if out.lo is not None:
            self.first_ns = out.lo if self.first_ns is None else min(self.first_ns, out.lo)
            self.last_ns = out.hi if self.last_ns is None else max(self.last_ns, out.hi)
        for k in self.saw_stats:
            self.saw_stats[k] += out.saw[k]
        for k, n in out.odd_stats.items():
            self.odd_stats[k] = self.odd_stats.get(k, 0) + n
        self.suffixed = self.suffixed or out.suffixed
        if out.pch is not None:
            self._fold_lines(out.pch)
        if out.last is not None:
            for k, tag, line, ts in out.last.iter_rows():
                self.last_rec[k] = (k, tag, line, ts)
        if out.cfg is not None:
            self.config.add(out.cfg)
        if out.iters is not None:
            self.iter_rows.append(out.iters)
        for keys, reqs in out.keys:
            self.prefix_keys.append(keys)
            self.prefix_reqs.append(reqs)
        for table, rows in out.emits:
            self._emit(table, rows)

    def _join_wrapped(self, df: pl.DataFrame) -> pl.DataFrame:
        """Join the pieces of lines hard-wrapped by a terminal copy to their record.

        A piece is a line with no envelope, prefix or known noise whose previous physical line is exactly as
        long as the terminal width; the widths are those (≥ 60 characters) that precede two or more such lines.
        Pieces are joined (without separator: the wrap cuts anywhere) only to a record or a noise line.
        Everything is computed on the few candidate lines and their predecessors, never on the whole frame.
        """
        cand = (c("noise").is_null() & ~c("msg").str.contains(P.TB_HEAD.regex)
                & ~c("msg").str.contains(P.TB_FRAME.regex) & (c("pfx").str.len_bytes() == 0))
        other = (df["kind"] == "other").arg_true().cast(pl.Int64)
        cidx = other.filter(df.select("noise", "msg", "pfx").gather(other).select(cand).to_series())
        cidx = cidx.filter(cidx > 0)
        if cidx.len() < 2:
            return df
        plen = df["text"].gather(cidx - 1).str.len_chars().cast(pl.Int64)
        cands = pl.DataFrame({"i": cidx, "plen": plen})
        widths = cands.filter(c("plen") >= 60).group_by("plen").len().filter(c("len") >= 2)["plen"]
        if widths.len() == 0:
            return df
        chain = cands.filter(c("plen").is_in(widths.implode()))["i"]
        # Consecutive pieces form one run; the line before a run is its head.
        runs = pl.DataFrame({"i": chain}).with_columns((c("i") != c("i").shift(1) + 1).fill_null(True).cum_sum().alias("run"))
        heads = runs.group_by("run", maintain_order=True).agg((c("i").first() - 1).alias("h"), c("i").alias("pieces"))
        head_rows = df.select("kind", "noise", "msg").gather(heads["h"])
        ok = ((head_rows["kind"] != "other") | head_rows["noise"].is_not_null()).to_list()
        heads = heads.with_columns(pl.Series("ok", ok), head_rows["msg"].alias("hmsg")).filter(c("ok"))
        if heads.height == 0:
            return df
        piece_idx = heads["pieces"].explode()
        texts = (heads.select("run", "pieces").explode("pieces")
                 .with_columns(df["text"].gather(piece_idx).alias("t"))
                 .group_by("run", maintain_order=True).agg(c("t").str.join(""), pl.len().alias("n")))
        heads = heads.join(texts, on="run", maintain_order="left")
        h = heads["h"]
        msg = df["msg"].scatter(h, heads.select(pl.concat_str([c("hmsg"), c("t")])).to_series())
        nlines = df["nlines"].scatter(h, (heads["n"] + 1).cast(pl.Int32))
        keep = pl.repeat(True, df.height, eager=True).scatter(piece_idx, False)
        return df.with_columns(msg, nlines).filter(keep)

    def _times(self, df: pl.DataFrame) -> pl.Series:
        """The time of every row that has its own (NULL for the others): vLLM records through the WallClock,
        Ray/KServe records from their full dates. The rest (uvicorn, tracebacks, noise) inherit the previous timed
        record's time (`_process`). In file order: the clock's year and roll-over run on from frame to frame.

        A frame's vLLM records are mostly runs of lines of the same second, so the clock reads the first line of
        each run of equal `MM-DD HH:MM:SS[.mmm]` only (a repeated time is no step for its roll-over) and the
        others take their run's time; full dates are read on their own rows only."""
        n = df.height
        timed = df["md"].is_not_null()
        vts = pl.repeat(None, n, dtype=pl.Int64, eager=True)
        fts = vts
        if timed.any():
            at = timed.arg_true()
            k = df.select("md", "hms", "ms").filter(timed)
            new_run = ((c("md") != c("md").shift(1)) | c("hms").ne_missing(c("hms").shift(1))
                       | c("ms").ne_missing(c("ms").shift(1))).fill_null(True)
            k = k.with_columns(new_run.alias("_new"), at.alias("_at"))
            run = k["_new"].cum_sum() - 1
            first = k.filter(c("_new"))
            t = first.select(
                c("md").str.slice(0, 2).cast(pl.Int64, strict=False).alias("mo"),
                c("md").str.slice(3, 2).cast(pl.Int64, strict=False).alias("d"),
                c("hms").str.slice(0, 2).cast(pl.Int64, strict=False).alias("h"),
                c("hms").str.slice(3, 2).cast(pl.Int64, strict=False).alias("mi"),
                c("hms").str.slice(6, 2).cast(pl.Int64, strict=False).alias("s"),
                c("ms").cast(pl.Int64, strict=False).alias("ms"))
            if self.clock is None and t["mo"].is_not_null().any():
                self._choose_year(t, df)
            if self.clock is not None:
                vts = vts.scatter(at, self.clock.epoch_ns(t, "mo", "d", "h", "mi", "s", "ms").gather(run))
        fd = df.select(pl.coalesce(c("rdate"), c("wdate")).alias("fd"), pl.coalesce(c("rms"), c("wms")).alias("fms"))
        full = fd["fd"].is_not_null()
        if full.any():
            f = fd.filter(full).select(
                *[c("fd").str.slice(a, n).cast(pl.Int64, strict=False).alias(k) for k, a, n in
                  (("y", 0, 4), ("mo", 5, 2), ("d", 8, 2), ("h", 11, 2), ("mi", 14, 2), ("s", 17, 2))],
                c("fms").cast(pl.Int64, strict=False).alias("ms"))
            fts = fts.scatter(full.arg_true(), full_date_ns(f, "y", "mo", "d", "h", "mi", "s", "ms", self.tz))
        return vts.fill_null(fts)

    def _choose_year(self, t: pl.DataFrame, df: pl.DataFrame) -> None:
        """The clock's year, from the first MM-DD time of the file (the first row of `t` with a month) and the
        first full date of its frame `df` when there is one (else --year, other sources, the file's time)."""
        r = t.filter(c("mo").is_not_null()).row(0, named=True)
        first = Local(r["mo"], r["d"], r["h"] or 0, r["mi"] or 0, r["s"] or 0)
        in_file = None
        full = df.select(pl.coalesce(c("rdate"), c("wdate")).alias("fd"), "line_no", "kind").filter(c("fd").is_not_null())
        if full.height:
            fr = full.row(0, named=True)
            fd = fr["fd"]
            try:
                y = int(fd[:4])
                ref = Local(int(fd[5:7]), int(fd[8:10]), int(fd[11:13]), int(fd[14:16]), int(fd[17:19])).in_year(y, self.tz)
            except ValueError:
                ref = None
            if ref is not None:
                cands = [(abs(first.in_year(k, self.tz) - ref), k) for k in (y - 1, y, y + 1)
                         if first.in_year(k, self.tz) is not None]
                what = "Ray" if fr["kind"] == "ray" else "KServe"
                in_file = (min(cands)[1], f"{what} line {fr['line_no']}: {fd}")
        with self.writer.lock:  # the store is read while the writer thread may be appending
            year, note = choose_year(self.con, self.sid, first, option_year=getattr(self.ctx.options, "year", None),
                                     in_file=in_file, mtime_ns=file_mtime_ns(self.ctx.path), tz=self.tz)
        self.clock = WallClock(year, self.tz)
        self.year_note = note

    # .. writers ...........................................................................................
    def _stats(self, sub: pl.DataFrame, out: "_Out") -> pl.Series | None:
        if sub.height == 0:
            return None
        base = [c("line_no"), c("ts_ns"), c("process")]
        g0 = sub.select(*base, c("msg").str.extract_groups(P.STATS_V0.regex).alias("g")).unnest("g")
        v0 = g0.filter(c("prompt").is_not_null())
        rest = sub.filter(~c("line_no").is_in(v0["line_no"].implode()))
        g1 = rest.select(*base, c("msg").str.extract_groups(P.STATS_V1.regex).alias("g")).unnest("g")
        v1 = g1.filter(c("prompt").is_not_null())
        if v0.height:
            out.emit("engine_stats", v0.select(
                *base, _num(c("prompt")).alias("prompt_throughput_tps"), _num(c("gen")).alias("generation_throughput_tps"),
                _int(c("running")).alias("running_reqs"), _int(c("swapped")).alias("swapped_reqs"),
                _int(c("pending")).alias("waiting_reqs"), _num(c("gpu_kv")).alias("gpu_kv_cache_usage_pct"),
                _num(c("cpu_kv")).alias("cpu_kv_cache_usage_pct")))
        if v1.height:
            out.emit("engine_stats", v1.select(*_v1_stats_columns(base, [c(g) for *_, g in P.STATS_V1_FIELDS])))
        left = g1.filter(c("prompt").is_null())["line_no"]
        loose = self._loose_stats(rest.filter(c("line_no").is_in(left.implode())), out) if left.len() else None
        if loose is not None:
            left = left.filter(~left.is_in(loose.implode()))
        out.saw["V0"] += v0.height
        out.saw["V1"] += v1.height + (loose.len() if loose is not None else 0)
        return left

    def _loose_stats(self, sub: pl.DataFrame, out: "_Out") -> pl.Series | None:
        """V1 stats lines STATS_V1 did not take, read by STATS_V1_LOOSE (their optional fields by key, in any order;
        fields this parser does not know counted in `out.odd_stats` for a note). Returns the lines read."""
        base = [c("line_no"), c("ts_ns"), c("process")]
        g = sub.select(*base, c("msg").str.extract_groups(P.STATS_V1_LOOSE.regex).alias("g")).unnest("g").filter(
            c("prompt").is_not_null())
        if g.height == 0:
            return None
        r = c("rest")
        known = [k for k, *_ in P.STATS_V1_FIELDS]
        keys = g.select(r.str.extract_all(r"(?:^|, )[A-Za-z][A-Za-z ]*: ").list.eval(
            pl.element().str.strip_prefix(", ").str.strip_suffix(": ")).explode().alias("k")).drop_nulls()
        for k, n in keys.filter(~c("k").is_in(known)).group_by("k").len().iter_rows():
            out.odd_stats[k] = out.odd_stats.get(k, 0) + n
        out.emit("engine_stats", g.select(*_v1_stats_columns(
            base, [r.str.extract(rf"(?:^|, ){k}: {v}(?:,|$)", 1) for k, v, *_ in P.STATS_V1_FIELDS])))
        return g["line_no"]

    def _after_stats(self, df: pl.DataFrame, out: "_Out") -> None:
        """The V0 `Prefix cache hit rate: GPU: …` records of the frame (`out.pch`), each with the previous record of
        its process stream (`_ptag`, `_pline_no`, `_pts_ns`): V0's stat logger prints it right after the stats line,
        so that is the stats record it belongs to (`_fold_lines`). A stream's first record in the frame has its
        previous one in the frame before: `out.last` holds the last record of each stream for the next frame."""
        recs = df.select("line_no", "ts_ns", "tag", "process").filter(c("tag").is_not_null()).with_columns(
            c("process").fill_null("").alias("_k"))
        if recs.height == 0:
            return
        out.last = recs.group_by("_k").agg(c("tag").last(), c("line_no").last(), c("ts_ns").last())
        if (recs["tag"] == "pch").any():
            pch = (recs.with_columns(*[c(k).shift(1).over("_k").alias(f"_p{k}") for k in ("tag", "line_no", "ts_ns")])
                   .filter(c("tag") == "pch").drop("tag"))
            out.pch = pch.join(df.select("line_no", "msg").filter(c("line_no").is_in(pch["line_no"].implode())),
                               on="line_no", how="left", maintain_order="left")

    def _prefix_hits(self, out: "_Out") -> pl.Series | None:
        """V0 prefix-cache lines: their numbers go into the stats row they follow (folded at the end, once every
        stats row is in); one without a stats line before it keeps a row of its own."""
        if out.pch is None:
            return None
        g = out.pch.with_columns(c("msg").str.extract_groups(P.PREFIX_HIT_V0.regex).alias("g")).unnest("g")
        out.pch = g.filter(c("gpu").is_not_null()).drop("msg")
        return g.filter(c("gpu").is_null())["line_no"]

    def _fold_lines(self, pch: pl.DataFrame) -> None:
        """The stats line each V0 prefix-cache line belongs to (`stats_line`, NULL when there is none): the previous
        record of its stream (from an earlier frame for a stream's first record in a frame, `self.last_rec`) when
        that is a stats record within a second before it (same second but for a tick between the two calls)."""
        if pch.height == 0:
            return
        if self.last_rec:
            before = pl.DataFrame(list(self.last_rec.values()), orient="row",
                                  schema={"_k": pl.String, "_btag": pl.String, "_bline_no": pl.Int64, "_bts_ns": pl.Int64})
            pch = pch.join(before, on="_k", how="left", maintain_order="left").with_columns(
                *[pl.coalesce(c(f"_p{k}"), c(f"_b{k}")).alias(f"_p{k}") for k in ("tag", "line_no", "ts_ns")])
        fold = ((c("_ptag") == "stats") & (c("ts_ns") - c("_pts_ns")).is_between(0, NS_PER_S))
        self.folds.append(pch.select(
            c("line_no"), c("ts_ns"), c("process"), pl.when(fold).then(c("_pline_no")).alias("stats_line"),
            _num(c("gpu")).alias("prefix_cache_hit_rate_pct"), _num(c("cpu")).alias("cpu_prefix_cache_hit_rate_pct")))

    def _fold_prefix_hits(self) -> None:
        """One engine_stats row per V0 interval: each prefix-cache line's numbers set on its stats row; a line whose
        stats row is not there (no stats line before it, or one that did not parse) is a row of its own."""
        if not self.folds:
            return
        f = pl.concat(self.folds)
        self.con.execute("""
            UPDATE engine_stats e SET prefix_cache_hit_rate_pct = f.prefix_cache_hit_rate_pct,
                   cpu_prefix_cache_hit_rate_pct = f.cpu_prefix_cache_hit_rate_pct
            FROM f WHERE e.source_id = $1 AND e.line_no = f.stats_line AND e.prompt_throughput_tps IS NOT NULL
              AND e.swapped_reqs IS NOT NULL AND e.cpu_prefix_cache_hit_rate_pct IS NULL""", [self.sid])
        own = self.con.sql("""
            SELECT line_no, ts_ns, process, prefix_cache_hit_rate_pct, cpu_prefix_cache_hit_rate_pct FROM f
            WHERE stats_line IS NULL OR stats_line NOT IN (
                SELECT line_no FROM engine_stats WHERE source_id = $1 AND cpu_prefix_cache_hit_rate_pct IS NOT NULL)
            ORDER BY line_no""", params=[self.sid]).to_arrow_table()
        if own.num_rows:
            self.ctx.write("engine_stats", own)
        self.folded_own = own.num_rows

    def _received(self, sub: pl.DataFrame, fields: pl.DataFrame, out: "_Out") -> pl.Series | None:
        """Received lines: id, prompt length (number of prompt_token_ids), sampling params, max_tokens.

        `_classify` read them already (`fields`, from `_received_fields`); a line whose message changed since (a
        hard-wrapped line joined to its pieces, a Ray dedup marker cut off) or carried from the frame before is
        read here."""
        if sub.height == 0:
            return None
        sub = sub.join(fields.with_columns(pl.lit(True).alias("_pre")), on="line_no", how="left", maintain_order="left")
        pre = sub["_pre"].fill_null(False) & (sub["nlines"] == 1)
        g = sub.filter(pre).select("line_no", "ts_ns", *_RECV_COLS)
        if not pre.all():
            again = sub.filter(~pre)
            g = pl.concat([g, again.select("line_no", "ts_ns").join(_received_fields(again.select("line_no", "msg")),
                                                                    on="line_no", how="left", maintain_order="left")
                           .select(g.columns)]).sort("line_no")
        ok = g.filter(c("request_id").is_not_null())
        out.emit("request_events", ok.select(c("line_no"), c("request_id"), pl.lit("received").alias("event"),
                                                   c("ts_ns")))
        blk = ok.filter(c("_blk").is_not_null())
        if blk.height:
            _prompt_blocks(blk["line_no"], blk["request_id"], blk["_blk"].explode().to_numpy(),
                           blk["_blk"].list.len().to_numpy().astype(np.int64), out)
        # The request row itself, written now (its params are most of its bytes); finish time, status and
        # request_index come from the lifecycle events at the end of the file.
        endpoint = (pl.when(c("request_id").str.starts_with("chatcmpl-")).then(pl.lit("chat_completions"))
                    .when(c("request_id").str.starts_with("cmpl-")).then(pl.lit("completions")))
        out.emit("requests", ok.select(
            c("line_no"), c("request_id"), c("request_id").alias("server_request_id"), pl.lit("vllm").alias("engine"),
            pl.lit("server").alias("kind"), c("ts_ns").alias("arrival_ns"), c("prompt_tokens"), c("max_tokens"),
            endpoint.alias("endpoint"), c("params")))
        return g.filter(c("request_id").is_null())["line_no"]

    def _shared_prefixes(self) -> None:
        """requests.shared_prefix_tokens: whole blocks each prompt shares with a prompt received before it."""
        if not self.prefix_keys:
            return
        keys = pa.concat_tables(self.prefix_keys)
        # A block is shared when its key appeared on an earlier line (a hash group-by: no sort of all the keys).
        per_line = (pl.from_arrow(keys).with_columns((c("line_no").min().over("key") < c("line_no")).alias("s"))
                    .group_by("line_no").agg(c("s").sum()))
        reqs = pl.from_arrow(pa.concat_tables(self.prefix_reqs)).join(per_line, on="line_no", how="left")
        counts = reqs.group_by("request_id").agg(pl.col("s").fill_null(0).sum().alias("n")).to_arrow()
        self.con.register("_vllm_prefix_counts", counts)
        try:
            self.con.execute("""
                UPDATE requests r SET shared_prefix_tokens = s.n * $2
                FROM _vllm_prefix_counts s
                WHERE r.source_id = $1 AND r.request_id = s.request_id""", [self.sid, BLOCK])
            # Token ids printed but shorter than one block: nothing shareable.
            self.con.execute("""UPDATE requests SET shared_prefix_tokens = 0 WHERE source_id = $1
                                AND shared_prefix_tokens IS NULL AND prompt_tokens < $2""", [self.sid, BLOCK])
        finally:
            self.con.unregister("_vllm_prefix_counts")

    def _iterations(self, sub: pl.DataFrame, out: "_Out") -> None:
        """`Iteration(i): …` lines: their fields kept for `_engine_steps` (placement needs the whole file); lines
        with missing fields or an elapsed time that is negative or not a number become rejects."""
        if sub.height == 0:
            return
        ok, bad = vllm_steps.read_lines(sub)
        if ok.height:
            out.iters = ok
        if bad.height:
            out.iter_rejected += bad.height
            out.emit("rejects", bad)

    def _engine_steps(self) -> None:
        """engine_steps: the file's iteration lines in step sequences, each step placed in its stamped second."""
        if not self.iter_rows:
            return
        rows = vllm_steps.build(pl.concat(self.iter_rows))
        self.ctx.write("engine_steps", rows)
        seqs = pl.from_arrow(rows).select(pl.struct("process", "sequence").n_unique()).item()
        self.ctx.notes.append(f"{rows.num_rows:,} engine steps from iteration lines in {seqs} sequence(s), placed "
                              "within their 1-s stamps from the order and elapsed times")

    def _lifecycle(self, sub: pl.DataFrame, out: "_Out") -> pl.Series | None:
        """Added / Finished / Aborted lines. The id is cut at the fixed offset after the verb; a line where that
        does not give one clean id goes through the `lifecycle` regex instead (and, failing that, is a message)."""
        if sub.height == 0:
            return None
        m = c("msg")
        verb = (pl.when(m.str.starts_with("Added request ")).then(pl.lit("added"))
                .when(m.str.starts_with("Finished request ")).then(pl.lit("finished")).otherwise(pl.lit("aborted")))
        off = pl.when(m.str.starts_with("Added request ")).then(14).when(m.str.starts_with("Finished request ")).then(17) \
            .otherwise(16)
        g = sub.select(c("line_no"), c("ts_ns"), m, verb.alias("event"),
                       m.str.slice(off).str.strip_chars_end().str.strip_suffix(".").alias("rid"))
        clean = ((c("rid").str.len_bytes() > 0) & ~c("rid").str.contains(" ", literal=True)
                 & ~c("rid").str.contains("\t", literal=True))
        if not g.select(clean.all()).item():
            rx = g.select(m.str.extract_groups(P.LIFECYCLE.regex).alias("x")).unnest("x")
            g = g.with_columns(pl.when(clean).then(c("rid")).otherwise(rx["rid"]).alias("rid"),
                               pl.when(clean).then(c("event")).otherwise(rx["event"].str.to_lowercase()).alias("event"))
        ok = g.filter(c("rid").is_not_null())
        out.suffixed = out.suffixed or bool(ok["rid"].str.contains(P.ENGINE_SUFFIX.regex).any())
        out.emit("request_events", ok.select(c("line_no"), c("rid").alias("request_id"), c("event"), c("ts_ns")))
        return g.filter(c("rid").is_null())["line_no"]

    def _messages(self, rows: pl.DataFrame, out: "_Out") -> None:
        if rows.height == 0:
            return
        m = c("msg")
        starts = m.str.starts_with
        is_cfg = c("kind").is_in(["rec", "ks"]) & (
            starts("vLLM API server version") | starts("Initializing a") | starts("Chunked prefill is enabled with")
            | starts("GPU KV cache size: ") | starts("# ") | starts("Using max model len") | starts("args: Namespace(")
            | starts("non-default args: ") | m.str.contains("num_gpu_blocks is", literal=True))
        rows = rows.with_columns(is_cfg.alias("_cfg"))
        out.cfg = rows.filter(c("_cfg")).select("line_no", "msg")
        rows = rows.with_columns(_access(rows))
        lvl = c("lvl")
        kind = (pl.when(c("method").is_not_null()).then(pl.lit("access"))
                .when(lvl.is_in(["ERROR", "CRITICAL"])).then(pl.lit("error"))
                .when(lvl == "WARNING").then(pl.lit("warning"))
                .when(c("_cfg")).then(pl.lit("startup"))
                .otherwise(pl.lit("message")))
        out.emit("log_events", rows.select(
            c("line_no"), c("nlines").alias("line_count"), c("ts_ns"), lvl.alias("level"), c("process"),
            kind.alias("kind"), m.str.slice(0, MSG_MAX).alias("message"), c("method").alias("http_method"),
            c("path").alias("http_path"), _int(c("status")).cast(pl.Int32).alias("http_status")))

    def _traceback_events(self, rows: pl.DataFrame, out: "_Out") -> None:
        if rows.height == 0:
            return
        ev = (rows.group_by("tb_event", maintain_order=True).agg(
            c("line_no").min(), c("nlines").sum().alias("line_count"), c("ts_ns").drop_nulls().first(),
            c("lvl").drop_nulls().first().alias("level"), c("process").drop_nulls().first(),
            c("msg").filter(c("_fx")).last().alias("exc"), c("msg").str.join("\n").alias("text")))
        msg = pl.when(c("exc").is_not_null()).then(pl.concat_str([c("exc"), pl.lit("\n"), c("text")])).otherwise(c("text"))
        out.emit("log_events", ev.select(
            c("line_no"), c("line_count").cast(pl.Int32), c("ts_ns"), pl.coalesce(c("level"), pl.lit("ERROR")).alias("level"),
            c("process"), pl.lit("traceback").alias("kind"), msg.str.slice(0, MSG_MAX).alias("message")))

    def _rejects(self, rows: pl.DataFrame, out: "_Out") -> None:
        if rows.height == 0:
            return
        cut = self.ctx.input.cut_error or ""
        reason = (pl.when(c("kind") == "cut").then(pl.lit(f"{cut}; the last line is incomplete"))
                  .when(c("bad_utf8")).then(pl.lit("invalid UTF-8 (decoded with U+FFFD) in a line that is no vLLM, "
                                                   "uvicorn or Ray record"))
                  .when(c("msg").str.contains(P.STATS_FRAGMENT.regex)).then(pl.lit(
                      "fragment of a stats line without its envelope (torn write or pasted fragment)"))
                  .when(c("msg").str.contains(P.TORN_NCCL.regex)).then(pl.lit(
                      "torn piece of an NCCL line (its write was split by another process's output)"))
                  .when(c("msg").str.contains(P.TORN_SHORT.regex)).then(pl.lit(
                      "torn fragment: a few characters of an interleaved write"))
                  .otherwise(pl.lit("unrecognised line: no vLLM, uvicorn or Ray envelope and not known noise "
                                    "(torn write or foreign output)")))
        out.emit("rejects", rows.select(c("line_no"), reason.alias("reason"), c("text").str.slice(0, 2048).alias("raw")))

    # .. buffered writes ...................................................................................
    def _emit(self, table: str, rows: pa.Table) -> None:
        """Queue rows for `table`; they go to DuckDB in batches of about FLUSH_ROWS or FLUSH_BYTES, from the writer thread (one
        INSERT per batch instead of one per frame and kind; memory stays bounded; parsing goes on meanwhile)."""
        buf = self.buffers.setdefault(table, [])
        buf.append(rows)
        if sum(b.num_rows for b in buf) >= FLUSH_ROWS or sum(b.nbytes for b in buf) >= FLUSH_BYTES:
            self._flush(table)

    def _flush(self, table: str | None = None) -> None:
        for t in [table] if table else list(self.buffers):
            buf = self.buffers.pop(t, [])
            if buf:
                self.writer.put(t, pa.concat_tables(buf, promote_options="default"))

    # .. the end of the file ...............................................................................
    def _finish(self) -> None:
        ctx, con, sid = self.ctx, self.con, self.sid
        self._flush()
        self.writer.close()
        self._fold_prefix_hits()
        if ctx.counts.parsed:
            self._requests()
            self._shared_prefixes()
        self._engine_steps()
        extra = pl.DataFrame({"line_no": [None], "key": ["engine"], "value": ["vllm"], "origin": ["parser"], "rank": [0]})
        if self.saw_stats["V0"] or self.saw_stats["V1"]:
            ev = "V1" if self.saw_stats["V1"] >= self.saw_stats["V0"] else "V0"
            extra = pl.concat([extra, pl.DataFrame({"line_no": [None], "key": ["engine_version"], "value": [ev],
                                                    "origin": ["stats line format"], "rank": [5]})])
        if ctx.counts.parsed:
            ctx.write("engine_config", self.config.rows(extra.cast({"line_no": pl.Int64, "rank": pl.Int32})))
        ctx.raw_bytes = self.raw_bytes
        ctx.first_ns, ctx.last_ns = self.first_ns, self.last_ns
        zone = f"zone {self.tz} (--tz)"
        if self.year_note is None:
            ctx.set_clock("log_wallclock", f"no MM-DD HH:MM:SS timestamps read; {zone}")
        else:
            ctx.set_clock("log_wallclock", f"{self.year_note}; {zone}; 1 s resolution, file order breaks ties")
        if ctx.input.cut_error:
            ctx.notes.append(f"{ctx.input.cut_error}: read up to the cut, last line rejected")
        if self.noise:
            ctx.notes.append("skipped as noise: " + ", ".join(f"{n:,} {k.replace('_', ' ')}" for k, n in
                                                               sorted(self.noise.items(), key=lambda x: -x[1])))
        if self.dedup[0]:
            ctx.notes.append(dedup_note(*self.dedup))
        if self.bad_utf8_kept:
            ctx.notes.append(f"{self.bad_utf8_kept} line(s) with invalid UTF-8 read with U+FFFD replacement")
        if self.odd_stats:
            ctx.notes.append("stats lines with field(s) this parser does not know, read without them: " + ", ".join(
                f"'{k}' ({n} lines)" for k, n in sorted(self.odd_stats.items())))

    def _requests(self) -> None:
        """One `requests` row per request id, from its lifecycle events (Received, else Added, gives the arrival)."""
        con, sid = self.con, self.sid
        # 2026: the engine-side id is the API id plus `-` and 8 hex digits; fold it back onto the API id.
        if self.suffixed:
            con.execute(
                "UPDATE request_events SET detail = 'engine_request_id=' || request_id, "
                "request_id = regexp_extract(request_id, $2, 1) "
                "WHERE source_id = $1 AND event <> 'received' AND regexp_matches(request_id, $2) AND ("
                "  regexp_extract(request_id, $2, 1) IN "
                "    (SELECT request_id FROM request_events WHERE source_id = $1 AND event = 'received')"
                "  OR regexp_matches(request_id, $3))", [sid, P.ENGINE_SUFFIX.regex, P.ENGINE_ID_2026.regex])
        # Requests seen only through lifecycle lines (request logging off, or a log that starts mid-run).
        con.execute("""
            INSERT INTO requests (source_id, line_no, request_id, server_request_id, engine, kind, arrival_ns, endpoint)
            SELECT $1, min(line_no), request_id, request_id, 'vllm', 'server',
                   arg_min(ts_ns, line_no) FILTER (WHERE event = 'added'),
                   CASE WHEN request_id LIKE 'chatcmpl-%' THEN 'chat_completions'
                        WHEN request_id LIKE 'cmpl-%' THEN 'completions' END
            FROM request_events e WHERE source_id = $1 AND event <> 'received'
              AND NOT EXISTS (SELECT 1 FROM requests r WHERE r.source_id = $1 AND r.request_id = e.request_id)
            GROUP BY request_id""", [sid])
        # The same id received twice (a client reusing X-Request-Id): keep the first.
        dup = con.execute("SELECT count(*) - count(DISTINCT request_id) FROM requests WHERE source_id = $1", [sid]).fetchall()[0][0]
        if dup:
            con.execute("""DELETE FROM requests r WHERE source_id = $1 AND line_no > (
                               SELECT min(line_no) FROM requests q WHERE q.source_id = $1 AND q.request_id = r.request_id)""",
                        [sid])
        con.execute("""
            UPDATE requests r SET request_index = f.request_index, finish_ns = f.fin_ns,
                   status = CASE WHEN f.aborted THEN 'aborted' WHEN f.finished THEN 'ok' END,
                   line_no = least(r.line_no, f.first_line)
            FROM (SELECT q.request_id, coalesce(least(q.line_no, e.first_line), q.line_no) AS first_line,
                         (row_number() OVER (ORDER BY coalesce(least(q.line_no, e.first_line), q.line_no)) - 1)::INTEGER
                             AS request_index,
                         e.fin_ns, coalesce(e.aborted, false) AS aborted, coalesce(e.finished, false) AS finished
                  FROM requests q LEFT JOIN (
                      SELECT request_id, min(line_no) AS first_line,
                             arg_min(ts_ns, line_no) FILTER (WHERE event = 'finished') AS fin_ns,
                             bool_or(event = 'aborted') AS aborted, bool_or(event = 'finished') AS finished
                      FROM request_events WHERE source_id = $1 GROUP BY request_id) e USING (request_id)
                  WHERE q.source_id = $1) f
            WHERE r.source_id = $1 AND r.request_id = f.request_id""", [sid])


# -- Received lines (pure functions of their rows) ----------------------------------------------------------

def _prompt_blocks(line_no: pl.Series, request_id: pl.Series, h: np.ndarray, nb: np.ndarray, out: "_Out") -> None:
    """Chain keys of each prompt's whole 16-token blocks (vLLM's default KV block), for `shared_prefix_tokens`:
    block j's key sums the hashes of every block up to j, each first mixed with its position (a plain sum would
    give [A, B] and [B, A] one key), and is mixed with j, so equal keys mean equal prefixes. `h` holds every
    prompt's block hashes one after another, `nb` how many each prompt has."""
    keep = nb > 0
    if not keep.any():
        return
    nb = nb[keep]
    first_blk = np.concatenate(([0], np.cumsum(nb)[:-1]))
    b = np.arange(int(nb.sum()), dtype=np.int64) - np.repeat(first_blk, nb)
    with np.errstate(over="ignore"):
        at = _mix64(h ^ ((b.astype(np.uint64) + np.uint64(1)) * np.uint64(0xC2B2AE3D27D4EB4F)))
        chain = np.cumsum(at, dtype=np.uint64)
        # the chain up to each prompt's start
        before = np.repeat(np.concatenate((np.zeros(1, np.uint64), chain))[first_blk], nb)
        key = _mix64((chain - before) ^ (b.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)))
    kept = pl.Series(keep)
    out.keys.append((pa.table({"line_no": np.repeat(line_no.filter(kept).to_numpy(), nb), "key": key.view(np.int64)}),
                     pl.DataFrame({"line_no": line_no.filter(kept), "request_id": request_id.filter(kept)}).to_arrow()))



_RECV_COLS = {"request_id": pl.String, "params": pl.String, "prompt_tokens": pl.Int32, "max_tokens": pl.Int32,
              "_blk": pl.List(pl.UInt64)}


def _received_fields(sub: pl.DataFrame) -> pl.DataFrame:
    """Received lines (line_no, msg) → line_no, request_id, params, prompt_tokens, max_tokens and `_blk`, the hashes
    of the prompt's whole 16-token blocks (NULL without one), for `_Run._prompt_blocks`.

    These lines are most of a log's bytes (a prompt and its token ids, up to ~10 kB each), so the fields are
    located with literal searches (`received_prompt_token_ids` / `received_params` give the format) and cut
    out as byte slices; only lines where that does not give a well-formed params repr fall back to the regex.
    """
    m = c("msg")
    g = sub.select(c("line_no"), m, m.str.extract(P.RECV_ID.regex, 1).alias("request_id"),
                   m.str.find("prompt_token_ids: ", literal=True).alias("_i"),
                   m.str.find("params: ", literal=True).alias("_p"))
    # Where the params end without token ids after them (older prints): looked for only on those lines (the
    # search runs to the end of the line, past the ids).
    lora = m.str.find(", lora_request: ", literal=True)
    g = g.with_columns((pl.when(c("_i").is_null()).then(lora) if g["_i"].null_count() else
                        pl.lit(None, g.schema["_i"])).alias("_l"))
    b = m.cast(pl.Binary)
    tail = pl.when(c("_i").is_not_null()).then(b.bin.slice(c("_i") + 18).cast(pl.String))
    end = pl.coalesce(c("_i") - 2, c("_l"))
    params = pl.when(c("_p").is_not_null() & (end > c("_p"))).then(
        b.bin.slice(c("_p") + 8, end - c("_p") - 8).cast(pl.String))
    g = g.with_columns(tail.alias("_t"), params.alias("params"))
    ids = pl.when(c("_t").str.starts_with("[")).then(c("_t").str.slice(0, c("_t").str.find("]", literal=True) + 1))
    ok_params = (c("params").str.slice(0, 48).str.contains(P.PARAMS_HEAD.regex) & c("params").str.ends_with(")")) | (
        c("params") == "None")
    g = g.with_columns(ids.alias("ids"), ok_params.fill_null(False).alias("_okp")).drop("_t")
    if not g["_okp"].all():
        g = g.with_columns(pl.when(c("_okp")).then(c("params")).otherwise(m.str.extract(P.RECV_PARAMS.regex, 1))
                           .alias("params"))
    ids_of = g.filter(c("request_id").is_not_null() & c("ids").is_not_null() & (c("ids") != "[]"))
    parsed = _id_blocks(ids_of["ids"]) if fast_lanes_on() else None
    if parsed is not None:
        # prompt_tokens from the commas found there (the same count as the commas + 1 below, without the scan)
        n, h, nb = parsed
        line_no = ids_of["line_no"]
    else:
        n = None
        line_no, h, nb = _split_blocks(g.filter(c("request_id").is_not_null()))
    keep = nb > 0
    offsets = np.concatenate(([0], np.cumsum(nb[keep]))).astype(np.int32)
    blocks = pl.DataFrame({"line_no": line_no.filter(pl.Series(keep)),
                           "_blk": pl.from_arrow(pa.ListArray.from_arrays(pa.array(offsets), pa.array(h, pa.uint64())))})
    g = g.join(blocks, on="line_no", how="left", maintain_order="left")
    if n is not None:
        g = g.join(pl.DataFrame({"line_no": ids_of["line_no"], "_n": pl.Series(n, dtype=pl.Int32)}), on="line_no",
                   how="left", maintain_order="left")
        n_tokens = c("_n")
    else:
        n_tokens = (pl.when(c("ids").is_null() | (c("ids") == "[]")).then(None)
                    .otherwise(c("ids").str.count_matches(",") + 1).cast(pl.Int32))
    return g.select(c("line_no"), c("request_id"), c("params"), n_tokens.alias("prompt_tokens"),
                    c("params").str.extract(P.MAX_TOKENS.regex, 1).cast(pl.Int32, strict=False).alias("max_tokens"),
                    c("_blk")).cast(_RECV_COLS)


def _split_blocks(g: pl.DataFrame) -> tuple[pl.Series, np.ndarray, np.ndarray]:
    """Block hashes of token-id lists that `_id_blocks` does not read (an odd print, a cut list), split on `, `
    by polars: (line_no of each list with a whole block, the hashes one list after another, blocks per list).
    A token that is not an integer still takes its place, as a value no id has."""
    t = g.select(c("line_no"), c("ids").str.strip_chars("[]").str.split(", ").alias("t")).filter(
        c("t").list.len() >= BLOCK)
    if t.height == 0:
        return t["line_no"], np.zeros(0, np.uint64), np.zeros(0, np.int64)
    n = t["t"].list.len().to_numpy().astype(np.int64)
    tok = t["t"].explode().cast(pl.Int64, strict=False).fill_null(-1).to_numpy().view(np.uint64)
    nb = n // BLOCK
    start = np.concatenate(([0], np.cumsum(n)[:-1]))
    # Row of every whole block in `tok`: the prompt's start plus 16 x the block's position in it.
    b = np.arange(int(nb.sum()), dtype=np.int64) - np.repeat(np.cumsum(nb) - nb, nb)
    rows = np.repeat(start, nb) + b * BLOCK
    blocks = tok[rows[:, None] + np.arange(BLOCK)]
    with np.errstate(over="ignore"):
        h = _mix64((blocks * _BLOCK_MULT).sum(axis=1, dtype=np.uint64))
    return t["line_no"], h, nb


def _read_received(df: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(the frame with `_dd`: the line has a Ray dedup marker, the `_received_fields` of its Received records) for
    `_Run._received` (a line with a Ray dedup marker is left to it, since its message changes when the marker is
    cut off)."""
    m = c("msg")
    df = df.with_columns(m.str.contains("across cluster]", literal=True).alias("_dd"))  # a Ray dedup marker
    recv = c("kind").is_in(["rec", "ks"]) & m.str.starts_with("Received request ") & ~c("_dd")
    sub = df.select("line_no", "msg", recv.alias("_recv")).filter(c("_recv"))
    if sub.height:
        return df, _received_fields(sub.drop("_recv"))
    return df, pl.DataFrame(schema={"line_no": pl.Int64, **_RECV_COLS})


# -- frame-level classification (pure functions of the frame) --------------------------------------------------

def _classify(frame: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A frame's lines without ANSI codes, with their envelope (`_envelope`) and torn records recovered, and the
    fields of its Received lines (`_read_received`): each line on its own, so frames are classified in any order
    and a carried tail joins the next frame as it is."""
    if frame.height == 0:
        return frame, pl.DataFrame(schema={"line_no": pl.Int64, **_RECV_COLS})
    df = _patch(frame, frame["text"].str.contains(X.ANSI_MARK), "text", c("text").str.replace_all(X.ANSI_RX, ""))
    return _read_received(_Run._recover_torn(_envelope(df)))



def _noise(df: pl.DataFrame) -> pl.Series:
    """Known-noise category of each line without an envelope (NULL for records and for unknown lines)."""
    out = pl.repeat(None, df.height, dtype=pl.String, eager=True).alias("noise")
    idx = (df["kind"] == "other").arg_true()
    if idx.len() == 0:
        return out
    m = c("msg")
    cat = (pl.when(m.str.contains(P.NOISE_BLANK.regex)).then(pl.lit("blank"))
           .when(m.str.contains(P.NOISE_NCCL.regex)).then(pl.lit("nccl"))
           .when(m.str.contains(P.NOISE_TQDM.regex)).then(pl.lit("tqdm"))
           .when(m.str.contains(P.NOISE_SHELL.regex)).then(pl.lit("shell"))
           .when(m.str.contains(P.NOISE_PYWARN.regex)).then(pl.lit("python_warning"))
           .when(m.str.contains(P.NOISE_TORCH_LOG.regex)).then(pl.lit("torch_log"))
           .when(m.str.contains(P.NOISE_RAY_CORE.regex)).then(pl.lit("ray_core"))
           .when(c("text").str.contains(P.NOISE_SHELL_CONT.regex) | c("_prev_cont")).then(pl.lit("shell"))
           .otherwise(None))
    prev = idx.cast(pl.Int64) - 1  # the line before each candidate (none before the first line)
    prev_cont = (df["text"].gather(prev.clip(0)).str.contains(P.NOISE_SHELL_CONT.regex) & (prev >= 0)).fill_null(False)
    sub = df.select(m, c("text")).gather(idx).with_columns(prev_cont.alias("_prev_cont"))
    vals = sub.select(cat).to_series()
    return out.scatter(idx, vals)


_HTTP_METHODS = ["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH"]


def _access(rows: pl.DataFrame) -> list[pl.Series]:
    """method, path, status of uvicorn access lines (`client - "METHOD path HTTP/v" status reason`): cut at the
    ` - "` separator and split on spaces; lines that do not split cleanly go through the `uvicorn_access` regex."""
    m = c("msg")
    q = m.str.find(' - "', literal=True)
    parts = (pl.when((c("kind") == "uvi") & q.is_not_null()).then(m.str.slice(q + 4).str.split_exact(" ", 3))
             .alias("s"))
    g = rows.select(m, c("kind"), parts).unnest("s")
    ok = (c("field_0").is_in(_HTTP_METHODS) & c("field_1").is_not_null() & c("field_2").str.starts_with("HTTP/")
          & (c("field_3").str.len_bytes() == 3) & c("field_3").cast(pl.Int32, strict=False).is_not_null())
    g = g.with_columns(ok.fill_null(False).alias("_ok"))
    if not g.filter((c("kind") == "uvi") & ~c("_ok") & c("msg").str.contains(' - "', literal=True)).is_empty():
        rx = g.select(pl.when(c("kind") == "uvi").then(m.str.extract_groups(P.ACCESS.regex)).alias("x")).unnest("x")
        g = g.with_columns(pl.when(c("_ok")).then(c("field_0")).otherwise(rx["method"]).alias("field_0"),
                           pl.when(c("_ok")).then(c("field_1")).otherwise(rx["path"]).alias("field_1"),
                           pl.when(c("_ok")).then(c("field_3")).otherwise(rx["status"]).alias("field_3"),
                           (c("_ok") | rx["method"].is_not_null()).alias("_ok"))
    g = g.select(pl.when(c("_ok")).then(c("field_0")).alias("method"), pl.when(c("_ok")).then(c("field_1")).alias("path"),
                 pl.when(c("_ok")).then(c("field_3")).alias("status"))
    return [g["method"], g["path"], g["status"]]


def _prev(name: str) -> pl.Expr:
    return c(name).shift(1).over("_st")


def _next(name: str) -> pl.Expr:
    return c(name).shift(-1).over("_st")


_TB_HELPERS = ["_st", "_fh", "_ffile", "_ff", "_fp", "_fc", "_fe", "_fb", "_hk", "_run", "_lg", "_lgev", "_rp", "_rs",
               "_rs0", "_rev"]


def _tracebacks(df: pl.DataFrame) -> pl.DataFrame:
    """`tb_event` (line of the event's first line) for every line that belongs to a traceback; one event per traceback.

    Logged tracebacks (`logger.exception`) repeat the record's prefix on every line: a run of records with the
    same level, time and location in one process stream that contains a traceback head or frame is one event,
    starting at its message line. Raw tracebacks (multiprocessing, CLI exit) have only the process prefix: a run
    of traceback-shaped lines (`Process X:`, `Traceback …`, frames, code and marker lines, the exception line)
    in one stream. Either must contain a `Traceback` head or a `File "…"` frame.
    """
    m = c("msg")
    body = c("kind").is_in(["rec", "ks", "other"])
    fh = body & m.str.contains(P.TB_HEAD.regex)
    ffile = body & m.str.starts_with('  File "')
    # Most frames have no traceback: literal tests first (the head regex needs the line to start so).
    maybe = body & (m.str.starts_with("Traceback (most recent call last):") | m.str.starts_with('  File "'))
    if not df.select(maybe.any()).item() or not df.select((fh | ffile).any()).item():
        return df.with_columns(pl.lit(None, pl.Int64).alias("tb_event"), pl.lit(False).alias("_fx"))
    is_rec = c("kind").is_in(["rec", "ks"])
    is_raw = c("kind") == "other"
    hk = pl.when(is_rec).then(c("env")).otherwise(pl.lit("~raw"))
    df = df.with_columns(pl.coalesce(c("process"), pl.lit("")).alias("_st"), fh.alias("_fh"), ffile.alias("_ffile"),
                         (body & m.str.contains(P.TB_FRAME.regex)).alias("_ff"),
                         (is_raw & m.str.contains(P.TB_PROCESS.regex)).alias("_fp"),
                         (body & m.str.contains(P.TB_CHAIN.regex)).alias("_fc"),
                         (body & m.str.contains(P.TB_EXC.regex)).alias("_fe"),
                         (body & m.str.contains(P.NOISE_BLANK.regex)).alias("_fb"), hk.alias("_hk"))
    df = df.with_columns((c("_hk") != _prev("_hk")).fill_null(True).cum_sum().over("_st").alias("_run"),
                         (c("_fe") & _prev("_ff").fill_null(False)).alias("_fx"))
    df = df.with_columns((is_rec & (c("_fh") | c("_ffile")).any().over(["_st", "_run"])).alias("_lg"),
                         c("line_no").first().over(["_st", "_run"]).alias("_lgev"))
    f = lambda e: e.fill_null(False)  # noqa: E731
    raw_piece = is_raw & (c("_fh") | c("_ff") | c("_fc") | c("_fx") | (c("_fp") & f(_next("_fh")))
                          | (c("_fb") & f(_prev("_fx")) & f(_next("_fc"))) | (c("_fb") & f(_prev("_fc")) & f(_next("_fh"))))
    df = df.with_columns(raw_piece.alias("_rp"))
    df = df.with_columns((c("_rp") & (~f(_prev("_rp")) | (c("_fh") & ~(f(_prev("_fp")) | f(_prev("_fc")) | f(_prev("_fb"))))))
                         .alias("_rs"))
    df = df.with_columns(pl.when(c("_rs")).then(c("line_no")).alias("_rs0"))
    df = df.with_columns(pl.when(c("_rp")).then(c("_rs0").forward_fill().over("_st")).alias("_rev"))
    valid_raw = (c("_fh") | c("_ffile")).any().over("_rev")
    ev = pl.when(c("_lg")).then(c("_lgev")).when(c("_rp") & c("_rev").is_not_null() & valid_raw).then(c("_rev"))
    return df.with_columns(ev.alias("tb_event")).drop([h for h in _TB_HELPERS if h != "_st"]).drop("_st")


def _python_warning_tails(df: pl.DataFrame) -> pl.DataFrame:
    """The lines after a Python `warnings` message in the same process stream (its further text lines and the
    `  warnings.warn(` source line) are noise too: an unknown line whose nearest earlier line of the same stream
    (looking back at most 6 physical lines) is such a warning line; chains of at most three."""
    pw = (df["noise"] == "python_warning").fill_null(False)
    if not pw.any():
        return df
    cand = ((df["kind"] == "other") & df["noise"].is_null() & df["tb_event"].is_null()).arg_true().cast(pl.Int64)
    if cand.len() == 0:
        return df
    # The stream of every line as a small integer, and for each candidate the nearest earlier line of its stream
    # within 6 lines (numpy over a (candidates x 6) matrix instead of a polars call per distance).
    stream = df["process"].fill_null("").cast(pl.Categorical).to_physical().to_numpy()
    pw = pw.to_numpy().copy()
    ci = cand.to_numpy()
    back = ci[:, None] - np.arange(1, 7)
    at = np.clip(back, 0, None)
    same = (stream[at] == stream[ci][:, None]) & (back >= 0)
    has = same.any(axis=1)
    near = at[np.arange(ci.size), same.argmax(axis=1)]
    for _ in range(3):
        hit = has & pw[near]
        if not hit.any():
            break
        pw[ci[hit]] = True
    pw = pl.Series(pw)
    noise = df["noise"].scatter(cand.filter(pw.gather(cand)), "python_warning")
    return df.with_columns(noise)


def _patch(df: pl.DataFrame, mask: pl.Series, col: str, expr: pl.Expr) -> pl.DataFrame:
    """`col` recomputed with `expr` on the rows where `mask` holds only (the rest is not touched, nor scanned)."""
    idx = mask.arg_true()
    if idx.len() == 0:
        return df
    new = df.select(col).gather(idx).select(expr).to_series()
    return df.with_columns(df[col].scatter(idx, new))


_V1_INT_COLUMNS = {"deferred_reqs", "preemptions", "corrupted_reqs"}


def _v1_stats_columns(base: list, fields: list[pl.Expr]) -> list[pl.Expr]:
    """engine_stats columns of V1 stats lines: the fields up to Waiting from the groups of STATS_V1 or
    STATS_V1_LOOSE (the same names), then `fields`, the text of each STATS_V1_FIELDS field in its order."""
    return [*base, _int(c("engine")).alias("engine_index"), _int(c("n_engines")).alias("engines_aggregated"),
            _num(c("prompt")).alias("prompt_throughput_tps"), _num(c("gen")).alias("generation_throughput_tps"),
            _int(c("running")).alias("running_reqs"), _int(c("waiting")).alias("waiting_reqs"),
            *[(_int if col in _V1_INT_COLUMNS else _num)(e).alias(col)
              for e, (_, _, col, _) in zip(fields, P.STATS_V1_FIELDS)]]


class _Out:
    """What one frame's parse hands to the file's run (`_Run._apply`): rows per table in the order written, counts,
    and the parts that link to other frames."""

    def __init__(self):
        self.emits: list[tuple[str, pa.Table]] = []
        self.lines = self.raw_bytes = self.parsed = self.skipped = self.bad_utf8 = 0
        self.noise: dict[str, int] = {}
        self.dedup = [0, 0]
        self.lo: int | None = None  # earliest and latest time of the parsed lines
        self.hi: int | None = None
        self.saw = {"V0": 0, "V1": 0}
        self.odd_stats: dict[str, int] = {}  # fields of V1 stats lines this parser does not know: lines with each
        self.suffixed = False
        self.pch: pl.DataFrame | None = None   # V0 prefix-cache lines with their stream's previous record
        self.last: pl.DataFrame | None = None  # the last record of each process stream
        self.cfg: pl.DataFrame | None = None   # config lines (line_no, msg)
        self.keys: list[tuple[pa.Table, pa.Table]] = []  # prompt-block keys and (line_no, request_id)
        self.iters: pl.DataFrame | None = None  # iteration lines' fields (vllm_steps.RAW_COLUMNS)
        self.iter_rejected = 0

    def emit(self, table: str, rows: pl.DataFrame) -> None:
        # As Arrow: a compact copy, so the queued rows do not keep whole frames alive through string views.
        if rows.height:
            self.emits.append((table, rows.to_arrow()))


class _Writer:
    """Appends batches to DuckDB from one background thread, in order, on the parse's own connection (so inside
    its transaction). DuckDB releases the GIL while it inserts, so the next frame is parsed meanwhile. An error
    in the thread is raised again in the parser's thread at the next `put` or at `close`."""

    def __init__(self, ctx: ParseContext, depth: int = 4):
        self.ctx = ctx
        self.lock = threading.Lock()
        self.q: queue.Queue = queue.Queue(maxsize=depth)
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None

    def _loop(self) -> None:
        while True:
            item = self.q.get()
            if item is None:
                return
            if self.error is not None:
                continue  # drain without writing after a failure
            table, data = item
            try:
                with self.lock:
                    if table == "rejects":
                        self.ctx.write_rejects(data)
                    else:
                        self.ctx.write(table, data)
            except BaseException as e:
                self.error = e

    def put(self, table: str, data: pa.Table) -> None:
        if self.error is not None:
            raise self.error
        if self.thread is None:
            self.thread = threading.Thread(target=self._loop, name="vllm-log-writer", daemon=True)
            self.thread.start()
        self.q.put((table, data))

    def close(self, wait: bool = True) -> None:
        """Wait for every queued batch (re-raising a failure); with wait=False only stop the thread."""
        if self.thread is not None:
            if not wait:
                self.error = self.error or RuntimeError("parse stopped")
            self.q.put(None)
            self.thread.join()
            self.thread = None
        if wait and self.error is not None:
            raise self.error


def _envelope(df: pl.DataFrame) -> pl.DataFrame:
    """The `_COLS` envelope columns, `kind` (rec / ray / uvi / ks / other) and `msg` for every line of a frame.

    Most lines are plain vLLM records: one capture-free regex (`head_fast`) finds their envelope and the fields
    are cut from it at fixed offsets; so are bare uvicorn lines (`uvicorn_head`). The others (Ray, docker-compose,
    KServe, wrapped uvicorn, unknown) go through the full `head` regex with named groups. The parts are put back
    in file order. With the fast lanes off (`base.FAST_LANES`) every line takes the full `head` regex.
    """
    lanes = fast_lanes_on()
    head = _fast_heads(df) if lanes else pl.repeat(None, df.height, dtype=pl.String, eager=True)
    fast_mask = head.is_not_null()
    parts = []
    if fast_mask.any():
        fast = df.filter(fast_mask).with_columns(head.filter(fast_mask).alias("head"))
        h = c("head").str.starts_with
        bare = h("INFO ") | h("DEBUG ") | h("WARNING ") | h("ERROR ") | h("CRITICAL ")
        pfx = pl.when(bare).then(pl.lit("")).otherwise(c("head").str.extract(P.PFX.regex, 0))
        fast = fast.with_columns(pfx.alias("pfx")).with_columns(c("head").str.slice(c("pfx").str.len_chars()).alias("env"))
        sp = c("env").str.find(" ", literal=True)
        fast = fast.with_columns(
            c("env").str.slice(0, sp).alias("level"), c("env").str.slice(sp + 1, 5).alias("md"),
            c("env").str.slice(sp + 7, 8).alias("hms"),
            pl.when(c("env").str.slice(sp + 15, 1) == ".").then(c("env").str.slice(sp + 16, 3)).alias("ms"),
            *[pl.lit(None, pl.String).alias(k) for k in _COLS if k not in ("head", "pfx", "env", "level", "md", "hms", "ms")])
        parts.append(fast.with_columns(pl.lit("rec").alias("kind")))
    if not fast_mask.all():
        slow = df.filter(~fast_mask)
        uhead = slow["text"].str.extract(P.UVI_FAST.regex, 0) if lanes else pl.Series([None] * slow.height, dtype=pl.String)
        uvi = uhead.is_not_null()
        if uvi.any():
            parts.append(slow.filter(uvi).with_columns(
                uhead.filter(uvi).alias("head"), pl.lit("").alias("pfx"), c("text").str.slice(0, c("text").str.find(":", literal=True)).alias("ulevel"),
                *[pl.lit(None, pl.String).alias(k) for k in _COLS if k not in ("head", "pfx", "ulevel")],
                pl.lit("uvi").alias("kind")))
            slow = slow.filter(~uvi)
    if not fast_mask.all() and slow.height:
        slow = slow.with_columns(c("text").str.extract_groups(P.HEAD.regex).alias("_h")).unnest("_h")
        kind = (pl.when(c("level").is_not_null()).then(pl.lit("rec"))
                .when(c("rlevel").is_not_null()).then(pl.lit("ray"))
                .when(c("ulevel").is_not_null()).then(pl.lit("uvi"))
                .when(c("klevel").is_not_null() | c("wdate").is_not_null()).then(pl.lit("ks"))
                .otherwise(pl.lit("other")))
        env = pl.when(c("level").is_not_null() | c("klevel").is_not_null()).then(
            c("head").str.slice(c("pfx").str.len_chars()))
        slow = slow.with_columns(kind.alias("kind"), env.alias("env"))
        parts.append(slow)
    cols = ["line_no", "text", "bad_utf8", *_COLS, "kind"]
    parts = [p.select(cols) for p in parts]
    out = parts[0] if len(parts) == 1 else pl.concat(parts).sort("line_no")
    # `head` is the start of `text` (a match at its start): cut it off as a prefix (half the cost of a char slice)
    return out.with_columns(c("text").str.strip_prefix(c("head")).alias("msg"), _process_names(out["pfx"]))


def _fast_heads(df: pl.DataFrame) -> pl.Series:
    """The fast lane of `_envelope`: each line's envelope as `head_fast` finds it (NULL where it does not hold)."""
    return df.select(c("text").str.extract(P.HEAD_FAST.regex, 0)).to_series()


def _process_names(pfx: pl.Series) -> pl.Series:
    """`process` for every row (`(EngineCore_0 pid=1159) (RayWorkerWrapper pid=1273) ` → `EngineCore_0 pid=1159 /
    RayWorkerWrapper pid=1273`), from the wrapper table (`prefixes.names`, once per distinct prefix): NULL without
    one, so only the rows with a prefix are looked up."""
    has = (pfx.str.len_bytes() > 0).fill_null(False)
    if not has.any():
        return pl.repeat(None, pfx.len(), dtype=pl.String, eager=True).alias("process")
    idx = has.arg_true()
    return pl.repeat(None, pfx.len(), dtype=pl.String, eager=True).alias("process").scatter(idx, X.names(pfx.gather(idx)))
