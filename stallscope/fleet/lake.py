"""The fleet lake: declared schema of every table, atomic per-shard Hive partitions, and the `_shards` ledger.

Layout (every value a URL-safe string; `window` is `all` without --window, else the window start
`YYYYMMDDTHHMMSSZ` UTC):

    LAKE/<table>/pool=<pool>/replica=<replica>/window=<window>/part-0.parquet
    LAKE/_shards/shard=<shard_id>/part-0.parquet     one row per shard: its latest state
    LAKE/_files/part-0.parquet                       first/last instant per file content (the --window planning cache)
    LAKE/_hashes/part-0.parquet                      SHA-256 per file address, size and mtime (planning's hash cache)

The partition columns are not stored in the files (read them with `scan(table)`: `read_parquet(...,
hive_partitioning = true, hive_types_autocast = false)`, so that a replica named `007` stays a string). Every
table has `shard_id`. A shard's partitions are first written under `LAKE/_staging/` and renamed into place, then
its `_shards` row is replaced (also by rename): a crash leaves whole partitions only, and a shard is complete
exactly when its `_shards` row says `done` with the current content hash. Readers that must never see a shard in
the middle of being rewritten join on `_shards` (`done_filter`).

Every shard writes every table of `TABLES` (an empty file when it has no rows); the tables of `OPTIONAL` are
written only by the shards that have rows for them (`metrics_windows`: shards whose files carry Prometheus
metrics), so a lake without such shards has no such folder and its other tables are unchanged.
"""
from __future__ import annotations

import uuid

import pyarrow as pa
import pyarrow.parquet as pq

from stallscope.errors import StallscopeError

FORMAT = "stallscope.lake/1"
I64, F64, STR, BOOL, I32 = pa.int64(), pa.float64(), pa.string(), pa.bool_(), pa.int32()


def _schema(*cols: tuple[str, pa.DataType]) -> pa.Schema:
    return pa.schema([pa.field("shard_id", STR)] + [pa.field(n, t) for n, t in cols])


