"""`stallscope report`: every output on the bundled samples and on real inputs, the plotted data against the
analysis and its SQL views, the recommendation section from a contract-shaped object, and hostile input."""
from __future__ import annotations

import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from conftest import real
from reportkit import (FIGURES, HOSTILE_BENCH_NAME, HOSTILE_IDS, HOSTILE_MODEL, OUTPUTS, SAMPLES, SLO, artifacts,
                       hostile_db, hostile_inputs, hostile_report, run_ok, sample_db, unchunked_db, unchunked_report,
                       workdir)

import stallscope
from stallscope.analyze import Options, analyze, parse_slo
from stallscope.report import figures as F
from stallscope.report.build import build

PNG = b"\x89PNG\r\n\x1a\n"


def _check_outputs(out: Path, stdout: str) -> dict:
    for name in OUTPUTS:
        p = out / name
        assert p.is_file() and p.stat().st_size > 0, name
        if name.endswith(".png"):
            assert p.read_bytes()[:8] == PNG, name
    assert str(out / "report.html") in stdout  # the terminal summary points at the page
    doc = json.loads((out / "analysis.json").read_text())
    assert doc["schema"] == "stallscope.analysis/1"
    html = (out / "report.html").read_text()
    assert html.count('src="data:image/png;base64,') == len(FIGURES)
    for section in ("Headline", "Top stall events", "Requests hurt most", "Recommendation",
                    "What each input contributed", "How the numbers were computed"):
        assert f"<h2>{section}</h2>" in html and f"## {section}" in (out / "report.md").read_text()
    return doc


@pytest.mark.slow
def test_report_on_the_unchunked_sample_with_a_store():
    out, stdout = unchunked_report()
    doc = _check_outputs(out, stdout)
    assert len(doc["spikes"]) > 0 and doc["requests"]["lost"] > 0
    md = (out / "report.md").read_text()
    # the four 8k-token prefills are the stalls' top culprits, and the page says so
    rows = [ln for ln in md.splitlines() if ln.startswith("| ") and "8,192" in ln]
    assert len(rows) >= 4
    # The report answers by default, in the sample's own engine's flags and policy (a vLLM V0 prefill-first run;
    # its folder also holds a TGI router log of the same requests).
    rec = doc["recommendation"]
    assert rec["engine"] == "vllm" and rec["policy_observed"] == "prefill_first" and rec["evidence"] == "trace"
    assert rec["setting"].startswith("--enable-chunked-prefill --max-num-batched-tokens ")
    html = (out / "report.html").read_text()
    assert "Not computed." not in md and f"**Set** {rec['setting']} (vllm)" in md
    assert "policy observed: prefill_first" in html and "Step evidence: the profiler trace&#x27;s steps" in html
    assert "spikes: " in stdout and f"recommendation: {rec['setting']}" in stdout


@pytest.mark.slow
def test_report_from_files_on_the_chunked_8192_sample():
    out = workdir() / "report-chunked-8192"
    r = run_ok("report", *artifacts(SAMPLES / "chunked-8192-tpot-violations"), "--slo", SLO, "--out", out,
               "--no-recommend")
    doc = _check_outputs(out, r.stdout)
    assert doc["requests"]["total"] > 0 and doc["requests"]["good"] < 0.7 * doc["requests"]["total"]
    assert "missed mean TPOT" in (out / "report.md").read_text()
    assert "recommendation" not in doc and "Not computed." in (out / "report.md").read_text()  # --no-recommend
    assert "recommendation: not computed" in r.stdout


@pytest.mark.slow
def test_report_on_the_chunked_2048_sample_with_a_store():
    out = workdir() / "report-chunked-2048"
    r = run_ok("report", "--db", sample_db("chunked-2048-healthy"), "--slo", SLO, "--out", out)
    doc = _check_outputs(out, r.stdout)
    assert doc["requests"]["good"] == doc["requests"]["total"] > 0


