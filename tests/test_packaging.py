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
    sql_in_repo = sorted(p.name for p in (ROOT / "queries").glob("*.sql"))
    assert sorted(n.rsplit("/", 1)[1] for n in names if n.startswith("stallscope/queries/") and n.endswith(".sql")) \
        == sql_in_repo
    # Real samples are test fixtures: never shipped.
    assert not [n for n in names if "shared" in n or n.endswith((".log", ".json.gz")) or "sample_traces" in n]
    entry = [n for n in names if n.endswith("entry_points.txt")]
    assert entry and "stallscope = stallscope.cli:main" in zipfile.ZipFile(wheel).read(entry[0]).decode()
    # Fleet mode ships; Ray only in the `fleet` extra (a plain install stays Ray-free; `--engine ray` without it
    # says how to install it: tests/test_fleet.py).
    assert "stallscope/fleet/execute.py" in names and "stallscope/fleet/lake.py" in names
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("/METADATA"))).decode()
    ray_reqs = [ln for ln in meta.splitlines() if ln.startswith("Requires-Dist: ray")]
    assert ray_reqs and all('extra == "fleet"' in ln for ln in ray_reqs), ray_reqs
