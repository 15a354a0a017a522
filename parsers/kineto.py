"""PyTorch-profiler (Kineto) Chrome-trace JSON, plain or gzip, NVIDIA and ROCm, into the GPU-timeline tables.

Pipeline: the file is mapped (or gunzipped) once; the header is decoded from the bytes around the
`traceEvents` array, and the events become an Arrow string-view column over that same buffer
(`eventtext`: found by layout, else by msgspec decoding). DuckDB parses the events a batch at a time on all
cores (`json_transform`, only the fields stallscope stores) into narrow per-destination Arrow staging tables.
CPU-op nesting is numpy sorting (`stallscope.intervals`) on a thread of its own, while the CPU-GPU links,
step windows and step composition run as SQL on a cursor of their own over the staged tables; the links that
need the nesting (time containment) come last. The ingest connection only writes.
"""
from __future__ import annotations

import gc
import re
from concurrent.futures import ThreadPoolExecutor

import duckdb
import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .base import ParseContext, Parser
from .eventtext import event_text, release_parsed, split_by_layout
from .patterns import Pattern, Sample
from stallscope.errors import InputError
from stallscope.intervals import DenseKeys, Nesting
from stallscope.memory import release_freed

VERSION = "1.0"

# -- the event layout stallscope keeps: staging column <- JSON path, DuckDB type ------------------------------
# DuckDB's json_transform pulls these out of each raw event in one parse (keys are case-sensitive, so the
# allocator's `Bytes` never collides with a memcpy's `bytes`; a value of the wrong type becomes NULL, and a
# numeric string such as ROCm's "pid": "6" becomes its number).
EVENT_FIELDS = (
    ("ph", "ph", "VARCHAR"), ("cat", "cat", "VARCHAR"), ("name", "name", "VARCHAR"),
    ("pid", "pid", "BIGINT"), ("tid", "tid", "BIGINT"), ("ts", "ts", "DOUBLE"), ("dur", "dur", "DOUBLE"),
)
ARG_FIELDS = (
    ("correlation", "correlation", "BIGINT"), ("external_id", "External id", "BIGINT"),
    ("device", "device", "BIGINT"), ("stream", "stream", "BIGINT"),
    ("grid", "grid", "BIGINT[]"), ("block", "block", "BIGINT[]"),
    ("registers", "registers per thread", "BIGINT"), ("shared_memory", "shared memory", "BIGINT"),
    ("blocks_per_sm", "blocks per SM", "DOUBLE"), ("warps_per_sm", "warps per SM", "DOUBLE"),
    ("occupancy", "est. achieved occupancy %", "DOUBLE"),
    ("python_id", "Python id", "BIGINT"), ("python_parent_id", "Python parent id", "BIGINT"),
    ("record_function_id", "Record function id", "BIGINT"),
    ("nbytes", "bytes", "VARCHAR"), ("bandwidth", "memory bandwidth (GB/s)", "DOUBLE"),
    ("kind", "kind", "VARCHAR"), ("kernel", "kernel", "VARCHAR"), ("cbid", "cbid", "BIGINT"), ("cid", "cid", "BIGINT"),
    ("meta_name", "name", "VARCHAR"), ("labels", "labels", "VARCHAR"),
)


def _transform_spec(exact_ts: bool) -> str:
    """The json_transform spec; `exact_ts` reads ts as text, for epoch-µs stamps a double cannot hold to the ns."""
    import json

    spec = {k: t for _, k, t in EVENT_FIELDS}
    if exact_ts:
        spec["ts"] = "VARCHAR"
    spec["args"] = {k: t for _, k, t in ARG_FIELDS}
    return json.dumps(spec).replace("'", "''")


def _staging_select() -> str:
    ev = [f'e."{k}" AS {c}' for c, k, _ in EVENT_FIELDS]
    args = [f'e.args."{k}" AS {c}' for c, k, _ in ARG_FIELDS]
    return ", ".join(ev + args)


_SPEC = {exact: _transform_spec(exact) for exact in (False, True)}
_PARSE_BATCH = 16_384
_STAGE_SELECT = _staging_select()
_raw_list_decoder = msgspec.json.Decoder(list[msgspec.Raw])
_top_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])

# -- step markers: formats as data, with the real lines they were taken from -------------------------------

_TR = "../shared/real/traces/"
STEP_PATTERNS = [
    Pattern(
        "vllm_execute_model_window",
        r"(?P<file>gpu_model_runner|gpu_worker|worker/model_runner)\.py\((?P<line>\d+)\): execute_model$",
        (
            Sample("vllm/v1/worker/gpu_model_runner.py(1002): execute_model", {"file": "gpu_model_runner", "line": "1002"},
                   _TR + "vllm_h100_tp4_llama_isl1000_osl10_c32.pt.trace.json.gz"),
            Sample("vllm/v1/worker/gpu_worker.py(258): execute_model", {"file": "gpu_worker", "line": "258"},
                   _TR + "vllm_mi300x_tp4_llama_isl1000_osl10_c32.pt.trace.json.gz"),
            Sample("vllm/v1/worker/gpu_model_runner.py(3380): execute_model", {"file": "gpu_model_runner", "line": "3380"},
                   _TR + "vllm_mi300x_mixed_step_ctx9_gen37.json.gz"),
        ),
        doc="python_function names of vLLM's per-iteration execute_model (V1 gpu_model_runner / gpu_worker, V0 worker/model_runner).",
    ),
    Pattern(
        "vllm_detailed",
        r"^execute_(?P<total>\d+)_context_(?P<nc>\d+)\(sq(?P<c_sq>\d+)sk(?P<c_sk>\d+)sqsq(?P<c_sqsq>\d+)sqsk(?P<c_sqsk>\d+)\)"
        r"_generation_(?P<ng>\d+)\(sq(?P<g_sq>\d+)sk(?P<g_sk>\d+)sqsq(?P<g_sqsq>\d+)sqsk(?P<g_sqsk>\d+)\)$",
        (
            Sample("execute_8192_context_9(sq8155sk8430sqsq7475785sqsk7671310)_generation_37(sq37sk34489sqsq37sqsk34489)",
                   {"total": "8192", "nc": "9", "c_sq": "8155", "c_sk": "8430", "c_sqsq": "7475785",
                    "c_sqsk": "7671310", "ng": "37", "g_sq": "37", "g_sk": "34489"},
                   _TR + "vllm_mi300x_mixed_step_ctx9_gen37.json.gz"),
            Sample("execute_15360_context_15(sq15360sk15360sqsq15728640sqsk15728640)_generation_0(sq0sk0sqsq0sqsk0)",
                   {"total": "15360", "nc": "15", "c_sq": "15360", "ng": "0", "g_sq": "0"},
                   _TR + "sglang_mi300x_qwen3-8b_extend_step.json.gz"),
        ),
        doc="vLLM `detailed_trace_annotation` (and the TraceLens SGLang patch): sums of q, kv, q², q·kv per phase.",
    ),
    Pattern(
        "vllm_context_generation_qk",
        r"^execute_(?:(?P<total>\d+)_)?context_(?P<nc>\d+)\((?P<c_tok>\d+)_(?P<c_qk>\d+)\)_generation_(?P<ng>\d+)\((?P<g_tok>\d+)(?:_(?P<g_qk>\d+))?\)$",
        (
            Sample("execute_context_1(888_788544)_generation_0(0)",
                   {"nc": "1", "c_tok": "888", "c_qk": "788544", "ng": "0", "g_tok": "0", "g_qk": None},
                   _TR + "vllm_b200_tp8_eager_prefill_step.json.gz"),
        ),
        doc="Context tokens with their q·kv attention work (888 tokens, 888² = 788544 with no cached prefix).",
    ),
    Pattern(
        "vllm_context_generation",
        r"^execute_(?:(?P<total>\d+)_)?context_(?P<nc>\d+)\((?P<c_tok>\d+)\)_generation_(?P<ng>\d+)\((?P<g_tok>\d+)\)$",
        (
            Sample("execute_context_2(4096)_generation_30(30)", {"nc": "2", "c_tok": "4096", "ng": "30", "g_tok": "30"}),
        ),
        doc="vLLM `Worker.annotate_profile`: context (prefill) and generation (decode) request and token counts.",
    ),
    Pattern(
        "vllm_new_cached",
        r"^execute_new_(?P<new>\d+)_cached_(?P<cached>\d+)$",
        (Sample("execute_new_3_cached_29", {"new": "3", "cached": "29"}),),
        doc="vLLM ~0.10-0.11 `annotate_profile`: new (first-scheduled) and carried-over requests.",
    ),
    Pattern(
        "sglang_step",
        r"^step\[(?P<mode>[A-Z_]+)(?: bs=(?P<bs>\d+))?(?: toks=(?P<toks>\d+))?[^\]]*\]",
        (
            Sample("step[EXTEND bs=15 toks=15360]", {"mode": "EXTEND", "bs": "15", "toks": "15360"},
                   _TR + "sglang_mi300x_qwen3-8b_extend_step.json.gz"),
            Sample("step[DECODE bs=32]", {"mode": "DECODE", "bs": "32", "toks": None}),
        ),
        doc="SGLang scheduler step annotation (`step[EXTEND …]`, `step[DECODE …]`, `step[MIXED …]`).",
    ),
]
PATTERNS = STEP_PATTERNS
_P = {p.name: p for p in STEP_PATTERNS}

