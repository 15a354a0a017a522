"""A benchmark run's clock, what the benchmark parser needs while it loads a run and alignment later replaces: the
coarse run-start anchor from vLLM's `date` and `duration`, and the run's `bench_clock` rows in `engine_config`.
Below the parsers (stallscope.ingest.align, above them, refines these clocks after every file has loaded)."""
from __future__ import annotations

import datetime as _dt
import re
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np

from ..errors import InputError

SECOND = 1_000_000_000
MAX_DURATION_S = 1e9  # seconds: beyond this a run length does not fit the int64 ns clock with room to spare
ZONE_STEP_NS = 900 * SECOND  # UTC offsets are whole quarter hours
# vLLM's `date`: `datetime.now().strftime('%Y%m%d-%H%M%S')` (the benchmark parser's `bench_date` pattern uses it)
BENCH_DATE_REGEX = (r"^(?P<year>\d{4})(?P<month>\d{2})(?P<day>\d{2})-(?P<hour>\d{2})(?P<minute>\d{2})"
                    r"(?P<second>\d{2})$")
_BENCH_DATE_RX = re.compile(BENCH_DATE_REGEX)


def run_start_anchor_ns(date: object, duration_s: float | None, tz: str) -> tuple[int | None, str]:
    """Epoch ns of a run's start from vLLM's `date` (end of run, local time, `%Y%m%d-%H%M%S`) and `duration`."""
    if not isinstance(date, str):
        return None, "no `date` in the run"
    m = _BENCH_DATE_RX.search(date.strip())
    if m is None:
        return None, f"`date` {date[:40]!r} is not YYYYMMDD-HHMMSS"
    try:
        zone = ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise InputError(f"unknown time zone {tz!r} (give an IANA name such as UTC or Europe/Paris)") from None
    try:
        local = _dt.datetime(*(int(m[k]) for k in ("year", "month", "day", "hour", "minute", "second")), tzinfo=zone)
        end_ns = int(local.timestamp()) * SECOND + SECOND // 2  # strftime floors to the second
    except (ValueError, OverflowError, OSError):
        return None, f"`date` {date[:40]!r} is not a valid date"
    # A duration is usable when it is a finite, non-negative number of seconds that fits the ns clock.
    if duration_s is None or not np.isfinite(duration_s) or duration_s < 0 or duration_s > MAX_DURATION_S:
        return None, f"`date` {date} but no usable `duration`"
    start = end_ns - int(round(duration_s * SECOND))
    return start, (f"run start = date {date} (end of run, local time read in zone {tz}) + 0.5 s - duration "
                   f"{duration_s:.3f} s; coarse: ±1 s plus the zone assumption")


def write_unit_clock(con, source_id: int, line_no: int, *, method: str, note: str, offset_ns: int | None,
                     residual_ns: int | None, matched: int | None, server_source_id: int | None) -> None:
    """Replace a run's `engine_config` rows with origin `bench_clock`."""
    con.execute("DELETE FROM engine_config WHERE source_id = ? AND line_no = ? AND origin = 'bench_clock'",
                [source_id, line_no])
    rows = [("clock_method", method, None), ("clock_note", note, None),
            ("clock_offset_ns", None if offset_ns is None else str(int(offset_ns)), offset_ns),
            ("clock_residual_ns", None if residual_ns is None else str(int(residual_ns)), residual_ns),
            ("matched_requests", None if matched is None else str(matched), matched),
            ("server_source_id", None if server_source_id is None else str(server_source_id), server_source_id)]
    con.executemany("INSERT INTO engine_config (source_id, line_no, key, value, value_num, origin) "
                    "VALUES (?, ?, ?, ?, ?, 'bench_clock')",
                    [[source_id, line_no, k, v, None if x is None else float(x)] for k, v, x in rows])
