"""The report's figures: each public function takes a store (and the analysis) and returns a matplotlib Figure.

Every number drawn comes from a SQL view (queries/report/*.sql and the analysis views) or from the analysis /
recommendation object; these functions only fetch, thin and draw. Figures are built without pyplot (no global
state, the Agg canvas), sized to read at 100 % on a laptop screen (1000 px wide), and each says what it could
not draw instead of drawing nothing.
"""
from __future__ import annotations

import math
from datetime import datetime, timezone

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

# Above this many points a scatter becomes a density view (a picture of 10^5 dots is a grey smear).
MAX_POINTS = 200_000
# Scatter plots of requests and steps draw at most this many (a reservoir sample in SQL).
SAMPLE_POINTS = 20_000
WIDTH_IN, HEIGHT_IN, DPI = 10.0, 4.8, 100

VERDICT_COLORS = {"good": "#2a9d4a", "ttft": "#e07b00", "tpot": "#7b3fbf", "itl": "#d62728", "e2el": "#8c564b",
                  "failed": "#222222", "unjudged": "#9a9a9a"}
VERDICT_LABELS = {"good": "good", "ttft": "missed TTFT", "tpot": "missed mean TPOT", "itl": "missed ITL (worst gap)",
                  "e2el": "missed end-to-end", "failed": "failed", "unjudged": "not judged"}

# What each figure shows and which view produced it: the report prints these under the figures.
ABOUT = {
    "timeline": ("Decode gaps over time: every streamed-chunk gap (view `client_gaps`; a 2-D density from "
                 "`report_gap_density` when there are more than {max_points:,}) and the traced engine step gaps "
                 "(`step_gaps`), with the analysis's spikes marked (`spikes`; above {sample_points:,}, the largest of each time x gap cell, "
                 "`report_spike_marks`); below, "
                 " the prefill tokens per traced step (`report_steps`, tokens from the step annotation "
                 "or as assigned to requests by `prefill_parts`), or the inferred prefill windows of each request "
                 "(`request_prefill_windows`) when no trace covers the run."),
    "throughput": ("Output tokens per second against goodput (good requests completed per second) over time, both "
                   "rolling means (macro `report_throughput`). A generation stall keeps tokens/s nearly flat while "
                   "goodput collapses: the decodes it holds still finish, but late."),
    "itl_cdf": ("Distribution of streamed-chunk gaps (ITL) and of each request's mean TPOT, as empirical CDFs on a "
                "log axis (view `report_gap_cdf`; engine step gaps when no client gaps exist), with the ITL and TPOT "
                "SLO lines."),
    "ttft": ("Time to first token against prompt length, one dot per judged request, coloured by the first SLO it "
             "missed (view `report_requests`; a reservoir sample of {sample_points:,} when there are more)."),
    "step_time": ("Traced step duration against the prefill tokens it computed (view `report_steps`), coloured by "
                  "phase; with a recommendation, the fitted step-time model's prediction for each step's "
                  "composition (macro `report_step_model`: its coefficients applied to decode sequences, KV tokens "
                  "read, prefill tokens and attention work) and its p99 band."),
    "metrics_timeline": ("From Prometheus metrics alone (all replicas merged, view macro `metric_timeline`): the ITL "
                         "p99 estimate per window (interpolated inside its histogram bucket; the shaded band is that "
                         "bucket) against the prompt tokens per second; below, the finished requests per second and "
                         "the goodput band (the Fréchet bounds of the TTFT and TPOT histograms, `metrics."
                         "goodput_rps_bounds`, over the whole range as dashed lines)."),
    "chunk_goodput": ("Goodput by chunked-prefill budget from the recommendation's what-if replay of this "
                      "incident's workload (`recommendation.goodput_by_chunk`), with its uncertainty band, the "
                      "budget the incident ran with and the recommended one."),
}


def _con(store):
    return getattr(store, "con", store)


def _ensure_views(con, analysis: dict | None = None) -> None:
    """Add the report's views to a connection the analysis ran on (`stallscope.analyze.analyze`); the figures draw
    what it computed and never run it themselves."""
    from .. import sqlviews
    from ..errors import StallscopeError

    have = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'analysis_params'").fetchall()[0][0]
    if not have:
        raise StallscopeError("the figures draw an analysed store: run stallscope.analyze.analyze(store.con, ...) "
                              "on this connection first")
    if not sqlviews.has_report_views(con):
        sqlviews.install_report(con)


