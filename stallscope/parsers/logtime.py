"""Log timestamps that print no year and no zone (vLLM `MM-DD HH:MM:SS`): choosing the year, the zone, and epoch ns.

Shared by the line-oriented log parsers. The whole API:

- `check_zone(tz) -> str`: the IANA zone name, validated (`InputError` with one clear line otherwise).
- `choose_year(con, source_id, first, *, option_year, in_file, mtime_ns, tz) -> (year, note)`: the year of the
  source's first timestamp, from (in this order) the `--year` option, a full date printed inside the same log
  (a Ray line), the time range of other sources already in the store (a benchmark JSON's `date`, a trace's
  clock), or the file's modification time. `note` says which, for `sources.clock_note`.
- `WallClock(year, tz)`: turns month/day/hour/minute/second(/ms) columns into int64 ns since the epoch, UTC,
  vectorised. It unwraps the year across calls (a `12-31` → `01-01` step starts the next year; a stray line
  written a moment before midnight after it still belongs to the old year), so feed it blocks in file order.
- `full_date_ns(year, month, day, hour, minute, second, ms, tz)`: the same for timestamps that carry a year.
"""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import polars as pl

from stallscope.errors import InputError

NS_PER_S = 1_000_000_000
_HALF_YEAR_S = 183 * 86400
# Seconds from 1 January of a (non-leap) year to the start of each month: the "position in the year" used to
# detect roll-overs. A leap day shifts it by one day, far below the half-year threshold.
_MONTH_START_S = [d * 86400 for d in (0, 0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334)]


def check_zone(tz: str | None) -> str:
    """A valid IANA zone name (default UTC); raises InputError for an unknown one."""
    tz = tz or "UTC"
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, IsADirectoryError):
        raise InputError(f"unknown time zone {tz!r} (use an IANA name such as UTC or Europe/Berlin)") from None
    return tz


@dataclass(frozen=True)
class Local:
    """A local wall-clock instant without a year, as printed by a log."""

    month: int
    day: int
    hour: int = 0
    minute: int = 0
    second: int = 0

    def in_year(self, year: int, tz: str) -> int | None:
        """Epoch ns of this instant in `year` and zone `tz`; None if the date does not exist (29 Feb)."""
        try:
            d = _dt.datetime(year, self.month, self.day, self.hour, self.minute, self.second, tzinfo=ZoneInfo(tz))
        except ValueError:
            return None
        return int(d.timestamp()) * NS_PER_S


def _fmt(ns: int, tz: str) -> str:
    return _dt.datetime.fromtimestamp(ns / NS_PER_S, ZoneInfo(tz)).strftime("%Y-%m-%d %H:%M:%S")


def choose_year(con, source_id: int | None, first: Local, *, option_year: int | None = None,
                in_file: tuple[int, str] | None = None, mtime_ns: int | None = None,
                tz: str = "UTC") -> tuple[int, str]:
    """(year of `first`, one-line note saying where the year came from). See the module docstring for the order.

    `in_file` is (year, where) for a full date found inside the same log, e.g. (2025, "Ray line 2").
    """
    if option_year is not None:
        return option_year, f"year {option_year} from --year"
    if in_file is not None:
        return in_file[0], f"year {in_file[0]} from a full date in this log ({in_file[1]})"
    if con is not None:
        got = _year_from_store(con, source_id, first, tz)
        if got is not None:
            return got
    if mtime_ns is not None:
        mt = _dt.datetime.fromtimestamp(mtime_ns / NS_PER_S, ZoneInfo(tz))
        # The log was written before the file was last modified: take the latest year that keeps its first
        # record at or before the mtime (with a day of slack for clock skew).
        for year in (mt.year, mt.year - 1, mt.year - 2, mt.year - 3, mt.year - 4):
            ns = first.in_year(year, tz)
            if ns is not None and ns <= mtime_ns + 86400 * NS_PER_S:
                return year, (f"year {year} from the file's modification time ({mt:%Y-%m-%d}); "
                              "no --year and no dated source to anchor it")
    year = _dt.datetime.now(ZoneInfo(tz)).year
    return year, f"year {year} assumed (current year): no --year, no dated source, no file time"


def _year_from_store(con, source_id, first: Local, tz: str) -> tuple[int, str] | None:
    rows = con.execute(
        "SELECT source_id, path, first_ns, last_ns FROM sources WHERE first_ns IS NOT NULL AND last_ns IS NOT NULL "
        "AND source_id <> ? AND coalesce(clock_method, '') <> 'log_wallclock' ORDER BY source_id",
        [-1 if source_id is None else source_id]).fetchall()
    best = None
    for sid, path, lo, hi in rows:
        years = {_dt.datetime.fromtimestamp(t / NS_PER_S, _dt.timezone.utc).year for t in (lo, hi)}
        for y in sorted(years | {min(years) - 1, max(years) + 1}):
            ns = first.in_year(y, tz)
            if ns is None:
                continue
            dist = 0 if lo <= ns <= hi else min(abs(ns - lo), abs(ns - hi))
            if best is None or dist < best[0]:
                best = (dist, y, sid, path, lo)
    if best is None or best[0] > _HALF_YEAR_S * NS_PER_S:
        return None
    dist, y, sid, path, lo = best
    name = str(path).rsplit("/", 1)[-1]
    return y, (f"year {y} from source {sid} ({name}, first record {_fmt(lo, 'UTC')} UTC), "
               f"{dist / NS_PER_S / 3600:.1f} h from this log's first record")


