"""Fleet execution: one shard = ingest into its own in-memory store, analyze, recommend, as Arrow tables; run
sequentially in-process (`local`) or as one Ray task per shard (`ray`), both through `run_shard`.

Faults. A shard whose files cannot be read (stallscope's own one-line input errors: an unknown format, a cut
gzip, nothing usable) fails at once: re-reading the same bytes cannot help. Any other failure (an exception the
analysis did not expect, MemoryError, a remote read that broke) is retried, and so is a worker that died (killed,
out of memory): Ray's `retry_exceptions` and `max_retries`, `--retries` times; the local engine retries exceptions
the same way (a local process that dies takes the run with it; re-run it and only what is missing is done).
Attempts are counted by a tiny Ray actor (a task cannot learn its retry number from Ray itself).

Fault injection for tests, kept tiny: `STALLSCOPE_FLEET_FAULT=kill:SHARD_ID` makes the first attempt of that
shard end its worker process (`os._exit`) in the middle of the task (after ingest, before analysis);
`raise:SHARD_ID` makes its first attempt raise an unexpected error; several are joined by commas. The driver reads
it and hands it to the tasks.
"""
from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from stallscope.errors import StallscopeError

from . import lake as lk

FAULT_ENV = "STALLSCOPE_FLEET_FAULT"


@dataclass
class RunOptions:
    slo: str | None = None
    attainment: float = 0.9
    spike_k: float = 3.0
    max_culprits: int = 5
    recommend: bool = True
    year: int | None = None
    tz: str = "UTC"
    fault: str | None = None          # the fault-injection hook (see the module doc)

    def analysis_key(self) -> dict:
        """What changes a shard's result (part of its content hash); the fault hook does not."""
        from stallscope import __version__

        return {"slo": self.slo or "", "attainment": self.attainment, "spike_k": self.spike_k,
                "max_culprits": self.max_culprits, "recommend": self.recommend, "year": self.year, "tz": self.tz,
                "stallscope": __version__, "lake": lk.FORMAT}


@dataclass
class ShardResult:
    shard_id: str
    status: str                       # done | failed
    error: str | None
    tables: dict[str, pa.Table] | None
    attempt: int
    started_ns: int
    finished_ns: int
    timings: dict = field(default_factory=dict)
    worker: str = ""
    cpu_s: float | None = None          # CPU seconds this attempt used in its process
    peak_rss_bytes: int | None = None   # peak RSS of the worker process so far (workers run several shards)


class ShardInputError(StallscopeError):
    """The shard's files cannot be read: not retried."""


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _fault(opts: RunOptions, shard_id: str, attempt: int) -> None:
    if not opts.fault or attempt != 1:
        return
    for item in opts.fault.split(","):
        kind, _, target = item.strip().partition(":")
        if target != shard_id:
            continue
        if kind == "kill":
            os._exit(17)
        if kind == "raise":
            raise RuntimeError(f"injected fault in {shard_id}")


