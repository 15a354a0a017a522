"""The fleet lake's `metrics_windows` table: shards whose files carry Prometheus metrics write the windows of their
analysis JSON's `"metrics"` object; shards without metrics write no file, and the rollup's `lake_metrics_windows`
is then an empty view of the declared schema (issue 22, item 3). Local engine only: no Ray needed."""
from __future__ import annotations

import shutil

import pytest

pytestmark = pytest.mark.slow

SLO = "ttft=2s,itl=100ms"
WINDOW_KEYS = ("start_ns", "end_ns", "requests_finished", "ttft_p99_ms", "itl_p99_ms", "tpot_p99_ms",
               "prompt_tokens_per_s", "generation_tokens_per_s", "big_step_share", "ttft_ok_share", "itl_ok_share")


def _run(src, lake):
    from stallscope.fleet.execute import RunOptions, run_fleet

    return run_fleet(str(src), str(lake), RunOptions(slo=SLO, recommend=False))


def _lake_windows(lake) -> dict[str, list[dict]]:
    """{shard_id: its lake_metrics_windows rows in time order} through the rollup's view."""
    from stallscope.fleet.rollup import open_lake

    with open_lake(lake) as lk:
        rows = lk.rows(f"SELECT shard_id, pool, replica, \"window\", {', '.join(WINDOW_KEYS)} "
                       "FROM lake_metrics_windows ORDER BY shard_id, start_ns")
    out: dict[str, list[dict]] = {}
    for r in rows:
        assert r["shard_id"] == f"{r['pool']}~{r['replica']}~{r['window']}"
        out.setdefault(r["shard_id"], []).append({k: r[k] for k in WINDOW_KEYS})
    return out


@pytest.fixture(scope="module")
def metric_fleet(tmp_path_factory):
    """Three replicas in two pools, two windows each; the first two export metrics, the third does not."""
    from stallscope.fleet.simulate import simulate_fleet

    base = tmp_path_factory.mktemp("fleet-metrics")
    reps = simulate_fleet(base / "src", 3, windows=2, traced=0, pools=2, metrics=2, duration_s=4.0)
    summary = _run(base / "src" / "fleet.csv", base / "lake")  # the manifest: one shard per replica and window
    assert (summary.planned, summary.done, summary.failed) == (6, 6, 0)
    return base, reps


def test_metrics_windows_equal_each_shards_analysis(metric_fleet):
    """Every shard with metrics: its lake rows are the `metrics.windows` of analyze on its files alone (a fresh
    store per run directory, no fleet code), value for value; the replica without metrics has none."""
    import stallscope
    from stallscope.analyze import Options, analyze, parse_slo

    base, reps = metric_fleet
    got = _lake_windows(base / "lake")
    checked = 0
    for rep in reps:
        for w, run_dir in enumerate(rep.runs):
            sid = f"{rep.pool}~{rep.replica}~{rep.windows[w]}"
            with stallscope.open(":memory:") as s:
                s.ingest(run_dir)
                ref = analyze(s.con, Options(slo=parse_slo(SLO), report_views=False)).get("metrics")
            if rep.replica == "r002":
                assert ref is None and sid not in got
                continue
            assert len(ref["windows"]) >= 3, sid  # a few scrape windows per run, not a degenerate one
            assert got[sid] == ref["windows"], sid
            checked += 1
    assert checked == len(got) == 4
    # the SLO shares are judged (not all NULL) and the prompt rate is seen: real windows, not empty shells
    rows = [r for rs in got.values() for r in rs]
    assert any(r["itl_ok_share"] is not None for r in rows) and any(r["prompt_tokens_per_s"] for r in rows)
    # no partition at all for the shards without metrics
    parts = sorted(p.parent.parent.name for p in (base / "lake" / "metrics_windows").glob("*/*/*/part-0.parquet"))
    assert parts == ["replica=r000"] * 2 + ["replica=r001"] * 2


def test_metrics_gone_removes_the_shards_rows(metric_fleet, tmp_path):
    """A replica whose metrics file disappears is redone and its old metrics_windows partition removed; the
    shards left alone keep theirs."""
    base, reps = metric_fleet
    src, lake = tmp_path / "src", tmp_path / "lake"
    shutil.copytree(base / "src", src)
    shutil.copytree(base / "lake", lake)
    before = _lake_windows(lake)
    gone_file = "r000/run-00/prometheus_query_range.json"
    (src / gone_file).unlink()
    manifest = src / "fleet.csv"
    manifest.write_text(manifest.read_text().replace(gone_file + ";", "").replace(";" + gone_file, ""))
    again = _run(manifest, lake)
    assert (again.executed, again.done, again.failed) == (1, 1, 0)
    after = _lake_windows(lake)
    gone = f"{reps[0].pool}~r000~{reps[0].windows[0]}"
    assert gone in before and gone not in after
    assert after == {k: v for k, v in before.items() if k != gone}


def test_fleet_without_metrics_has_no_metrics_windows(tmp_path):
    """No metrics anywhere: no metrics_windows folder in the lake, and the rollup's view is empty but declared
    (every column of lake.METRICS_WINDOWS plus pool, replica, window), so SQL over it binds."""
    from stallscope.fleet import lake as lk
    from stallscope.fleet.rollup import open_lake
    from stallscope.fleet.simulate import simulate_fleet

    simulate_fleet(tmp_path / "src", 2, windows=1, traced=0, pools=1, duration_s=3.0)
    summary = _run(tmp_path / "src", tmp_path / "lake")
    assert (summary.done, summary.failed) == (2, 0)
    assert not (tmp_path / "lake" / "metrics_windows").exists()
    assert sorted(p.name for p in (tmp_path / "lake").iterdir() if not p.name.startswith("_")) == sorted(lk.TABLES)
    with open_lake(tmp_path / "lake") as lake:
        assert lake.tables["metrics_windows"] == 0
        cols = lake.con.sql("SELECT * FROM lake_metrics_windows").columns
        assert lake.con.execute("SELECT count(*) FROM lake_metrics_windows").fetchall()[0][0] == 0
    assert cols == [*lk.METRICS_WINDOWS.names, "pool", "replica", "window"]


def test_docs_name_every_metrics_windows_column():
    from conftest import ROOT
    from stallscope.fleet import lake as lk

    text = (ROOT / "docs" / "fleet.md").read_text()
    assert "`lake_metrics_windows`" in text
    missing = [c for name, schema in lk.OPTIONAL.items() for c in schema.names if f"`{c}`" not in text]
    assert not missing, missing