# One row per shard: the numbers `stallscope analyze --json` gives for the shard's files alone.
GOODPUT = _schema(
    ("window_start_ns", I64), ("window_end_ns", I64), ("duration_s", F64),
    ("requests_total", I64), ("requests_good", I64), ("requests_good_counterfactual", I64),
    ("requests_lost", I64), ("requests_failed", I64),
    ("goodput_rps", F64), ("goodput_counterfactual_rps", F64), ("goodput_lost_rps", F64),
    ("attainment", F64), ("meets_attainment", BOOL),
    ("spike_count", I64), ("worst_gap_ns", I64), ("gpus", I64), ("goodput_per_gpu_rps", F64),
    ("interference_gpu_s", F64),
    ("slo_ttft_ms", F64), ("slo_tpot_ms", F64), ("slo_itl_ms", F64), ("slo_e2el_ms", F64),
    ("slo_attainment", F64), ("spike_k", F64),
)
# One row per spike, the fields of analyze's `spikes` (times int64 ns).
SPIKES = _schema(
    ("spike_id", I64), ("level", STR), ("request_id", STR), ("source_request_id", STR), ("token_index", I32),
    ("step_index", I64), ("start_ns", I64), ("end_ns", I64), ("gap_ns", I64), ("baseline_ns", I64),
    ("baseline_basis", STR), ("rule", STR), ("evidence", STR), ("prefill_overlap_ns", I64), ("share", F64),
    ("excess_ns", I64), ("prefill_excess_ns", I64), ("other_ns", I64), ("stalled_decodes", I32),
    ("prefill_tokens", I64), ("source", STR), ("run_line", I64),
)
# One row per culprit of a spike (at most --max-culprits per spike, as analyze).
CULPRITS = _schema(
    ("spike_id", I64), ("rank", I64), ("request_id", STR), ("prompt_tokens", I32), ("overlap_ns", I64),
    ("evidence", STR), ("confidence", STR), ("ambiguous_with", pa.list_(STR)),
)
# One row per request: view request_metrics with the verdicts of request_verdicts / request_counterfactual.
REQUESTS = _schema(
    ("source_id", I32), ("run_line", I64), ("request_id", STR), ("report_id", STR), ("kind", STR), ("status", STR),
    ("arrival_ns", I64), ("first_token_ns", I64), ("finish_ns", I64), ("prompt_tokens", I32),
    ("output_tokens", I32), ("ttft_ns", I64), ("e2e_latency_ns", I64), ("tpot_ns", F64), ("max_itl_ns", I64),
    ("p99_itl_ns", F64), ("gaps", I64), ("completed", BOOL), ("ok_ttft", BOOL), ("ok_tpot", BOOL),
    ("ok_itl", BOOL), ("ok_e2el", BOOL), ("judged", BOOL), ("good", BOOL), ("good_cf", BOOL),
    ("removed_ns", I64), ("counts_for_goodput", BOOL),
)
# One row per shard: the recommendation (or why there is none).
RECOMMENDATIONS = _schema(
    ("status", STR), ("reason", STR), ("engine", STR), ("policy", STR),
    ("current_budget_tokens", I64), ("recommended_budget_tokens", I64), ("setting", STR), ("placement", STR),
    ("goodput_current_rps", F64), ("goodput_recommended_rps", F64), ("goodput_unchunked_rps", F64),
    ("predicted_p99_itl_ms", F64), ("predicted_p90_ttft_ms", F64), ("fit_mape", F64), ("steps_used", I64),
)
# The store's `sources` for the shard's files (run-dependent columns ingested_ns / ingest_s left out: timings are
# in `_shards`), and its `rejects`.
SOURCES = _schema(
    ("source_id", I32), ("path", STR), ("format", STR), ("parser", STR), ("parser_version", STR), ("sha256", STR),
    ("size_bytes", I64), ("raw_bytes", I64), ("compression", STR), ("records_parsed", I64),
    ("records_skipped", I64), ("records_rejected", I64), ("clock_offset_ns", I64), ("clock_method", STR),
    ("clock_residual_ns", I64), ("clock_note", STR), ("first_ns", I64), ("last_ns", I64),
)
REJECTS = _schema(
    ("source_id", I32), ("line_no", I64), ("byte_offset", I64), ("record_index", I64), ("reason", STR), ("raw", STR),
)
# The ledger: one row per shard, its latest state.
SHARDS = pa.schema([
    ("shard_id", STR), ("pool", STR), ("replica", STR), ("window", STR), ("files", pa.list_(STR)),
    ("content_hash", STR), ("status", STR), ("attempts", I64), ("error", STR), ("started_ns", I64),
    ("finished_ns", I64), ("ingest_s", F64), ("analyze_s", F64), ("recommend_s", F64), ("cpu_s", F64),
    ("worker", STR), ("worker_peak_rss_bytes", I64), ("engine", STR),
])
# Columns of `_shards` that depend on when and where a shard ran (not on its data).
SHARDS_RUN_COLUMNS = ("started_ns", "finished_ns", "ingest_s", "analyze_s", "recommend_s", "cpu_s", "worker",
                      "worker_peak_rss_bytes", "engine")
# The --window planning cache: per file content, its first and last instant and its role (the format of an input,
# `failed` when it looks like an input but cannot be loaded, `not_input`).
FILES = pa.schema([("sha256", STR), ("first_ns", I64), ("last_ns", I64), ("role", STR)])

# Planning's record of file hashes: a file whose address, size and mtime are unchanged is not read again.
HASHES = pa.schema([("path", STR), ("size_bytes", I64), ("mtime_ns", I64), ("sha256", STR)])

# One row per window of the shard's Prometheus metrics: the `windows` of `analyze --json`'s `"metrics"` object for
# the shard alone (all metric series of the shard's files merged, as analyze merges them; NaN and infinities null).
METRICS_WINDOWS = _schema(
    ("start_ns", I64), ("end_ns", I64), ("requests_finished", F64), ("ttft_p99_ms", F64), ("itl_p99_ms", F64),
    ("tpot_p99_ms", F64), ("prompt_tokens_per_s", F64), ("generation_tokens_per_s", F64), ("big_step_share", F64),
    ("ttft_ok_share", F64), ("itl_ok_share", F64),
)

