"""The fleet rollup and report (`stallscope fleet report`) on a lake the local engine built from a simulated fleet:
17 replicas in three pools (chat: chunked 512, batch: chunked 8192, legacy: V0 unchunked), odd replicas with an
incident of 6,144-token prompts, two replicas traced (so they get a recommendation), and one replica whose
benchmark file is truncated (its shard fails). Every expectation is read from the lake's Parquet files, the
simulator's own fleet description, the source files or an independent `analyze` of a shard, never from the
rollup itself."""
from __future__ import annotations

import base64
import re
import shutil
from pathlib import Path

import orjson
import pyarrow.dataset as ds
import pytest

from helpers import cli

pytestmark = pytest.mark.slow

SLO = "ttft=2s,itl=200ms"
REPLICAS = 17  # 16 that analyse, the last one corrupt
INCIDENT_TOKENS = 6144  # the simulated fleet's long prompts (stallscope/fleet/simulate.py)


def _read(lake: Path, table: str):
    return ds.dataset(lake / table, format="parquet", partitioning="hive").to_table().to_pylist()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    from stallscope.fleet.execute import RunOptions, run_fleet
    from stallscope.fleet.report import build
    from stallscope.fleet.simulate import simulate_fleet

    d = tmp_path_factory.mktemp("fleet")
    source, lake = d / "source", d / "lake"
    reps = simulate_fleet(source, REPLICAS, traced=2, pools=3, seed=3)
    bad = reps[-1]
    bench = bad.runs[0] / "bench_serve.json"
    bench.write_bytes(bench.read_bytes()[:3000])  # cut mid-record: not a benchmark file any more
    (source / "fleet.csv").unlink()  # the directory is the SOURCE
    summary = run_fleet(str(source), str(lake), RunOptions(slo=SLO, recommend=True), engine="local")
    assert (summary.done, summary.failed) == (REPLICAS - 1, 1), summary
    rep = build(lake, d / "report")
    return {"source": source, "lake": lake, "reps": {r.replica: r for r in reps}, "bad": bad, "rep": rep,
            "f": rep.fleet, "dir": d}


def test_fleet_goodput_is_the_sum_over_the_shards_in_the_lake(fleet):
    rows = _read(fleet["lake"], "goodput")
    assert len(rows) == REPLICAS - 1 >= 16
    f = fleet["f"]["fleet"]
    assert f["goodput_rps"] == pytest.approx(sum(r["goodput_rps"] for r in rows), rel=1e-12)
    assert f["goodput_lost_rps"] == pytest.approx(sum(r["goodput_lost_rps"] for r in rows), rel=1e-12)
    assert f["goodput_lost_rps"] > 0
    assert (f["shards_total"], f["shards_done"], f["shards_failed"]) == (REPLICAS, REPLICAS - 1, 1)
    assert (f["slo"], f["slo_sets"]) == ("TTFT 2000 ms, ITL 200 ms", 1)  # the run's --slo ttft=2s,itl=200ms
    for p in fleet["f"]["pools"]:
        mine = [r for r in rows if r["pool"] == p["pool"]]
        assert p["goodput_rps"] == pytest.approx(sum(r["goodput_rps"] for r in mine), rel=1e-12)
        assert p["goodput_lost_rps"] == pytest.approx(sum(r["goodput_lost_rps"] for r in mine), rel=1e-12)
        assert p["attainment"] == pytest.approx(sum(r["requests_good"] for r in mine)
                                                / sum(r["requests_total"] for r in mine))
    assert {p["pool"] for p in fleet["f"]["pools"]} == {"chat", "batch", "legacy"}


