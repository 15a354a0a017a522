"""Failures as an unlucky or hostile user meets them: inputs that are not files, Ctrl-C, a full disk, odd option
values, a file named by mistake. Each ends with one line that names the cause and the file, the store as it was,
and no output file cut short."""
from __future__ import annotations

import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from helpers import cli

ROOT = Path(__file__).resolve().parents[1]
INCIDENT = ROOT / "sample_traces" / "chunked-8192-tpot-violations"


def _lines(text: str) -> list[str]:
    return [x for x in text.splitlines() if x.strip()]


# -- inputs that are not regular files --------------------------------------------------------------------------

def test_a_fifo_without_a_writer_is_refused_at_once(tmp_path):
    """It used to block in open() forever, holding the store's lock, deaf to Ctrl-C."""
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    r = cli("ingest", fifo, "--db", tmp_path / "s.duckdb", timeout=20)
    assert time.monotonic() - t0 < 10  # the interpreter's start on a loaded machine; the refusal itself is instant
    assert r.returncode == 1 and _lines(r.stderr) == [f"error: {fifo}: a named pipe (FIFO), not a regular file; "
                                                      "copy its content to a file first"]


def test_a_character_device_is_refused_not_called_empty(tmp_path):
    r = cli("ingest", "/dev/zero", "--db", tmp_path / "s.duckdb", timeout=20)
    assert r.returncode == 1 and len(_lines(r.stderr)) == 1
    assert "/dev/zero: a character device, not a regular file" in r.stderr and "empty" not in r.stderr


# -- Ctrl-C ---------------------------------------------------------------------------------------------------------

def _interrupt_when(args: list, ready, log: Path) -> tuple[int, float, str]:
    """Run the CLI, send SIGINT once `ready(log lines)` holds; (exit status, seconds from SIGINT to exit, stderr)."""
    env = {**os.environ, "STALLSCOPE_CRASH_LOG": str(log)}
    p = subprocess.Popen([sys.executable, "-m", "stallscope.cli", *map(str, args)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 300
    while not (log.exists() and ready(log.read_text().split())):
        assert p.poll() is None and time.monotonic() < deadline, "the command ended before the point was reached"
        time.sleep(0.02)
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    return p.returncode, time.monotonic() - t0, err


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory):
    db = tmp_path_factory.mktemp("store") / "s.duckdb"
    r = cli("ingest", INCIDENT, "--db", db)
    assert r.returncode == 0, r.stderr
    return db


@pytest.mark.slow
def test_ctrl_c_during_an_ingest_exits_130_at_once_and_the_store_is_consistent(tmp_path):
    db = tmp_path / "s.duckdb"
    # inside the parse of the Kineto trace (the first file loaded), whose load is in its open transaction
    rc, took, err = _interrupt_when(["ingest", INCIDENT, "--db", db], lambda p: "ingest.file1.parsing" in p,
                                    tmp_path / "points")
    assert rc == 130 and took < 2.0 and _lines(err)[-1] == "interrupted"
    with duckdb.connect(str(db), read_only=True) as con:  # the interrupted load left nothing behind
        assert con.execute("SELECT count(*) FROM sources").fetchall() == [(0,)]
        assert con.execute("SELECT count(*) FROM gpu_kernels").fetchall() == [(0,)]
    r = cli("ingest", INCIDENT, "--db", db)
    assert r.returncode == 0 and r.stdout.count("ingested") == 4


@pytest.mark.slow
def test_ctrl_c_during_an_analysis_exits_130_at_once(sample_store, tmp_path):
    out = tmp_path / "a.json"
    rc, took, err = _interrupt_when(["analyze", "--db", sample_store, "--json", out],
                                    lambda p: "analyze.start" in p, tmp_path / "points")
    assert rc == 130 and took < 2.0 and _lines(err)[-1] == "interrupted"
    assert not out.exists() and list(tmp_path.glob(".a.json*")) == []


@pytest.mark.slow
def test_ctrl_c_during_a_report_leaves_no_report_folder(sample_store, tmp_path):
    out = tmp_path / "rep"
    rc, took, err = _interrupt_when(["report", "--db", sample_store, "--out", out],
                                    lambda p: "report.build" in p, tmp_path / "points")
    assert rc == 130 and took < 2.0 and _lines(err)[-1] == "interrupted"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["points"]  # neither the folder nor a part of it


# -- a full disk ------------------------------------------------------------------------------------------------------

@pytest.fixture
def small_fs(tmp_path):
    """A 4 MB file system: a tmpfs where mounting is allowed (root), else None (the tests then limit the file
    size of the process instead, RLIMIT_FSIZE: EFBIG, "file too large", through the same code paths)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        yield None, mnt
        return
    try:
        yield "tmpfs", mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fill(mnt: Path, leave: int) -> None:
    """Leave only `leave` bytes free on the file system at `mnt`."""
    st = os.statvfs(mnt)
    free = st.f_bavail * st.f_frsize
    (mnt / "filler").write_bytes(b"\0" * max(0, free - leave))


def _cli_limited(args: list, limit: int | None) -> subprocess.CompletedProcess:
    def cap():
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return subprocess.run([sys.executable, "-m", "stallscope.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=300, preexec_fn=cap)


def _digest(*files: Path) -> dict:
    """The store's bytes: its file and its write-ahead log (an empty log, which DuckDB may leave, holds nothing)."""
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in files if f.exists() and f.stat().st_size}


