"""vLLM iteration lines into `engine_steps`: one step sequence per EngineCore run, each step placed in its second.

The lines (`Iteration(i): …, iteration elapsed time: t ms`, see ../shared/notes/production-evidence.md §1) are
written when the wait for a step's output ends, stamped to the second. Placement, per sequence (steps in counter
order): step i ends after step i-1's end plus the host gap g plus its own elapsed time e_i, and inside its stamped
second [s_i, s_i + 1 s). So with d_i = e_i + g and D_i = d_1 + … + d_i,

    earliest end  E_i = D_i + max_{j <= i} (s_j - D_j)          (the chain pushed as early as the stamps allow)
    latest end    L_i = D_i + min_{j >= i} (s_j + 1 s - D_j)    (as late as they allow)

and every placement consistent with the stamps lies in [E_i, L_i]; the end is put at the midpoint, whose spacing
keeps every step's own elapsed time (both chains advance by at least d_i). Back-to-back steps crossing second edges
pin the chain (tight bounds); after idle time only the step's own second bounds it (±0.5 s). g is estimated per
sequence from seconds in which the engine ran back to back (the previous and the next second have steps too):
(1 s - Σ elapsed) / steps, the 25th percentile over those seconds (seconds with idle moments overstate it). If g (or elapsed times that do not fit the stamps) leaves
E_i > L_i somewhere, the sequence is placed again with g / 2, then with g = 0 (the bounds are then valid for any
gaps >= 0), and a step still inconsistent is put at the middle of its own second with bounds [s_i, s_i + 1 s).
"""
from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa

from . import vllm_log_patterns as P

NS_PER_S = 1_000_000_000
MAX_HOST_GAP_NS = 50_000_000  # a host gap beyond 50 ms is idle time, not scheduling overhead
c = pl.col

RAW_COLUMNS = {"line_no": pl.Int64, "ts_ns": pl.Int64, "process": pl.String, "iteration": pl.Int64,
               "ctx_reqs": pl.Int32, "ctx_tokens": pl.Int64, "gen_reqs": pl.Int32, "gen_tokens": pl.Int64,
               "elapsed_ms": pl.Float64, "dummy": pl.Boolean}


