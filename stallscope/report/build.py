"""Assemble the incident report from a store and its analysis: the page's sections, the figures, and the files
(report.md, report.html, analysis.json, one PNG per figure). Every number shown is read from the analysis object
or a SQL view; nothing here computes a statistic of its own."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from ..jsonwrite import orjson_bytes
from ..outputs import atomic_dir
from . import figures as F
from .page import Bullets, Heading, Image, Para, Table, _ticks, clip, num, pct, to_html, utc, to_markdown

TOP = 10


@dataclass
class Report:
    """What `build` wrote: the output folder and each file, plus the page blocks (for the terminal summary)."""
    out_dir: Path
    files: dict[str, Path] = field(default_factory=dict)
    blocks: list = field(default_factory=list)
    analysis: dict = field(default_factory=dict)
    events: list[dict] = field(default_factory=list)


def _rows(con, sql: str) -> list[dict]:
    rel = con.sql(sql)
    if rel is None:
        return []
    cols = rel.columns
    return [dict(zip(cols, r)) for r in rel.fetchall()]


def build(store, analysis: dict, out_dir: str | Path, *, include_prompts: bool = False,
          top: int = TOP) -> Report:
    """Write the report for `analysis` (the `stallscope.analysis/1` object of this store) into out_dir."""
    con = getattr(store, "con", store)
    from ..errors import StallscopeError

    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise StallscopeError(f"--out {out} is a file, not a folder")
    rep = Report(out_dir=out, analysis=analysis)
    F._ensure_views(con, analysis)
    images: dict[str, Image] = {}
    # Built in a folder beside `out`, then renamed into place: a report killed mid-way or cut by a full disk
    # leaves no half-written folder (stallscope.outputs.atomic_dir).
    with atomic_dir(out) as tmp:
        for name, fn, title in F.ALL:
            fig = fn(store, analysis)
            png = F.png_bytes(fig)
            fig.clear()
            (tmp / f"{name}.png").write_bytes(png)
            rep.files[name] = out / f"{name}.png"
            images[name] = Image(name, title, png, F.about(name))
        if analysis.get("metrics"):  # only with metrics: the report of a store without them is unchanged
            fig = F.metrics_timeline(store, analysis)
            png = F.png_bytes(fig)
            fig.clear()
            (tmp / "metrics_timeline.png").write_bytes(png)
            rep.files["metrics_timeline"] = out / "metrics_timeline.png"
            images["metrics_timeline"] = Image("metrics_timeline", "Prometheus metrics timeline", png,
                                               F.about("metrics_timeline"))
        blocks = _page(con, analysis, images, include_prompts, top, rep)
        rep.blocks = blocks
        # orjson writes NaN and infinities (hostile inputs) as null: the file stays strict JSON, and it is fast on
        # analyses with 10^5 spikes.
        # The spikes are dumped a batch at a time (stallscope.jsonwrite.orjson_bytes, the same bytes).
        with (tmp / "analysis.json").open("wb") as f:
            for chunk in orjson_bytes(analysis):
                f.write(chunk)
        rep.files["analysis.json"] = out / "analysis.json"
        (tmp / "report.md").write_text(to_markdown(blocks), encoding="utf-8")
        rep.files["report.md"] = out / "report.md"
        (tmp / "report.html").write_text(to_html(blocks, "stallscope incident report"), encoding="utf-8")
        rep.files["report.html"] = out / "report.html"
    return rep


# -- the page -----------------------------------------------------------------------------------------------------
def _page(con, a: dict, img: dict, include_prompts: bool, top: int, rep: Report) -> list:
    b: list = []
    cfg = {r["key"]: r["value"] for r in _rows(con, """
        SELECT key, arg_min(value, source_id) AS value FROM engine_config
        WHERE key IN ('model', 'engine', 'engine_version', 'max_num_batched_tokens', 'enable_chunked_prefill',
                      'chunked_prefill_size', 'max_batch_prefill_tokens', 'tensor_parallel_size',
                      'pipeline_parallel_size')
        GROUP BY key""")}
    w = a.get("window") or {}
    b.append(Heading(1, "stallscope incident report"))
    facts = [f"Window {utc(w.get('start_ns'))} to {utc(w.get('end_ns'))} ({num(w.get('duration_s'), 1)} s)"]
    if cfg.get("model"):
        facts.append(f"model {clip(cfg['model'])}")
    if cfg.get("engine"):
        facts.append(f"engine {clip(cfg['engine'])} {clip(cfg.get('engine_version') or '')}".rstrip())
    if a.get("gpus"):
        facts.append(f"{a['gpus']} GPUs per replica")
    b.append(Para(["; ".join(facts) + "."]))
    _headline(con, a, b)
    b.append(img["timeline"])
    b.append(img["throughput"])
    _stalls(con, a, b, top, rep)
    _hurt(con, a, b, top)
    b.append(img["itl_cdf"])
    b.append(img["ttft"])
    if a.get("metrics"):
        _metrics(a, b, img)
    _recommendation(a, b, img)
    _inputs(con, a, b, include_prompts)
    _method(a, b)
    return b


def _headline(con, a: dict, b: list) -> None:
    b.append(Heading(2, "Headline"))
    slo = a.get("slo") or {}
    req = a.get("requests") or {}
    h = (_rows(con, "SELECT * FROM report_headline") or [{}])[0]
    slo_txt = ", ".join(f"{k[:-3].upper()} {v:g} ms" for k, v in slo.items()
                        if k.endswith("_ms") and isinstance(v, (int, float))) or "none set"
    met = a.get("meets_attainment")
    items = [
        [("b", "Goodput"), " ", f"{num(a.get('goodput_rps'), 3)} req/s against ",
         ("b", f"{num(h.get('tokens_per_s'), 0)} output tokens/s"),
         f" ({'requests' if h.get('basis') == 'requests' else 'traced decode tokens'} over "
         f"{num(h.get('duration_s'), 1)} s)."],
        [("b", "Attainment"), " ", f"{pct(a.get('attainment'))} of {num(req.get('total'))} requests good "
         f"(target {pct(slo.get('attainment'))}: "
         f"{'n/a' if met is None else 'met' if met else 'missed'}); SLOs: {slo_txt}; "
         f"{num(req.get('failed'))} failed."],
        [("b", "Lost goodput"), " ", f"{num(a.get('goodput_lost_rps'), 3)} req/s: without prefill-decode interference "
         f"{num(a.get('goodput_counterfactual_rps'), 3)} req/s ({num(req.get('lost'))} more good requests; an "
         "upper bound, ideal disaggregation with no KV-transfer cost)."],
    ]
    if a.get("goodput_per_gpu_rps") is not None:
        items.append([f"Per GPU: {num(a.get('goodput_per_gpu_rps'), 4)} req/s/GPU over {a.get('gpus')} GPUs."])
    if a.get("interference_gpu_s") is not None:
        items.append([f"Prefill work that stalled decodes: {num(a.get('interference_gpu_s'), 2)} GPU-s."])
    b.append(Bullets(items))
    att = _rows(con, "SELECT * FROM report_slo_attainment")
    if att:
        b.append(Table(["SLO", "threshold (ms)", "requests", "met", "attainment"],
                       [[r["slo"].upper(), num(r["threshold_ms"], 1), num(r["requests"]), num(r["met"]),
                         pct(r["attainment"])] for r in att], [False, True, True, True, True]))


def _stalls(con, a: dict, b: list, top: int, rep: Report) -> None:
    b.append(Heading(2, "Top stall events"))
    ev = _rows(con, f"SELECT * FROM report_stall_events ORDER BY event_id LIMIT {int(top)}")
    n_ev = con.execute("SELECT count(*) FROM report_stall_events").fetchall()[0][0]
    rep.events = ev
    spikes = a.get("spikes") or []
    if not spikes:
        b.append(Para(["No decode-gap spikes: no gap exceeded the ITL SLO or "
                       f"{num((a.get('slo') or {}).get('spike_k'), 1)} x its decode-only baseline."]))
        return
    b.append(Para([f"{len(spikes):,} spikes in {n_ev:,} stall events (one stall is a spike in every request it "
                   "held up); the largest first. Evidence ", ("code", "kernels"),
                   " means kernel-exact prefill time from a GPU trace, ", ("code", "inferred"),
                   " means inferred prefill windows from request timings."]))
    t0 = (a.get("window") or {}).get("start_ns")
    rows = []
    for e in ev:
        rows.append([
            num((e["start_ns"] - t0) / 1e9, 2) if t0 is not None and e["start_ns"] is not None else utc(e["start_ns"]),
            num(e["worst_gap_ms"], 1), num(e["worst_gap_ms"] / e["baseline_ms"], 1)
            if e["baseline_ms"] and e["worst_gap_ms"] is not None else "-",
            num(e["requests_hit"]) if e["requests_hit"] else "step-level", num(e["stalled_decodes"]),
            clip(e["evidence"]), num(e["prefill_ms"], 1), pct(e["share"]), num(e["step_index"]),
            clip(e["culprit_id"]) if e["culprit_id"] else "-", num(e["culprit_prompt_tokens"]),
            num(e["culprit_overlap_ms"], 1)])
    b.append(Table(["when (s)", "worst gap (ms)", "x baseline", "requests hit", "stalled decodes", "evidence",
                    "prefill in gap (ms)", "prefill share", "step", "top culprit", "culprit prompt (tokens)",
                    "culprit prefill (ms)"], rows,
                   [True, True, True, True, True, False, True, True, True, False, True, True]))


def _hurt(con, a: dict, b: list, top: int) -> None:
    b.append(Heading(2, "Requests hurt most"))
    rows = _rows(con, f"""SELECT * FROM report_requests
                          ORDER BY removed_ms DESC NULLS LAST, max_itl_ms DESC NULLS LAST, report_id LIMIT {int(top)}""")
    if not rows:
        b.append(Para(["No requests in the store (a trace alone has no request timings)."]))
        return
    b.append(Para(["Ordered by the interference removed from their gaps in the counterfactual, then by their "
                   "worst gap (view ", ("code", "report_requests"), ")."]))
    b.append(Table(["request", "prompt (tokens)", "output (tokens)", "TTFT (ms)", "mean TPOT (ms)", "worst gap (ms)",
                    "interference (ms)", "verdict", "good without interference"],
                   [[clip(r["report_id"]), num(r["prompt_tokens"]), num(r["output_tokens"]), num(r["ttft_ms"], 1),
                     num(r["tpot_ms"], 2), num(r["max_itl_ms"], 1), num(r["removed_ms"], 1),
                     F.VERDICT_LABELS.get(r["verdict"], clip(r["verdict"])),
                     "-" if r["good_cf"] is None else "yes" if r["good_cf"] else "no"] for r in rows],
                   [False, True, True, True, True, True, True, False, False]))


_EVIDENCE_WORDS = {"trace": "the profiler trace's steps",
                   "iteration_log": "vLLM's per-step Iteration log lines (no profiler trace; goodput band widened "
                                    "x1.5)",
                   "sglang_log": "SGLang's scheduler batch lines (40-forward decode means and prefill forwards timed "
                                 "by their throughput fields; no profiler trace; goodput band widened x2)",
                   "client_stream": "the benchmark's token stream (steps rebuilt from the chunk arrivals of "
                                    "concurrent requests; no profiler trace or Iteration lines; goodput band widened "
                                    "by the evidence's quality)"}


def _metrics(a: dict, b: list, img: dict) -> None:
    """What Prometheus metrics alone say: goodput and attainment bounds, the ranked interference windows."""
    m = a["metrics"]
    b.append(Heading(2, "From metrics"))
    g, att = m.get("goodput_rps_bounds"), m.get("attainment_bounds")
    items = [[("b", "Goodput"), " ", f"between {num(g[0], 3)} and {num(g[1], 3)} req/s" if g else "not bounded",
              f" over {num(m.get('duration_s'), 1)} s and {num(m.get('replicas'))} replicas; attainment between "
              f"{pct(att[0]) if att else '-'} and {pct(att[1]) if att else '-'} of "
              f"{num(m.get('requests_finished'))} finished requests (Fréchet bounds of the TTFT and TPOT "
              "histograms: they do not say which requests met both)."]]
    for miss in m.get("missing") or []:
        items.append([("b", "Missing"), " ", miss + "."])
    b.append(Bullets(items))
    b.append(img["metrics_timeline"])
    top = m.get("interference") or []
    if top:
        b.append(Para(["Windows where the ITL tail rose with prefill work (view ", ("code", "metric_interference"),
                       "):"]))
        b.append(Table(["replica", "window start", "ITL p99 (ms)", "rise", "prompt tokens/s", "big steps"],
                       [[clip(r["replica"]), utc(r["start_ns"]), num(r["itl_p99_ms"], 1), num(r["itl_rise"], 2),
                         num(r["prompt_tokens_per_s"], 0), pct(r["big_step_share"])] for r in top],
                       [False, False, True, True, True, True]))


def _recommendation(a: dict, b: list, img: dict) -> None:
    b.append(Heading(2, "Recommendation"))
    rec = a.get("recommendation")
    if not isinstance(rec, dict):
        b.append(Para([("b", "Not computed."), " This analysis carries no ", ("code", "recommendation"),
                       " object; the figures below show the observed steps only."]))
        b.append(img["step_time"])
        b.append(img["chunk_goodput"])
        return
    items = []
    if rec.get("setting"):
        items.append([("b", "Set"), " ", clip(rec["setting"], 200), f" ({clip(rec.get('engine'))})."])
    items.append([f"Chunk budget {num(rec.get('chunk_tokens'))} tokens (the incident ran with "
                  f"{num(rec.get('current_chunk_tokens'))}; policy observed: {clip(rec.get('policy_observed'))})."])
    band = rec.get("goodput_band_rps")
    band_txt = (f" (band {num(band[0], 3)} to {num(band[1], 3)})"
                if isinstance(band, (list, tuple)) and len(band) == 2 else "")
    items.append([f"Predicted goodput {num(rec.get('goodput_rps'), 3)} req/s{band_txt}; p99 ITL "
                  f"{num(rec.get('predicted_p99_itl_ms'), 1)} ms, mean TPOT {num(rec.get('predicted_mean_tpot_ms'), 1)}"
                  f" ms, p90 TTFT {num(rec.get('predicted_p90_ttft_ms'), 1)} ms; TTFT cost "
                  f"{num(rec.get('ttft_cost_ms'), 1)} ms."])
    if rec.get("placement"):
        split = rec.get("prefill_decode_split")
        split_txt = (f", prefill:decode split {num(split[0])}:{num(split[1])}"
                     if isinstance(split, (list, tuple)) and len(split) == 2 else "")
        items.append([("b", "Placement"), " ", f"{clip(rec['placement'])}{split_txt} (margin "
                      f"{num(rec.get('placement_margin'), 3)})."])
    model = rec.get("model") if isinstance(rec.get("model"), dict) else {}
    if model:
        coefs = model.get("coefficients") or {}
        items.append(["Step-time model: " + ", ".join(f"{clip(k, 40)} = {num(v, 6)}" for k, v in coefs.items())
                      + f"; held-out MAPE {pct(model.get('mape'))}, p99 band coverage "
                      f"{pct(model.get('p99_coverage'))}, {num(model.get('steps_used'))} steps."])
        ident = model.get("identified") or {}
        why = model.get("unidentified_reasons") or {}
        unident = [f"{clip(k, 40)} ({clip(why.get(k) or 'no reason given', 120)})" for k, v in ident.items()
                   if v is not True]
        if unident:
            items.append(["Not identified by the data: " + "; ".join(unident) + "."])
    evidence = _EVIDENCE_WORDS.get(rec.get("evidence"))
    if evidence:
        items.append([f"Step evidence: {evidence} ({num(rec.get('evidence_steps'))} steps fitted)."])
    missing = rec.get("missing_evidence") or []
    if missing:
        items.append(["Missing evidence: " + "; ".join(clip(m, 200) for m in missing) + "."])
    b.append(Bullets(items))
    rows = rec.get("goodput_by_chunk") or []
    if rows:
        b.append(Table(["chunk (tokens)", "goodput (req/s)", "low", "high", "p99 ITL (ms)", "mean TPOT (ms)",
                        "p90 TTFT (ms)"],
                       [[num(r.get("chunk_tokens")) if r.get("chunk_tokens") is not None else "unchunked",
                         num(r.get("goodput_rps"), 3), num(r.get("lo"), 3), num(r.get("hi"), 3),
                         num(r.get("p99_itl_ms"), 1), num(r.get("mean_tpot_ms"), 1), num(r.get("p90_ttft_ms"), 1)]
                        for r in rows], [True] * 7))
    b.append(img["step_time"])
    b.append(img["chunk_goodput"])


def _inputs(con, a: dict, b: list, include_prompts: bool) -> None:
    b.append(Heading(2, "What each input contributed"))
    src = _rows(con, """SELECT source_id, path, format, records_parsed, records_skipped, records_rejected,
                               clock_method, clock_note FROM sources ORDER BY source_id""")
    b.append(Table(["#", "file", "format", "parsed", "skipped", "rejected", "clock"],
                   [[str(s["source_id"]), clip(os.path.basename(s["path"] or ""), 80), clip(s["format"]),
                     num(s["records_parsed"]), num(s["records_skipped"]), num(s["records_rejected"]),
                     clip(s["clock_method"])] for s in src], [True, False, False, True, True, True, False]))
    rej = _rows(con, "SELECT * FROM report_rejects")
    if rej:
        header = ["#", "reason", "records", "first at"] + (["first record (raw)"] if include_prompts else [])
        rows = []
        for r in rej:
            where = (f"line {r['first_line']:,}" if r["first_line"] is not None else
                     f"byte {r['first_offset']:,}" if r["first_offset"] is not None else
                     f"record {r['first_record']:,}" if r["first_record"] is not None else "-")
            row = [str(r["source_id"]), clip(r["reason"], 160), num(r["records"]), where]
            if include_prompts:
                row.append(clip(r["example_raw"], 200))
            rows.append(row)
        b.append(Table(header, rows, [True, False, True, False] + ([False] if include_prompts else [])))
        if not include_prompts:
            b.append(Para(["Raw rejected records are left out (they can hold prompt text); ",
                           ("code", "--include-prompts"), " shows them."]))
    runs = [r for r in a.get("runs") or [] if r.get("kind") == "client"]
    if runs:
        b.append(Table(["run of", "line", "requests", "good", "goodput (req/s)", "lost (req/s)", "attainment"],
                       [[clip(os.path.basename(r.get("source") or ""), 80), num(r.get("run_line")),
                         num(r.get("total")), num(r.get("good")), num(r.get("goodput_rps"), 3),
                         num(r.get("goodput_lost_rps"), 3), pct(r.get("attainment"))] for r in runs[:50]],
                       [False, True, True, True, True, True, True]))


def _method(a: dict, b: list) -> None:
    b.append(Heading(2, "How the numbers were computed"))
    b.append(Para(["Every number comes from the SQL views shipped in ", ("code", "stallscope.queries"),
                   " (query them with ", ("code", "stallscope sql"), "); the full result is ",
                   ("code", "analysis.json"), " (", ("code", "stallscope.analysis/1"), "). Goodput is good "
                   "requests per second of the judged runs (view ", ("code", "goodput_runs"), "); a spike is a gap "
                   "above the ITL SLO or above spike_k x its decode-only baseline (", ("code", "spikes"), "); "
                   "culprits come from ", ("code", "spike_culprits"), "; the counterfactual from ",
                   ("code", "request_counterfactual"), "."]))
    for name, _, title in F.ALL:
        b.append(Para([("b", title + "."), " "] + _ticks(F.about(name))))
