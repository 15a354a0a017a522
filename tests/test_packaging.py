"""What ships: parsers and queries only inside the stallscope package, SQL as package data, no test fixtures."""
from __future__ import annotations

import subprocess
import sys
import zipfile

from conftest import ROOT


def test_wheel_contents(tmp_path):
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation",
                        "-q", "-w", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    wheel = next(tmp_path.glob("stallscope-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert tops <= {"stallscope"} | {t for t in tops if t.endswith(".dist-info")}, tops
    assert "stallscope/parsers/kineto.py" in names and "stallscope/parsers/base.py" in names
    assert "stallscope/queries/__init__.py" in names
    sql_in_repo = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "stallscope" / "queries").glob("*/*.sql"))
    assert sorted(n for n in names if n.startswith("stallscope/queries/") and n.endswith(".sql")) == sql_in_repo
    # Real samples are test fixtures: never shipped.
    assert not [n for n in names if "shared" in n or n.endswith((".log", ".json.gz")) or "sample_traces" in n]
    entry = [n for n in names if n.endswith("entry_points.txt")]
    assert entry and "stallscope = stallscope.cli:main" in zipfile.ZipFile(wheel).read(entry[0]).decode()
    # Fleet mode ships; Ray only in the `fleet` extra (a plain install stays Ray-free; `--engine ray` without it
    # says how to install it: below).
    assert "stallscope/fleet/execute.py" in names and "stallscope/fleet/lake.py" in names
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("/METADATA"))).decode()
    ray_reqs = [ln for ln in meta.splitlines() if ln.startswith("Requires-Dist: ray")]
    assert ray_reqs and all('extra == "fleet"' in ln for ln in ray_reqs), ray_reqs


def test_engine_ray_without_ray_says_how_to_install(tmp_path):
    """Where Ray is not installed (Ray made unimportable here), `--engine ray` is one line saying how to get it."""
    code = ("import sys; sys.modules['ray'] = None; sys.argv = ['stallscope', 'fleet', 'run', %r, '--out', %r, "
            "'--engine', 'ray']; from stallscope.cli import main; main()" % (str(tmp_path), str(tmp_path / "l")))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 1
    assert r.stderr.strip() == ("error: --engine ray needs Ray: pip install 'stallscope[fleet]' "
                                "(or pip install 'ray>=2.40')")
    assert not (tmp_path / "l").exists()  # said before anything is written