# Category routing. Old (pre-2022) Kineto names map case-insensitively onto current ones.
_CAT_NORMAL = {"kernel": "kernel", "runtime": "cuda_runtime", "memcpy": "gpu_memcpy", "memset": "gpu_memset",
               "driver": "cuda_driver"}
_STORED = {
    "kernel": "gpu_kernels", "gpu_memcpy": "gpu_memops", "gpu_memset": "gpu_memops",
    "cpu_op": "cpu_ops", "user_annotation": "cpu_ops", "python_function": "cpu_ops",
    "cuda_runtime": "runtime_calls", "cuda_driver": "runtime_calls", "gpu_user_annotation": "gpu_annotations",
}
# Kineto ActivityType names and other categories real traces carry that stallscope does not store.
_KNOWN_NOISE = {
    "ac2g", "fwdbwd", "async_gpu", "async_cpu_to_gpu", "overhead", "trace", "cpu_instant_event",
    "external_correlation", "cuda_sync", "cuda_event", "cuda_profiler_range", "mtia_runtime", "mtia_ccp_events",
    "mtia_insight", "mtia_counters", "glow_runtime", "hpu_op", "xpu_runtime", "xpu_driver", "collective_comm",
    "privateuse1_runtime", "privateuse1_driver", "xpu_scope_profiler", "xpu_sync", "hardware_counters",
}


class KinetoParser(Parser):
    name = "kineto"
    version = VERSION
    formats = ("kineto_trace",)
    order = 10

    def sniff(self, head: bytes, inp):
        h = head.lstrip()
        if h[:1] == b"{":
            if b'"traceEvents"' in h:
                return "kineto_trace", 0.95
            if b'"schemaVersion"' in h and b'"deviceProperties"' in h:
                return "kineto_trace", 0.8
        if h[:1] == b"[" and b'"ph"' in h[:4096] and b'"ts"' in h[:4096]:
            return "kineto_trace", 0.6
        return None

    def parse(self, ctx: ParseContext, fmt: str) -> None:
        was_enabled = gc.isenabled()
        gc.disable()  # the cyclic GC halves decode throughput on millions of small objects
        try:
            _Loader(ctx).run()
        finally:
            if was_enabled:
                gc.enable()


PARSER = KinetoParser()