def test_shard_goodput_matches_an_independent_analyze_of_that_shard(fleet):
    """The rollup's per-replica goodput equals `analyze` of the replica's files alone, in a store of their own."""
    from stallscope.analyze import Options, analyze, parse_slo
    from stallscope import Store

    by_replica = {r["replica"]: r for r in fleet["f"]["replicas"]}
    total = 0.0
    for name in ("r001", "r004"):  # a traced stalling batch replica, a healthy one
        files = sorted(p for p in (fleet["reps"][name].runs[0]).iterdir())
        with Store(":memory:") as s:
            assert all(r.ok for r in s.ingest(files))
            a = analyze(s.con, Options(slo=parse_slo(SLO)))
        assert by_replica[name]["goodput_rps"] == pytest.approx(a["goodput_rps"], rel=1e-12)
        assert by_replica[name]["goodput_lost_rps"] == pytest.approx(a["goodput_lost_rps"], rel=1e-12)
        assert by_replica[name]["spike_count"] == len(a["spikes"])
        total += a["goodput_rps"]
    pair = [r for r in fleet["f"]["replicas"] if r["replica"] in ("r001", "r004")]
    assert sum(r["goodput_rps"] for r in pair) == pytest.approx(total, rel=1e-12)


def test_stalling_replicas_rank_above_healthy_ones(fleet):
    reps, ranked = fleet["reps"], fleet["f"]["replicas"]
    rank = {r["replica"]: r["lost_rank"] for r in ranked}
    assert sorted(rank.values()) == list(range(1, len(ranked) + 1))
    # where nothing bounds a prefill (a large budget, or V0 unchunked) the incident costs goodput
    unbounded = [n for n, r in reps.items() if r.stalling and r.pool in ("batch", "legacy") and n in rank]
    healthy = [n for n, r in reps.items() if not r.stalling and n in rank]
    assert len(unbounded) >= 4 and len(healthy) >= 7
    assert max(rank[n] for n in unbounded) < min(rank[n] for n in healthy)
    lost = {r["replica"]: r["goodput_lost_rps"] for r in ranked}
    assert all(lost[n] > 0 for n in unbounded)
    assert [r["goodput_lost_rps"] for r in ranked] == sorted((r["goodput_lost_rps"] for r in ranked), reverse=True)


def test_worst_stall_event_is_on_a_stalling_replica_and_names_its_culprit(fleet):
    ev = fleet["f"]["stall_events"]
    worst = ev[0]
    assert worst["fleet_rank"] == 1
    assert fleet["reps"][worst["replica"]].stalling
    gaps = [r["worst_gap_ns"] for r in _read(fleet["lake"], "goodput") if r["worst_gap_ns"] is not None]
    assert worst["worst_gap_ms"] == pytest.approx(max(gaps) / 1e6)
    assert [e["worst_gap_ms"] for e in ev] == sorted((e["worst_gap_ms"] for e in ev), reverse=True)
    # the culprit is one of that replica's incident prompts: the server log received it, with 6,144 prompt tokens
    assert worst["culprit_prompt_tokens"] == INCIDENT_TOKENS
    log = (fleet["reps"][worst["replica"]].runs[0] / "vllm_server.log").read_text()
    m = re.search(rf"Received request {re.escape(worst['culprit_id'])}: .*?prompt_token_ids: \[([0-9, ]*)\]", log)
    assert m, worst["culprit_id"]
    assert m[1].count(",") + 1 == INCIDENT_TOKENS
    # a healthy replica is never the worst, and every listed event names the replica's own request
    reqs = {(r["replica"], r["report_id"]) for r in _read(fleet["lake"], "requests")}
    assert all((e["replica"], e["culprit_id"]) in reqs for e in ev if e["culprit_id"])


def test_pool_with_a_mis_set_budget_is_flagged(fleet):
    budgets = {b["pool"]: b for b in fleet["f"]["budgets"]}
    batch = budgets["batch"]  # chunked 8192: the incident's 6,144-token prompts go through in one step
    assert batch["differs"] is True
    assert batch["current_budget_tokens"] == fleet["reps"]["r001"].budget == 8192
    assert batch["recommended_budget_tokens"] is not None and batch["recommended_budget_tokens"] < 8192
    assert batch["shards_ok"] >= 1 and batch["predicted_gain_rps"] > 0
    recs = [r for r in _read(fleet["lake"], "recommendations") if r["pool"] == "batch" and r["status"] == "ok"]
    assert batch["recommended_budget_tokens"] in {r["recommended_budget_tokens"] for r in recs}
    # No traced replica in the legacy pool: its shards are answered all the same, from the benchmark's token
    # stream and the server log's budget (steps rebuilt from the chunk arrivals), so the pool gets a verdict.
    legacy = budgets["legacy"]
    legacy_recs = [r for r in _read(fleet["lake"], "recommendations") if r["pool"] == "legacy" and r["status"] == "ok"]
    assert legacy["shards_ok"] == len(legacy_recs) >= 1 and legacy["differs"] is not None
    assert all(r["recommended_budget_tokens"] is not None or r["setting"] for r in legacy_recs)
    md = fleet["rep"].files["report.md"].read_text()
    assert re.search(r"^\| batch \| change \| 8,192 \|", md, re.M)


