"""Stall forensics end to end: install the SQL analyses, run them once, and assemble the versioned report.

The numbers all come from the views in stallscope/queries/analysis/ (spikes, spike_attribution, spike_culprits,
goodput_runs, ...); this module sets their parameters, materialises the expensive ones once, and shapes the
result as the `stallscope.analysis/1` JSON documented in docs/analysis-json.md.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from . import analyze_metrics, sqlviews
from .errors import StallscopeError

SCHEMA = "stallscope.analysis/1"
SLO_KEYS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "itl": "itl_ms", "e2el": "e2el_ms", "e2e": "e2el_ms"}
# Views computed once per analysis and then read by everything downstream.
_MATERIALISE = ("step_phase", "client_gaps", "gap_baseline", "spikes", "spike_prefill", "spike_steps",
                "prefill_parts", "request_prefill_windows", "spike_attribution", "spike_culprits",
                "request_metrics", "request_counterfactual")


@dataclass
class Slo:
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    itl_ms: float | None = None
    e2el_ms: float | None = None

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None}


def parse_slo(text: str | None) -> Slo:
    """`ttft=500ms,tpot=50ms,itl=200ms` (any subset; units ms or s, bare numbers are ms) into an Slo."""
    slo = Slo()
    if not text:
        return slo
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"(?P<k>[a-z0-9]+)\s*[=:]\s*(?P<v>[0-9]*\.?[0-9]+)\s*(?P<u>ms|s)?", part)
        if not m or m["k"] not in SLO_KEYS:
            raise StallscopeError(f"bad SLO {part!r}: use ttft=500ms,tpot=50ms,itl=200ms,e2el=10s (units ms or s)")
        v = float(m["v"]) * (1000.0 if m["u"] == "s" else 1.0)
        setattr(slo, SLO_KEYS[m["k"]], v)
    return slo


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


def prepare(con, opts: Options) -> None:
    """Install every view with these parameters and materialise the expensive ones."""
    sqlviews.install(con, report=opts.report_views, **opts.slo.__dict__, spike_k=opts.spike_k,
                     baseline_window_s=opts.baseline_window_s, baseline_steps=opts.baseline_steps)
    sqlviews.materialise(con, _MATERIALISE)


def analyze(con, opts: Options | None = None) -> dict:
    opts = opts or Options()
    prepare(con, opts)
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


def _spikes(con, max_culprits: int) -> list[dict]:
    rows = con.sql("""
        SELECT s.*, a.*, src.path AS source_path, st.step_index
        FROM spikes s JOIN spike_attribution a USING (spike_id) JOIN sources src ON src.source_id = s.source_id
        LEFT JOIN steps st ON st.step_id = coalesce(s.step_id, a.stalling_step_id)
        ORDER BY s.start_ns, s.spike_id""").pl()
    culprits = con.sql(f"""
        SELECT spike_id, report_id, prompt_tokens, overlap_ns, confidence, ambiguous_with FROM spike_culprits
        WHERE rank <= {int(max_culprits)} ORDER BY spike_id, rank""").pl()
    by_spike: dict[int, list[dict]] = {}
    for c in culprits.iter_rows(named=True):
        by_spike.setdefault(c["spike_id"], []).append(
            {"request_id": c["report_id"], "prompt_tokens": c["prompt_tokens"], "overlap_ms": c["overlap_ns"] / 1e6,
             "confidence": c["confidence"], "ambiguous_with": c["ambiguous_with"]})
    out = []
    for r in rows.iter_rows(named=True):
        ms = lambda v: None if v is None else v / 1e6  # noqa: E731
        out.append({
            "request_id": r["report_id"], "token_index": r["token_index"],
            "start_ns": r["start_ns"], "end_ns": r["end_ns"], "gap_ms": ms(r["gap_ns"]),
            "rule": r["rule"], "prefill_overlap_ms": ms(r["prefill_overlap_ns"]), "share": r["share"],
            "stalled_decodes": r["stalled_decodes"], "culprits": by_spike.get(r["spike_id"], []),
            "evidence": r["evidence"],
            "level": r["level"], "baseline_ms": ms(r["baseline_ns"]), "baseline_basis": r["baseline_basis"],
            "excess_ms": ms(r["excess_ns"]), "other_ms": ms(r["other_ns"]), "prefill_tokens": r["prefill_tokens"],
            "step_index": r["step_index"], "source": r["source_path"], "run_line": r["run_line"],
        })
    return out


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