def test_an_ingest_onto_a_full_disk_says_so_with_the_store_and_leaves_it_unchanged(small_fs):
    kind, mnt = small_fs
    db = mnt / "s.duckdb"
    r = cli("ingest", INCIDENT / "tgi_router.log", "--db", db)
    assert r.returncode == 0, r.stderr
    before = _digest(db, db.with_name("s.duckdb.wal"))
    if kind == "tmpfs":
        _fill(mnt, 64 << 10)
        r = cli("ingest", INCIDENT / "vllm_server.log.gz", "--db", db)
        cause = "no space left on device"
    else:
        r = _cli_limited(["ingest", INCIDENT / "vllm_server.log.gz", "--db", db], db.stat().st_size + (64 << 10))
        cause = "file too large"
    assert r.returncode != 0
    line = _lines(r.stderr)
    assert len(line) == 1 and line[0].startswith(f"error: cannot write the store {db}: {cause}"), r.stderr
    assert "vllm_server.log.gz" in line[0] and "invalidated" not in line[0]
    (mnt / "filler").unlink(missing_ok=True)
    assert _digest(db, db.with_name("s.duckdb.wal")) == before
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM sources").fetchall() == [(1,)]


@pytest.mark.slow
def test_outputs_onto_a_full_disk_leave_the_old_file_or_nothing(small_fs, sample_store):
    kind, mnt = small_fs
    old = mnt / "analysis.json"
    old.write_text('{"old": true}\n')
    if kind == "tmpfs":
        _fill(mnt, 16 << 10)
        a = cli("analyze", "--db", sample_store, "--json", old)
        rep = cli("report", "--db", sample_store, "--out", mnt / "rep")
        cause = "no space left on device"
    else:
        a = _cli_limited(["analyze", "--db", sample_store, "--json", old], 16 << 10)
        rep = _cli_limited(["report", "--db", sample_store, "--out", mnt / "rep"], 16 << 10)
        cause = "file too large"
    assert a.returncode == 1 and _lines(a.stderr) == [f"error: cannot write {old}: {cause}"]
    assert json.loads(old.read_text()) == {"old": True}
    assert rep.returncode == 1 and len(_lines(rep.stderr)) == 1
    assert _lines(rep.stderr)[0].startswith(f"error: cannot write {mnt / 'rep'}") and cause in rep.stderr
    assert sorted(p.name for p in mnt.iterdir() if p.name != "filler") == ["analysis.json"]


def test_a_store_on_a_read_only_path_names_the_cause(tmp_path):
    if os.geteuid() == 0:
        # root writes through permission bits: a read-only bind mount where allowed
        ro = tmp_path / "ro"
        ro.mkdir()
        if subprocess.run(["mount", "--bind", "-o", "ro", str(ro), str(ro)], capture_output=True).returncode:
            pytest.skip("cannot make a read-only file system here")
        try:
            r = cli("ingest", INCIDENT / "tgi_router.log", "--db", ro / "s.duckdb")
        finally:
            subprocess.run(["umount", "-l", str(ro)], capture_output=True)
        causes = ("read-only file system",)
    else:
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        r = cli("ingest", INCIDENT / "tgi_router.log", "--db", ro / "s.duckdb")
        causes = ("permission denied",)
    assert r.returncode == 1 and len(_lines(r.stderr)) == 1
    assert str(ro / "s.duckdb") in r.stderr and any(c in r.stderr for c in causes), r.stderr


# -- atomic outputs -------------------------------------------------------------------------------------------------

def test_an_output_interrupted_mid_write_leaves_the_old_file(tmp_path):
    from stallscope.outputs import atomic_dir, atomic_file

    f = tmp_path / "out.json"
    f.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_file(f) as part:
            part.write_text("half")
            raise RuntimeError("killed")
    assert f.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]
    with pytest.raises(RuntimeError):
        with atomic_dir(tmp_path / "rep") as d:
            (d / "a.png").write_bytes(b"png")
            raise RuntimeError("killed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]
    with atomic_dir(tmp_path / "rep") as d:
        (d / "a.png").write_bytes(b"png")
    assert (tmp_path / "rep" / "a.png").read_bytes() == b"png"
    assert oct((tmp_path / "rep").stat().st_mode & 0o777) == oct(0o777 & ~_umask())


def _umask() -> int:
    m = os.umask(0o022)
    os.umask(m)
    return m


# -- option values ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, says", [
    (["--attainment", "5"], "'--attainment': 5 is not a share in (0, 1]"),
    (["--attainment", "nan"], "'--attainment': nan is not a number"),
    (["--attainment", "0"], "'--attainment': 0 is not a share in (0, 1]"),
    (["--spike-k", "0"], "'--spike-k': 0 must be above 1"),
    (["--slo", "ttft=2s,ttft=3s"], "'--slo': ttft given twice"),
    (["--slo", "tpot=0ms"], "'--slo': tpot=0ms: an SLO must be above 0"),
])
def test_option_values_out_of_range_are_usage_errors(sample_store, args, says):
    r = cli("analyze", "--db", sample_store, *args)
    assert r.returncode == 2 and len(_lines(r.stderr)) == 1 and says in r.stderr, r.stderr


def test_simulate_refuses_a_zero_rate(tmp_path):
    r = cli("simulate", "--rate", "0", "--out", tmp_path / "x")
    assert r.returncode == 2 and _lines(r.stderr) == ["error: Invalid value for '--rate': 0 must be above 0"]
    assert not (tmp_path / "x").exists()


# -- a file named by mistake --------------------------------------------------------------------------------------------

def test_an_unknown_file_is_described_by_kind_and_size_never_by_its_bytes(tmp_path):
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$SECRETSALT$hash:19000:0:99999:7:::\n")
    r = cli("ingest", secret, "--db", tmp_path / "s.duckdb")
    assert r.returncode == 1 and "SECRET" not in r.stderr and "root:" not in r.stderr
    assert _lines(r.stderr) == [f"error: {secret}: unknown format (text, 43 bytes): not a Kineto trace, "
                                "vLLM/TGI/SGLang log or benchmark result"]
