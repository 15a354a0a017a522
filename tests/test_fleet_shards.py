"""Fleet planning and the lake's writes: SOURCE layouts and manifests, content hashes, window cuts, URIs, atomic
partitions, and the one-line errors."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import duckdb
import pyarrow as pa
import pytest

from stallscope.errors import StallscopeError
from stallscope.fleet import lake as lk
from stallscope.fleet.shards import FileRef, Replica, discover, parse_duration, plan, window_label

STALLSCOPE = [sys.executable, "-m", "stallscope.cli"]


def _tree(root, files: dict[str, str]):
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def test_directory_layouts_pools_and_hidden_files(tmp_path):
    src = _tree(tmp_path / "src", {
        "a/pool": "chat\n", "a/x.log": "1", "a/sub/y.json": "2", "a/.hidden": "3",
        "b/x.log": "4",
        "replica=c/x.log": "5",
        "pool=batch/replica=d/x.log": "6", "pool=batch/e/x.log": "7",
        ".git/x": "8", "_staging/x": "9", "notes.txt": "top-level files are not replicas",
    })
    got = {(r.pool, r.replica): sorted(f.path.split("/src/", 1)[1] for f in r.files) for r in discover(str(src))}
    assert got == {("chat", "a"): ["a/sub/y.json", "a/x.log"], ("default", "b"): ["b/x.log"],
                   ("default", "c"): ["replica=c/x.log"], ("batch", "d"): ["pool=batch/replica=d/x.log"],
                   ("batch", "e"): ["pool=batch/e/x.log"]}


@pytest.mark.parametrize("files,msg", [
    ({"bad name/x": "1"}, "replica name 'bad name' is not usable as a lake partition"),
    ({"a/pool": "no/slash\n", "a/x": "1"}, "pool name 'no/slash' is not usable"),
    ({"pool=p/a/x": "1", "pool=p/replica=a/x": "2"}, "replica 'a' of pool 'p' appears twice"),
])
def test_directory_errors_are_one_line(tmp_path, files, msg):
    src = _tree(tmp_path / "src", files)
    with pytest.raises(StallscopeError, match=msg.replace("(", r"\(")):
        discover(str(src))


def test_empty_or_missing_source(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(StallscopeError, match="no replica directories"):
        discover(str(tmp_path / "empty"))
    with pytest.raises(StallscopeError, match="no such file or directory"):
        discover(str(tmp_path / "nope"))


def test_manifests_csv_and_json_with_uris(tmp_path):
    src = _tree(tmp_path / "src", {"r1/a.log": "1", "r1/b.json": "2", "r2/dir/c.log": "3", "r2/dir/d.log": "4"})
    (src / "m.csv").write_text("replica,pool,window,files\n"
                               "r1,chat,w0,r1/a.log\n"
                               "r1,chat,w0,r1/b.json\n"          # same shard: merged
                               f"r2,,,{src}/r2/dir\n")           # absolute directory, default pool, window all
    rows = {(r.pool, r.replica, r.window): sorted(f.path.rsplit("/", 1)[1] for f in r.files)
            for r in discover(str(src / "m.csv"))}
    assert rows == {("chat", "r1", "w0"): ["a.log", "b.json"], ("default", "r2", None): ["c.log", "d.log"]}
    (src / "m.json").write_text(json.dumps({"shards": [
        {"replica": "r1", "pool": "chat", "files": ["r1/a.log", f"file://{src}/r1/b.json"]}]}))
    (r,) = discover(f"file://{src}/m.json")
    assert sorted(f.path for f in r.files) == [f"file://{src}/r1/a.log", f"file://{src}/r1/b.json"]
    (src / "bad.csv").write_text("replica,files\nr1,r1/missing.log\n")
    with pytest.raises(StallscopeError, match="row 1 \\(r1\\): r1/missing.log: no such file"):
        discover(str(src / "bad.csv"))
    (src / "m.txt").write_text("x")
    with pytest.raises(StallscopeError, match="must be a .csv or .json"):
        discover(str(src / "m.txt"))


def test_content_hash_follows_content_not_location(tmp_path):
    src = _tree(tmp_path / "src", {"a/x.log": "1", "a/y.json": "2", "b/x.log": "1"})
    h = {r.replica: plan([r], {"slo": "x"})[0].content_hash for r in discover(str(src))}
    moved = shutil.copytree(src, tmp_path / "elsewhere")
    assert {r.replica: plan([r], {"slo": "x"})[0].content_hash for r in discover(str(moved))} == h
    (moved / "a" / "y.json").write_text("3")
    h2 = {r.replica: plan([r], {"slo": "x"})[0].content_hash for r in discover(str(moved))}
    assert h2["a"] != h["a"] and h2["b"] == h["b"]
    assert plan(discover(str(src)), {"slo": "y"})[0].content_hash != h["a"]  # an analysis option changed


def test_window_cut_by_last_instant():
    m = 60 * 10**9
    t0 = 1743523200 * 10**9  # 2025-04-01T16:00:00Z
    files = [FileRef(f"/f/{n}", 1, n) for n in ("bench0", "log0", "bench1", "log1", "readme", "untimed", "broken")]
    rep = Replica("p", "r", None, ["/f"], files)
    last = {"bench0": t0 + 3 * m, "log0": t0 + 9 * m, "bench1": t0 + 13 * m, "log1": t0 + 10 * m,
            "untimed": None, "broken": None}  # readme: not an input, in no window
    shards = plan([rep], {}, parse_duration("10m"), last)
    assert [(s.window, [f.path for f in s.files]) for s in shards] == [
        ("20250401T160000Z", ["/f/bench0", "/f/log0", "/f/untimed", "/f/broken"]),
        ("20250401T161000Z", ["/f/bench1", "/f/log1"])]
    assert shards[0].window_start_ns == t0 and shards[1].window_end_ns == t0 + 20 * m
    assert window_label(t0) == "20250401T160000Z"
    assert parse_duration("1.5h") == 5400 * 10**9
    for bad in ("10", "0m", "10 minutes", ""):
        with pytest.raises(StallscopeError, match="bad --window"):
            parse_duration(bad)


def _tables(sid: str, n_spikes: int) -> dict:
    out = {name: schema.empty_table() for name, schema in lk.TABLES.items()}
    row = {c: None for c in lk.GOODPUT.names}
    row.update(shard_id=sid, requests_total=7, spike_count=n_spikes)
    out["goodput"] = pa.Table.from_pylist([row], schema=lk.GOODPUT)
    out["spikes"] = pa.Table.from_pylist([{"shard_id": sid, "spike_id": i} for i in range(n_spikes)],
                                         schema=lk.SPIKES)
    return out


def _row(shard, status="done"):
    return {"shard_id": shard.shard_id, "pool": shard.pool, "replica": shard.replica, "window": shard.window,
            "files": [], "content_hash": shard.content_hash, "status": status, "attempts": 1}


def test_partitions_are_replaced_whole_and_a_crash_leaves_no_half(tmp_path, monkeypatch):
    (shard,) = plan([Replica("p", "r", None, ["/x"], [FileRef("/x/a", 1, "h")])], {})
    lake = lk.Lake(str(tmp_path / "lake"))
    lake.write_shard(shard, _tables(shard.shard_id, 3), _row(shard))
    spikes = f"SELECT count(*) FROM {lk.scan(str(tmp_path / 'lake'), 'spikes')}"
    assert duckdb.sql(spikes).fetchall() == [(3,)]
    # A crash in the middle of rewriting the shard (after its goodput, while writing its spikes).
    real = lk.pq.write_table
    calls = []

    def crash(table, where, **kw):
        calls.append(where)
        if len(calls) == 2:
            real(table.slice(0, 1), where, **kw)  # half a file is written... then the process dies
            raise OSError("disk full")
        return real(table, where, **kw)

    monkeypatch.setattr(lk.pq, "write_table", crash)
    with pytest.raises(OSError):
        lake.write_shard(shard, _tables(shard.shard_id, 5), _row(shard))
    monkeypatch.setattr(lk.pq, "write_table", real)
    # Readers see the old spikes partition whole (the half file is in _staging, which is no table).
    assert duckdb.sql(spikes).fetchall() == [(3,)]
    assert list((tmp_path / "lake" / "_staging").iterdir())
    lake.clean_staging()
    assert not list((tmp_path / "lake" / "_staging").iterdir())
    lake.write_shard(shard, _tables(shard.shard_id, 5), _row(shard))
    assert duckdb.sql(spikes).fetchall() == [(5,)]
    # A shard that now fails loses its old partitions; its ledger row says why.
    lake.write_shard(shard, None, {**_row(shard, "failed"), "error": "x: unknown format"})
    assert not list((tmp_path / "lake").glob("[!_]*/pool=p/replica=r/window=all"))
    assert lake.ledger().to_pylist()[0]["error"] == "x: unknown format"


def test_lake_that_cannot_be_written_is_a_one_line_error(tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "src" / "r1").mkdir(parents=True)
    (tmp_path / "src" / "r1" / "x.log").write_text("x")
    r = subprocess.run(STALLSCOPE + ["fleet", "run", str(tmp_path / "src"), "--out", str(tmp_path / "file" / "lake")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert r.stderr.startswith(f"error: cannot write the lake at {tmp_path / 'file' / 'lake'}: ")
    assert len(r.stderr.strip().splitlines()) == 1


def test_uri_source_and_lake_a_shard_with_nothing_usable_and_no_recommend(tmp_path):
    """file:// URIs through pyarrow's filesystems (as s3:// and gs:// are): remote files are copied for the task
    and keep their URI in `sources`; a replica without one input fails alone, with its reason."""
    from stallscope.simulate import artifacts
    from stallscope.simulate.runner import RunSpec, execute

    src = tmp_path / "src"
    run = execute(RunSpec(duration_s=3.0, rate=4.0, seed=3, output_len="48:0.3", prompt_len="256:0.4"))
    artifacts.write_all(run, src / "good", only=("bench", "vllm"))
    _tree(src, {"empty/README.md": "no inputs here\n"})
    r = subprocess.run(STALLSCOPE + ["fleet", "run", f"file://{src}", "--out", f"file://{tmp_path}/lake",
                                     "--slo", "ttft=2s", "--no-recommend"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "2 shards: 1 done, 1 failed, 0 already done (skipped); 2 executed on local" in r.stdout
    assert "failed: default~empty~all: no input files in this shard" in r.stderr
    con = duckdb.connect()
    lake = str(tmp_path / "lake")
    paths = sorted(p for (p,) in con.sql(f"SELECT path FROM {lk.scan(lake, 'sources')}").fetchall())
    assert paths == [f"file://{src}/good/bench_serve.json", f"file://{src}/good/vllm_server.log"]
    assert con.sql(f"SELECT status, reason FROM {lk.scan(lake, 'recommendations')}").fetchall() == \
        [("skipped", "--no-recommend")]
    again = subprocess.run(STALLSCOPE + ["fleet", "run", f"file://{src}", "--out", f"file://{tmp_path}/lake",
                                         "--slo", "ttft=2s", "--no-recommend"],
                           capture_output=True, text=True, timeout=120)
    assert "2 shards: 0 done, 1 failed, 1 already done (skipped); 1 executed on local" in again.stdout


def test_fleet_simulate_writes_a_source_and_its_manifest(tmp_path):
    out = tmp_path / "fleet"
    r = subprocess.run(STALLSCOPE + ["fleet", "simulate", "--out", str(out), "--replicas", "4", "--windows", "2",
                                     "--traced", "1", "--duration", "2"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("4 replicas (2 stalling) x 2 windows in 3 pools")
    by_dir = {(x.pool, x.replica): sorted(f.path.split("/fleet/", 1)[1] for f in x.files)
              for x in discover(str(out))}
    assert set(by_dir) == {("chat", "r000"), ("batch", "r001"), ("legacy", "r002"), ("chat", "r003")}
    assert by_dir[("chat", "r000")] == ["r000/run-00/bench_serve.json", "r000/run-00/trace.pt.trace.json.gz",
                                        "r000/run-00/vllm_server.log", "r000/run-01/bench_serve.json",
                                        "r000/run-01/vllm_server.log"]
    by_manifest = {(x.pool, x.replica, x.window): sorted(f.path.split("/fleet/", 1)[1] for f in x.files)
                   for x in discover(str(out / "fleet.csv"))}
    assert by_manifest[("chat", "r000", "20250401T161000Z")] == by_dir[("chat", "r000")][3:]
    assert sum(len(v) for v in by_manifest.values()) == sum(len(v) for v in by_dir.values()) == 17


@pytest.mark.slow
def test_an_object_store_source_through_fsspec_with_windows(tmp_path):
    """A non-local filesystem (fsspec's in-memory one, as s3fs/gcsfs/adlfs would be): the planning ingest and
    the shard tasks copy the files out, the window cut finds both runs, and `sources` keeps the URIs."""
    fsspec = pytest.importorskip("fsspec")
    from stallscope.analyze import Options, analyze, parse_slo
    from stallscope.fleet.execute import RunOptions, run_fleet
    from stallscope.fleet.simulate import simulate_fleet
    from stallscope import Store

    (rep,) = simulate_fleet(tmp_path / "src", 1, windows=2, traced=0, duration_s=2.0)
    mem = fsspec.filesystem("memory")
    root = f"/fleet-{tmp_path.name}"
    for f in sorted((tmp_path / "src").rglob("*")):
        if f.is_file() and f.name != "fleet.csv":
            mem.pipe(f"{root}/{f.relative_to(tmp_path / 'src')}", f.read_bytes())
    lake = str(tmp_path / "lake")
    summary = run_fleet(f"memory://{root}", lake, RunOptions(slo="ttft=2s,itl=100ms", recommend=False),
                        window="10m")
    assert (summary.planned, summary.done, summary.failed) == (2, 2, 0)
    con = duckdb.connect()
    got = dict(con.sql(f"SELECT \"window\", goodput_rps FROM {lk.scan(lake, 'goodput')}").fetchall())
    for run_dir, label in zip(rep.runs, rep.windows):
        with Store(":memory:") as s:
            s.ingest([run_dir])
            assert got[label] == analyze(s.con, Options(slo=parse_slo("ttft=2s,itl=100ms")))["goodput_rps"]
    paths = sorted(p for (p,) in con.sql(f"SELECT path FROM {lk.scan(lake, 'sources')}").fetchall())
    assert paths == [f"memory://{root}/r000/run-0{k}/{n}" for k in (0, 1) for n in ("bench_serve.json",
                                                                                   "vllm_server.log")]
    # A corrupt remote file: its shard says so, naming the file by its URI.
    mem.pipe(f"{root}/r000/run-00/bench_serve.json", (tmp_path / "src/r000/run-00/bench_serve.json").read_bytes()[:999])
    again = run_fleet(f"memory://{root}", lake, RunOptions(slo="ttft=2s,itl=100ms", recommend=False), window="10m")
    assert (again.executed, again.failed) == (1, 1)
    assert again.failures[0][1].startswith(f"memory://{root}/r000/run-00/bench_serve.json: truncated or invalid")


def test_retries_exhausted_is_recorded_with_its_reason(tmp_path):
    """An unexpected error on every allowed attempt (here --retries 0): the shard is failed with the error's one
    line and its attempts; the run itself succeeds."""
    from stallscope.fleet.execute import RunOptions, run_fleet
    from stallscope.simulate import artifacts
    from stallscope.simulate.runner import RunSpec, execute

    run = execute(RunSpec(duration_s=1.0, rate=4.0, seed=5, output_len="16", prompt_len="64"))
    artifacts.write_all(run, tmp_path / "src" / "only", only=("bench",))
    lake = str(tmp_path / "lake")
    s = run_fleet(str(tmp_path / "src"), lake, RunOptions(fault="raise:default~only~all"), retries=0)
    assert (s.done, s.failed) == (0, 1)
    (row,) = lk.Lake(lake).ledger().to_pylist()
    assert (row["status"], row["attempts"]) == ("failed", 1)
    assert row["error"] == "RuntimeError: injected fault in default~only~all (after 1 attempts)"


def test_a_rerun_reads_only_new_or_changed_files(tmp_path, monkeypatch):
    import os

    from stallscope.fleet import shards as sh
    from stallscope.fleet.execute import RunOptions, plan_source

    src = _tree(tmp_path / "src", {"a/x.log": "1", "a/y.json": "2", "b/x.log": "3"})
    lake = lk.Lake(str(tmp_path / "lake"))
    first = {s.shard_id: s.content_hash for s in plan_source(str(src), lake, RunOptions())}
    read = []
    real = sh.sha256_of
    monkeypatch.setattr(sh, "sha256_of", lambda fs, p: read.append(p.rsplit("/src/", 1)[1]) or real(fs, p))
    assert {s.shard_id: s.content_hash for s in plan_source(str(src), lake, RunOptions())} == first
    assert read == []
    (src / "a" / "y.json").write_text("changed")
    st = (src / "a" / "y.json").stat()
    os.utime(src / "a" / "y.json", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    again = {s.shard_id: s.content_hash for s in plan_source(str(src), lake, RunOptions())}
    assert read == ["a/y.json"]
    assert again["default~a~all"] != first["default~a~all"] and again["default~b~all"] == first["default~b~all"]


def test_docs_name_every_lake_column():
    """docs/fleet.md documents every declared column of every lake table (the rollup reads by those names)."""
    from conftest import ROOT

    text = (ROOT / "docs" / "fleet.md").read_text()
    missing = [f"{name}.{c}" for name, schema in [*lk.TABLES.items(), ("_shards", lk.SHARDS)]
               for c in schema.names if f"`{c}`" not in text]
    assert not missing, missing