def test_failed_shard_is_listed_with_its_reason(fleet):
    bad = fleet["bad"]
    failed = fleet["f"]["failed_shards"]
    assert [(r["pool"], r["replica"]) for r in failed] == [(bad.pool, bad.replica)]
    ledger = [r for r in _read(fleet["lake"], "_shards") if r["status"] == "failed"]
    assert failed[0]["error"] == ledger[0]["error"] and "invalid JSON" in failed[0]["error"]
    assert bad.replica not in {r["replica"] for r in fleet["f"]["replicas"]}
    md = fleet["rep"].files["report.md"].read_text()
    section = md.split("## Failed shards", 1)[1]
    assert "| shard | pool | replica | window | files | attempts | reason |" in section
    assert bad.replica in section and "invalid JSON" in section


def test_lost_goodput_over_time_adds_up_to_the_fleet(fleet):
    bins, f = fleet["f"]["lost_over_time"], fleet["f"]["fleet"]
    assert len(bins) == 60
    assert sum(b["requests_lost"] for b in bins) == f["requests_lost"] > 0
    assert sum(b["requests_good"] for b in bins) == f["requests_good"]
    assert all(b["goodput_lost_rps"] == pytest.approx(b["requests_lost"] / b["bin_s"]) for b in bins)


def test_html_is_self_contained_with_both_figures(fleet):
    rep = fleet["rep"]
    html = rep.files["report.html"].read_text()
    assert not re.search(r"https?://|<script|<link|<iframe|@import|url\(|href=", html, re.I)
    srcs = re.findall(r'<img src="([^"]+)"', html)
    assert len(srcs) == 2 and all(s.startswith("data:image/png;base64,") for s in srcs)
    for name in ("goodput_by_replica", "lost_over_time"):
        png = rep.files[name].read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
        assert "data:image/png;base64," + base64.b64encode(png).decode() in srcs
    assert "Goodput by replica" in html and "Lost goodput over time" in html


def test_markdown_has_the_tables_and_figures(fleet):
    md = fleet["rep"].files["report.md"].read_text()
    for header in ("| pool | replicas | shards | requests | attainment |", "| rank | pool | replica |",
                   "| # | pool | replica | when | worst gap (ms) |", "| pool | flag | current (tokens) |"):
        assert header in md, header
    assert "![Goodput by replica](goodput_by_replica.png)" in md
    assert "![Lost goodput over time](lost_over_time.png)" in md
    top = fleet["f"]["replicas"][0]
    assert re.search(rf"^\| 1 \| {top['pool']} \| {top['replica']} \|", md, re.M)


def test_fleet_json_is_the_rollup(fleet):
    doc = orjson.loads((fleet["rep"].out_dir / "fleet.json").read_bytes())
    assert doc["schema"] == "stallscope.fleet/1"
    assert doc["fleet"]["goodput_rps"] == pytest.approx(fleet["f"]["fleet"]["goodput_rps"])
    assert len(doc["replicas"]) == REPLICAS - 1


