"""Stall forensics end to end: install the SQL analyses, run them once, and assemble the versioned report.

The numbers all come from the views in stallscope/queries/analysis/ (spikes, spike_attribution, spike_culprits,
goodput_runs, ...); this module sets their parameters, materialises the expensive ones once, and shapes the
result as the `stallscope.analysis/1` JSON documented in docs/analysis-json.md.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import analyze_metrics, sqlviews
from .errors import StallscopeError
from .slo import Slo, parse_slo  # noqa: F401 - parse_slo stays importable from here (the notebook API)

SCHEMA = "stallscope.analysis/1"
# Views computed once per analysis and then read by everything downstream.
_MATERIALISE = ("step_phase", "client_gaps", "client_gap_median", "gap_baseline", "spikes", "spike_prefill", "spike_steps",
                "prefill_parts", "request_prefill_windows", "spike_prefill_window_pairs", "spike_attribution", "spike_culprits",
                "request_metrics", "request_counterfactual")
# Materialised views read by one later view alone, freed once that one is materialised (reader -> views): the
# window medians and baselines of a 9.1M-gap hour are ~0.5 GB each that nothing reads after `spikes`. Their views
# stay queryable (computed anew, slowly, when read).
_RELEASE_AFTER = {"gap_baseline": ("client_gap_median",), "spikes": ("gap_baseline",)}
# Stages one analysis reports to `Options.progress`: each materialised view (`prepare`), then "goodput and spikes".
STAGES = len(_MATERIALISE) + 1


@dataclass
class Options:
    slo: Slo = field(default_factory=Slo)
    attainment: float = 0.9
    spike_k: float = 3.0
    baseline_window_s: float = 30.0
    baseline_steps: int = 16
    max_culprits: int = 5
    report_views: bool = True   # also install the report's views (a notebook, a report); a CLI analysis, a fleet
                                # shard and the recommendation read none of them
    since_ns: int | None = None  # analyse only what happened in [since_ns, until_ns) (`restrict`)
    until_ns: int | None = None
    progress: object = None      # called with each stage's name as the analysis reaches it


def restrict(con, since_ns: int | None, until_ns: int | None) -> None:
    """Make every analysis on `con` see only [since_ns, until_ns): temp views shadow the store's tables (DuckDB
    resolves temp objects first) with the requests that arrived in the range and their gaps, the steps and
    kernels that started in it; a benchmark's own duration no longer sets the goodput window (the range's
    first arrival to last completion does)."""
    if since_ns is None and until_ns is None:
        return
    lo = -2**63 if since_ns is None else int(since_ns)
    hi = 2**63 - 1 if until_ns is None else int(until_ns)
    inr = lambda col: f"{col} >= {lo} AND {col} < {hi}"  # noqa: E731
    db = con.execute("SELECT current_database()").fetchall()[0][0].replace('"', '""')
    t = f'"{db}".main'      # the store's own tables (a bare `main` would find the temp views themselves)
    con.execute(f"""CREATE OR REPLACE TEMP VIEW requests AS SELECT * FROM {t}.requests
                    WHERE {inr('coalesce(arrival_ns, first_token_ns, finish_ns)')}""")
    con.execute(f"""CREATE OR REPLACE TEMP VIEW token_gaps AS SELECT g.* FROM {t}.token_gaps g
                    SEMI JOIN requests r ON r.source_id = g.source_id AND r.request_id = g.request_id""")
    con.execute(f"""CREATE OR REPLACE TEMP VIEW steps AS SELECT * FROM {t}.steps
                    WHERE {inr('coalesce(gpu_start_ns, cpu_start_ns)')}""")
    con.execute(f"CREATE OR REPLACE TEMP VIEW gpu_kernels AS SELECT * FROM {t}.gpu_kernels WHERE {inr('start_ns')}")
    con.execute(f"""CREATE OR REPLACE TEMP VIEW engine_config AS SELECT * FROM {t}.engine_config
                    WHERE NOT (origin = 'bench_summary' AND key = 'duration')""")


def prepare(con, opts: Options) -> None:
    """Install every view with these parameters and materialise the expensive ones."""
    restrict(con, opts.since_ns, opts.until_ns)
    sqlviews.install(con, report=opts.report_views, **opts.slo.__dict__, spike_k=opts.spike_k,
                     baseline_window_s=opts.baseline_window_s, baseline_steps=opts.baseline_steps)
    for name in _MATERIALISE:
        if opts.progress:
            opts.progress(name)
        sqlviews.materialise(con, [name])
        for done in _RELEASE_AFTER.get(name, ()):
            sqlviews.release(con, done)


def analyze(con, opts: Options | None = None) -> dict:
    opts = opts or Options()
    prepare(con, opts)
    return summarise(con, opts)


def summarise(con, opts: Options) -> dict:
    """The `stallscope.analysis/1` object of a store `prepare` has made ready with these options. Apart from
    `analyze`, for a caller that runs other work on the prepared views first (the report's recommendation): its
    replays then run before the ~10^5 spike records exist, not beside them."""
    if opts.progress:
        opts.progress("goodput and spikes")
    runs = con.sql("SELECT r.*, s.path FROM goodput_runs r JOIN sources s USING (source_id) "
                   "ORDER BY r.source_id, r.run_line").pl()
    # Client runs judge goodput; server-only runs (a log alone) are used when nothing else exists.
    judged = runs.filter(runs["kind"] == "client") if (runs["kind"] == "client").any() else runs
    window = _window(con, judged)
    total = int(judged["total"].sum()) if judged.height else 0
    good = int(judged["good"].sum()) if judged.height else 0
    good_cf = int(judged["good_cf"].sum()) if judged.height else 0
    dur = float(judged["duration_s"].sum()) if judged.height else None
    spikes = _spikes(con, opts.max_culprits)
    gpus = _gpu_count(con)
    report = {
        "schema": SCHEMA,
        "window": window,
        "slo": {**opts.slo.as_dict(), "attainment": opts.attainment, "spike_k": opts.spike_k},
        "requests": {"total": total, "good": good, "good_counterfactual": good_cf,
                     "lost": good_cf - good, "failed": int((judged["total"] - judged["completed"]).sum())
                     if judged.height else 0},
        "goodput_rps": good / dur if dur else None,
        "goodput_counterfactual_rps": good_cf / dur if dur else None,
        "goodput_lost_rps": (good_cf - good) / dur if dur else None,
        "attainment": good / total if total else None,
        "meets_attainment": (good / total >= opts.attainment) if total else None,
        "gpus": gpus,
        "goodput_per_gpu_rps": (good / dur / gpus) if dur and gpus else None,
        "interference_gpu_s": _interference_gpu_s(con, gpus),
        "counterfactual_note": "goodput_counterfactual_rps removes from every spike the excess its prefill work "
                               "explains and re-judges each request: the upper bound that perfect isolation "
                               "(ideal prefill/decode disaggregation, no KV-transfer cost) would recover",
        "runs": [_run(r) for r in runs.iter_rows(named=True)],
        "spikes": spikes,
    }
    if analyze_metrics.has_metrics(con):  # absent otherwise: the JSON of a store without metrics stays as it was
        report["metrics"] = analyze_metrics.summary(con)
    spans = analyze_metrics.spans(con)
    if spans:  # only with OpenTelemetry span sources, for the same reason
        report["spans"] = spans
    return report


def _window(con, judged) -> dict:
    if judged.height and judged["start_ns"].null_count() < judged.height:
        start, end = int(judged["start_ns"].min()), int(judged["end_ns"].max())
        return {"start_ns": start, "end_ns": end, "duration_s": float(judged["duration_s"].sum())}
    row = con.execute("SELECT min(start_ns), max(end_ns) FROM trace_meta").fetchall()[0]
    if row[0] is None:
        return {"start_ns": None, "end_ns": None, "duration_s": None}
    return {"start_ns": int(row[0]), "end_ns": int(row[1]), "duration_s": (row[1] - row[0]) / 1e9}


def _run(r: dict) -> dict:
    return {"source": r["path"], "source_id": r["source_id"], "run_line": r["run_line"], "kind": r["kind"],
            "start_ns": r["start_ns"], "end_ns": r["end_ns"], "duration_s": r["duration_s"],
            "total": r["total"], "completed": r["completed"], "good": r["good"], "good_counterfactual": r["good_cf"],
            "goodput_rps": r["goodput_rps"], "goodput_counterfactual_rps": r["goodput_cf_rps"],
            "goodput_lost_rps": r["goodput_lost_rps"], "attainment": r["attainment"]}


_SPIKE_KEYS = ("request_id", "token_index", "start_ns", "end_ns", "gap_ms", "rule", "prefill_overlap_ms", "share",
               "stalled_decodes", "culprits", "evidence", "level", "baseline_ms", "baseline_basis", "excess_ms",
               "other_ms", "prefill_tokens", "step_index", "source", "run_line")
_CULPRIT_KEYS = ("request_id", "prompt_tokens", "overlap_ms", "confidence", "ambiguous_with")


def _spikes(con, max_culprits: int) -> list[dict]:
    # Columns come out of DuckDB whole (ns -> ms there: the same IEEE division as Python's) and the dicts are
    # zipped from them: a 9.1M-gap hour has ~480k spikes and ~1.5M culprit rows.
    culprits = con.sql(f"""
        SELECT spike_id, report_id, prompt_tokens, overlap_ns / 1e6, confidence, ambiguous_with FROM spike_culprits
        WHERE rank <= {int(max_culprits)} ORDER BY spike_id, rank""").fetch_arrow_table()
    ids = culprits.column(0).to_numpy()
    by_spike: dict[int, list[dict]] = {}
    if len(ids):
        rows = [dict(zip(_CULPRIT_KEYS, r)) for r in zip(*(c.to_pylist() for c in culprits.columns[1:]))]
        bounds = [0, *(np.flatnonzero(ids[1:] != ids[:-1]) + 1).tolist(), len(ids)]
        by_spike = {int(ids[a]): rows[a:b] for a, b in zip(bounds[:-1], bounds[1:])}
    cols = con.sql("""
        SELECT s.spike_id, s.report_id, s.token_index, s.start_ns, s.end_ns, s.gap_ns / 1e6, s.rule,
               a.prefill_overlap_ns / 1e6, a.share, a.stalled_decodes, a.evidence, s.level, s.baseline_ns / 1e6,
               s.baseline_basis, a.excess_ns / 1e6, a.other_ns / 1e6, a.prefill_tokens, st.step_index,
               src.path, s.run_line
        FROM spikes s JOIN spike_attribution a USING (spike_id) JOIN sources src ON src.source_id = s.source_id
        LEFT JOIN steps st ON st.step_id = coalesce(s.step_id, a.stalling_step_id)
        ORDER BY s.start_ns, s.spike_id""").fetch_arrow_table()
    spike_ids = cols.column(0).to_pylist()
    values = [c.to_pylist() for c in cols.columns[1:]]
    values.insert(9, [by_spike.get(i, []) for i in spike_ids])   # culprits sit after stalled_decodes
    return [dict(zip(_SPIKE_KEYS, r)) for r in zip(*values)]


def _gpu_count(con) -> int | None:
    """GPUs serving one replica, from the engine configuration (TP x PP x DP) or a trace's world size."""
    rows = dict(con.execute("""
        SELECT key, max(value_num) FROM engine_config
        WHERE key IN ('tensor_parallel_size', 'pipeline_parallel_size', 'data_parallel_size') GROUP BY key
    """).fetchall())
    if rows.get("tensor_parallel_size"):
        n = 1
        for k in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
            n *= int(rows.get(k) or 1)
        return n
    ws = con.execute("SELECT max(world_size) FROM trace_meta").fetchall()[0][0]
    return int(ws) if ws else None


def _interference_gpu_s(con, gpus: int | None) -> float | None:
    """GPU-seconds of prefill work that stalled decodes: the distinct stalling steps' prefill time x GPUs."""
    row = con.execute("""
        SELECT sum(p.prefill_gpu_ns) FROM step_phase p
        WHERE p.step_id IN (SELECT stalling_step_id FROM spike_attribution WHERE evidence = 'kernels')
    """).fetchall()[0][0]
    if row is None:
        return None
    return float(row) / 1e9 * (gpus or 1)