TABLES: dict[str, pa.Schema] = {
    "goodput": GOODPUT, "spikes": SPIKES, "culprits": CULPRITS, "requests": REQUESTS,
    "recommendations": RECOMMENDATIONS, "sources": SOURCES, "rejects": REJECTS,
}
# Written only by shards with rows for them (see the module doc); the rollup gives an empty view when none did.
OPTIONAL: dict[str, pa.Schema] = {"metrics_windows": METRICS_WINDOWS}
ALL_TABLES: dict[str, pa.Schema] = {**TABLES, **OPTIONAL}


def conform(name: str, table: pa.Table) -> pa.Table:
    """The table in its declared schema: declared columns, in order, cast (a missing one is an internal error)."""
    schema = ALL_TABLES[name]
    missing = [f.name for f in schema if f.name not in table.column_names]
    if missing:
        raise RuntimeError(f"lake table {name}: columns {missing} not produced")
    return table.select(schema.names).cast(schema)


def partition(pool: str, replica: str, window: str) -> str:
    return f"pool={pool}/replica={replica}/window={window}"


class Lake:
    """A lake root (local path or URI) and the pyarrow filesystem it lives on."""

    def __init__(self, root: str):
        from .shards import filesystem, is_uri

        self.uri = str(root)
        self.fs, self.root = filesystem(root)
        self.remote = is_uri(root)
        try:
            self.fs.create_dir(self.root, recursive=True)
            self.fs.create_dir(f"{self.root}/_staging", recursive=True)
        except Exception as e:  # noqa: BLE001 - permissions, a file in the way, no such bucket
            raise StallscopeError(f"cannot write the lake at {root}: {str(e).splitlines()[0]}") from None

    def path(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    # -- reading ---------------------------------------------------------------------------------------------
    def ledger(self) -> pa.Table:
        """Every `_shards` row (empty table when none)."""
        from pyarrow import fs as pafs

        base = self.path("_shards")
        if self.fs.get_file_info(base).type != pafs.FileType.Directory:
            return SHARDS.empty_table()
        files = [i.path for i in self.fs.get_file_info(pafs.FileSelector(base, recursive=True))
                 if i.type == pafs.FileType.File and i.path.endswith(".parquet")]
        if not files:
            return SHARDS.empty_table()
        return pa.concat_tables([pq.read_table(f, filesystem=self.fs, schema=SHARDS) for f in files])

    def file_times_full(self) -> dict[str, tuple[int | None, int | None, str | None]]:
        """The --window planning cache: {sha256: (first_ns, last_ns, role)}."""
        from pyarrow import fs as pafs

        p = self.path("_files", "part-0.parquet")
        if self.fs.get_file_info(p).type != pafs.FileType.File:
            return {}
        t = pq.read_table(p, filesystem=self.fs, schema=FILES)
        return {k: (a, b, c) for k, a, b, c in zip(t["sha256"].to_pylist(), t["first_ns"].to_pylist(),
                                                   t["last_ns"].to_pylist(), t["role"].to_pylist())}

    def hashes(self) -> dict[tuple, str]:
        from pyarrow import fs as pafs

        p = self.path("_hashes", "part-0.parquet")
        if self.fs.get_file_info(p).type != pafs.FileType.File:
            return {}
        t = pq.read_table(p, filesystem=self.fs, schema=HASHES)
        return {(a, b, c): d for a, b, c, d in zip(*(t[n].to_pylist() for n in HASHES.names))}

    def write_hashes(self, hashes: dict[tuple, str]) -> None:
        """Replace the hash record by this run's files (files gone from SOURCE are forgotten)."""
        if not hashes or hashes == self.hashes():
            return
        keys = list(hashes)
        t = pa.table({"path": [k[0] for k in keys], "size_bytes": [k[1] for k in keys],
                      "mtime_ns": [k[2] for k in keys], "sha256": [hashes[k] for k in keys]}, schema=HASHES)
        stage = self._staging()
        pq.write_table(t, f"{stage}/part-0.parquet", filesystem=self.fs)
        self._replace_dir(stage, self.path("_hashes"))

    # -- writing ---------------------------------------------------------------------------------------------
    def _staging(self) -> str:
        d = self.path("_staging", uuid.uuid4().hex)
        self.fs.create_dir(d, recursive=True)
        return d

    def _replace_dir(self, new: str, target: str) -> None:
        """Put directory `new` at `target`, replacing what was there (rename, so never half a partition)."""
        from pyarrow import fs as pafs

        parent = target.rsplit("/", 1)[0]
        self.fs.create_dir(parent, recursive=True)
        old = None
        if self.fs.get_file_info(target).type != pafs.FileType.NotFound:
            old = self.path("_staging", uuid.uuid4().hex + "-old")
            self.fs.move(target, old)
        self.fs.move(new, target)
        if old is not None:
            self.fs.delete_dir(old)

    def write_shard(self, shard, tables: dict[str, pa.Table] | None, row: dict) -> None:
        """Write a shard's tables (None: it failed, its old partitions are removed) and then its ledger row. An
        OPTIONAL table the shard has no rows for is not written (and a partition an earlier run left is removed)."""
        from pyarrow import fs as pafs

        part = partition(shard.pool, shard.replica, shard.window)
        for name in ALL_TABLES:
            target = self.path(name, part)
            absent = tables is None or (name in OPTIONAL and (name not in tables or tables[name].num_rows == 0))
            if absent:
                if self.fs.get_file_info(target).type != pafs.FileType.NotFound:
                    self.fs.delete_dir(target)
                continue
            stage = self._staging()
            pq.write_table(conform(name, tables[name]), f"{stage}/part-0.parquet", filesystem=self.fs)
            self._replace_dir(stage, target)
        self.write_ledger_row(row)

    def write_ledger_row(self, row: dict) -> None:
        stage = self._staging()
        pq.write_table(pa.Table.from_pylist([row], schema=SHARDS), f"{stage}/part-0.parquet", filesystem=self.fs)
        self._replace_dir(stage, self.path("_shards", f"shard={row['shard_id']}"))

    def write_file_times(self, times: dict[str, tuple[int | None, int | None, str | None]]) -> None:
        if not times:
            return
        rows = {**self.file_times_full(), **times}
        t = pa.table({"sha256": list(rows), "first_ns": [v[0] for v in rows.values()],
                      "last_ns": [v[1] for v in rows.values()], "role": [v[2] for v in rows.values()]},
                     schema=FILES)
        stage = self._staging()
        pq.write_table(t, f"{stage}/part-0.parquet", filesystem=self.fs)
        self._replace_dir(stage, self.path("_files"))

    def clean_staging(self) -> None:
        """Leftovers of a run that crashed mid-write (never visible to readers: `_staging` is not a table)."""
        from pyarrow import fs as pafs

        base = self.path("_staging")
        for i in self.fs.get_file_info(pafs.FileSelector(base, recursive=False)):
            if i.type == pafs.FileType.Directory:
                self.fs.delete_dir(i.path)


# -- reading the lake with DuckDB (the rollup's entry point) --------------------------------------------------
def scan(lake: str, table: str, files: list[str] | None = None) -> str:
    """A DuckDB table expression over one lake table, partition columns (pool, replica, window) as strings.
    (`s3://` and `gs://` lakes need DuckDB's httpfs extension: `INSTALL httpfs; LOAD httpfs;`.)
    With `files` (the table's Parquet files, listed by the caller), DuckDB reads exactly those: no glob over a
    path that may itself hold glob characters (`[`, `*`, `?`)."""
    if table != "_shards" and table not in ALL_TABLES:
        raise StallscopeError(f"no lake table {table!r}; tables: {', '.join(ALL_TABLES)}, _shards")
    if files is not None:
        where = "[" + ", ".join(_literal(f) for f in files) + "]"
    else:
        root = str(lake).removeprefix("file://").rstrip("/")
        where = _literal(f"{root}/_shards/*/*.parquet" if table == "_shards" else f"{root}/{table}/*/*/*/*.parquet")
    if table == "_shards":
        # Its partition (`shard=`) repeats shard_id, which the rows hold: not added again.
        return f"read_parquet({where}, hive_partitioning = false)"
    return f"read_parquet({where}, hive_partitioning = true, hive_types_autocast = false, union_by_name = true)"


def _literal(text: str) -> str:
    """A SQL string literal, quoted once."""
    return "'" + text.replace("'", "''") + "'"


def done_filter(lake: str, alias: str = "t") -> str:
    """A WHERE clause keeping only rows of shards whose `_shards` row says `done` (the committed ones)."""
    return f"{alias}.shard_id IN (SELECT shard_id FROM {scan(lake, '_shards')} WHERE status = 'done')"