def test_fleet_views_document_their_columns(fleet):
    from stallscope import sqlviews
    from stallscope.fleet.rollup import open_lake

    qs = sqlviews.all_queries(fleet=True)
    assert len(qs) >= 9 and not set(qs) & set(sqlviews.all_queries())
    with open_lake(fleet["lake"]) as lk:
        for name, q in qs.items():
            if q.kind == "scalar":
                continue  # a helper with a type, no columns: checked in test_queries.py
            rel = f"SELECT * FROM {name}" if q.kind == "view" else f"SELECT * FROM {name}()"
            got = [(c[0], str(c[1]).upper()) for c in lk.con.execute(f"DESCRIBE {rel}").fetchall()]
            assert got == [(c[0], c[1].upper()) for c in q.columns], name
            assert q.doc and all(len(meaning) > 8 for _, _, meaning in q.columns), name


def test_cli_report_and_a_lake_whose_shards_all_failed(fleet, tmp_path):
    out = tmp_path / "rep"
    r = cli("fleet", "report", fleet["lake"], "--out", out)
    assert r.returncode == 0, r.stderr
    assert "Fleet goodput" in r.stdout and "budget: pool batch runs 8,192" in r.stdout
    assert f"{fleet['bad'].replica}" in r.stdout and str(out / "report.html") in r.stdout
    # a lake whose only shard failed: every view still binds, the page says so
    from stallscope.fleet.execute import RunOptions, run_fleet
    from stallscope.fleet.report import build

    src = tmp_path / "src"
    shutil.copytree(fleet["bad"].runs[0].parent, src / fleet["bad"].replica)
    run_fleet(str(src), str(tmp_path / "lake"), RunOptions(slo=SLO), engine="local")
    rep = build(tmp_path / "lake", tmp_path / "rep2")
    assert rep.fleet["fleet"]["shards_failed"] == 1 and rep.fleet["replicas"] == []
    md = rep.files["report.md"].read_text()
    assert "No analysed shard in the lake." in md and "invalid JSON" in md
    r = cli("fleet", "report", tmp_path / "src", "--out", tmp_path / "rep3")
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "not a stallscope lake" in r.stderr


def test_a_file_uri_lake_rolls_up_the_same(fleet):
    """A lake given as a URI is read through its pyarrow filesystem (as s3:// or gs:// would be)."""
    from stallscope.fleet.rollup import open_lake, rollup

    with open_lake(fleet["lake"].as_uri()) as lk:
        f = rollup(lk)
    want = fleet["f"]["fleet"]
    assert f["fleet"]["slo"] == want["slo"]
    assert {k: v for k, v in f["fleet"].items() if k != "slo"} == pytest.approx(
        {k: v for k, v in want.items() if k != "slo"}, rel=1e-12)
    assert [r["replica"] for r in f["replicas"]] == [r["replica"] for r in fleet["f"]["replicas"]]
    assert f["failed_shards"] == fleet["f"]["failed_shards"] and f["budgets"] == fleet["f"]["budgets"]