def read_lines(sub: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Iteration messages (line_no, ts_ns, process, msg) → (rows of RAW_COLUMNS, rejects (line_no, reason, raw))."""
    g = sub.select(c("line_no"), c("ts_ns"), c("process"), c("msg"),
                   c("msg").str.extract_groups(P.ITERATION.regex).alias("g")).unnest("g")
    el = c("elapsed").cast(pl.Float64, strict=False)
    reason = (pl.when(c("iter").is_null()).then(pl.lit("iteration line with missing or malformed fields"))
              .when(el.is_null() | el.is_nan() | el.is_infinite()).then(pl.lit("iteration line: elapsed time is not a "
                                                                               "finite number"))
              .when(el < 0).then(pl.lit("iteration line: negative elapsed time"))
              .when(c("ts_ns").is_null()).then(pl.lit("iteration line without a time (no earlier timed line)")))
    g = g.with_columns(reason.alias("reason"))
    bad = g.filter(c("reason").is_not_null()).select(
        c("line_no"), c("reason"), c("msg").str.slice(0, 2048).alias("raw"))
    ok = g.filter(c("reason").is_null()).select(
        c("line_no"), c("ts_ns"), c("process"), c("iter").cast(pl.Int64, strict=False).alias("iteration"),
        *[c(k).cast(RAW_COLUMNS[k], strict=False) for k in ("ctx_reqs", "ctx_tokens", "gen_reqs", "gen_tokens")],
        el.alias("elapsed_ms"), c("dummy").is_not_null().alias("dummy"))
    return ok, bad


def build(raw: pl.DataFrame) -> pa.Table:
    """engine_steps rows (without source_id) from every iteration row of a file (RAW_COLUMNS)."""
    if raw.height == 0:
        return pl.DataFrame().to_arrow()
    df = raw.with_columns(c("process").fill_null("").alias("_p")).sort("_p", "line_no")
    core = c("process").str.extract_groups(P.ENGINE_CORE.regex)
    df = df.with_columns(core.alias("_c")).unnest("_c").with_columns(
        pl.coalesce(c("dp"), c("idx")).cast(pl.Int32, strict=False).alias("dp_rank"),
        c("pid").cast(pl.Int32, strict=False).alias("pid"), c("name").alias("engine_core"))
    restart = (c("iteration") != c("iteration").shift(1) + 1).fill_null(True).over("_p")
    df = df.with_columns((restart.cast(pl.Int32).cum_sum().over("_p") - 1).alias("sequence"))
    df = df.with_columns(pl.struct("_p", "sequence").rank("dense").cast(pl.Int64).alias("_seq"))
    df = df.sort("_seq", "line_no")
    seq = df["_seq"].to_numpy()
    stamp = df["ts_ns"].to_numpy().astype(np.int64)
    e = np.rint(df["elapsed_ms"].to_numpy() * 1e6).astype(np.int64)
    gap = host_gaps(seq, stamp, e)
    lo, hi = place(seq, stamp, e, gap[seq])
    for shrink in (2, 0):  # an estimated gap too large for some stretch: halve it there, then drop it
        bad_seq = np.unique(seq[lo > hi])
        if bad_seq.size == 0:
            break
        gap[bad_seq] = gap[bad_seq] // shrink if shrink else 0
        again = np.isin(seq, bad_seq)
        lo[again], hi[again] = place(seq[again], stamp[again], e[again], gap[seq[again]])
    bad = lo > hi
    lo[bad], hi[bad] = stamp[bad], stamp[bad] + NS_PER_S - 1
    end = lo + (hi - lo) // 2
    out = df.with_columns(pl.Series("stamp_ns", stamp), pl.Series("end_ns", end), pl.Series("start_ns", end - e),
                          pl.Series("end_lo_ns", lo), pl.Series("end_hi_ns", hi),
                          pl.Series("host_gap_ms", gap[seq] / 1e6))
    return out.select("line_no", "process", "engine_core", "dp_rank", "pid", "sequence", "iteration", "stamp_ns",
                      "start_ns", "end_ns", "end_lo_ns", "end_hi_ns", "elapsed_ms", "host_gap_ms",
                      "ctx_reqs", "ctx_tokens", "gen_reqs", "gen_tokens", "dummy").sort("line_no").to_arrow()


def place(seq: np.ndarray, stamp: np.ndarray, e: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(earliest, latest) end of every step (rows grouped by `seq`, in order) given the stamps, elapsed times `e`
    and host gaps `g` (ns): the two chains of the module doc, by a cumulative max and a reversed cumulative min."""
    d = e + g
    first = np.r_[True, seq[1:] != seq[:-1]]
    start_idx = np.maximum.accumulate(np.where(first, np.arange(seq.size), 0))
    cd = np.cumsum(d)
    D = cd - (cd - d)[start_idx]  # D within the sequence (its first step: its own d)
    lo = D + _seg_cummax(stamp - D, first)
    last = np.r_[seq[1:] != seq[:-1], True]
    hi = D + _seg_cummax(-(stamp + NS_PER_S - 1 - D)[::-1], last[::-1])[::-1] * -1
    return lo, hi


def _seg_cummax(x: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Cumulative max of `x` (int64, exact) restarting where `first` is set (segments in order)."""
    if x.size == 0:
        return x
    return pl.DataFrame({"x": x, "g": np.cumsum(first)}).select(c("x").cum_max().over("g"))["x"].to_numpy()


def host_gaps(seq: np.ndarray, stamp: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Host gap (ns) per sequence id (index = id): over the seconds where the engine ran back to back (the previous
    and the next second hold steps of the same sequence too), (1 s - Σ elapsed) / steps of that second; the 25th percentile,
    within [0, MAX_HOST_GAP_NS]. 0 for a sequence without such a second."""
    out = np.zeros(int(seq.max()) + 1 if seq.size else 0, np.int64)
    if seq.size == 0:
        return out
    sec = pl.DataFrame({"q": seq, "s": stamp // NS_PER_S, "e": e}).group_by("q", "s").agg(
        c("e").sum().alias("busy"), pl.len().alias("n")).sort("q", "s")
    sec = sec.filter((c("s").shift(1).over("q") == c("s") - 1) & (c("s").shift(-1).over("q") == c("s") + 1)
                     & (c("n") >= 2))
    if sec.height == 0:
        return out
    per = sec.group_by("q").agg(((NS_PER_S - c("busy")) / c("n")).quantile(0.25).alias("g"))
    q = per["q"].to_numpy()
    out[q] = np.clip(np.nan_to_num(per["g"].to_numpy()), 0, MAX_HOST_GAP_NS).astype(np.int64)
    return out
