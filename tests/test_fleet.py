"""Fleet mode end to end on a simulated fleet of 6 replicas x 2 windows (12 shards).

Two lakes of the same fleet, built independently of each other:
- local: the CLI, `--engine local`, on the generator's manifest (fleet.csv: which run's files make which window,
  as the generator wrote them), so every shard is `analyze` of exactly the files the generator put in it;
- ray: `--engine ray` on the fleet directory cut by `--window 10m` (the planner decides the windows), with a
  corrupt file and a worker killed mid-task, then the file removed and a re-run.
Identical lakes therefore mean both that the engines agree and that the window cut put every file where it
belongs; the local lake is checked against the `stallscope analyze --json` CLI on three shards, and against
an in-process `analyze` of each of the 12 shards' files alone."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import duckdb
import pytest

pytestmark = pytest.mark.slow

SLO = "ttft=2s,itl=100ms"
STALLSCOPE = [sys.executable, "-m", "stallscope.cli"]
GOODPUT_FIELDS = ("requests_total", "requests_good", "requests_good_counterfactual", "requests_lost",
                  "goodput_rps", "goodput_counterfactual_rps", "goodput_lost_rps", "spike_count")
KILLED = "chat~r003~20250401T161000Z"    # its worker is killed mid-task on the first attempt
RAISES = "batch~r004~20250401T160000Z"    # its first attempt raises an unexpected error
CORRUPT = "legacy~r005~20250401T160000Z"  # gets an extra, truncated benchmark file


def _env(**extra):
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **extra}
    env.pop("STALLSCOPE_FLEET_FAULT", None)
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    from stallscope.fleet.simulate import simulate_fleet

    out = tmp_path_factory.mktemp("fleet") / "src"
    reps = simulate_fleet(out, 6, windows=2, traced=2)
    return out, reps


@pytest.fixture(scope="module")
def local_lake(fleet, tmp_path_factory):
    """The CLI, local engine, on the manifest; the killed shard's first attempt raises instead (a local process
    cannot survive its own death), so that both engines see one retry of each faulty shard."""
    src, _ = fleet
    lake = tmp_path_factory.mktemp("lakes") / "local"
    r = subprocess.run(STALLSCOPE + ["fleet", "run", str(src / "fleet.csv"), "--out", str(lake), "--slo", SLO,
                                     "--engine", "local"],
                       capture_output=True, text=True, timeout=400, env=_env(STALLSCOPE_FLEET_FAULT=f"raise:{KILLED},raise:{RAISES}"))
    assert r.returncode == 0, r.stderr
    assert "12 shards: 12 done, 0 failed, 0 already done (skipped); 12 executed on local, 2 retried" in r.stdout
    return lake


@pytest.fixture(scope="module")
def ray_session():
    from stallscope.fleet.execute import local_ray_env, ray_init_kwargs

    local_ray_env()
    try:
        import ray
    except ImportError:  # CI must run these: a missing Ray is a failure, never a skip
        pytest.fail("ray is not installed: `make dev` installs the fleet extra (pip install -e '.[fleet]')")
    ray.init(**ray_init_kwargs(num_cpus=2, object_store_mb=200))
    # Loopback only: the node (and so every Ray server, which binds the node address) is 127.0.0.1.
    assert ray.util.get_node_ip_address() == "127.0.0.1"
    assert {n["NodeManagerAddress"] for n in ray.nodes()} == {"127.0.0.1"}
    assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def ray_runs(fleet, ray_session, tmp_path_factory):
    """Ray on a copy of the fleet with a corrupt file, one worker killed, one attempt raising; then the file
    removed and a re-run."""
    from stallscope.fleet.execute import RunOptions, run_fleet

    src, _ = fleet
    work = tmp_path_factory.mktemp("rayfleet")
    src2 = work / "src"
    shutil.copytree(src, src2)
    bench = (src2 / "r005" / "run-00" / "bench_serve.json").read_bytes()
    bad = src2 / "r005" / "run-00" / "bench_serve-retry.json"
    bad.write_bytes(bench[: len(bench) // 3])
    lake = work / "ray"
    opts = RunOptions(slo=SLO, fault=f"kill:{KILLED},raise:{RAISES}")
    first = run_fleet(str(src2), str(lake), opts, engine="ray", window="10m", retries=2)
    ledger_first = _ledger(lake)
    bad.unlink()
    second = run_fleet(str(src2), str(lake), RunOptions(slo=SLO), engine="ray", window="10m", retries=2)
    return lake, first, ledger_first, second


def _ledger(lake) -> dict:
    from stallscope.fleet.lake import scan

    rows = duckdb.sql(f"SELECT shard_id, status, attempts, error, engine FROM {scan(str(lake), '_shards')}").fetchall()
    return {r[0]: r[1:] for r in rows}


def _goodput(lake) -> dict:
    from stallscope.fleet.lake import scan

    rel = duckdb.sql(f"SELECT shard_id, pool, replica, \"window\", {', '.join(GOODPUT_FIELDS)} "
                     f"FROM {scan(str(lake), 'goodput')}")
    return {r[0]: dict(zip(rel.columns, r)) for r in rel.fetchall()}


def _as_row(res: dict) -> dict:
    req = res["requests"]
    return {"requests_total": req["total"], "requests_good": req["good"],
            "requests_good_counterfactual": req["good_counterfactual"], "requests_lost": req["lost"],
            "goodput_rps": res["goodput_rps"], "goodput_counterfactual_rps": res["goodput_counterfactual_rps"],
            "goodput_lost_rps": res["goodput_lost_rps"], "spike_count": len(res["spikes"])}


def test_the_fleet_is_a_real_mix_and_windows_differ(local_lake, fleet):
    """What makes the equalities below able to fail: the two windows of every replica give different numbers (a
    file in the wrong window, or both windows analysed together, changes them), some replicas stall and lose
    goodput, others are healthy, in three pools."""
    lake = _goodput(local_lake)
    _, reps = fleet
    assert len(lake) == 12
    for rep in reps:
        w0, w1 = ({k: lake[f"{rep.pool}~{rep.replica}~{w}"][k] for k in GOODPUT_FIELDS} for w in rep.windows)
        assert w0 != w1, rep.replica
    stalling = [s for s, r in lake.items() if r["requests_lost"] > 0]
    healthy = [s for s, r in lake.items() if r["spike_count"] == 0]
    assert len(stalling) >= 4 and len(healthy) >= 4, (stalling, healthy)
    assert len({r["pool"] for r in lake.values()}) == 3
    # The fleet's goodput, lake side: the sum over shards of goodput_rps (the rollup's number is checked there).
    total = duckdb.sql(f"SELECT sum(goodput_rps) FROM {_scan(local_lake, 'goodput')}").fetchall()[0][0]
    assert total == pytest.approx(sum(r["goodput_rps"] for r in lake.values()), rel=1e-12) and total > 0


def _scan(lake, table):
    from stallscope.fleet.lake import scan

    return scan(str(lake), table)


@pytest.mark.parametrize("replica,window", [("r001", 0), ("r002", 1), ("r000", 0)])
def test_lake_equals_the_analyze_cli(local_lake, fleet, tmp_path, replica, window):
    """`stallscope analyze RUN_DIR --json` of the shard's files alone, on a stalling chunked, a stalling unchunked
    and a traced shard: goodput, lost goodput and spike count equal the lake's."""
    _, reps = fleet
    rep = next(r for r in reps if r.replica == replica)
    js = tmp_path / "a.json"
    r = subprocess.run(STALLSCOPE + ["analyze", str(rep.runs[window]), "--slo", SLO, "--json", str(js)],
                       capture_output=True, text=True, timeout=120, env=_env())
    assert r.returncode == 0, r.stderr
    ref = _as_row(json.loads(js.read_text()))
    got = _goodput(local_lake)[f"{rep.pool}~{replica}~{rep.windows[window]}"]
    assert {k: got[k] for k in GOODPUT_FIELDS} == ref