@pytest.mark.slow
def test_report_on_the_real_083_log_and_its_benchmarks():
    files = [real("vllm/v0_0.8.3_ray_tp4pp2_llama70b_full_server_log_800req_llmk8s.log"),
             *sorted(real("vllm").glob("bench_serving_0.8.3_*.json"))]
    assert len(files) == 5
    out = workdir() / "report-real-083"
    r = run_ok("report", *files, "--slo", "ttft=2s,tpot=100ms", "--out", out)
    doc = _check_outputs(out, r.stdout)
    assert doc["requests"]["total"] >= 800
    md = (out / "report.md").read_text()
    assert "meta\\-llama" in md or "Llama" in md or "model" in md


@pytest.mark.slow
def test_report_on_the_real_h100_trace_alone():
    out = workdir() / "report-h100"
    r = run_ok("report", real("traces/vllm_h100_tp4_llama_isl1000_osl10_c32.pt.trace.json.gz"), "--out", out)
    doc = _check_outputs(out, r.stdout)
    assert doc["requests"]["total"] == 0 and len(doc["spikes"]) >= 1
    assert all(s["level"] == "step" for s in doc["spikes"])
    assert "No requests in the store" in (out / "report.md").read_text()


# -- the plotted data ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def unchunked():
    s = stallscope.open(unchunked_db(), read_only=True)
    a = analyze(s.con, Options(slo=parse_slo(SLO)))
    yield s, a
    s.close()


def _gid(fig, gid):
    found = [a for ax in fig.axes for a in ax.get_children() if getattr(a, "get_gid", lambda: None)() == gid]
    assert found, gid
    return found[0]


def test_timeline_marks_exactly_the_analysis_spikes(unchunked):
    s, a = unchunked
    fig = F.timeline(s, a)
    t0 = a["window"]["start_ns"]
    plotted = np.asarray(_gid(fig, "spikes").get_offsets())
    want = np.array(sorted(((sp["end_ns"] - t0) / 1e9, sp["gap_ms"]) for sp in a["spikes"]))
    got = plotted[np.lexsort((plotted[:, 1], plotted[:, 0]))]
    assert got.shape == want.shape and len(want) == len(a["spikes"]) > 0
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    # the four long stalls stand out above the ITL SLO, and every client gap is drawn
    assert (want[:, 1] > 600).sum() >= 4 * 60
    gaps = np.asarray(_gid(fig, "gaps").get_offsets())
    assert len(gaps) == s.sql("SELECT count(*) FROM client_gaps WHERE gap_ns > 0").item()
    # below: the 8k-token prefill steps
    segs = _gid(fig, "prefill_tokens").get_segments()
    assert sum(1 for sg in segs if sg[1][1] >= 8000) >= 4


def test_timeline_density_view_counts_every_gap(unchunked, monkeypatch):
    s, a = unchunked
    monkeypatch.setattr(F, "MAX_POINTS", 1000)
    fig = F.timeline(s, a)
    mesh = _gid(fig, "gap_density")
    assert np.nansum(np.asarray(mesh.get_array(), dtype=float)) == \
        s.sql("SELECT count(*) FROM client_gaps WHERE gap_ns > 0").item()
    np.testing.assert_allclose(np.asarray(_gid(fig, "spikes").get_offsets())[:, 1].max(),
                               max(sp["gap_ms"] for sp in a["spikes"]))


def test_cdf_and_headline_views_agree_with_the_data(unchunked):
    s, a = unchunked
    gaps = s.sql("SELECT gap_ns / 1e6 AS ms FROM client_gaps").to_series().to_numpy()
    cdf = s.sql("SELECT value_ms, fraction FROM report_gap_cdf WHERE series = 'itl' ORDER BY value_ms")
    v, f = cdf["value_ms"].to_numpy(), cdf["fraction"].to_numpy()
    # every kept point is exact: the share of gaps at or below it
    idx = np.linspace(0, len(v) - 1, 25).astype(int)
    np.testing.assert_allclose(f[idx], [(gaps <= x).mean() for x in v[idx]], atol=1.0 / len(gaps))
    att = {r["slo"]: r for r in s.sql("SELECT * FROM report_slo_attainment").to_dicts()}
    assert att["itl"]["met"] == a["requests"]["good"]  # ITL is the only SLO this incident breaks
    assert att["ttft"]["attainment"] == 1.0 and att["tpot"]["attainment"] == 1.0
    ev = s.sql("SELECT sum(spikes) AS n, count(*) AS e FROM report_stall_events").row(0)
    assert ev[0] == len(a["spikes"]) and ev[1] >= 4
    toks = s.sql("SELECT sum(output_tokens) FROM report_requests").item()
    assert s.sql("SELECT output_tokens FROM report_headline").item() == toks
    fig = F.itl_cdf(s, a)
    x = _gid(fig, "cdf_itl").get_xdata()
    np.testing.assert_allclose(np.sort(x), np.sort(v[v > 0]))


