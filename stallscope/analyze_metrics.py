"""The `"metrics"` part of the analysis JSON: what Prometheus metrics alone say, read from queries/metrics/ views.

Goodput and attainment come as bounds (the Fréchet bounds of the marginal TTFT and TPOT histograms, view
`metric_goodput`), the timeline as windows (view macro `metric_timeline`), merged to at most MAX_WINDOWS so a week of
scrapes stays a readable document. Absent (the key is not written) when the store holds no metric samples, so the
analysis of a store without metrics is unchanged; null when it holds samples but none of the serving metrics.
"""
from __future__ import annotations

import math

from . import sqlviews

MAX_WINDOWS = 720
TOP_INTERFERENCE = 5
_WINDOW_KEYS = ("start_ns", "end_ns", "requests_finished", "ttft_p99_ms", "itl_p99_ms", "tpot_p99_ms",
                "prompt_tokens_per_s", "generation_tokens_per_s", "big_step_share", "ttft_ok_share", "itl_ok_share")


def has_metrics(con) -> bool:
    return bool(con.execute("SELECT EXISTS (SELECT 1 FROM metric_samples)").fetchall()[0][0])


def window_width_ns(con) -> int:
    """0 (the scrape windows) when there are at most MAX_WINDOWS of them, else the width that makes MAX_WINDOWS."""
    n, lo, hi = con.execute("SELECT count(DISTINCT end_ns), min(start_ns), max(end_ns) FROM metric_deltas "
                            "WHERE kind <> 'gauge'").fetchall()[0]
    if not n or n <= MAX_WINDOWS:
        return 0
    return int(math.ceil((hi - lo) / MAX_WINDOWS))


def summary(con) -> dict | None:
    """The `"metrics"` object (docs/analysis-json.md), or None when no serving metric is among the samples."""
    # Each view below reads the window deltas and the per-replica windows: computed once (the deltas' window function
    # over every sample is most of the cost), then read from temp tables.
    sqlviews.materialise(con, ["metric_deltas", "metric_windows"])
    con.execute("CREATE OR REPLACE TEMP TABLE _m_metric_goodput AS SELECT * FROM metric_goodput")
    g = con.execute("""
        SELECT min(start_ns), max(end_ns), sum(good_lo), sum(good_hi), sum(finished), count(*),
               bool_and(has_ttft), bool_and(has_tpot)
        FROM _m_metric_goodput""").fetchall()[0]
    if g[0] is None:
        return None
    start, end, lo, hi, n, replicas, has_ttft, has_tpot = g
    dur = (end - start) / 1e9
    width = window_width_ns(con)
    wins = con.execute(f"SELECT {', '.join(_WINDOW_KEYS)} FROM metric_timeline({width})").fetchall()
    params = con.execute("SELECT ttft_ms, tpot_ms, itl_ms FROM analysis_params").fetchall()[0]
    missing = []
    if params[0] is not None and not has_ttft:
        missing.append("no TTFT histogram (TGI exports none): the TTFT SLO is bounded by [0, all requests]")
    if params[1] is not None and not has_tpot:
        missing.append("no per-request TPOT histogram: the TPOT SLO is bounded by [0, all requests]")
    sources = [r[0] for r in con.execute("""
        SELECT DISTINCT s.path FROM sources s JOIN _m_metric_goodput g USING (source_id) ORDER BY 1""").fetchall()]
    top = con.execute(f"""
        SELECT i.replica, i.start_ns, i.end_ns, i.itl_p99_ms, i.itl_rise, i.prompt_tokens_per_s, i.big_step_share
        FROM metric_interference i WHERE rank <= {TOP_INTERFERENCE} ORDER BY rank""").fetchall()
    return {
        "window_start_ns": int(start), "window_end_ns": int(end), "duration_s": dur, "replicas": int(replicas),
        "requests_finished": _num(n),
        "goodput_rps_bounds": [lo / dur, hi / dur] if dur > 0 and lo is not None else None,
        "attainment_bounds": [lo / n, hi / n] if n else None,
        "window_width_s": width / 1e9 if width else None,
        "windows": [dict(zip(_WINDOW_KEYS, (_num(v) for v in w))) for w in wins],
        "interference": [dict(zip(("replica", "start_ns", "end_ns", "itl_p99_ms", "itl_rise", "prompt_tokens_per_s",
                                   "big_step_share"), (_num(v) for v in r))) for r in top],
        "missing": missing,
        "note": "bounds from histograms: TTFT and TPOT are counted per request but not jointly, so the requests "
                "meeting both lie between the Fréchet bounds; p99 values are estimates inside their bucket",
        "source": sources[0] if len(sources) == 1 else sources,
    }


def _num(v):
    """JSON-safe: NaN and infinities as null, integral floats kept as floats (counts are sums of doubles)."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def spans(con) -> dict | None:
    """The `"spans"` object when requests came from OpenTelemetry spans (parsers/otel.py), else None: how many,
    and that the ITL criterion cannot be judged from them (a span has no per-token times)."""
    rows = con.execute("""
        SELECT s.path, count(*) FROM requests r JOIN sources s USING (source_id)
        WHERE s.parser = 'otel' GROUP BY s.path ORDER BY s.path""").fetchall()
    if not rows:
        return None
    itl = con.execute("SELECT itl_ms FROM analysis_params").fetchall()[0][0]
    return {"requests": sum(r[1] for r in rows), "itl_judgeable": False,
            "note": "spans give each request's TTFT and end-to-end time, so TTFT and mean TPOT are judged exactly as "
                    "vLLM does; no per-token times: the ITL criterion cannot be judged"
                    + (" (with the ITL SLO set, span requests count as unjudged, never good)" if itl is not None
                       else ""),
            "source": rows[0][0] if len(rows) == 1 else [r[0] for r in rows]}