def new_figure(rows: int = 1, height_ratios=None, height: float = HEIGHT_IN) -> tuple[Figure, list]:
    fig = Figure(figsize=(WIDTH_IN, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, 1, sharex=rows > 1, squeeze=False,
                        gridspec_kw={"height_ratios": height_ratios} if height_ratios else None)[:, 0]
    return fig, list(axes)


def centred_note(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=11, color="#555555",
            wrap=True)


def _unavailable(title: str, reason: str, xlabel: str, ylabel: str) -> Figure:
    fig, (ax,) = new_figure()
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_xticks([])
    ax.set_yticks([])
    centred_note(ax, reason)
    fig.stallscope_missing = reason
    return fig


def _origin(con, analysis: dict | None) -> int | None:
    w = (analysis or {}).get("window") or {}
    if w.get("start_ns") is not None:
        return int(w["start_ns"])
    row = con.execute("SELECT origin_ns FROM report_origin").fetchall()[0][0]
    return None if row is None else int(row)


def _time_label(t0: int) -> str:
    when = datetime.fromtimestamp(t0 / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    return f"time since {when} UTC (s)"


def _arrays(con, sql: str, params: dict | None = None) -> dict[str, np.ndarray]:
    """Run SQL and hand back each column as a numpy array through Arrow: numbers as float (NULL as NaN),
    booleans as bool (NULL as False), text as object."""
    import pyarrow as pa

    tbl = con.sql(sql, params=params).to_arrow_table()
    out = {}
    for name in tbl.column_names:
        col = tbl.column(name)
        t = col.type
        if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
            out[name] = np.asarray(col.cast(pa.large_string()).fill_null("").to_numpy(zero_copy_only=False),
                                   dtype=object)
        elif pa.types.is_boolean(t):
            out[name] = np.asarray(col.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)
        elif pa.types.is_integer(t) and col.null_count == 0:
            out[name] = np.asarray(col.cast(pa.int64()).to_numpy(zero_copy_only=False))  # ns instants stay exact
        else:
            out[name] = np.asarray(col.cast(pa.float64(), safe=False).fill_null(float("nan"))
                                   .to_numpy(zero_copy_only=False))
    return out


def _slo(analysis: dict | None, key: str) -> float | None:
    v = ((analysis or {}).get("slo") or {}).get(key)
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) and v > 0 else None


# -- timeline ---------------------------------------------------------------------------------------------------
def timeline(store, analysis: dict | None = None) -> Figure:
    """Decode gaps over time with the spikes marked and prefill work overlaid (the stall at a glance)."""
    con = _con(store)
    _ensure_views(con, analysis)
    t0 = _origin(con, analysis)
    title = "Decode gaps over time, spikes marked, prefill work below"
    if t0 is None:
        return _unavailable(title, "no decode gaps: the store has no streamed requests and no traced steps",
                            "time (s)", "gap (ms)")
    n_client = con.execute("SELECT count(*) FROM client_gaps").fetchall()[0][0]
    steps = _arrays(con, """SELECT start_ns, end_ns, step_ms, coalesce(prefill_tokens, assigned_tokens) AS tokens,
                                   prefill_gpu_ms FROM report_steps ORDER BY end_ns""")
    step_gaps = _arrays(con, "SELECT end_ns, gap_ns / 1e6 AS gap_ms FROM step_gaps WHERE gap_ns > 0 ORDER BY end_ns")
    fig, (ax, axp) = new_figure(2, height_ratios=[3, 1.3], height=6.0)
    ax.set_title(title)
    drawn = False
    if n_client and n_client <= MAX_POINTS:
        g = _arrays(con, "SELECT end_ns, gap_ns / 1e6 AS gap_ms FROM client_gaps WHERE gap_ns > 0")
        ax.scatter((g["end_ns"] - t0) / 1e9, g["gap_ms"], s=2, c="#4a6fa5", alpha=0.25, linewidths=0,
                   label=f"streamed-chunk gaps ({n_client:,})", rasterized=True, gid="gaps")
        drawn = True
    elif n_client:
        d = _arrays(con, "SELECT * FROM report_gap_density(nx := 400, ny := 80)")
        _density(ax, d, t0)
        ax.plot([], [], "s", color="#4a6fa5", label=f"streamed-chunk gaps, density ({n_client:,})")
        drawn = True
    if step_gaps["end_ns"].size:
        ax.plot((step_gaps["end_ns"] - t0) / 1e9, step_gaps["gap_ms"], lw=0.7, color="#555555", alpha=0.8,
                label=f"engine step gaps ({step_gaps['end_ns'].size:,})", gid="step_gaps")
        drawn = True
    if not drawn:
        return _unavailable(title, "no decode gaps in the store", "time (s)", "gap (ms)")
    n_spikes = con.execute("SELECT count(*) FROM spikes").fetchall()[0][0]
    if n_spikes <= SAMPLE_POINTS:
        sp = _arrays(con, "SELECT end_ns, gap_ns / 1e6 AS gap_ms FROM spikes ORDER BY end_ns, spike_id")
        spike_label = f"spikes ({n_spikes:,})"
    else:   # an hour's ~4x10^5 markers cost seconds to draw and overlap into a band: one per occupied cell
        sp = _arrays(con, "SELECT end_ns, gap_ms FROM report_spike_marks()")
        spike_label = f"spikes ({n_spikes:,}; the largest of each time x gap cell)"
    ax.scatter((sp["end_ns"] - t0) / 1e9, sp["gap_ms"], marker="x", s=28, c="#d62728", linewidths=1.2,
               label=spike_label, zorder=5, gid="spikes")
    itl = _slo(analysis, "itl_ms")
    if itl:
        ax.axhline(itl, ls="--", lw=1, color="#d62728", alpha=0.7, label=f"ITL SLO {itl:g} ms")
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylabel("gap (ms, log scale)")
    # "best" scores every drawn point at each candidate place: minutes for an hour's 10^5 spikes; a fixed corner
    # beyond a sample's worth of points.
    drawn_points = sp["end_ns"].size + step_gaps["end_ns"].size + (n_client if n_client <= MAX_POINTS else 0)
    ax.legend(loc="best" if drawn_points <= SAMPLE_POINTS else "upper left", fontsize=8, framealpha=0.85)
    _prefill_panel(con, axp, steps, t0)
    axp.set_xlabel(_time_label(t0))
    return fig


def _density(ax, d: dict, t0: int) -> None:
    if not d["x0_ns"].size:
        return
    xs = np.unique(np.concatenate([d["x0_ns"], d["x1_ns"]]))
    ys = np.unique(np.concatenate([d["y0_ms"], d["y1_ms"]]))
    grid = np.zeros((ys.size - 1, xs.size - 1))
    xi = np.searchsorted(xs, d["x0_ns"])
    yi = np.clip(np.searchsorted(ys, d["y0_ms"], side="right") - 1, 0, ys.size - 2)
    np.add.at(grid, (yi, np.clip(xi, 0, xs.size - 2)), d["gaps"])
    grid[grid == 0] = np.nan
    mesh = ax.pcolormesh((xs - t0) / 1e9, ys, grid, cmap="Blues", norm=LogNorm(), shading="flat", rasterized=True,
                         gid="gap_density")
    ax.figure.colorbar(mesh, ax=ax, pad=0.01, label="gaps per bin")


def _prefill_panel(con, axp, steps: dict, t0: int) -> None:
    tokens = steps["tokens"] if steps["end_ns"].size else np.zeros(0)
    known = np.isfinite(tokens) & (tokens > 0)
    if known.any():
        x = (steps["end_ns"][known] - t0) / 1e9
        axp.vlines(x, 0, tokens[known], color="#e76f51", lw=1.2, gid="prefill_tokens")
        axp.set_ylabel("prefill tokens\nper step")
        return
    pgpu = steps["prefill_gpu_ms"] if steps["end_ns"].size else np.zeros(0)
    ok = np.isfinite(pgpu) & (pgpu > 0)
    if ok.any():
        axp.vlines((steps["end_ns"][ok] - t0) / 1e9, 0, pgpu[ok], color="#e76f51", lw=1.2, gid="prefill_gpu")
        axp.set_ylabel("prefill GPU ms\nper step")
        return
    w = _arrays(con, """SELECT window_start_ns, window_end_ns, prompt_tokens FROM request_prefill_windows
                        WHERE window_end_ns > window_start_ns""")
    if w["window_start_ns"].size:
        axp.hlines(w["prompt_tokens"], (w["window_start_ns"] - t0) / 1e9, (w["window_end_ns"] - t0) / 1e9,
                   color="#e76f51", lw=2, gid="prefill_windows")
        axp.set_ylabel("prompt tokens\n(inferred prefill)")
        return
    axp.set_ylabel("prefill")
    centred_note(axp, "no prefill evidence: the traced steps carry no prefill tokens or prefill/decode kernel split, "
               "and no request timings cover the window" if steps["end_ns"].size else
          "no prefill evidence: no traced steps and no request timings")


# -- tokens/s against goodput -----------------------------------------------------------------------------------
def throughput(store, analysis: dict | None = None) -> Figure:
    """Tokens/s over time against goodput over time (rolling window): flat tokens/s while goodput drops."""
    con = _con(store)
    _ensure_views(con, analysis)
    title = "Tokens/s against goodput over time"
    span = con.execute("SELECT start_ns, end_ns FROM report_token_span").fetchall()[0]
    if span[0] is None:
        return _unavailable(title, "no token timings: no requests and no traced steps", "time (s)", "tokens/s")
    dur_s = max((span[1] - span[0]) / 1e9, 1e-3)
    bin_s = max(dur_s / 300.0, 0.05 if dur_s < 30 else 0.5)
    window_bins = max(1, int(round(max(dur_s / 12.0, 5 * bin_s) / bin_s)))
    d = _arrays(con, f"SELECT * FROM report_throughput(bin_s := {bin_s!r}, window_bins := {window_bins})")
    if not (np.nan_to_num(d["tokens_per_s"]) > 0).any() and not np.isfinite(d["goodput_rps"]).any():
        return _unavailable(title, "no token counts: no requests, and the traced steps carry no batch composition",
                            "time (s)", "tokens/s")
    t0 = _origin(con, analysis) or int(span[0])
    x = (d["bin_start_ns"] + bin_s * 1e9 - t0) / 1e9
    fig, (ax,) = new_figure()
    ax.set_title(f"{title} (rolling {window_bins * bin_s:.3g} s)")
    ax.plot(x, d["tokens_per_s"], color="#4a6fa5", lw=1.6, label="output tokens/s", gid="tokens_per_s")
    ax.set_ylabel("output tokens/s", color="#4a6fa5")
    ax.set_xlabel(_time_label(t0))
    ax.set_ylim(bottom=0)
    ax2 = ax.twinx()
    if np.isfinite(d["goodput_rps"]).any():
        ax2.plot(x, d["goodput_rps"], color="#2a9d4a", lw=1.8, label="goodput (good req/s)", gid="goodput_rps")
        ax2.plot(x, d["completed_rps"], color="#2a9d4a", lw=1, ls=":", alpha=0.8, label="completed req/s")
        ax2.set_ylim(bottom=0)
    else:
        centred_note(ax2, "goodput not available: no judged requests (a trace alone has no request timings)")
    ax2.set_ylabel("requests/s", color="#2a9d4a")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="lower left", fontsize=8, framealpha=0.85)
    return fig