def test_several_windows_average_the_window_sums(fleet, tmp_path):
    """With a second window holding only the batch pool, the fleet's goodput is the span-weighted mean of the two
    window sums and a replica's goodput the duration-weighted mean of its shards (here: equal copies)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from stallscope.fleet import lake as lk
    from stallscope.fleet.report import build
    from stallscope.fleet.rollup import open_lake, rollup

    lake = tmp_path / "lake"
    shutil.copytree(fleet["lake"], lake)
    w2 = "20250401T170000Z"
    batch = {r["shard_id"]: r for r in _read(lake, "_shards") if r["pool"] == "batch" and r["status"] == "done"}
    for sid, row in batch.items():
        new = sid.replace("~all", f"~{w2}")
        for table in lk.TABLES:
            src = lake / table / f"pool=batch/replica={row['replica']}/window=all/part-0.parquet"
            t = pq.read_table(src)
            t = t.set_column(0, "shard_id", pa.array([new] * t.num_rows, pa.string()))
            if table == "goodput":  # judged against another ITL SLO: the rollup must say the sets differ
                i = t.schema.get_field_index("slo_itl_ms")
                t = t.set_column(i, "slo_itl_ms", pa.array([100.0] * t.num_rows, pa.float64()))
            dst = lake / table / f"pool=batch/replica={row['replica']}/window={w2}"
            dst.mkdir(parents=True)
            pq.write_table(t, dst / "part-0.parquet")
        led = {k: v for k, v in row.items() if k != "shard"}
        (lake / "_shards" / f"shard={new}").mkdir()
        pq.write_table(pa.Table.from_pylist([{**led, "shard_id": new, "window": w2}], schema=lk.SHARDS),
                       lake / "_shards" / f"shard={new}" / "part-0.parquet")
    with open_lake(lake) as lk2:
        f = rollup(lk2)
    assert (f["fleet"]["slo_sets"], f["fleet"]["slo"]) == (2, "TTFT 2000 ms, ITL 200 ms")
    md = build(lake, tmp_path / "rep").files["report.md"].read_text()
    assert "judged against 2 different SLO sets" in md
    rows = _read(lake, "goodput")
    per = {}
    for w in ("all", w2):
        mine = [r for r in rows if r["window"] == w]
        span = (max(r["window_end_ns"] for r in mine) - min(r["window_start_ns"] for r in mine)) / 1e9
        per[w] = (sum(r["goodput_rps"] for r in mine), span)
    windows = {w["window"]: w for w in f["windows"]}
    assert set(windows) == {"all", w2}
    for w, (total, span) in per.items():
        assert windows[w]["goodput_rps"] == pytest.approx(total, rel=1e-12)
        assert windows[w]["span_s"] == pytest.approx(span, rel=1e-12)
    want = sum(t * s for t, s in per.values()) / sum(s for _, s in per.values())
    assert f["fleet"]["goodput_rps"] == pytest.approx(want, rel=1e-12)
    assert per["all"][0] > f["fleet"]["goodput_rps"] > per[w2][0]
    before = {r["replica"]: r for r in fleet["f"]["replicas"]}
    for r in f["replicas"]:
        assert r["windows"] == (2 if r["pool"] == "batch" else 1)
        assert r["goodput_rps"] == pytest.approx(before[r["replica"]]["goodput_rps"], rel=1e-12)
        assert r["requests_total"] == before[r["replica"]]["requests_total"] * r["windows"]


@pytest.mark.browser
def test_html_opens_cleanly_in_headless_chromium(fleet):
    """The page as a reader's browser sees it: nothing runs, nothing loads, both figures decode."""
    import os

    from browser import blank_fraction, check_page, find_chromium

    path = find_chromium()
    if path is None:
        if os.environ.get("STALLSCOPE_ALLOW_NO_BROWSER"):
            pytest.skip("chromium not installed (STALLSCOPE_ALLOW_NO_BROWSER set)")
        pytest.fail("chromium not found: `make test` installs Debian's chromium (apt-get install chromium)")
    chk = check_page(fleet["rep"].files["report.html"], path)
    assert chk.console_errors == [] and chk.requests == [] and chk.dialogs == [] and chk.scripts == 0
    assert len(chk.images) == 2
    assert all(i["src_kind"] == "data" and i["complete"] and i["natural_width"] == 1000 for i in chk.images)
    assert chk.width <= 1280 and chk.body_text_chars > 2000
    assert 0.3 < blank_fraction(chk.screenshot) < 0.99


def test_a_lake_whose_path_holds_a_quote_a_bracket_and_a_space_reports_the_same(fleet, tmp_path):
    """DuckDB gets the lake's files as a list, each quoted once: the `'` was escaped twice and the `[` was read
    as a glob, so `fleet report` found no lake at such a path."""
    odd = tmp_path / "it's [a] lake"
    shutil.copytree(fleet["lake"], odd)
    r = cli("fleet", "report", odd, "--out", tmp_path / "rep")
    assert r.returncode == 0, r.stderr
    got = orjson.loads((tmp_path / "rep" / "fleet.json").read_bytes())
    want = fleet["f"]["fleet"]
    assert got["fleet"]["slo"] == want["slo"] and got["failed_shards"] == fleet["f"]["failed_shards"]
    assert {k: v for k, v in got["fleet"].items() if k != "slo"} == pytest.approx(
        {k: v for k, v in want.items() if k != "slo"}, rel=1e-12)