def _days_from_civil(y: pl.Expr, m: pl.Expr, d: pl.Expr) -> pl.Expr:
    """Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm), as integer expressions."""
    y = y - (m <= 2).cast(pl.Int64)
    era = y.floordiv(400)
    yoe = y - era * 400
    mp = pl.when(m > 2).then(m - 3).otherwise(m + 9)
    doy = (153 * mp + 2).floordiv(5) + d - 1
    doe = yoe * 365 + yoe.floordiv(4) - yoe.floordiv(100) + doy
    return era * 146097 + doe - 719468


def _valid_date(y: pl.Expr, m: pl.Expr, d: pl.Expr) -> pl.Expr:
    leap = ((y % 4 == 0) & (y % 100 != 0)) | (y % 400 == 0)
    dim = (pl.when(m == 2).then(28 + leap.cast(pl.Int64))
           .when(m.is_in([4, 6, 9, 11])).then(30).otherwise(31))
    return (m >= 1) & (m <= 12) & (d >= 1) & (d <= dim)


def _naive_ns(y, mo, d, h, mi, s, ms) -> pl.Expr:
    days = _days_from_civil(y, mo, d)
    secs = days * 86400 + h * 3600 + mi * 60 + s
    ns = secs * NS_PER_S + ms.fill_null(0) * 1_000_000
    ok = _valid_date(y, mo, d) & (h <= 23) & (mi <= 59) & (s <= 60)
    return pl.when(ok).then(ns).otherwise(None)


def _localize(naive: pl.Expr, tz: str) -> pl.Expr:
    """Naive local ns → UTC ns; a time that does not exist (spring-forward gap) becomes NULL."""
    if tz == "UTC":
        return naive
    return (naive.cast(pl.Datetime("ns")).dt.replace_time_zone(tz, ambiguous="earliest", non_existent="null")
            .dt.epoch("ns"))


def full_date_ns(df: pl.DataFrame, year: str, month: str, day: str, hour: str, minute: str, second: str,
                 ms: str | None, tz: str) -> pl.Series:
    """Epoch ns (UTC) of timestamps that print their own year; columns are integer (or null) columns of `df`."""
    c = pl.col
    msx = c(ms) if ms else pl.lit(None, pl.Int64)
    e = _naive_ns(c(year).cast(pl.Int64), c(month).cast(pl.Int64), c(day).cast(pl.Int64), c(hour).cast(pl.Int64),
                  c(minute).cast(pl.Int64), c(second).cast(pl.Int64), msx.cast(pl.Int64))
    return df.select(_localize(e, tz).alias("ns")).to_series()


class WallClock:
    """MM-DD HH:MM:SS(.mmm) columns → int64 ns since the epoch (UTC), block after block, with year roll-over.

    The position in the year (seconds since 1 January, leap days ignored) is unwrapped like a phase: a step back
    of more than half a year is a new year, a step forward of more than half a year is a line from the
    previous year written late (interleaved processes around midnight of 31 December).
    """

    def __init__(self, year: int, tz: str = "UTC"):
        self.year = year
        self.tz = check_zone(tz)
        self._last_pos: int | None = None  # position in the year of the last timed row seen
        self._last_k = 0  # years added to `year` at that row

    def epoch_ns(self, df: pl.DataFrame, month: str, day: str, hour: str, minute: str, second: str,
                 ms: str | None = None) -> pl.Series:
        """Epoch ns for every row of `df` (NULL where the month is NULL); rows must be in file order."""
        c = pl.col
        i64 = pl.Int64
        mo, d = c(month).cast(i64), c(day).cast(i64)
        pos = (mo.replace_strict(list(range(1, 13)), _MONTH_START_S[1:], default=0, return_dtype=i64)
               + (d - 1) * 86400 + c(hour).cast(i64) * 3600 + c(minute).cast(i64) * 60 + c(second).cast(i64))
        p = df.select(pos.alias("p")).to_series()
        if p.null_count() == p.len():
            return pl.repeat(None, df.height, dtype=i64, eager=True).alias("ns")
        # Unwrap on the forward-filled position; untimed rows get a step of 0 and keep the running year.
        pf = p.forward_fill()
        prev = pf.shift(1)
        if self._last_pos is not None:
            prev = prev.fill_null(self._last_pos)
        step = (p - prev).fill_null(0)
        corr = (step < -_HALF_YEAR_S).cast(i64) - (step > _HALF_YEAR_S).cast(i64)
        # A late line (a step forward of half a year) belongs to the previous year but does not move the running
        # year, so its correction is undone on the next timed row.
        k = (corr.cum_sum() + self._last_k).alias("_k")
        self._last_pos = int(pf[-1])
        self._last_k = int(k[-1])
        msx = c(ms).cast(i64) if ms else pl.lit(None, i64)
        e = _naive_ns(c("_k") + self.year, mo, d, c(hour).cast(i64), c(minute).cast(i64), c(second).cast(i64), msx)
        return df.with_columns(k).select(_localize(e, self.tz).alias("ns")).to_series()
