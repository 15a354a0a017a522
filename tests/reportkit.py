"""Shared inputs and outputs of the report tests, built once per test session: the bundled unchunked incident as a
store and its report, and a hostile variant of the same incident (script-tag and 100 kB request ids, a model name
with Markdown pipes, NaN and negative latencies, a file name with markup)."""
from __future__ import annotations

import atexit
import functools
import gzip
import json
import re
import shutil
import tempfile
from pathlib import Path

from helpers import cli

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"
UNCHUNKED = SAMPLES / "unchunked-long-prompt-stall"
SLO = "ttft=2s,tpot=50ms,itl=200ms"
FIGURES = ("timeline", "throughput", "itl_cdf", "ttft", "step_time", "chunk_goodput")
OUTPUTS = ("report.md", "report.html", "analysis.json") + tuple(f"{f}.png" for f in FIGURES)

HOSTILE_IDS = ("<script>alert(1)</script>", "<img/src=x/onerror=alert(1)>", "A" * 100_000, "cmpl-|pipe|id|-0")
HOSTILE_MODEL = "evil|model|<b>bold</b>|`tick`"
HOSTILE_BENCH_NAME = "bench_<img src=x onerror=alert(3)>.json"


@functools.lru_cache(maxsize=None)
def workdir() -> Path:
    d = Path(tempfile.mkdtemp(prefix="stallscope-report-tests-"))
    atexit.register(shutil.rmtree, d, True)
    return d


def artifacts(d: Path) -> list[Path]:
    return sorted(p for p in d.iterdir() if p.name not in ("README.md", "truth.json"))


def run_ok(*args, timeout: int = 300):
    r = cli(*args, timeout=timeout)
    assert r.returncode == 0, (args, r.stdout[-2000:], r.stderr[-2000:])
    return r


def unchunked_db() -> Path:
    return sample_db(UNCHUNKED.name)


@functools.lru_cache(maxsize=None)
def unchunked_report() -> tuple[Path, str]:
    out = workdir() / "unchunked-report"
    r = run_ok("report", "--db", unchunked_db(), "--slo", SLO, "--out", out)
    return out, r.stdout


@functools.lru_cache(maxsize=None)
def sample_db(name: str) -> Path:
    db = workdir() / f"{name}.duckdb"
    run_ok("ingest", *artifacts(SAMPLES / name), "--db", db)
    return db


@functools.lru_cache(maxsize=None)
def hostile_inputs() -> Path:
    """The unchunked incident's server log and benchmark file with hostile strings: the four 8k-token requests
    (the stalls' culprits) renamed to script, markup, 100 kB and pipe ids; the model named with pipes and tags;
    NaN and negative latencies in the benchmark file, saved under a file name with markup."""
    d = workdir() / "hostile"
    d.mkdir()
    log = gzip.decompress((UNCHUNKED / "vllm_server.log.gz").read_bytes()).decode()
    longest = sorted(((m[2].count(",") + 1, m[1]) for m in re.finditer(
        r"Received request (\S+): prompt: .*?prompt_token_ids: \[([0-9, ]*)\]", log)), reverse=True)[:4]
    for (_, rid), bad in zip(longest, HOSTILE_IDS):
        log = log.replace(rid, bad)
    log = log.replace("model='meta-llama/Llama-3.1-70B-Instruct'", f"model='{HOSTILE_MODEL}'")
    (d / "vllm_server.log").write_text(log)
    bench = json.loads(gzip.decompress((UNCHUNKED / "bench_serve.json.gz").read_bytes()))
    bench["model_id"] = HOSTILE_MODEL
    bench["ttfts"][3] = -0.5
    bench["ttfts"][5] = float("nan")
    bench["itls"][7][2] = float("nan")
    bench["itls"][8][1] = -0.25
    bench["itls"][9] = [float("nan")] * len(bench["itls"][9])
    (d / HOSTILE_BENCH_NAME).write_text(json.dumps(bench))  # json writes NaN as vLLM's json.dump does
    return d


@functools.lru_cache(maxsize=None)
def hostile_report() -> tuple[Path, str]:
    out = workdir() / "hostile-report"
    r = run_ok("report", *sorted(hostile_inputs().iterdir()), "--db", hostile_db(), "--slo", SLO, "--out", out)
    return out, r.stdout


def hostile_db() -> Path:
    """The store `hostile_report` ingests the hostile inputs into (exists once hostile_report has run)."""
    return workdir() / "hostile.duckdb"