# -- ITL distribution -------------------------------------------------------------------------------------------
def itl_cdf(store, analysis: dict | None = None) -> Figure:
    """Empirical CDF of streamed-chunk gaps and per-request mean TPOT (log x), with the ITL and TPOT SLOs."""
    con = _con(store)
    _ensure_views(con, analysis)
    title = "Inter-token latency distribution"
    d = _arrays(con, "SELECT * FROM report_gap_cdf WHERE value_ms > 0")
    if not d["series"].size:
        return _unavailable(title, "no gaps: no streamed requests and no traced steps", "gap (ms)", "fraction")
    fig, (ax,) = new_figure()
    ax.set_title(title)
    names = {"itl": ("streamed-chunk gap (ITL)", "#4a6fa5"), "tpot": ("request mean TPOT", "#7b3fbf"),
             "step_gap": ("engine step gap", "#555555")}
    for key, (label, color) in names.items():
        m = d["series"] == key
        if m.any():
            ax.step(d["value_ms"][m], d["fraction"][m], where="post", color=color, lw=1.6,
                    label=f"{label} (n={int(d['n'][m][0]):,})", gid=f"cdf_{key}")
    for key, label, color in (("itl_ms", "ITL SLO", "#d62728"), ("tpot_ms", "TPOT SLO", "#e07b00")):
        v = _slo(analysis, key)
        if v:
            ax.axvline(v, ls="--", lw=1.2, color=color, label=f"{label} {v:g} ms")
    ax.set_xscale("log")
    ax.set_ylim(0, 1.01)
    ax.set_xlabel("gap or mean TPOT (ms, log scale)")
    ax.set_ylabel("fraction at or below")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(loc="lower right", fontsize=8, framealpha=0.85)
    return fig