def test_lake_tables_carry_the_shard_details(local_lake, fleet):
    """Spikes, culprits, requests, sources per shard; the traced shard has a recommendation; partition columns
    come back as strings."""
    con = duckdb.connect()
    spikes = con.sql(f"SELECT shard_id, count(*) FROM {_scan(local_lake, 'spikes')} GROUP BY 1").fetchall()
    good = _goodput(local_lake)
    assert dict(spikes) == {s: g["spike_count"] for s, g in good.items() if g["spike_count"]}
    n_req = con.sql(f"SELECT shard_id, count(*) FILTER (counts_for_goodput) FROM {_scan(local_lake, 'requests')} "
                    "GROUP BY 1").fetchall()
    assert dict(n_req) == {s: g["requests_total"] for s, g in good.items()}
    orphan = con.sql(f"""SELECT count(*) FROM {_scan(local_lake, 'culprits')} c
                         ANTI JOIN {_scan(local_lake, 'spikes')} s USING (shard_id, spike_id)""").fetchall()[0][0]
    assert orphan == 0
    src = con.sql(f"SELECT replica, \"window\", path FROM {_scan(local_lake, 'sources')}").fetchall()
    _, reps = fleet
    for rep in reps:
        for run_dir, label in zip(rep.runs, rep.windows):
            mine = sorted(p for r, w, p in src if r == rep.replica and w == label)
            assert mine == sorted(str(p) for p in run_dir.iterdir()), (rep.replica, label)
    rec = con.sql(f"SELECT shard_id, status, current_budget_tokens, setting "
                  f"FROM {_scan(local_lake, 'recommendations')}").fetchall()
    ok = {r[0]: r for r in rec if r[1] == "ok"}
    # The traced shards are answered from their traces; the untraced ones (since issue 21) from the benchmark's
    # token stream and the server log's budget, so more than the traced shards carry a recommendation.
    assert {"chat~r000~20250401T160000Z", "batch~r001~20250401T160000Z"} < set(ok)
    assert ok["chat~r000~20250401T160000Z"][2] == 512 and ok["batch~r001~20250401T160000Z"][2] == 8192
    assert all(r[3].startswith(("--max-num-batched-tokens", "--enable-chunked-prefill")) for r in ok.values())
    assert {r[1] for r in rec if r[0] not in ok} <= {"insufficient"}