def _localise(shard, tmp: Path) -> tuple[list[Path], dict[str, str]]:
    """Local paths to ingest (remote inputs copied under tmp) and {local path: address} to restore the names."""
    from .shards import filesystem, is_uri

    paths: list[Path] = []
    names: dict[str, str] = {}
    for n, addr in enumerate(shard.inputs):
        if not is_uri(addr):
            paths.append(Path(addr))
            continue
        fs, base = filesystem(addr)
        dest = tmp / f"in{n}"
        mine = [f for f in shard.files if f.path == addr or f.path.startswith(addr.rstrip("/") + "/")]
        for f in mine:
            rel = f.path[len(addr.rstrip("/")) + 1:] if f.path != addr else Path(base).name
            local = dest / rel if f.path != addr else dest / Path(base).name
            local.parent.mkdir(parents=True, exist_ok=True)
            src_path = f"{base}/{rel}" if f.path != addr else base
            with fs.open_input_stream(src_path, compression=None) as src, open(local, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
            names[str(local.resolve())] = f.path
        paths.append(dest if any(f.path != addr for f in mine) else dest / Path(base).name)
    return paths, names


def run_shard(shard, opts: RunOptions, attempt: int = 1) -> ShardResult:
    """Analyse one shard exactly as `stallscope analyze [--recommend]` analyses one incident."""
    from stallscope.analyze import Options as AOptions, analyze, parse_slo
    from stallscope.ingest.orchestrate import ingest_paths
    from stallscope.parsers import Options as IOptions
    from stallscope.store import Store

    started = time.time_ns()
    cpu0 = time.process_time()
    timings: dict[str, float] = {}
    try:
        aopts = AOptions(slo=parse_slo(opts.slo), attainment=opts.attainment, spike_k=opts.spike_k,
                         max_culprits=opts.max_culprits, report_views=False)
        with tempfile.TemporaryDirectory(prefix="stallscope-shard-") as tmp, Store(":memory:") as store:
            t0 = time.perf_counter()
            paths, names = _localise(shard, Path(tmp))
            report = ingest_paths(store, paths, options=IOptions(year=opts.year, tz=opts.tz))
            bad = [r for r in report if r.status == "failed"]
            if bad:
                msg = bad[0].message + (f" (and {len(bad) - 1} more files)" if len(bad) > 1 else "")
                for local, addr in names.items():  # name a remote file by its URI, not its temporary copy
                    msg = msg.replace(local, addr)
                raise ShardInputError(msg)
            if not report.ok:
                raise ShardInputError("no input files in this shard (no trace, log or benchmark result)")
            for local, addr in names.items():
                store.con.execute("UPDATE sources SET path = ? WHERE path = ?", [addr, local])
            timings["ingest_s"] = time.perf_counter() - t0
            _fault(opts, shard.shard_id, attempt)
            t0 = time.perf_counter()
            result = analyze(store.con, aopts)
            tables = shard_tables(store.con, result, shard, aopts)
            timings["analyze_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            tables["recommendations"] = _recommendation(store.con, aopts, opts.recommend, shard.shard_id)
            timings["recommend_s"] = time.perf_counter() - t0
        return ShardResult(shard.shard_id, "done", None, tables, attempt, started, time.time_ns(), timings,
                           worker_name(), time.process_time() - cpu0, _peak_rss())
    except StallscopeError as e:  # bad input or an analysis that says why: final, one line
        return ShardResult(shard.shard_id, "failed", _one_line(e), None, attempt, started, time.time_ns(), timings,
                           worker_name(), time.process_time() - cpu0, _peak_rss())


def _peak_rss() -> int | None:
    try:
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB
    except Exception:  # noqa: BLE001 - not on every platform
        return None


def _one_line(e: BaseException) -> str:
    s = str(e).strip() or type(e).__name__
    return s.splitlines()[0][:500]


def shard_tables(con, result: dict, shard, aopts) -> dict[str, pa.Table]:
    """The lake tables of one analysed shard: goodput from analyze's result, the rest from the same views."""
    sid = shard.shard_id
    req = result["requests"]
    slo = aopts.slo
    spikes = con.sql("""
        SELECT s.spike_id, s.level, s.report_id AS request_id, s.request_id AS source_request_id, s.token_index,
               st.step_index, s.start_ns, s.end_ns, s.gap_ns, s.baseline_ns, s.baseline_basis, s.rule, a.evidence,
               a.prefill_overlap_ns, a.share, a.excess_ns, a.prefill_excess_ns, a.other_ns, a.stalled_decodes,
               a.prefill_tokens, src.path AS source, s.run_line
        FROM spikes s JOIN spike_attribution a USING (spike_id) JOIN sources src ON src.source_id = s.source_id
        LEFT JOIN steps st ON st.step_id = coalesce(s.step_id, a.stalling_step_id)
        ORDER BY s.start_ns, s.spike_id""").to_arrow_table()
    worst = con.execute("SELECT max(gap_ns) FROM spikes").fetchall()[0][0]
    goodput = {
        "window_start_ns": result["window"]["start_ns"], "window_end_ns": result["window"]["end_ns"],
        "duration_s": result["window"]["duration_s"],
        "requests_total": req["total"], "requests_good": req["good"],
        "requests_good_counterfactual": req["good_counterfactual"], "requests_lost": req["lost"],
        "requests_failed": req["failed"],
        "goodput_rps": result["goodput_rps"], "goodput_counterfactual_rps": result["goodput_counterfactual_rps"],
        "goodput_lost_rps": result["goodput_lost_rps"], "attainment": result["attainment"],
        "meets_attainment": result["meets_attainment"], "spike_count": len(result["spikes"]),
        "worst_gap_ns": worst, "gpus": result["gpus"], "goodput_per_gpu_rps": result["goodput_per_gpu_rps"],
        "interference_gpu_s": result["interference_gpu_s"],
        "slo_ttft_ms": slo.ttft_ms, "slo_tpot_ms": slo.tpot_ms, "slo_itl_ms": slo.itl_ms, "slo_e2el_ms": slo.e2el_ms,
        "slo_attainment": aopts.attainment, "spike_k": aopts.spike_k,
    }
    culprits = con.sql(f"""
        SELECT spike_id, rank, report_id AS request_id, prompt_tokens, overlap_ns, evidence, confidence,
               ambiguous_with
        FROM spike_culprits WHERE rank <= {int(aopts.max_culprits)} ORDER BY spike_id, rank""").to_arrow_table()
    # The kind that judged goodput: client runs when any exist, else the server's (as analyze).
    requests = con.sql("""
        WITH judge AS (SELECT CASE WHEN count(*) FILTER (kind = 'client') > 0 THEN 'client' END AS k
                       FROM goodput_runs)
        SELECT m.source_id, m.run_line, m.request_id, m.report_id, m.kind, m.status, m.arrival_ns, m.first_token_ns,
               m.finish_ns, m.prompt_tokens, m.output_tokens, m.ttft_ns, m.e2e_latency_ns, m.tpot_ns, m.max_itl_ns,
               m.p99_itl_ns, m.gaps, v.completed, v.ok_ttft, v.ok_tpot, v.ok_itl, v.ok_e2el, v.judged, v.good,
               c.good_cf, c.removed_ns, (judge.k IS NULL OR m.kind = judge.k) AS counts_for_goodput
        FROM request_metrics m
        LEFT JOIN request_verdicts v USING (source_id, run_line, request_id)
        LEFT JOIN request_counterfactual c USING (source_id, run_line, request_id)
        CROSS JOIN judge
        ORDER BY m.source_id, m.run_line, m.request_index""").to_arrow_table()
    sources = con.sql("SELECT * FROM sources ORDER BY source_id").to_arrow_table()
    rejects = con.sql("SELECT * FROM rejects ORDER BY source_id, line_no, byte_offset, record_index").to_arrow_table()
    out = {"goodput": pa.Table.from_pylist([goodput]), "spikes": spikes, "culprits": culprits, "requests": requests,
           "sources": sources, "rejects": rejects}
    windows = metrics_windows(result)
    if windows is not None:
        out["metrics_windows"] = windows
    return {k: _with_shard(sid, v) for k, v in out.items()}


def metrics_windows(result: dict) -> pa.Table | None:
    """The windows of the analysis' `"metrics"` object as a table (None when the shard has no metrics windows:
    no samples, or none of the serving metrics). Taken from the result itself, so the lake holds exactly what
    `analyze --json` gives for the shard (at most analyze_metrics.MAX_WINDOWS rows)."""
    windows = (result.get("metrics") or {}).get("windows")
    if not windows:
        return None
    schema = pa.schema([f for f in lk.METRICS_WINDOWS if f.name != "shard_id"])
    return pa.Table.from_pylist(windows, schema=schema)


def _with_shard(sid: str, t: pa.Table) -> pa.Table:
    col = pa.array([sid] * t.num_rows, pa.string())
    return t.append_column("shard_id", col) if "shard_id" not in t.column_names else t


def _recommendation(con, aopts, enabled: bool, sid: str) -> pa.Table:
    from stallscope.recommend import Options as ROptions, recommend

    row = {k: None for k in lk.RECOMMENDATIONS.names}
    row["shard_id"] = sid
    if not enabled:
        row.update(status="skipped", reason="--no-recommend")
        return pa.Table.from_pylist([row], schema=lk.RECOMMENDATIONS)
    if not any(getattr(aopts.slo, k) is not None for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms")):
        row.update(status="skipped", reason="no latency SLO given (--slo): the recommendation needs one")
        return pa.Table.from_pylist([row], schema=lk.RECOMMENDATIONS)
    try:
        rec = recommend(con, ROptions(slo=aopts.slo, attainment=aopts.attainment, prepared=True))
    except StallscopeError as e:  # no latency SLO, an empty store: said, not fatal for the shard
        row.update(status="failed", reason=_one_line(e))
        return pa.Table.from_pylist([row], schema=lk.RECOMMENDATIONS)
    by_chunk = {r["chunk_tokens"]: r["goodput_rps"] for r in rec.get("goodput_by_chunk") or []}
    current = rec.get("current_chunk_tokens")
    model = rec.get("model") or {}
    row.update(
        status="ok" if rec.get("setting") else "insufficient",
        reason="; ".join(rec.get("missing_evidence") or []) or None,
        engine=rec.get("engine"), policy=rec.get("policy_observed"),
        current_budget_tokens=current, recommended_budget_tokens=rec.get("chunk_tokens"),
        setting=rec.get("setting"), placement=rec.get("placement"),
        # A prefill-first (unchunked) engine has no budget: its current point is the replay's unchunked row.
        goodput_current_rps=by_chunk.get(current) if current is not None else (
            by_chunk.get(None) if rec.get("policy_observed") == "prefill_first" else None),
        goodput_recommended_rps=rec.get("goodput_rps"), goodput_unchunked_rps=by_chunk.get(None),
        predicted_p99_itl_ms=rec.get("predicted_p99_itl_ms"), predicted_p90_ttft_ms=rec.get("predicted_p90_ttft_ms"),
        fit_mape=model.get("mape"), steps_used=model.get("steps_used"))
    return pa.Table.from_pylist([row], schema=lk.RECOMMENDATIONS)


# -- the driver: plan, skip what is done, run the rest on an engine, write each result as it comes -------------
@dataclass
class FleetRun:
    planned: int = 0
    skipped: int = 0          # already done with the same content hash
    executed: int = 0
    done: int = 0
    failed: int = 0
    retried: int = 0          # shards that needed more than one attempt
    wall_s: float = 0.0
    engine: str = "local"
    failures: list[tuple[str, str]] = field(default_factory=list)   # (shard_id, reason)


def plan_source(source: str, lake, opts: RunOptions, window: str | None = None, mapper=None):
    """The shards of SOURCE (with --window: files placed by their last instant, cached in the lake's `_files`).
    `mapper(fn, items, opts)` runs the planning ingest of the replicas that need one (the Ray engine: as tasks)."""
    from .shards import Hasher, discover, parse_duration, plan

    hasher = Hasher(lake.hashes())
    replicas = discover(source, hasher)
    lake.write_hashes(hasher.seen)
    window_ns = parse_duration(window) if window else None
    last: dict[str, int | None] = {}
    if window_ns is not None:
        cache = lake.file_times_full()
        new: dict[str, tuple] = {}
        need = [r for r in replicas if r.window is None and any(f.sha256 not in cache for f in r.files)]
        for got in (mapper or _map_local)(_instants, need, opts):
            new.update(got)
        lake.write_file_times(new)
        cache.update(new)
        last = {k: v[1] for k, v in cache.items() if v[2] != "not_input"}
    return plan(replicas, opts.analysis_key(), window_ns, last)


def _map_local(fn, items, opts):
    return [fn(x, opts) for x in items]


def _instants(replica, opts: RunOptions) -> dict[str, tuple]:
    """{sha256: (first_ns, last_ns, role)} of a replica's files: role is the format of an input, `failed` for a
    file that looks like an input but cannot be loaded, `not_input` for the rest (as a directory ingest says)."""
    from stallscope.ingest.orchestrate import ingest_paths
    from stallscope.parsers import Options as IOptions
    from stallscope.store import Store

    from .shards import Shard

    whole = Shard(replica.pool, replica.replica, "all", tuple(replica.inputs), tuple(replica.files))
    by_path = {f.path: f.sha256 for f in replica.files}
    out = {f.sha256: (None, None, "not_input") for f in replica.files}
    with tempfile.TemporaryDirectory(prefix="stallscope-plan-") as tmp, Store(":memory:") as store:
        paths, names = _localise(whole, Path(tmp))
        report = ingest_paths(store, paths, options=IOptions(year=opts.year, tz=opts.tz))
        for r in report:
            sha = by_path.get(names.get(r.path, r.path))
            if sha is not None and r.status == "failed":
                out[sha] = (None, None, "failed")
        for sha, first, last, fmt in store.con.execute(
                "SELECT sha256, first_ns, last_ns, format FROM sources").fetchall():
            out[sha] = (first, last, fmt)
    return out


def _ledger_row(shard, res: ShardResult | None, engine: str, *, status: str, error: str | None,
                attempts: int) -> dict:
    t = res.timings if res else {}
    return {"shard_id": shard.shard_id, "pool": shard.pool, "replica": shard.replica, "window": shard.window,
            "files": [f.path for f in shard.files], "content_hash": shard.content_hash, "status": status,
            "attempts": attempts, "error": error, "started_ns": res.started_ns if res else None,
            "finished_ns": res.finished_ns if res else time.time_ns(), "ingest_s": t.get("ingest_s"),
            "analyze_s": t.get("analyze_s"), "recommend_s": t.get("recommend_s"),
            "cpu_s": res.cpu_s if res else None, "worker": res.worker if res else None,
            "worker_peak_rss_bytes": res.peak_rss_bytes if res else None, "engine": engine}


def run_fleet(source: str, lake_root: str, opts: RunOptions, *, engine: str = "local", address: str | None = None,
              window: str | None = None, retries: int = 2, num_cpus: int | None = None,
              task_memory_mb: int = 1500, object_store_mb: int | None = None, progress=None) -> FleetRun:
    """`stallscope fleet run`: every shard of SOURCE not already done into the lake at `lake_root`.

    `progress(total)` may return a callable `advance(shard_id, status)`; the CLI passes a rich progress bar."""
    from .lake import Lake

    if engine not in ("local", "ray"):
        raise StallscopeError(f"unknown engine {engine!r}: use local or ray")
    if retries < 0:
        raise StallscopeError("--retries must be 0 or more")
    if engine == "ray":
        if not address:
            local_ray_env()
        _import_ray()  # before anything is written
    t_start = time.perf_counter()
    lake = Lake(lake_root)
    lake.clean_staging()
    with (_RayEngine(address, num_cpus, object_store_mb, task_memory_mb) if engine == "ray" else _LocalEngine()) as eng:
        shards = plan_source(source, lake, opts, window, mapper=eng.map)
        ledger = lake.ledger()
        done = {sid: h for sid, h, st in zip(ledger["shard_id"].to_pylist(), ledger["content_hash"].to_pylist(),
                                             ledger["status"].to_pylist()) if st == "done"}
        todo = [s for s in shards if done.get(s.shard_id) != s.content_hash]
        summary = FleetRun(planned=len(shards), skipped=len(shards) - len(todo), executed=len(todo), engine=engine)
        advance = progress(len(todo)) if progress and todo else None

        def record(shard, res: ShardResult | None, error: str | None, attempts: int) -> None:
            status = "done" if res is not None and res.status == "done" else "failed"
            err = None if status == "done" else (error or (res.error if res else "failed"))
            row = _ledger_row(shard, res, engine, status=status, error=err, attempts=attempts)
            try:
                lake.write_shard(shard, res.tables if status == "done" else None, row)
            except Exception as e:  # noqa: BLE001 - the one failure that stops the run: the lake cannot be written
                raise StallscopeError(f"cannot write the lake at {lake_root}: {_one_line(e)}") from None
            if status == "done":
                summary.done += 1
            else:
                summary.failed += 1
                summary.failures.append((shard.shard_id, err))
            if attempts > 1:
                summary.retried += 1
            if advance:
                advance(shard.shard_id, status)

        if todo:
            eng.run(todo, opts, retries, record)
    summary.wall_s = time.perf_counter() - t_start
    return summary


class _LocalEngine:
    map = staticmethod(_map_local)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def run(self, todo, opts, retries, record):
        _run_local(todo, opts, retries, record)


def _run_local(todo, opts: RunOptions, retries: int, record) -> None:
    for shard in todo:
        attempt, error = 0, None
        while True:
            attempt += 1
            try:
                res = run_shard(shard, opts, attempt)
                record(shard, res, None, attempt)
                break
            except StallscopeError:
                raise
            except Exception as e:  # noqa: BLE001 - unexpected: retried, then recorded with its one line
                error = f"{type(e).__name__}: {_one_line(e)}"
                if attempt > retries:
                    record(shard, None, f"{error} (after {attempt} attempts)", attempt)
                    break


RAY_INSTALL = "--engine ray needs Ray: pip install 'stallscope[fleet]' (or pip install 'ray>=2.40')"


def local_ray_env() -> None:
    """Environment for a Ray started on this machine only, set before Ray is imported: no usage statistics, and
    Ray's single-node mode, in which the node address is the loopback one and every Ray server listens on
    127.0.0.1 only (otherwise Ray swaps 127.0.0.1 for the machine's address and listens on all interfaces)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if "ray" not in sys.modules:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def _import_ray():
    try:
        import ray  # noqa: F401
    except ImportError:
        raise StallscopeError(RAY_INSTALL) from None
    return ray


def _ray_task(shard, opts: RunOptions, counter) -> ShardResult:
    import ray

    attempt = ray.get(counter.bump.remote(shard.shard_id))
    return run_shard(shard, opts, attempt)


def _ray_reason(e: BaseException) -> str:
    """One line for a task that failed every attempt: the task's own error, or how its worker died."""
    import ray.exceptions as rex

    if isinstance(e, rex.RayTaskError):
        cause = getattr(e, "cause", None)
        if cause is not None and not isinstance(cause, rex.RayTaskError):
            return f"{type(cause).__name__}: {_one_line(cause)}"
    if isinstance(e, rex.OutOfMemoryError):
        return "out of memory: the worker was killed by Ray's memory monitor"
    if isinstance(e, (rex.WorkerCrashedError, rex.NodeDiedError)):
        return f"worker died: {type(e).__name__}"
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:500]


def ray_init_kwargs(num_cpus: int | None, object_store_mb: int | None) -> dict:
    """A local Ray on this machine only (with `local_ray_env()` set before importing Ray): loopback, no
    dashboard, quiet."""
    import logging

    kw = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING,
              _node_ip_address="127.0.0.1")
    if num_cpus:
        kw["num_cpus"] = num_cpus
    if object_store_mb:
        kw["object_store_memory"] = int(object_store_mb) * 1024 * 1024
    return kw


class _RayEngine:
    """A Ray session for one run: joined (`--address`) or started locally, and shut down if started here."""

    def __init__(self, address, num_cpus, object_store_mb, task_memory_mb):
        self.address, self.num_cpus, self.object_store_mb = address, num_cpus, object_store_mb
        self.task_memory = int(task_memory_mb) * 1024 * 1024
        self.ray = _import_ray()
        self.started_here = False

    def __enter__(self):
        ray = self.ray
        if not ray.is_initialized():
            if self.address:
                ray.init(address=self.address, log_to_driver=False)
            else:
                ray.init(**ray_init_kwargs(self.num_cpus, self.object_store_mb))
            self.started_here = True
        return self

    def __exit__(self, *exc):
        if self.started_here:
            self.ray.shutdown()
        return False

    def map(self, fn, items, opts):
        """Planning work, one task per item (same resources as a shard), results in order."""
        if not items:
            return []
        task = self.ray.remote(fn).options(num_cpus=1, memory=self.task_memory)
        return self.ray.get([task.remote(x, opts) for x in items])

    def run(self, todo, opts: RunOptions, retries: int, record) -> None:
        ray = self.ray

        @ray.remote(num_cpus=0)
        class Attempts:
            def __init__(self):
                self.n: dict[str, int] = {}

            def bump(self, sid: str) -> int:
                self.n[sid] = self.n.get(sid, 0) + 1
                return self.n[sid]

            def get(self, sid: str) -> int:
                return self.n.get(sid, 0)

        counter = Attempts.remote()
        task = ray.remote(_ray_task).options(num_cpus=1, memory=self.task_memory, max_retries=retries,
                                             retry_exceptions=True)
        pending = {task.remote(s, opts, counter): s for s in todo}
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    shard = pending.pop(ref)
                    try:
                        res = ray.get(ref)
                    except Exception as e:  # noqa: BLE001 - every attempt failed: recorded, the others go on
                        n = ray.get(counter.get.remote(shard.shard_id))
                        record(shard, None, f"{_ray_reason(e)} (after {n} attempts)", n)
                        continue
                    record(shard, res, None, res.attempt)
        finally:
            for ref in pending:  # the lake could not be written: stop what is still queued
                ray.cancel(ref, force=True)
            ray.kill(counter)