# -- TTFT against prompt length ---------------------------------------------------------------------------------
def ttft(store, analysis: dict | None = None) -> Figure:
    """TTFT against prompt length, coloured by each request's SLO verdict."""
    con = _con(store)
    _ensure_views(con, analysis)
    title = "Time to first token against prompt length"
    n = con.execute("SELECT count(*) FROM report_requests WHERE ttft_ms IS NOT NULL AND prompt_tokens IS NOT NULL"
                    ).fetchall()[0][0]
    if not n:
        return _unavailable(title, "no requests with both a TTFT and a prompt length", "prompt tokens", "TTFT (ms)")
    sample = f"USING SAMPLE reservoir({SAMPLE_POINTS} ROWS) REPEATABLE (7)" if n > SAMPLE_POINTS else ""
    d = _arrays(con, f"""SELECT prompt_tokens, ttft_ms, verdict FROM (
        SELECT * FROM report_requests WHERE ttft_ms IS NOT NULL AND prompt_tokens IS NOT NULL
          AND isfinite(ttft_ms)) {sample}""")
    fig, (ax,) = new_figure()
    ax.set_title(title + (f" ({SAMPLE_POINTS:,} of {n:,} sampled)" if sample else ""))
    for v, color in VERDICT_COLORS.items():
        m = d["verdict"] == v
        if m.any():
            ax.scatter(d["prompt_tokens"][m], d["ttft_ms"][m], s=14, c=color, alpha=0.75, linewidths=0,
                       label=f"{VERDICT_LABELS[v]} ({int(m.sum()):,})", gid=f"ttft_{v}")
    slo = _slo(analysis, "ttft_ms")
    if slo:
        ax.axhline(slo, ls="--", lw=1.2, color="#e07b00", label=f"TTFT SLO {slo:g} ms")
    pt = d["prompt_tokens"][np.isfinite(d["prompt_tokens"]) & (d["prompt_tokens"] > 0)]
    if pt.size and pt.max() / max(pt.min(), 1) > 50:
        ax.set_xscale("log")
    pos = d["ttft_ms"][d["ttft_ms"] > 0]
    if pos.size and pos.max() / max(pos.min(), 1e-3) > 100:
        ax.set_yscale("log")
    ax.set_xlabel("prompt length (tokens)")
    ax.set_ylabel("TTFT (ms)")
    ax.grid(True, alpha=0.25)
    ax.legend(loc="upper left", fontsize=8, framealpha=0.85)
    return fig