def test_throughput_figure_plots_the_view(unchunked):
    s, a = unchunked
    fig = F.throughput(s, a)
    tok = np.asarray(_gid(fig, "tokens_per_s").get_ydata())
    good = np.asarray(_gid(fig, "goodput_rps").get_ydata())
    assert tok.max() > 1000 and np.nanmax(good) > 0
    # unrolled, the rolling means add up to what was produced: every output token and every good request
    d = s.sql("SELECT * FROM report_throughput(bin_s := 1.0, window_bins := 1)")
    assert round(d["tokens_per_s"].sum()) == s.sql("SELECT sum(output_tokens) FROM report_requests").item()
    assert round(d["goodput_rps"].sum()) == a["requests"]["good"]


def test_ttft_figure_colours_by_verdict(unchunked):
    s, a = unchunked
    fig = F.ttft(s, a)
    good = len(_gid(fig, "ttft_good").get_offsets())
    itl = len(_gid(fig, "ttft_itl").get_offsets())
    assert good == a["requests"]["good"] and good + itl == a["requests"]["total"]


# -- the recommendation, from a contract-shaped object (issue 10's `analysis["recommendation"]`) -----------------
def _recommendation():
    grid = [256, 512, 1024, 2048, 4096, 8192, 16384]
    gp = [0.8, 1.2, 1.5, 1.6, 1.1, 0.7, 0.6]
    return {"engine": "vllm", "setting": "--max-num-batched-tokens 2048", "chunk_tokens": 2048,
            "current_chunk_tokens": 8192, "policy_observed": "vllm_v1_chunked", "predicted_p99_itl_ms": 61.0,
            "predicted_mean_tpot_ms": 31.0, "predicted_p90_ttft_ms": 880.0, "goodput_rps": 1.6,
            "goodput_band_rps": [1.5, 1.7], "ttft_cost_ms": 140.0, "placement": "aggregated",
            "prefill_decode_split": [1, 3], "placement_margin": 0.12,
            "goodput_by_chunk": [{"chunk_tokens": c, "goodput_rps": g, "lo": g - 0.1, "hi": g + 0.05,
                                  "p99_itl_ms": 40 + c / 100, "mean_tpot_ms": 30.0, "p90_ttft_ms": 900.0}
                                 for c, g in zip(grid, gp)],
            "model": {"coefficients": {"fixed_ms": 8.0, "per_decode_seq_ms": 0.05, "per_kv_token_ms": 2e-5,
                                       "per_prefill_token_ms": 0.06, "per_attention_unit_ms": 1e-6},
                      "identified": {"fixed_ms": True, "per_attention_unit_ms": False},
                      "unidentified_reasons": {"per_attention_unit_ms": "prompts too short"},
                      "tile_tokens": 256, "p99_band": {"decode": 0.05, "prefill": 0.08},
                      "mape": 0.031, "p99_coverage": 0.985, "steps_used": 1200},
            "missing_evidence": []}


@pytest.fixture(scope="module")
def chunked():
    s = stallscope.open(sample_db("chunked-2048-healthy"), read_only=True)
    a = analyze(s.con, Options(slo=parse_slo(SLO)))
    yield s, a
    s.close()