class _Loader:
    """One trace file through the pipeline: decode → staging table → canonical tables → links → steps."""

    def __init__(self, ctx: ParseContext):
        self.ctx = ctx
        self.con = ctx.con
        self.sid = ctx.source_id

    # -- decoding ----------------------------------------------------------------------------------
    def run(self) -> None:
        ctx = self.ctx
        dec = ctx.input.read_all(mapped=True)
        ctx.raw_bytes = len(dec.data)
        if not dec.data or (not dec.data[:4096].strip() and not dec.data.strip()):
            raise InputError(f"{ctx.path}: " + (dec.error or "no data"))
        header, text, cut, guessed = self._split(dec.data, dec.error)
        self.header = {k: _decode_small(v) for k, v in header.items()}
        base = self.header.get("baseTimeNanoseconds")
        self.base = int(base) if isinstance(base, (int, float)) and not isinstance(base, bool) else None
        self.truncated = cut is not None
        if cut is not None:
            offset, reason, tail = cut
            ctx.reject(reason, tail, byte_offset=offset)
        del header, cut
        try:
            self._stage(text, self.base or 0, dec.data)
        except duckdb.InvalidInputException:
            if not guessed:
                raise
            # The layout guess cut through an event (or an event is malformed): decode the array properly.
            text = self._split(dec.data, dec.error, by_layout=False)[1]
            self._stage(text, self.base or 0, dec.data)
        # The event texts pin the whole decompressed file; let it go before the derivation allocates more.
        del text, dec
        self._derive()

    def _split(self, data, gzip_error: str | None, by_layout: bool = True):
        """Header keys, the event texts, the cut (offset, reason, tail) if the file ends early, and whether the
        events were found by layout (unvalidated until DuckDB parses them)."""
        if gzip_error is None and (env := _envelope(data)) is not None:
            header, lo, hi = env
            if by_layout and (text := split_by_layout(data, lo + 1, hi)) is not None:
                return header, text, None, True
            try:
                raws = _raw_list_decoder.decode(memoryview(data)[lo: hi + 1])
                return header, event_text(raws, data), None, False
            except msgspec.DecodeError:
                pass
        if not isinstance(data, bytes):
            data = data[:]  # a mapped file: the slower paths below work on a copy
        header, raws, src, cut = self._decode(data, gzip_error)
        return header, event_text(raws, src), cut, False

    def _decode(self, data: bytes, gzip_error: str | None):
        """Header keys and the raw event slices of the whole document; on a cut file, every complete event."""
        try:
            top = _top_decoder.decode(data)
            if isinstance(top, dict) and "traceEvents" in top:
                raws = _raw_list_decoder.decode(top.pop("traceEvents"))
                return top, raws, data, None
            if "traceEvents" not in top:
                raise InputError(f"{self.ctx.path}: JSON object has no traceEvents")
        except msgspec.ValidationError:
            # A bare Chrome-trace array: `[ {event}, ... ]`.
            try:
                return {}, _raw_list_decoder.decode(data), data, None
            except msgspec.DecodeError:
                pass
        except msgspec.DecodeError:
            pass
        return self._recover(data, gzip_error)

    def _recover(self, data: bytes, gzip_error: str | None):
        key = data.find(b'"traceEvents"')
        bare = data.lstrip()[:1] == b"["
        if key < 0 and not bare:
            why = gzip_error or "JSON is malformed or cut before traceEvents"
            raise InputError(f"{self.ctx.path}: not a readable trace ({why})")
        header: dict = {}
        if key >= 0:
            start = data.find(b"[", key)
            try:
                header = _top_decoder.decode(data[:key] + b'"traceEvents": []}')
                header.pop("traceEvents", None)
            except msgspec.DecodeError:
                header = {}
        else:
            start = data.find(b"[")
        if start < 0:
            raise InputError(f"{self.ctx.path}: trace cut before its first event ({gzip_error or 'JSON cut'})")
        buf = bytearray(data[start:])
        view = memoryview(buf)
        pos = len(buf)
        raws = None
        for _ in range(10_000):
            pos = buf.rfind(b"}", 0, pos)
            if pos < 0:
                break
            if pos + 1 < len(buf):
                saved = buf[pos + 1]
                buf[pos + 1] = 0x5D  # ']'
                try:
                    raws = _raw_list_decoder.decode(view[: pos + 2])
                    break
                except msgspec.DecodeError:
                    buf[pos + 1] = saved
            else:
                try:
                    raws = _raw_list_decoder.decode(bytes(buf) + b"]")
                    break
                except msgspec.DecodeError:
                    pass
        if not raws:
            why = gzip_error or "JSON ends early"
            raise InputError(f"{self.ctx.path}: not a readable trace: {why} before the first complete event")
        # The raw slices point into `buf`, whose only change is past the last kept event.
        kept_end = start + pos + 1 if raws else start + 1
        tail = data[kept_end: kept_end + 512]
        why = gzip_error or "JSON ends early"
        reason = (f"trace cut: {why}; kept {len(raws)} complete events, dropped {len(data) - kept_end} bytes "
                  f"after decompressed byte {kept_end}")
        return header, raws, buf, (kept_end, reason, tail.lstrip(b", \r\n\t"))

    def _stage(self, text: pa.Array, offset_ns: int, src=None) -> None:
        """Event texts → narrow typed staging tables, a batch at a time (memory stays bounded on huge traces).

        DuckDB parses each batch on all cores into one typed table whose rows go three ways: CPU ops (most
        rows) to `_kcpu`, other stored or rejected events to `_kother`, events only counted to `_kskip`.
        At the end `_kother` splits into `_krt0` (runtime calls), `_kgpu` (GPU activity), `_kmeta`, `_krej`,
        and `_kacc` counts every event by (ph, cat, destination). Each staging table carries every column
        its canonical table needs, so no later step joins an event back together."""
        n = len(text)
        if n == 0:
            raise InputError(f"{self.ctx.path}: trace has no events")
        parse = self._parse_sql(offset_ns)
        # Parsing runs on a cursor outside the ingest transaction: Arrow inputs registered inside it would be
        # kept alive until commit, so memory would grow with every batch. Batches are staged as Arrow, not as
        # DuckDB temp tables, for the same reason.
        cur = self.con.cursor()
        parts: dict[str, list[pa.Table]] = {"_kcpu": [], "_kother": [], "_kskip": []}
        # Each parsed batch is routed on a thread (Arrow filters, one core) while DuckDB parses the next.
        router = ThreadPoolExecutor(max_workers=1)
        routing = None
        try:
            step = max(1, self.ctx.options.chunk_events)
            for lo in range(0, n, step):
                batch = text.slice(lo, step)
                raw = pa.table({"event_id": pa.array(np.arange(lo, lo + len(batch), dtype=np.int64)), "j": batch})
                # Several record batches let DuckDB parse them on all cores.
                cur.register("_kraw", pa.Table.from_batches(raw.to_batches(max_chunksize=_PARSE_BATCH)))
                kb = cur.sql(parse).to_arrow_reader(step).read_all()
                cur.unregister("_kraw")
                if routing is not None:
                    routing.result()  # one batch in flight: memory stays bounded
                routing = router.submit(_route, kb, parts)
                del kb
                release_parsed(src, text, lo + step)
                self.ctx.progress(min(lo + step, n))
            routing.result()
            self.staged = self._split_staged(cur, {t: pa.concat_tables(p) for t, p in parts.items()})
        finally:
            router.shutdown(wait=True)
            cur.close()
        release_freed()  # the batches' memory: nothing that size is allocated again
        self.n_events = n

    def _parse_sql(self, offset_ns: int) -> str:
        """One batch of `_kraw` event texts → typed columns, the normalised category and the destination."""
        fast = ", ".join(f"'{k}'" for k in sorted(set(_STORED) | _KNOWN_NOISE))
        norm = " ".join(f"WHEN '{k}' THEN '{v}'" for k, v in _CAT_NORMAL.items())
        stored_case = " ".join(f"WHEN '{k}' THEN '{v}'" for k, v in _STORED.items())
        noise = ", ".join(f"'{c}'" for c in sorted(_KNOWN_NOISE))
        stored = ", ".join(f"'{k}'" for k in _STORED)
        py_kept = "true" if self.ctx.options.keep_python_functions else "name LIKE '%execute_model'"
        # Relative timestamps (< 8e12 µs) are exact in a double; absolute epoch-µs ones (~1.7e15, old traces
        # without baseTimeNanoseconds) are not, so those are read as text and go through exact decimals.
        exact = not offset_ns
        ts_ns = ("coalesce(CAST(round(TRY_CAST(ts AS DECIMAL(38, 6)) * 1000) AS BIGINT), "
                 "CAST(round(TRY_CAST(ts AS DOUBLE) * 1000) AS BIGINT))" if exact else
                 "CAST(round(ts * 1000) AS BIGINT)")
        return f"""
            WITH t AS (
                SELECT event_id, {_STAGE_SELECT},
                       -- Metadata names processes and threads by their raw ids, numeric or not.
                       CASE WHEN e.ph = 'M' THEN json_extract_string(j, '$.pid') END AS pid_s,
                       CASE WHEN e.ph = 'M' THEN json_extract_string(j, '$.tid') END AS tid_s
                FROM (SELECT event_id, j, json_transform(j, '{_SPEC[exact]}') AS e FROM _kraw)),
            c AS (
                SELECT * EXCLUDE (ts, dur),
                       CASE WHEN cat IN ({fast}) THEN cat ELSE CASE lower(cat) {norm} ELSE cat END END AS ncat,
                       {ts_ns} + {offset_ns} AS start_ns,
                       greatest(CAST(round(coalesce(dur, 0) * 1000) AS BIGINT), 0) AS dur_ns
                FROM t)
            SELECT *,
                   CASE WHEN ph IS NULL OR (ph = 'X' AND start_ns IS NULL) THEN 'rejected'
                        WHEN ph = 'X' AND ncat = 'python_function' AND NOT ({py_kept}) THEN 'skipped'
                        WHEN ph = 'X' AND ncat IN ({stored}) THEN CASE ncat {stored_case} END
                        WHEN ph = 'M' AND name IN ('process_name', 'thread_name', 'process_labels')
                             THEN 'trace_threads'
                        WHEN ph IN ('M', 's', 'f', 't', 'i', 'I', 'C', 'b', 'e', 'n', 'R', 'P', 'O', 'N', 'D')
                             OR lower(cat) IN ({noise}) THEN 'skipped'
                        ELSE 'unknown' END AS stored_in
            FROM c"""

    @staticmethod
    def _split_staged(cur, staged: dict[str, pa.Table]) -> dict[str, pa.Table]:
        """`_kother` into the small per-destination tables, and the per-(ph, cat, destination) counts."""
        other = staged.pop("_kother")
        cur.register("_kother", other)
        for name, (dests, cols) in _ROUTES.items():
            staged[name] = cur.sql(f"SELECT {', '.join(cols)} FROM _kother "
                                   f"WHERE stored_in IN ({', '.join(map(repr, dests))})").to_arrow_table()
        cur.register("_kcpu", staged["_kcpu"])
        cur.register("_kskip", staged.pop("_kskip"))
        staged["_kacc"] = cur.sql("""
            SELECT ph, cat, stored_in, count(*) AS events, min(start_ns) FILTER (WHERE ph = 'X') AS lo,
                   max(start_ns + dur_ns) FILTER (WHERE ph = 'X') AS hi
            FROM (SELECT 'X' AS ph, ncat AS cat, 'cpu_ops' AS stored_in, start_ns, dur_ns FROM _kcpu
                  UNION ALL SELECT ph, cat, stored_in, start_ns, dur_ns FROM _kother
                  UNION ALL SELECT ph, cat, stored_in, start_ns, dur_ns FROM _kskip)
            GROUP BY ph, cat, stored_in""").to_arrow_table()
        return staged

    # -- derivation (SQL) --------------------------------------------------------------------------
    def _derive(self) -> None:
        # Derivation queries run on a cursor of their own, reading the staged Arrow tables: the ingest
        # connection only writes (Arrow registered inside its transaction would be held until commit).
        self.dc = self.con.cursor()
        try:
            for t, tbl in self.staged.items():
                self.dc.register(t, tbl)
            self._derive_all()
        finally:
            self.dc.close()
            self.staged.clear()

    def _derive_all(self) -> None:
        ctx, dc = self.ctx, self.dc
        h, base = self.header, self.base
        lo, hi = dc.execute("SELECT min(lo), max(hi) FROM _kacc WHERE stored_in <> 'rejected'").fetchall()[0]
        if base is not None:
            mode = "relative_to_base"
            ctx.set_clock("trace_base_time", f"abs_ns = baseTimeNanoseconds ({base}) + round(ts*1000)")
        elif lo is not None and lo > 1e17:
            mode = "epoch_us"
            ctx.set_clock("trace_epoch_us", "no baseTimeNanoseconds: ts read as epoch microseconds (old Kineto)")
        else:
            mode = "relative_unanchored"
            ctx.set_clock("trace_unanchored", "no baseTimeNanoseconds and ts is not epoch µs: times are relative "
                                              "to the trace's own origin, not wall clock")
        dist = h.get("distributedInfo") if isinstance(h.get("distributedInfo"), dict) else {}
        rank = dist.get("rank") if isinstance(dist.get("rank"), int) else None
        self.rank = rank
        ctx.first_ns, ctx.last_ns = lo, hi
        self._account()
        # The CPU ranges the links and step windows look at: ATen ops and annotations, and execute_model
        # (the other python functions, most of the rows, are only nested).
        dc.execute("CREATE TEMP TABLE _kops AS SELECT event_id, ncat AS category, pid, tid, start_ns, "
                   "start_ns + dur_ns AS end_ns, name, external_id, CASE WHEN ncat = 'python_function' "
                   "THEN 'py' ELSE 'op' END AS fam FROM _kcpu "
                   "WHERE ncat <> 'python_function' OR name LIKE '%execute_model'")
        dc.unregister("_kcpu")  # from here on the staged CPU rows are read as Arrow, off the derivation cursor
        # Links and steps: each canonical table's rows are computed here, and written once all are known.
        self.out: dict[str, pa.Table] = {}
        # The nesting is numpy and Arrow work, which releases the GIL: it runs on a thread while DuckDB derives
        # everything that does not need it (only the containment links do).
        with ThreadPoolExecutor(max_workers=1) as pool:
            nesting = pool.submit(self._nest_cpu_ops)
            self._steps_windows()
            self._runtime()
            self._gpu()
            self._steps()
            # While the nesting finishes: the staged columns cpu_ops keeps as they are, made contiguous, so that
            # DuckDB writes whole row groups (see ParseContext.write).
            kept = {col: self.staged["_kcpu"][src].combine_chunks() for col, src in _CPU_KEPT}
            rows = pa.table(nesting.result() | kept)
            del kept
        del self.staged["_kcpu"]
        self._containment_links()
        release_freed()  # the staged CPU rows and the nesting's temporaries, before the insert allocates
        ctx.write("cpu_ops", rows)
        del rows
        for table, rows in self.out.items():
            ctx.write(table, rows)
        self._meta(h, base, mode, rank, dist, lo, hi)
        self.out.clear()

    def _emit(self, table: str, select_sql: str) -> None:
        """Rows for a canonical table, computed on the derivation cursor (later steps read them as `_o_<table>`)."""
        rows = self.dc.sql(select_sql).to_arrow_table()
        self.out[table] = rows
        self.dc.register(f"_o_{table}", rows)

    def _account(self) -> None:
        """trace_categories and the parsed / skipped / rejected counts every event falls into."""
        dc = self.dc
        self.ctx.write("trace_categories", dc.sql(
            "SELECT ph, cat, sum(events) AS events, stored_in FROM _kacc GROUP BY ph, cat, stored_in").to_arrow_table())
        self.ctx.write_rejects(dc.sql(
            "SELECT event_id AS record_index, CASE WHEN ph IS NULL THEN 'not a trace event (no \"ph\")' "
            "ELSE 'complete (X) event without ts' END AS reason, name AS raw FROM _krej").to_arrow_table())
        parsed, skipped = dc.execute(
            "SELECT coalesce(sum(events) FILTER (WHERE stored_in NOT IN ('skipped', 'unknown', 'rejected')), 0), "
            "coalesce(sum(events) FILTER (WHERE stored_in IN ('skipped', 'unknown')), 0) FROM _kacc").fetchall()[0]
        self.ctx.counts.parsed += int(parsed)
        self.ctx.counts.skipped += int(skipped)
        unknown = dc.execute("SELECT string_agg(DISTINCT coalesce(cat, '(none)'), ', ') FROM _kacc "
                             "WHERE stored_in = 'unknown'").fetchall()[0][0]
        if unknown:
            self.ctx.notes.append(f"unknown event categories counted, not stored: {unknown}")

    def _nest_cpu_ops(self) -> dict[str, object]:
        """The computed cpu_ops columns: times, and nesting depth and parent per thread (numpy sort/search, see
        stallscope.intervals). Runs on a thread of its own.

        ATen ops and annotations nest among themselves, python functions among themselves: one nesting over
        (pid, tid, is python) keys does both. The runtime calls' enclosing ranges are looked up here too, so
        the nesting is gone before cpu_ops is written."""
        ops = self.staged["_kcpu"]
        py = pc.equal(ops["ncat"], "python_function").to_numpy(zero_copy_only=False).astype(np.int64)
        threads = DenseKeys(_ints(ops["pid"]), _ints(ops["tid"]), py)
        start, dur = _ints(ops["start_ns"]), _ints(ops["dur_ns"])  # never null in a stored complete event
        nest = Nesting(threads.ids, start, start + dur)
        ev = _ints(ops["event_id"])
        self.containment = _containment(self.staged["_krt0"], nest, ev, threads)
        parent = _take(ev, nest.parent)
        n = len(ev)
        return {"event_id": ev, "rank": pa.nulls(n, pa.int32()) if self.rank is None else np.full(n, self.rank, np.int32),
                "start_ns": start, "end_ns": start + dur, "dur_ns": dur, "depth": nest.depth.astype(np.int32),
                "parent_event_id": pa.array(parent, mask=parent < 0)}

    def _steps_windows(self) -> None:
        """Candidate step windows: execute_model python functions (best family present), else annotations."""
        con = self.dc
        win_rx = _P["vllm_execute_model_window"].regex
        con.execute(f"""
            CREATE TEMP TABLE _kwin AS
            WITH py AS (
                SELECT event_id, pid, tid, start_ns, end_ns, name,
                       CASE regexp_extract(name, '{win_rx}', 1)
                            WHEN 'gpu_model_runner' THEN 1 WHEN 'gpu_worker' THEN 2 WHEN 'worker/model_runner' THEN 3
                       END AS prio
                FROM _kops WHERE category = 'python_function' AND name LIKE '%execute_model'),
            best AS (SELECT min(prio) AS prio FROM py WHERE prio IS NOT NULL),
            ann AS (
                SELECT event_id, pid, tid, start_ns, end_ns, name,
                       CASE WHEN regexp_matches(name, '{_P['sglang_step'].regex}') THEN 4 ELSE 5 END AS prio
                FROM _kops WHERE category = 'user_annotation' AND (name LIKE 'execute\\_%' ESCAPE '\\' OR name LIKE 'step[%')),
            ann_best AS (SELECT min(prio) AS prio FROM ann)
            SELECT event_id, pid, tid, start_ns, end_ns, name,
                   'vllm_execute_model' AS marker FROM py WHERE prio = (SELECT prio FROM best)
            UNION ALL
            SELECT event_id, pid, tid, start_ns, end_ns, name,
                   CASE WHEN prio = 4 THEN 'sglang_step' ELSE 'vllm_annotation' END
            FROM ann WHERE (SELECT prio FROM best) IS NULL AND prio = (SELECT prio FROM ann_best)""")
        con.execute(f"""
            CREATE OR REPLACE TEMP TABLE _kwin AS
            SELECT *, row_number() OVER (ORDER BY start_ns, event_id) - 1 AS step_index,
                   {self.sid}::BIGINT * 1000000000 + row_number() OVER (ORDER BY start_ns, event_id) - 1 AS step_id
            FROM _kwin""")

    def _runtime(self) -> None:
        """runtime_calls, linked to their CPU op by External id (time containment follows in
        `_containment_links`, once the nesting is done)."""
        con = self.dc
        con.execute("""
            CREATE TEMP TABLE _krt AS
            SELECT event_id, ncat AS category, pid, tid, start_ns, start_ns + dur_ns AS end_ns, dur_ns, name,
                   correlation, external_id, coalesce(cbid, cid) AS cbid, kernel AS kernel_name,
                   regexp_matches(name, '(?i)(launch|graphlaunch)') AND NOT regexp_matches(name, '(?i)hostfunc')
                       AS is_launch,
                   regexp_matches(name, '(?i)graphlaunch') AS is_graph_launch
            FROM _krt0""")
        self._emit("runtime_calls", f"""
            WITH ext AS (
                -- Old traces number External ids differently on both sides: accept only a link in time.
                SELECT r.event_id, min(o.event_id) AS op_id
                FROM _krt r JOIN _kops o ON o.fam = 'op' AND o.external_id = r.external_id
                 AND r.start_ns >= o.start_ns AND r.start_ns <= o.end_ns
                WHERE r.external_id IS NOT NULL GROUP BY r.event_id)
            SELECT r.event_id, {_sql_int(self.rank)} AS rank, r.category, r.pid, r.tid, r.start_ns, r.end_ns,
                   r.dur_ns, r.name, r.correlation, r.external_id, r.cbid, r.kernel_name, r.is_launch,
                   r.is_graph_launch, ext.op_id AS cpu_op_event_id,
                   CASE WHEN ext.op_id IS NOT NULL THEN 'external_id' END AS cpu_link, w.step_id
            FROM _krt r LEFT JOIN ext USING (event_id)
            LEFT JOIN _kwin w ON w.pid = r.pid AND r.start_ns >= w.start_ns AND r.start_ns < w.end_ns""")

    def _containment_links(self) -> None:
        """Runtime calls without an External-id link take the innermost CPU op enclosing them on their thread
        (else the innermost python function: CUDA-graph replays); kernels take their launch's CPU op."""
        con = self.dc
        con.register("_kcont", self.containment)
        self._emit("runtime_calls", """
            SELECT r.* REPLACE (
                       coalesce(r.cpu_op_event_id, c.op_id, c.py_id) AS cpu_op_event_id,
                       CASE WHEN r.cpu_link IS NOT NULL THEN r.cpu_link WHEN c.op_id IS NOT NULL THEN 'containment'
                            WHEN c.py_id IS NOT NULL THEN 'containment_python' END AS cpu_link)
            FROM _o_runtime_calls r LEFT JOIN _kcont c USING (event_id)""")
        con.unregister("_kcont")
        self._emit("gpu_kernels", """
            SELECT k.*, r.cpu_op_event_id, r.cpu_link
            FROM _o_gpu_kernels k LEFT JOIN _o_runtime_calls r ON r.event_id = k.launch_event_id""")

    def _gpu(self) -> None:
        """gpu_kernels, gpu_memops, gpu_annotations, each linked to its launch by correlation."""
        con, w = self.dc, self._emit
        rank = _sql_int(self.rank)
        con.execute(f"""
            CREATE TEMP TABLE _klaunch AS
            SELECT correlation, arg_min(event_id, (category <> 'cuda_runtime', event_id)) AS launch_event_id
            FROM _o_runtime_calls WHERE correlation IS NOT NULL GROUP BY correlation""")
        launch_join = f"""
            LEFT JOIN _klaunch l ON l.correlation = k.correlation
            LEFT JOIN _o_runtime_calls r ON r.event_id = l.launch_event_id"""
        w("gpu_kernels", f"""
            SELECT k.event_id, {rank} AS rank, CAST(coalesce(k.device, k.pid) AS INTEGER) AS device,
                   CAST(coalesce(k.stream, k.tid) AS INTEGER) AS stream, k.start_ns, k.start_ns + k.dur_ns AS end_ns,
                   k.dur_ns, k.name, k.correlation, k.external_id,
                   k.grid[1] AS grid_x, k.grid[2] AS grid_y, k.grid[3] AS grid_z,
                   k.block[1] AS block_x, k.block[2] AS block_y, k.block[3] AS block_z,
                   k.registers AS registers_per_thread, k.shared_memory AS shared_memory_bytes,
                   k.blocks_per_sm, k.warps_per_sm, k.occupancy AS occupancy_pct,
                   l.launch_event_id, r.is_graph_launch AS graph_launch, r.step_id
            FROM _kgpu k {launch_join} WHERE k.ncat = 'kernel'""")
        w("gpu_memops", f"""
            SELECT k.event_id, {rank} AS rank, CASE k.ncat WHEN 'gpu_memcpy' THEN 'memcpy' ELSE 'memset' END AS kind,
                   CAST(coalesce(k.device, k.pid) AS INTEGER) AS device,
                   CAST(coalesce(k.stream, k.tid) AS INTEGER) AS stream, k.start_ns, k.start_ns + k.dur_ns AS end_ns,
                   k.dur_ns, k.name, TRY_CAST(k.nbytes AS BIGINT) AS bytes, k.bandwidth AS bandwidth_gbps,
                   k.kind AS copy_kind, k.correlation, k.external_id, l.launch_event_id, r.step_id
            FROM _kgpu k {launch_join} WHERE k.ncat IN ('gpu_memcpy', 'gpu_memset')""")
        w("gpu_annotations", f"""
            SELECT event_id, {rank} AS rank, CAST(coalesce(device, pid) AS INTEGER) AS device,
                   CAST(coalesce(stream, tid) AS INTEGER) AS stream, start_ns, start_ns + dur_ns AS end_ns, dur_ns,
                   name, external_id
            FROM _kgpu WHERE ncat = 'gpu_user_annotation'""")
        w("trace_threads", "SELECT coalesce(pid_s, CAST(pid AS VARCHAR)) AS pid, coalesce(tid_s, CAST(tid AS VARCHAR)) "
                           "AS tid, name AS kind, rtrim(coalesce(meta_name, labels)) AS value FROM _kmeta")
        con.execute("DROP TABLE _klaunch")

    def _steps(self) -> None:
        """steps: windows + the best composition annotation overlapping each + GPU work launched inside."""
        con = self.dc
        comp_cols = ["c_total", "ctx_reqs", "ctx_tokens", "gen_reqs", "gen_tokens", "new_reqs", "cached_reqs",
                     "ctx_sum_kv", "ctx_sum_qq", "ctx_sum_qkv", "gen_sum_kv", "gen_sum_qkv", "batch_size", "sg_mixed"]
        d, q, c, s = (_P[n].regex for n in ("vllm_detailed", "vllm_context_generation_qk",
                                             "vllm_context_generation", "vllm_new_cached"))
        sg = _P["sglang_step"].regex

        def groups(rx):
            names = sorted(re.compile(rx).groupindex.items(), key=lambda kv: kv[1])
            return "[" + ", ".join(f"'{k}'" for k, _ in names) + "]"

        def g(alias, group):
            return f"TRY_CAST(nullif({alias}.{group}, '') AS BIGINT)"

        con.execute(f"""
            CREATE TEMP TABLE _kcomp AS
            SELECT event_id, pid, start_ns, end_ns, name,
                CASE WHEN regexp_matches(name, '{d}') THEN 1 WHEN regexp_matches(name, '{q}') THEN 2
                     WHEN regexp_matches(name, '{c}') THEN 3 WHEN regexp_matches(name, '{sg}') THEN 4
                     WHEN regexp_matches(name, '{s}') THEN 5 END AS prio,
                regexp_extract(name, '{d}', {groups(d)}) AS d, regexp_extract(name, '{q}', {groups(q)}) AS q,
                regexp_extract(name, '{c}', {groups(c)}) AS c, regexp_extract(name, '{sg}', {groups(sg)}) AS sg,
                regexp_extract(name, '{s}', {groups(s)}) AS s
            FROM _kops WHERE category = 'user_annotation' AND (name LIKE 'execute\\_%' ESCAPE '\\' OR name LIKE 'step[%')""")
        mode = "sg.mode"
        con.execute(f"""
            CREATE OR REPLACE TEMP TABLE _kcomp AS
            SELECT event_id, pid, start_ns, end_ns, name, prio,
              CASE prio WHEN 1 THEN 'detailed' WHEN 2 THEN 'context_generation_qk' WHEN 3 THEN 'context_generation'
                        WHEN 4 THEN 'sglang' WHEN 5 THEN 'new_cached' END AS kind,
              CASE prio WHEN 1 THEN {g('d', 'total')} WHEN 2 THEN {g('q', 'total')} WHEN 3 THEN {g('c', 'total')}
                        WHEN 4 THEN {g('sg', 'toks')} END AS c_total,
              CASE prio WHEN 1 THEN {g('d', 'nc')} WHEN 2 THEN {g('q', 'nc')} WHEN 3 THEN {g('c', 'nc')}
                        WHEN 4 THEN CASE {mode} WHEN 'EXTEND' THEN {g('sg', 'bs')}
                                         WHEN 'PREFILL' THEN {g('sg', 'bs')} WHEN 'DECODE' THEN 0 END END AS ctx_reqs,
              CASE prio WHEN 1 THEN {g('d', 'c_sq')} WHEN 2 THEN {g('q', 'c_tok')} WHEN 3 THEN {g('c', 'c_tok')}
                        WHEN 4 THEN CASE {mode} WHEN 'EXTEND' THEN {g('sg', 'toks')}
                                         WHEN 'PREFILL' THEN {g('sg', 'toks')} WHEN 'DECODE' THEN 0 END END AS ctx_tokens,
              CASE prio WHEN 1 THEN {g('d', 'ng')} WHEN 2 THEN {g('q', 'ng')} WHEN 3 THEN {g('c', 'ng')}
                        WHEN 4 THEN CASE {mode} WHEN 'DECODE' THEN {g('sg', 'bs')}
                                         WHEN 'EXTEND' THEN 0 WHEN 'PREFILL' THEN 0 END END AS gen_reqs,
              CASE prio WHEN 1 THEN {g('d', 'g_sq')} WHEN 2 THEN {g('q', 'g_tok')} WHEN 3 THEN {g('c', 'g_tok')}
                        WHEN 4 THEN CASE {mode} WHEN 'DECODE' THEN {g('sg', 'bs')}
                                         WHEN 'EXTEND' THEN 0 WHEN 'PREFILL' THEN 0 END END AS gen_tokens,
              CASE prio WHEN 5 THEN {g('s', 'new')} END AS new_reqs,
              CASE prio WHEN 5 THEN {g('s', 'cached')} END AS cached_reqs,
              CASE prio WHEN 1 THEN {g('d', 'c_sk')} END AS ctx_sum_kv,
              CASE prio WHEN 1 THEN CAST({g('d', 'c_sqsq')} AS DOUBLE) END AS ctx_sum_qq,
              CASE prio WHEN 1 THEN CAST({g('d', 'c_sqsk')} AS DOUBLE) WHEN 2 THEN CAST({g('q', 'c_qk')} AS DOUBLE)
                   END AS ctx_sum_qkv,
              CASE prio WHEN 1 THEN {g('d', 'g_sk')} END AS gen_sum_kv,
              CASE prio WHEN 1 THEN CAST({g('d', 'g_sqsk')} AS DOUBLE) WHEN 2 THEN CAST({g('q', 'g_qk')} AS DOUBLE)
                   END AS gen_sum_qkv,
              CASE prio WHEN 4 THEN {g('sg', 'bs')} END AS batch_size,
              -- SGLang's MIXED step says it holds prefill and decode work, not how the tokens split.
              CASE prio WHEN 4 THEN CASE {mode} WHEN 'MIXED' THEN 1 END END AS sg_mixed
            FROM _kcomp WHERE prio IS NOT NULL""")
        pick = ",\n".join(f"arg_min(a.{col}, (a.prio, -a.overlap)) FILTER (WHERE a.{col} IS NOT NULL) AS {col}"
                          for col in comp_cols)
        self._emit("steps", f"""
            WITH ann AS (
                SELECT w.step_id, a.*, least(w.end_ns, a.end_ns) - greatest(w.start_ns, a.start_ns) AS overlap
                FROM _kwin w JOIN _kcomp a ON a.pid = w.pid AND a.start_ns < w.end_ns AND a.end_ns > w.start_ns),
            comp AS (
                SELECT a.step_id, arg_min(a.name, (a.prio, -a.overlap)) AS annotation,
                       arg_min(a.kind, (a.prio, -a.overlap)) AS annotation_kind, {pick}
                FROM ann a GROUP BY a.step_id),
            gpu AS (
                SELECT step_id, start_ns, end_ns, 1 AS is_kernel FROM _o_gpu_kernels WHERE step_id IS NOT NULL
                UNION ALL
                SELECT step_id, start_ns, end_ns, 0 FROM _o_gpu_memops WHERE step_id IS NOT NULL),
            isl AS (
                SELECT step_id, start_ns, end_ns,
                       max(end_ns) OVER (PARTITION BY step_id ORDER BY start_ns, end_ns
                                         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
                FROM gpu),
            busy AS (
                SELECT step_id, sum(greatest(end_ns - greatest(start_ns, coalesce(prev_end, start_ns)), 0)) AS busy
                FROM isl GROUP BY step_id),
            agg AS (
                SELECT step_id, min(start_ns) AS gs, max(end_ns) AS ge, sum(is_kernel) AS kernels FROM gpu GROUP BY step_id),
            graphs AS (
                SELECT step_id, count(*) FILTER (WHERE is_graph_launch) AS n FROM _o_runtime_calls
                WHERE step_id IS NOT NULL GROUP BY step_id)
            SELECT {_sql_int(self.rank)} AS rank, w.step_id, CAST(w.step_index AS INTEGER) AS step_index, w.marker,
                   w.name AS marker_name, c.annotation, c.annotation_kind,
                   CASE WHEN c.ctx_reqs IS NULL OR c.gen_reqs IS NULL THEN
                            CASE WHEN c.sg_mixed = 1 THEN 'mixed'
                                 WHEN c.new_reqs > 0 AND c.cached_reqs = 0 THEN 'prefill'
                                 WHEN c.new_reqs > 0 AND c.cached_reqs > 0 THEN 'mixed' END
                        WHEN c.ctx_reqs > 0 AND c.gen_reqs > 0 THEN 'mixed'
                        WHEN c.ctx_reqs > 0 THEN 'prefill' WHEN c.gen_reqs > 0 THEN 'decode' ELSE 'empty' END AS phase,
                   w.start_ns AS cpu_start_ns, w.end_ns AS cpu_end_ns, w.end_ns - w.start_ns AS cpu_dur_ns,
                   g.gs AS gpu_start_ns, g.ge AS gpu_end_ns, g.ge - g.gs AS gpu_dur_ns, b.busy AS gpu_busy_ns,
                   coalesce(g.kernels, 0) AS kernel_count, coalesce(gr.n, 0) AS graph_launches,
                   CAST(c.ctx_reqs AS INTEGER) AS ctx_reqs, c.ctx_tokens, CAST(c.gen_reqs AS INTEGER) AS gen_reqs,
                   c.gen_tokens, coalesce(c.c_total, c.ctx_tokens + c.gen_tokens) AS total_tokens,
                   CAST(c.new_reqs AS INTEGER) AS new_reqs, CAST(c.cached_reqs AS INTEGER) AS cached_reqs,
                   c.ctx_sum_kv, c.ctx_sum_qq, c.ctx_sum_qkv, c.gen_sum_kv, c.gen_sum_qkv,
                   CAST(c.batch_size AS INTEGER) AS batch_size
            FROM _kwin w LEFT JOIN comp c USING (step_id) LEFT JOIN agg g USING (step_id)
            LEFT JOIN busy b USING (step_id) LEFT JOIN graphs gr USING (step_id)
            ORDER BY w.step_index""")
        con.execute("DROP TABLE _kcomp")

    def _meta(self, h: dict, base, mode: str, rank, dist: dict, start_ns, end_ns) -> None:
        import orjson

        con = self.con
        keys = set(h)
        if keys & {"roctracer_version", "hip_runtime_version", "hip_driver_version"}:
            vendor = "amd"
        elif keys & {"cupti_version", "cuda_runtime_version", "cuda_driver_version"}:
            vendor = "nvidia"
        else:
            row = self.dc.execute("""SELECT count(*) FILTER (WHERE name LIKE 'hip%'), count(*) FILTER (WHERE name LIKE 'cu%')
                                     FROM _o_runtime_calls""").fetchall()[0]
            vendor = "amd" if row[0] > row[1] else ("nvidia" if row[1] else None)
        other = {k: v for k, v in h.items() if k not in ("schemaVersion", "baseTimeNanoseconds", "displayTimeUnit",
                                                         "deviceProperties", "distributedInfo")}
        span = (start_ns, end_ns)
        ws = dist.get("world_size") if isinstance(dist.get("world_size"), int) else None
        sv = h.get("schemaVersion") if isinstance(h.get("schemaVersion"), int) else None

        def js(v):
            return None if v is None else orjson.dumps(v).decode()

        con.execute("INSERT INTO trace_meta (source_id, schema_version, base_time_ns, ts_mode, display_time_unit, "
                    "vendor, rank, world_size, device_properties, distributed_info, other, events, truncated, "
                    "start_ns, end_ns) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [self.sid, sv, base, mode, h.get("displayTimeUnit") if isinstance(h.get("displayTimeUnit"), str)
                     else None, vendor, rank, ws, js(h.get("deviceProperties")), js(h.get("distributedInfo")),
                     js(other), self.n_events, self.truncated, span[0], span[1]])