# -- step time against prefill tokens ---------------------------------------------------------------------------
def step_time(store, analysis: dict | None = None) -> Figure:
    """Traced step time against prefill tokens, with the recommendation's fitted model and p99 band when present."""
    con = _con(store)
    _ensure_views(con, analysis)
    title = "Step time against prefill tokens"
    n = con.execute("SELECT count(*) FROM report_steps").fetchall()[0][0]
    if not n:
        return _unavailable(title, "no traced steps: load a PyTorch-profiler trace to see step times",
                            "prefill tokens per step", "step time (ms)")
    rec = (analysis or {}).get("recommendation")
    model = rec.get("model") if isinstance(rec, dict) else None
    coefs = (model or {}).get("coefficients") if isinstance(model, dict) else None
    has_model = isinstance(coefs, dict) and bool(coefs)
    sample = f"USING SAMPLE reservoir({SAMPLE_POINTS} ROWS) REPEATABLE (7)" if n > SAMPLE_POINTS else ""
    args = ", ".join(f"{k} := ${k}" for k in _MODEL_ARGS)
    d = _arrays(con, f"SELECT * FROM (SELECT * FROM report_step_model({args})) {sample}",
                _model_args(model) if has_model else dict.fromkeys(_MODEL_ARGS))
    fig, (ax,) = new_figure()
    ax.set_title(title + (f" ({SAMPLE_POINTS:,} of {n:,} steps sampled)" if sample else ""))
    colors = {"decode": "#4a6fa5", "prefill": "#e76f51", "mixed": "#7b3fbf", "empty": "#9a9a9a", "unknown": "#555555"}
    for ph, color in colors.items():
        m = d["phase"] == ph
        if m.any():
            ax.scatter(d["tokens"][m], d["step_ms"][m], s=10, c=color, alpha=0.6, linewidths=0,
                       label=f"{ph} steps ({int(m.sum()):,})", gid=f"steps_{ph}")
    if has_model:
        pred, hi = d["predicted_ms"], d["p99_ms"]
        order = np.argsort(d["tokens"], kind="stable")
        ax.scatter(d["tokens"][order], pred[order], s=8, marker="_", c="#111111", alpha=0.8, linewidths=1,
                   label="fitted model (prediction per step)", gid="model_prediction")
        if np.isfinite(hi).any():
            ax.vlines(d["tokens"][order], pred[order], hi[order], color="#111111", alpha=0.12, lw=2,
                      label="model p99 (split-conformal upper bound)", gid="model_band")
        bits = [f"{k}={model[k]:.3g}" for k in ("mape", "p99_coverage") if isinstance(model.get(k), (int, float))]
        if model.get("steps_used") is not None:
            bits.append(f"steps_used={model['steps_used']}")
        if bits:
            ax.text(0.99, 0.02, "model: " + ", ".join(bits), transform=ax.transAxes, ha="right", va="bottom",
                    fontsize=8, color="#333333")
    if not (d["tokens"] > 0).any():
        centred_note(ax, "the traced steps carry no prefill token counts (no batch-composition annotation, no requests "
                  "to assign chunks to)")
    if not has_model:
        ax.text(0.99, 0.02, "fitted step-time model: not computed (no recommendation)", transform=ax.transAxes,
                ha="right", va="bottom", fontsize=9, color="#555555")
    ax.set_xlabel("prefill tokens in the step")
    ax.set_ylabel("step time (ms)")
    ax.grid(True, alpha=0.25)
    ax.legend(loc="upper left", fontsize=8, framealpha=0.85)
    return fig