@pytest.mark.slow
def test_recommendation_figures_and_section(chunked, tmp_path):
    s, a = chunked
    a = {**a, "recommendation": _recommendation()}
    fig = F.chunk_goodput(s, a)
    line = _gid(fig, "chunk_goodput")
    assert list(line.get_xdata()) == [r["chunk_tokens"] for r in a["recommendation"]["goodput_by_chunk"]]
    assert list(line.get_ydata()) == [r["goodput_rps"] for r in a["recommendation"]["goodput_by_chunk"]]
    vlines = {round(ln.get_xdata()[0]) for ax in fig.axes for ln in ax.get_lines() if ln.get_linestyle() == "--"}
    assert vlines == {2048, 8192}
    # the model's prediction is its coefficients applied to each step's composition, read from the trace
    fig = F.step_time(s, a)
    pred = np.asarray(_gid(fig, "model_prediction").get_offsets())
    c = a["recommendation"]["model"]["coefficients"]
    st = s.sql("""SELECT coalesce(ctx_tokens, 0) AS t, coalesce(gen_reqs, 0) AS d, coalesce(gen_sum_kv, 0) AS kv,
                         coalesce(ctx_sum_qkv - ctx_sum_qq / 2, 0) AS att FROM steps WHERE kernel_count > 0""")
    assert st["t"].max() > 0  # this trace annotates its steps' prefill tokens
    # the model's GEMM term runs over every scheduled token (prefill + one per decode), in 256-token tiles
    tiled = np.ceil((st["t"].to_numpy() + st["d"].to_numpy()) / 256) * 256
    want = (c["fixed_ms"] + c["per_decode_seq_ms"] * st["d"].to_numpy() + c["per_kv_token_ms"] * st["kv"].to_numpy()
            + c["per_prefill_token_ms"] * tiled + c["per_attention_unit_ms"] * st["att"].to_numpy())
    got = pred[np.lexsort((pred[:, 1], pred[:, 0]))]
    ref = np.column_stack([st["t"].to_numpy(), want])
    np.testing.assert_allclose(got, ref[np.lexsort((ref[:, 1], ref[:, 0]))], rtol=1e-9)
    rep = build(s, a, tmp_path / "rec")
    md = (tmp_path / "rec" / "report.md").read_text()
    assert "\\-\\-max\\-num\\-batched\\-tokens 2048" in md or "--max-num-batched-tokens 2048" in md
    assert "Not computed" not in md and "prompts too short" in md
    assert "| 2,048 | 1.600 |" in md
    assert rep.files["chunk_goodput"].read_bytes()[:8] == PNG


@pytest.mark.slow
def test_recommendation_figures_say_not_computed(chunked):
    s, a = chunked
    assert "recommendation" not in a
    assert getattr(F.chunk_goodput(s, a), "stallscope_missing", "") == "recommendation not computed"
    fig = F.step_time(s, a)
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert any("not computed" in t for t in texts)


# -- hostile input ------------------------------------------------------------------------------------------------
class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.attrs, self.rows = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [(tag, k, v) for k, v in attrs]
        if tag == "tr":
            self.rows.append(0)
        if tag in ("td", "th"):
            self.rows[-1] += 1


@pytest.mark.slow
def test_hostile_input_stays_inert_and_keeps_layout():
    out, stdout = hostile_report()
    _check_outputs(out, stdout)
    html = (out / "report.html").read_text()
    md = (out / "report.md").read_text()
    p = _Tags()
    p.feed(html)
    assert "script" not in p.tags and "iframe" not in p.tags and "object" not in p.tags
    assert not [a for a in p.attrs if a[1].lower().startswith("on")]
    assert {v.split(":")[0] for t, k, v in p.attrs if t == "img" and k == "src"} == {"data"}
    assert not re.search(r"<\s*script", html, re.I) and not re.search(r"<\s*script", md, re.I)
    assert "<img src=x" not in html and "<img" not in md and "<b>" not in md and "<b>bold" not in html
    # the hostile strings are there, escaped
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "&lt;script&gt;alert\\(1\\)" not in md
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in md
    assert html.count("&lt;img src=x onerror=alert(3)&gt;") >= 1 and HOSTILE_BENCH_NAME not in html
    assert "evil|model|&lt;b&gt;bold&lt;/b&gt;" in html and "evil\\|model\\|&lt;b&gt;bold&lt;/b&gt;" in md
    # the 100 kB id is clipped on the page (analysis.json keeps it whole)
    assert "A" * 200 not in html and "A" * 200 not in md and len(html) < 2_000_000
    assert HOSTILE_IDS[2] in (out / "analysis.json").read_text()
    # layout: every table row has as many cells as its header, in HTML and in Markdown
    assert len(set(p.rows)) <= 12
    for table in re.findall(r"<table>.*?</table>", html, re.S):
        q = _Tags()
        q.feed(table)
        assert len(set(q.rows)) == 1, table[:300]
    for block in re.findall(r"(?:^\|.*\|$\n?)+", md, re.M):
        lines = block.strip().splitlines()
        cells = [len(re.findall(r"(?<!\\)\|", ln)) for ln in lines]
        assert len(set(cells)) == 1, lines[:3]
    # NaN and negative latencies: rejected with a reason and counted, never drawn or printed as nan
    assert "not a finite non-negative number" in html and "nan" not in md.lower().replace("finite", "")
    assert HOSTILE_MODEL not in md