# Staging tables: which parsed events each keeps (by destination) and the columns it needs downstream.
_COMMON = ("event_id", "ncat", "name", "pid", "tid", "start_ns", "dur_ns", "external_id")
_CPU_COLS = _COMMON + ("record_function_id", "python_id", "python_parent_id")
_COUNTED_ONLY = pa.array(["skipped", "unknown"])
# cpu_ops columns taken as staged (canonical name, staged name); the others are computed by `_nest_cpu_ops`.
_CPU_KEPT = (("category", "ncat"), ("pid", "pid"), ("tid", "tid"), ("name", "name"), ("external_id", "external_id"),
             ("record_function_id", "record_function_id"), ("python_id", "python_id"),
             ("python_parent_id", "python_parent_id"))
_ROUTES = {
    "_krt0": (("runtime_calls",), _COMMON + ("correlation", "cbid", "cid", "kernel")),
    "_kgpu": (("gpu_kernels", "gpu_memops", "gpu_annotations"),
              _COMMON + ("correlation", "device", "stream", "grid", "block", "registers", "shared_memory",
                         "blocks_per_sm", "warps_per_sm", "occupancy", "nbytes", "bandwidth", "kind")),
    "_kmeta": (("trace_threads",), ("pid", "tid", "pid_s", "tid_s", "name", "meta_name", "labels")),
    "_krej": (("rejected",), ("event_id", "ph", "name")),
}