# The parameters of the `report_step_model` macro, read from the recommendation's `model` object.
_MODEL_ARGS = ("fixed_ms", "per_decode_seq_ms", "per_kv_token_ms", "per_prefill_token_ms", "per_attention_unit_ms",
               "tile_tokens", "q_decode", "q_prefill")


def _model_args(model: dict) -> dict:
    """The model as the macro's arguments: a missing coefficient is 0 and a missing tile the fit's default (256),
    as the recommendation states them (docs/analysis-json.md); a band quantile that is no number is NULL."""
    c = model.get("coefficients") or {}
    band = model.get("p99_band") or {}

    def num(v):
        return float(v) if isinstance(v, (int, float)) else None

    args = {k: float(c.get(k) or 0.0) for k in _MODEL_ARGS[:5]}
    return {**args, "tile_tokens": int(model.get("tile_tokens") or 256), "q_decode": num(band.get("decode")),
            "q_prefill": num(band.get("prefill"))}


# -- goodput against chunk budget -------------------------------------------------------------------------------
def chunk_goodput(store=None, analysis: dict | None = None) -> Figure:
    """Goodput against the chunked-prefill budget from the recommendation's what-if replay."""
    title = "Goodput against chunked-prefill budget (what-if replay)"
    rec = (analysis or {}).get("recommendation")
    rows = rec.get("goodput_by_chunk") if isinstance(rec, dict) else None
    if not rows:
        return _unavailable(title, "recommendation not computed", "chunk budget (tokens)", "goodput (req/s)")

    def col(key):
        return np.array([float(r[key]) if isinstance(r.get(key), (int, float)) else np.nan for r in rows])

    x, y, lo, hi = col("chunk_tokens"), col("goodput_rps"), col("lo"), col("hi")
    fig, (ax,) = new_figure()
    ax.set_title(title)
    finite = np.isfinite(x)
    order = np.argsort(x[finite])
    xs, ys = x[finite][order], y[finite][order]
    ax.plot(xs, ys, "o-", color="#2a9d4a", lw=1.8, ms=4, label="replayed goodput", gid="chunk_goodput")
    band = np.isfinite(lo[finite][order]) & np.isfinite(hi[finite][order])
    if band.any():
        ax.fill_between(xs[band], lo[finite][order][band], hi[finite][order][band], color="#2a9d4a", alpha=0.18,
                        label="uncertainty band")
    if (~finite).any() and np.isfinite(y[~finite]).any():
        ax.axhline(float(y[~finite][0]), color="#555555", ls=":", lw=1.2, label="unchunked")
    for key, label, color in (("current_chunk_tokens", "current", "#555555"), ("chunk_tokens", "recommended",
                                                                                 "#d62728")):
        v = rec.get(key)
        if isinstance(v, (int, float)) and v > 0:
            ax.axvline(v, ls="--", lw=1.4, color=color, label=f"{label}: {int(v):,} tokens")
    if xs.size and xs.min() > 0:
        ax.set_xscale("log", base=2)
    ax.set_xlabel("chunked-prefill budget (tokens, log scale)")
    ax.set_ylabel("goodput (good req/s)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.25)
    ax.legend(loc="best", fontsize=8, framealpha=0.85)
    return fig


# The figures of a report, in page order: (file stem, function, title).
def metrics_timeline(store, analysis: dict | None = None) -> Figure:
    """ITL p99 (with its bucket) against the prompt-token rate per window, and requests/s with the goodput band."""
    con = _con(store)
    title = "Prometheus metrics: ITL tail against prefill load"
    m = (analysis or {}).get("metrics")
    if not m:
        return _unavailable(title, "no serving metrics in the store", "time (s)", "ms")
    width = int((m.get("window_width_s") or 0) * 1e9)
    d = _arrays(con, f"""SELECT start_ns, end_ns, itl_p99_ms, itl_p99_lo_ms, itl_p99_hi_ms, prompt_tokens_per_s,
                                requests_finished / duration_s AS finished_rps, good_lo / duration_s AS good_lo_rps,
                                good_hi / duration_s AS good_hi_rps
                         FROM metric_timeline({width})""")
    if not len(d["end_ns"]):
        return _unavailable(title, "no windows: every series has a single sample", "time (s)", "ms")
    t0 = int(m["window_start_ns"])
    x = (d["end_ns"] - t0) / 1e9
    fig, (ax, axg) = new_figure(2, height_ratios=[3, 2], height=HEIGHT_IN * 1.2)
    ax.set_title(title)
    hi = np.where(np.isfinite(d["itl_p99_hi_ms"]), d["itl_p99_hi_ms"], d["itl_p99_lo_ms"])
    ax.fill_between(x, d["itl_p99_lo_ms"], hi, step="pre", color="#d62728", alpha=0.15, label="bucket of the p99")
    ax.step(x, d["itl_p99_ms"], where="pre", color="#d62728", lw=1.6, label="ITL p99 (estimate)", gid="itl_p99")
    ax.set_ylabel("ITL p99 (ms)", color="#d62728")
    ax.set_ylim(bottom=0)
    ax2 = ax.twinx()
    ax2.step(x, d["prompt_tokens_per_s"], where="pre", color="#4a6fa5", lw=1.2, label="prompt tokens/s",
             gid="prompt_tokens_per_s")
    ax2.set_ylabel("prompt tokens/s", color="#4a6fa5")
    ax2.set_ylim(bottom=0)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="upper left", fontsize=8, framealpha=0.85)
    axg.step(x, d["finished_rps"], where="pre", color="#555555", lw=1, label="finished req/s")
    axg.fill_between(x, d["good_lo_rps"], d["good_hi_rps"], step="pre", color="#2a9d4a", alpha=0.35,
                     label="goodput band per window")
    band = m.get("goodput_rps_bounds")
    if band:
        for v in band:
            axg.axhline(v, color="#2a9d4a", ls="--", lw=1)
    axg.set_ylabel("requests/s")
    axg.set_ylim(bottom=0)
    axg.set_xlabel(_time_label(t0))
    axg.legend(loc="upper left", fontsize=8, framealpha=0.85)
    return fig


ALL = (("timeline", timeline, "Decode gaps over time"),
       ("throughput", throughput, "Tokens/s against goodput"),
       ("itl_cdf", itl_cdf, "Inter-token latency distribution"),
       ("ttft", ttft, "TTFT against prompt length"),
       ("step_time", step_time, "Step time against prefill tokens"),
       ("chunk_goodput", chunk_goodput, "Goodput against chunk budget"))


def png_bytes(fig: Figure) -> bytes:
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def about(name: str) -> str:
    return ABOUT[name].format(max_points=MAX_POINTS, sample_points=SAMPLE_POINTS)