@pytest.mark.slow
def test_prompts_reach_the_report_only_when_asked(tmp_path):
    out, _ = hostile_report()
    log = (hostile_inputs() / "vllm_server.log").read_text()
    prompts = re.findall(r"prompt: '([^']{40,})'", log)
    assert len(prompts) > 100
    pages = [(out / n).read_text() for n in ("report.html", "report.md", "analysis.json")]
    assert not any(p[:40] in page for p in prompts[:50] for page in pages)
    assert "first record (raw)" not in pages[0] and "--include-prompts" in pages[0]
    s = stallscope.open(hostile_db(), read_only=True)
    a = analyze(s.con, Options(slo=parse_slo(SLO)))
    raw = s.sql("SELECT raw FROM rejects ORDER BY line_no, record_index LIMIT 1").item()
    rep = build(s, a, tmp_path / "with-prompts", include_prompts=True)
    s.close()
    html = rep.files["report.html"].read_text()
    assert "first record (raw)" in html and raw and len(raw) > 10
    assert "<script" not in html.lower()


@pytest.mark.slow
def test_report_renders_nan_and_negative_values_from_the_store(tmp_path):
    db = tmp_path / "bad.duckdb"
    shutil.copy(unchunked_db(), db)
    s = stallscope.open(db)
    # durations a buggy writer could leave: negative TTFTs and gaps
    s.con.execute("UPDATE requests SET ttft_ns = -ttft_ns WHERE kind = 'client' AND request_index % 7 = 0")
    s.con.execute("UPDATE token_gaps SET gap_ns = -gap_ns WHERE gap_index = 3")
    a = analyze(s.con, Options(slo=parse_slo(SLO)))
    a["goodput_rps"] = float("nan")
    a["attainment"] = float("inf")
    rep = build(s, a, tmp_path / "out")
    s.close()
    doc = json.loads(rep.files["analysis.json"].read_text())  # strict JSON: NaN became null
    assert doc["goodput_rps"] is None and doc["attainment"] is None
    md = rep.files["report.md"].read_text()
    assert "nan" not in md.lower().replace("finite", "") and "inf%" not in md
    assert "Goodput** - req/s" in md
    for f in FIGURES:
        assert rep.files[f].read_bytes()[:8] == PNG


def test_timeline_thins_many_spikes_to_one_mark_per_cell(unchunked, monkeypatch):
    """Above SAMPLE_POINTS spikes each occupied time x gap cell is marked once, at a real spike: its largest."""
    s, a = unchunked
    monkeypatch.setattr(F, "SAMPLE_POINTS", 10)
    fig = F.timeline(s, a)
    marks = _gid(fig, "spikes")
    plotted = np.asarray(marks.get_offsets())
    t0 = a["window"]["start_ns"]
    every = {(round((sp["end_ns"] - t0) / 1e9, 6), round(sp["gap_ms"], 6)) for sp in a["spikes"]}
    assert 0 < len(plotted) < len(a["spikes"])
    assert {(round(x, 6), round(y, 6)) for x, y in plotted} <= every
    assert plotted[:, 1].max() == pytest.approx(max(sp["gap_ms"] for sp in a["spikes"]))
    assert f"spikes ({len(a['spikes']):,};" in marks.get_label()
    cells = s.con.execute("SELECT count(*), sum(spikes) FROM report_spike_marks()").fetchall()[0]
    assert cells == (len(plotted), len(a["spikes"]))