def _route(kb: pa.Table, parts: dict[str, list[pa.Table]]) -> None:
    """One parsed batch into the staging parts, by Arrow filters (a DuckDB query per route would scan it again)."""
    dest = kb["stored_in"]
    cpu = pc.equal(dest, "cpu_ops")
    counted = pc.is_in(dest, _COUNTED_ONLY)
    parts["_kcpu"].append(kb.select(list(_CPU_COLS)).filter(cpu))
    parts["_kother"].append(kb.filter(pc.invert(pc.or_(cpu, counted))))
    parts["_kskip"].append(kb.select(["ph", "cat", "stored_in", "start_ns", "dur_ns"]).filter(counted))


def _containment(calls: pa.Table, nest: Nesting, ev: np.ndarray, threads: DenseKeys) -> pa.Table:
    """The innermost range enclosing each runtime call on its thread: among cpu_op/user_annotation ranges
    (`op_id`), and among python_function ranges (`py_id`, for CUDA-graph replays that no ATen op encloses)."""
    pid, tid, start = _ints(calls["pid"]), _ints(calls["tid"]), _ints(calls["start_ns"])
    found = {}
    for fam, py in (("op_id", 0), ("py_id", 1)):
        th = threads.lookup(pid, tid, np.full(len(pid), py))
        idx = np.full(len(pid), -1, dtype=np.int64)
        has = th >= 0
        if has.any() and nest.n:
            idx[has] = nest.enclosing(th[has], start[has])
        found[fam] = _take(ev, idx)
    return pa.table({"event_id": calls["event_id"]} | {k: pa.array(v, mask=v < 0) for k, v in found.items()})