@pytest.mark.fleet
def test_faults_cost_only_their_shard_and_a_rerun_does_only_what_is_missing(ray_runs):
    lake, first, ledger, second = ray_runs
    assert (first.planned, first.executed, first.done, first.failed) == (12, 12, 11, 1)
    status, attempts, error, engine = ledger[CORRUPT]
    assert status == "failed" and attempts == 1 and engine == "ray"
    assert "bench_serve-retry.json: truncated or invalid JSON" in error and "\n" not in error
    assert ledger[KILLED][:3] == ("done", 2, None)   # worker death: Ray's max_retries
    assert ledger[RAISES][:3] == ("done", 2, None)   # an exception: Ray's retry_exceptions
    assert first.retried == 2
    assert all(v[0] == "done" and v[1] == 1 for k, v in ledger.items() if k not in (CORRUPT, KILLED, RAISES))
    assert (second.planned, second.skipped, second.executed, second.done, second.failed) == (12, 11, 1, 1, 0)
    assert _ledger(lake)[CORRUPT][:3] == ("done", 1, None)


@pytest.mark.fleet
def test_ray_and_local_lakes_are_identical(ray_runs, local_lake):
    """Every table row for row (ORDER BY ALL); `_shards` without the columns that say when and where a shard ran
    (lake.SHARDS_RUN_COLUMNS: started_ns, finished_ns, ingest_s, analyze_s, recommend_s, cpu_s, worker,
    worker_peak_rss_bytes, engine). Sources' paths differ by the fleet's directory only, so they are compared
    relative to it."""
    from stallscope.fleet.lake import SHARDS, SHARDS_RUN_COLUMNS, TABLES

    ray_lake = ray_runs[0]
    con = duckdb.connect()
    for table in [*TABLES, "_shards"]:
        cols = "*" if table != "_shards" else ", ".join(f'"{c}"' for c in SHARDS.names if c not in SHARDS_RUN_COLUMNS)
        rows = []
        for lake in (local_lake, ray_lake):
            q = f"SELECT {cols} FROM {_scan(lake, table)} ORDER BY ALL"
            rows.append(_relative(con.sql(q).fetchall()))
        assert len(rows[0]) > 0 or table == "rejects", table
        assert rows[0] == rows[1], table


def _relative(rows):
    """Paths (also inside lists) cut to what follows the fleet directory `src/`."""
    def cut(v):
        if isinstance(v, str) and "/src/" in v:
            return v.split("/src/", 1)[1]
        if isinstance(v, list):
            return [cut(x) for x in v]
        return v
    return [tuple(cut(v) for v in r) for r in rows]


def test_every_shard_equals_analyze_of_its_files_alone(local_lake, fleet):
    """All 12 shards: a fresh store per run directory of the generator (no fleet code: the files as written, one
    window each), analysed in process; goodput, lost goodput and spike count equal the lake's row."""
    import stallscope
    from stallscope.analyze import Options, analyze, parse_slo

    _, reps = fleet
    lake = _goodput(local_lake)
    checked = 0
    for rep in reps:
        for w, run_dir in enumerate(rep.runs):
            with stallscope.open(":memory:") as s:
                s.ingest(run_dir)
                ref = _as_row(analyze(s.con, Options(slo=parse_slo(SLO), report_views=False)))
            got = lake[f"{rep.pool}~{rep.replica}~{rep.windows[w]}"]
            assert {k: got[k] for k in GOODPUT_FIELDS} == ref, (rep.replica, w)
            checked += 1
    assert checked == len(lake) == 12