def _ints(col) -> np.ndarray:
    """An integer Arrow column as int64 numpy, nulls as -1."""
    return pc.fill_null(col, -1).to_numpy().astype(np.int64, copy=False)


def _envelope(data):
    """`{..., "traceEvents": [...], ...}`: the header keys and the byte offsets of the array's `[` and `]`, from
    the bytes around the array alone (its end is the last `]` after which the document closes validly). None
    when that does not work out (no such key, a bare array, a cut or malformed file)."""
    key = data.find(b'"traceEvents"')
    if key < 0:
        return None
    start = data.find(b"[", key)
    if start < 0 or data[key + 13: start].strip(b" \t\r\n") != b":":
        return None
    prefix = data[:start]
    end, floor = len(data), max(start, len(data) - (1 << 20))
    for _ in range(64):
        end = data.rfind(b"]", floor, end)
        if end < 0:
            return None
        try:
            header = _top_decoder.decode(prefix + b"[]" + data[end + 1:])
        except msgspec.DecodeError:
            continue
        if bytes(header.pop("traceEvents", b"")) != b"[]":
            return None
        return header, start, end
    return None


def _decode_small(raw) -> object:
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None


def _take(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """values[idx] where idx >= 0, else -1 (idx -1 means "none")."""
    if len(values) == 0:
        return np.full(len(idx), -1, dtype=np.int64)
    return np.where(idx >= 0, values[np.maximum(idx, 0)], -1)


def _sql_int(v) -> str:
    return "NULL::INTEGER" if v is None else f"{int(v)}::INTEGER"
