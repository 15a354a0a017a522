"""PyTorch-profiler (Kineto) Chrome-trace JSON, plain or gzip, NVIDIA and ROCm, into the GPU-timeline tables.

Pipeline: the file is mapped (or gunzipped) once; the header is decoded from the bytes around the
`traceEvents` array, and the events become an Arrow string-view column over that same buffer
(`eventtext`: found by layout, else by msgspec decoding). DuckDB parses the events a batch at a time on all
cores (`json_transform`, only the fields stallscope stores) into narrow per-destination Arrow staging tables.
CPU-op nesting is numpy sorting (`stallscope.ingest.intervals`) on a thread of its own, while the CPU-GPU links,
step windows and step composition run as SQL on a cursor of their own over the staged tables; the links that
need the nesting (time containment) come last. The ingest connection only writes.
"""
from __future__ import annotations

import gc
import json
import math
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import duckdb
import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .base import ParseContext, Parser
from .eventtext import (_WHITESPACE, MAX_DEPTH, event_text_at, layout_split, release_parsed, scan_elements, skip_whitespace,
                        views)
from .patterns import Pattern, Sample
from stallscope.errors import InputError
from stallscope.ingest.intervals import DenseKeys, Nesting
from stallscope.ingest.memory import release_freed

VERSION = "1.0"

# -- the event layout stallscope keeps: staging column <- JSON path, DuckDB type ------------------------------
# DuckDB's json_transform pulls these out of each raw event in one parse (keys are case-sensitive, so the
# allocator's `Bytes` never collides with a memcpy's `bytes`; a value of the wrong type becomes NULL, and a
# numeric string such as ROCm's "pid": "6" becomes its number; a number out of the type's range becomes NULL, which
# is why the fields stored as INTEGER are read as INTEGER).
EVENT_FIELDS = (
    ("ph", "ph", "VARCHAR"), ("cat", "cat", "VARCHAR"), ("name", "name", "VARCHAR"),
    ("pid", "pid", "BIGINT"), ("tid", "tid", "BIGINT"), ("ts", "ts", "DOUBLE"), ("dur", "dur", "DOUBLE"),
)
ARG_FIELDS = (
    ("correlation", "correlation", "BIGINT"), ("external_id", "External id", "BIGINT"),
    ("device", "device", "INTEGER"), ("stream", "stream", "INTEGER"),
    ("grid", "grid", "INTEGER[]"), ("block", "block", "INTEGER[]"),
    ("registers", "registers per thread", "INTEGER"), ("shared_memory", "shared memory", "BIGINT"),
    ("blocks_per_sm", "blocks per SM", "DOUBLE"), ("warps_per_sm", "warps per SM", "DOUBLE"),
    ("occupancy", "est. achieved occupancy %", "DOUBLE"),
    ("python_id", "Python id", "BIGINT"), ("python_parent_id", "Python parent id", "BIGINT"),
    ("record_function_id", "Record function id", "BIGINT"),
    ("nbytes", "bytes", "VARCHAR"), ("bandwidth", "memory bandwidth (GB/s)", "DOUBLE"),
    ("kind", "kind", "VARCHAR"), ("kernel", "kernel", "VARCHAR"), ("cbid", "cbid", "INTEGER"), ("cid", "cid", "INTEGER"),
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
_NON_WS = re.compile(rb"[^ \t\r\n]")
_TIME_LIMIT_NS = 1 << 62  # times and durations beyond ±2^62 ns (146 years) are not times: their sums must fit int64
# Reasons for texts that are not events at all (SQL literals).
_WS_SQL = "chr(32) || chr(9) || chr(10) || chr(13)"
_BAD_UTF8, _EMPTY, _NOT_JSON = "'not valid UTF-8 text'", "'empty traceEvents entry (a stray comma)'", "'not valid JSON'"
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


@dataclass
class _Events:
    """The events of one trace as found: their texts, ids and byte offsets, and what was rejected on the way."""

    header: dict
    text: pa.Array  # one JSON text per event
    starts: np.ndarray | None  # byte offset of each text in the decompressed data (None: a copy, offsets unknown)
    how: str  # layout | decoded | scanned | layout+scanned (broken layout runs split again by structure)
    ids: np.ndarray | None = None  # event_id of each text (None: 0..n-1); elements rejected before parsing are gaps
    total: int = 0  # elements of traceEvents, the rejected-before-parsing ones included
    early: list = field(default_factory=list)  # rejects found before parsing: (record_index, byte_offset, reason, raw)
    cut: tuple | None = None  # (byte offset, reason, tail) when the file ends early
    span: tuple[int, int] | None = None  # the array body [lo, hi): for offsets found only when a reject needs them


class _Loader:
    """One trace file through the pipeline: decode → staging table → canonical tables → links → steps."""

    def __init__(self, ctx: ParseContext):
        self.ctx = ctx
        self.con = ctx.con
        self.sid = ctx.source_id

    # -- decoding ----------------------------------------------------------------------------------
    def run(self) -> None:
        ctx = self.ctx
        ctx.place = "reading the file"
        dec = ctx.input.read_all(mapped=True)
        ctx.raw_bytes = len(dec.data)
        if not dec.data or (not dec.data[:4096].strip() and not dec.data.strip()):
            raise InputError(f"{ctx.path}: " + (dec.error or "no data"))
        ctx.place = "finding the events"
        ev = self._events(dec.data, dec.error)
        self.header = {k: _decode_small(v) for k, v in ev.header.items()}
        self.base = self._base(self.header.get("baseTimeNanoseconds"))
        self.truncated = ev.cut is not None
        if ev.cut is not None:
            offset, reason, tail = ev.cut
            ctx.reject(reason, tail, byte_offset=offset)
        invalid = self._stage(ev, dec.data)
        if invalid is not None and ev.how == "layout":
            # Pieces the layout split found that are not JSON: broken events, or a layout guess that cut through
            # events (a nested list printed at the events' own indentation). Each run of them is split again by
            # structure; where that finds other boundaries, the events are staged again with them.
            better = self._resplit(ev, invalid, dec.data)
            if better is not None:
                ev = better
                self._stage(ev, dec.data)
        self.n_events = ev.total
        # The event texts pin the whole decompressed file; let it go before the derivation allocates more.
        del ev, dec
        self._derive()

    def _base(self, base) -> int | None:
        if base is None:
            return None
        if isinstance(base, bool) or not isinstance(base, (int, float)) or not math.isfinite(base) \
                or not 0 <= base < _TIME_LIMIT_NS:
            self.ctx.notes.append(f"baseTimeNanoseconds {str(base)[:40]} is not a time in ns since 1970: ignored, "
                                  "times are relative to the trace")
            return None
        return int(base)

    def _events(self, data, gzip_error: str | None) -> _Events:
        """The events of the file, by the fastest means that can read it: by layout, by decoding, by structure."""
        if gzip_error is None and (env := _envelope(data)) is not None:
            header, lo, hi = env
            if (got := layout_split(data, lo + 1, hi)) is not None:
                return _Events(header, got[0], got[1], "layout", total=len(got[0]), span=(lo + 1, hi))
            try:
                raws = _raw_list_decoder.decode(memoryview(data)[lo: hi + 1])
                text, starts = event_text_at(raws, data)
                return _Events(header, text, starts, "decoded", total=len(text), span=(lo + 1, hi))
            except (msgspec.DecodeError, RecursionError):
                return self._scanned(data, header, lo + 1, hi, closed=True)
        first = _NON_WS.search(data, 0, 1 << 20)
        bare = first is not None and data[first.start(): first.start() + 1] == b"["
        try:  # a valid document the envelope could not take apart (a bare array, a huge trailer)
            if bare:
                raws, header = _raw_list_decoder.decode(data), {}
            else:
                header = _top_decoder.decode(data)
                if "traceEvents" not in header:
                    raise InputError(f"{self.ctx.path}: JSON object has no traceEvents")
                raws = _raw_list_decoder.decode(header.pop("traceEvents"))
            text, starts = event_text_at(raws, data)
            return _Events(header, text, starts, "decoded", total=len(text))
        except (msgspec.DecodeError, RecursionError):
            pass
        # Not valid JSON as a whole (cut, NaN literals, broken events, nesting too deep): split by structure.
        why = gzip_error or "JSON ends early"
        if bare:
            return self._scanned(data, {}, first.start() + 1, len(data), closed=False, why=why)
        key = data.find(b'"traceEvents"')
        start = data.find(b"[", key) if key >= 0 else -1
        if key < 0 or data[key + 13: max(start, key + 13)].strip(b" \t\r\n") != b":":
            raise InputError(f"{self.ctx.path}: not a readable trace "
                             f"({gzip_error or 'JSON is malformed or cut before traceEvents'})")
        try:
            header = _top_decoder.decode(data[:key] + b'"traceEvents": []}')
            header.pop("traceEvents", None)
        except (msgspec.DecodeError, RecursionError):
            header = {}
            self.ctx.notes.append("the header keys before traceEvents do not decode: ignored")
        return self._scanned(data, header, start + 1, len(data), closed=False, why=why, trailer=True)

    def _scanned(self, data, header: dict, lo: int, hi: int, closed: bool, why: str = "",
                 trailer: bool = False) -> _Events:
        """The elements of the array body data[lo:hi] by structure. `closed`: the body is known to be whole
        (the envelope found its `]`); otherwise the array ends at its own `]` or the file ends first, and with
        `trailer` the header keys after that `]` are read too."""
        el = scan_elements(data, lo, hi, stop_at_close=not closed)
        cut = None
        n = len(el)
        if not closed and el.closed is None:
            # The file ends inside the array: the last element is kept only if it is complete in itself.
            if n and (el.tail_open or not _ends_a_value(data, el.starts[-1], el.starts[-1] + el.lens[-1])):
                n -= 1
            kept_end = int(el.starts[n - 1] + el.lens[n - 1]) if n else lo
            kept_end = int(_strip_end(data, lo if not n else int(el.starts[n - 1]), kept_end))
            tail = data[kept_end: kept_end + 512]
            cut = (kept_end, f"trace cut: {why}; kept {n} complete events, dropped {len(data) - kept_end} bytes "
                             f"after decompressed byte {kept_end}", bytes(tail).lstrip(b", \r\n\t"))
            if n == 0:
                raise InputError(f"{self.ctx.path}: not a readable trace: {why} before the first complete event")
        elif not closed and trailer:
            # The array closed; the header keys after it (Kineto writes baseTimeNanoseconds there) must decode.
            rest = data[el.closed + 1:]
            try:
                more = _top_decoder.decode(b'{"traceEvents": []' + rest)
                more.pop("traceEvents", None)
                header = {**header, **more}
            except (msgspec.DecodeError, RecursionError):
                at = el.closed + 1
                cut = (at, f"trace cut or malformed after its events ({why}): the header keys after traceEvents "
                           f"are lost, from decompressed byte {at}", bytes(data[at: at + 512]))
        starts, lens, depth = el.starts[:n], el.lens[:n], el.depth[:n]
        deep = depth > MAX_DEPTH
        early = []
        if deep.any():
            at = np.flatnonzero(deep)
            offsets = skip_whitespace(data, starts[at], starts[at] + lens[at])
            early = [(int(i), int(o), f"nested deeper than {MAX_DEPTH} levels (depth limit)",
                      bytes(data[o: o + 64]).decode("utf-8", "replace")) for i, o in zip(at, offsets)]
        keep = np.flatnonzero(~deep)
        big = lens[keep] >= (1 << 30)  # a view cannot hold it; no trace event is that long
        if big.any():
            for i in keep[big]:
                early.append((int(i), int(starts[i]), "event longer than 1 GiB", None))
            keep = keep[~big]
        text = views(data, starts[keep], lens[keep])
        return _Events(header, text, starts[keep], "scanned", ids=keep.astype(np.int64), total=n, early=early,
                       cut=cut, span=(lo, hi))

    def _resplit(self, ev: _Events, invalid: np.ndarray, data) -> _Events | None:
        """Layout pieces that are not JSON, split again by structure, run by run; None when that changes nothing."""
        starts, lens = ev.starts, _view_lengths(ev.text)
        runs = np.split(invalid, np.flatnonzero(np.diff(invalid) != 1) + 1)
        if len(runs) > 1000:  # damage all over the file, not a layout guess gone wrong: each piece stands
            return None
        pieces_s, pieces_l, changed = [], [], False
        prev = 0
        for run in runs:
            a, b = int(run[0]), int(run[-1]) + 1
            lo, hi = int(starts[a]), int(starts[b - 1] + lens[b - 1])
            el = scan_elements(data, lo, hi, stop_at_close=False)
            same = len(el) == b - a and np.array_equal(el.starts + el.lens, starts[a:b] + lens[a:b])
            # Other boundaries are taken only when they make every piece of the run a JSON value: a wrong
            # layout guess or entries glued to events. Splitting a broken event would scatter it into fragments.
            if same or not _all_values(data, el):
                continue
            changed = True
            pieces_s += [starts[prev:a], el.starts]
            pieces_l += [lens[prev:a], el.lens]
            prev = b
        if not changed:
            return None
        pieces_s.append(starts[prev:])
        pieces_l.append(lens[prev:])
        s, n = np.concatenate(pieces_s), np.concatenate(pieces_l)
        return _Events(ev.header, views(data, s, n), s, "layout+scanned", total=len(s), span=ev.span)

    def _stage(self, ev: _Events, src=None) -> np.ndarray | None:
        """Event texts → narrow typed staging tables, a batch at a time (memory stays bounded on huge traces).

        DuckDB parses each batch on all cores into one typed table whose rows go three ways: CPU ops (most
        rows) to `_kcpu`, other stored or rejected events to `_kother`, events only counted to `_kskip`.
        At the end `_kother` splits into `_krt0` (runtime calls), `_kgpu` (GPU activity), `_kmeta`, `_krej`,
        and `_kacc` counts every event by (ph, cat, destination). Each staging table carries every column
        its canonical table needs, so no later step joins an event back together.

        A batch DuckDB cannot parse (text that is not JSON, or not UTF-8) is parsed again with every event
        checked first; returns the positions (in `ev.text`) of the events that are not JSON, or None."""
        text = ev.text
        n = len(text)
        if ev.total == 0:
            raise InputError(f"{self.ctx.path}: trace has no events")
        fast, careful = self._parse_sql(self.base or 0, False), self._parse_sql(self.base or 0, True)
        # Parsing runs on a cursor outside the ingest transaction: Arrow inputs registered inside it would be
        # kept alive until commit, so memory would grow with every batch. Batches are staged as Arrow, not as
        # DuckDB temp tables, for the same reason.
        cur = self.con.cursor()
        parts: dict[str, list[pa.Table]] = {"_kcpu": [], "_kother": [], "_kskip": []}
        invalid: list[np.ndarray] = []
        # Each parsed batch is routed on a thread (Arrow filters, one core) while DuckDB parses the next.
        router = ThreadPoolExecutor(max_workers=1)
        routing = None
        try:
            step = max(1, self.ctx.options.chunk_events)
            for lo in range(0, max(n, 1), step):  # one empty batch when every element was rejected already
                self.ctx.place = f"parsing events {lo}-{min(lo + step, n) - 1}"
                batch = text.slice(lo, step)
                ids = pa.array(np.arange(lo, lo + len(batch), dtype=np.int64) if ev.ids is None else ev.ids[lo: lo + step])
                try:
                    kb = self._parse_batch(cur, fast, ids, batch)
                except duckdb.InvalidInputException:
                    kb = self._parse_batch(cur, careful, ids, batch.view(pa.binary_view())
                                           if batch.type == pa.string_view() else batch.cast(pa.large_binary()))
                    bad = pc.equal(kb["stored_in"], "invalid")
                    invalid.append(_ints(kb["event_id"].filter(bad)))
                    kb = kb.set_column(kb.column_names.index("stored_in"), "stored_in",
                                       pc.if_else(bad, "rejected", kb["stored_in"]))
                if routing is not None:
                    routing.result()  # one batch in flight: memory stays bounded
                routing = router.submit(_route, kb, parts)
                del kb
                release_parsed(src, text, lo + step)
                self.ctx.progress(min(lo + step, n))
            if routing is not None:
                routing.result()
            self.ctx.place = "sorting the parsed events"
            self.staged = self._split_staged(cur, {t: pa.concat_tables(p) if p else None for t, p in parts.items()},
                                             ev, src)
        finally:
            router.shutdown(wait=True)
            cur.close()
        release_freed()  # the batches' memory: nothing that size is allocated again
        found = np.concatenate(invalid) if invalid else np.empty(0, dtype=np.int64)
        return found if len(found) else None

    @staticmethod
    def _parse_batch(cur, sql: str, ids: pa.Array, batch: pa.Array) -> pa.Table:
        raw = pa.table({"event_id": ids, "j": batch})
        # Several record batches let DuckDB parse them on all cores.
        cur.register("_kraw", pa.Table.from_batches(raw.to_batches(max_chunksize=_PARSE_BATCH), schema=raw.schema))
        try:
            return cur.sql(sql).to_arrow_reader(max(len(batch), 1)).read_all()
        finally:
            cur.unregister("_kraw")

    def _parse_sql(self, offset_ns: int, careful: bool) -> str:
        """One batch of `_kraw` event texts → typed columns, the normalised category, the destination and, for a
        rejected event, why. `careful` takes the texts as bytes and checks each is UTF-8 JSON before parsing it."""
        fast = ", ".join(f"'{k}'" for k in sorted(set(_STORED) | _KNOWN_NOISE))
        norm = " ".join(f"WHEN '{k}' THEN '{v}'" for k, v in _CAT_NORMAL.items())
        stored_case = " ".join(f"WHEN '{k}' THEN '{v}'" for k, v in _STORED.items())
        noise = ", ".join(f"'{c}'" for c in sorted(_KNOWN_NOISE))
        stored = ", ".join(f"'{k}'" for k in _STORED)
        tables = ", ".join(f"'{t}'" for t in sorted(set(_STORED.values())))
        py_kept = "true" if self.ctx.options.keep_python_functions else "name LIKE '%execute_model'"
        # Relative timestamps (< 8e12 µs) are exact in a double; absolute epoch-µs ones (~1.7e15, old traces
        # without baseTimeNanoseconds) are not, so those are read as text and go through exact decimals.
        # A time must stay within ±2^62 ns after the base is added, a duration below 2^62 ns: their sum fits.
        exact = not offset_ns
        lim = 1 << 62
        if exact:
            ts_ns = ("coalesce(TRY_CAST(round(TRY_CAST(ts AS DECIMAL(38, 6)) * 1000) AS BIGINT), "
                     "TRY_CAST(round(TRY_CAST(ts AS DOUBLE) * 1000) AS BIGINT))")
            start_ns, range_ns = ts_ns, f"CASE WHEN ts_ns0 BETWEEN {-lim} AND {lim} THEN ts_ns0 END"
            ts_num = "TRY_CAST(ts AS DOUBLE)"
        else:
            hi_us, lo_us = (lim - offset_ns) / 1000 - 1, (-lim - offset_ns) / 1000 + 1
            # NaN compares above every number in DuckDB, so it fails `ts < hi`.
            start_ns = f"CASE WHEN ts > {lo_us!r} AND ts < {hi_us!r} THEN CAST(round(ts * 1000) AS BIGINT) + {offset_ns} END"
            range_ns, ts_num = "ts_ns0", "ts"
        dur_hi = lim / 1000 - 1
        if careful:
            source = (f"(SELECT event_id, j, CASE WHEN j IS NULL THEN {_BAD_UTF8} WHEN NOT json_valid(j) THEN "
                      f"CASE WHEN regexp_full_match(j, '\\s*') THEN {_EMPTY} ELSE {_NOT_JSON} END END AS bad, b "
                      f"FROM (SELECT event_id, try(decode(j)) AS j, j AS b FROM _kraw))")
            parsed = f"CASE WHEN bad IS NULL THEN json_transform(j, '{_SPEC[exact]}') END"
            raw = f"coalesce(left(ltrim(j, {_WS_SQL}), 512), left(CAST(b AS VARCHAR), 512))"
        else:
            source, parsed, raw = "(SELECT event_id, j, NULL::VARCHAR AS bad FROM _kraw)", \
                f"json_transform(j, '{_SPEC[exact]}')", f"left(ltrim(j, {_WS_SQL}), 512)"

        def why(field):
            kind = f"json_type(j, '$.{field}')"
            return (f"CASE coalesce({kind}, 'MISSING') WHEN 'MISSING' THEN '{field} missing' "
                    f"WHEN 'VARCHAR' THEN '{field} is a string that is not a number' "
                    f"WHEN 'NULL' THEN '{field} is null' WHEN 'BOOLEAN' THEN '{field} is a boolean' "
                    f"WHEN 'ARRAY' THEN '{field} is an array' WHEN 'OBJECT' THEN '{field} is an object' "
                    f"ELSE '{field} is out of range' END")

        return f"""
            WITH t AS (
                SELECT * EXCLUDE (e), {_STAGE_SELECT},
                       -- Metadata names processes and threads by their raw ids, numeric or not.
                       CASE WHEN e.ph = 'M' THEN json_extract_string(j, '$.pid') END AS pid_s,
                       CASE WHEN e.ph = 'M' THEN json_extract_string(j, '$.tid') END AS tid_s
                FROM (SELECT *, {parsed} AS e FROM {source})),
            c AS (
                SELECT *,
                       CASE WHEN cat IN ({fast}) THEN cat ELSE CASE lower(cat) {norm} ELSE cat END END AS ncat,
                       {start_ns} AS ts_ns0,
                       -- An X event without dur is an instant; one whose dur is there but unusable is rejected.
                       CASE WHEN dur IS NULL THEN CASE WHEN ph IS NULL OR ph <> 'X' THEN 0
                                                        WHEN json_type(j, '$.dur') IS NULL THEN 0 END
                            WHEN dur >= 0 AND dur < {dur_hi!r} THEN CAST(round(dur * 1000) AS BIGINT)
                            WHEN ph <> 'X' THEN 0 END AS dur_ns
                FROM t),
            d AS (
                SELECT *, {range_ns} AS start_ns,
                       CASE WHEN ph IS NULL THEN NULL
                            WHEN ph = 'X' AND ncat = 'python_function' AND NOT ({py_kept}) THEN 'skipped'
                            WHEN ph = 'X' AND ncat IN ({stored}) THEN CASE ncat {stored_case} END
                            WHEN ph = 'M' AND name IN ('process_name', 'thread_name', 'process_labels')
                                 THEN 'trace_threads'
                            WHEN ph IN ('M', 's', 'f', 't', 'i', 'I', 'C', 'b', 'e', 'n', 'R', 'P', 'O', 'N', 'D')
                                 OR lower(cat) IN ({noise}) THEN 'skipped'
                            ELSE 'unknown' END AS dest
                FROM c),
            r AS (
                SELECT *,
                       CASE WHEN bad IS NOT NULL THEN bad
                            WHEN ph IS NULL THEN CASE coalesce(json_type(j), 'NULL') WHEN 'OBJECT'
                                 THEN 'not a trace event (no "ph")'
                                 WHEN 'ARRAY' THEN 'not a trace event: an array, not an object'
                                 WHEN 'VARCHAR' THEN 'not a trace event: a string, not an object'
                                 WHEN 'BOOLEAN' THEN 'not a trace event: a boolean, not an object'
                                 WHEN 'NULL' THEN 'not a trace event: null, not an object'
                                 ELSE 'not a trace event: a number, not an object' END
                            WHEN ph <> 'X' THEN NULL
                            WHEN start_ns IS NULL THEN 'complete (X) event without ts: ' || CASE
                                 WHEN {ts_num} IS NULL THEN {why('ts')} WHEN isnan({ts_num}) THEN 'ts is NaN'
                                 WHEN isinf({ts_num}) THEN 'ts is infinite' ELSE 'ts out of range' END
                            WHEN dur_ns IS NULL THEN 'complete (X) event with an unusable dur: ' || CASE
                                 WHEN dur IS NULL THEN {why('dur')} WHEN isnan(dur) THEN 'dur is NaN'
                                 WHEN isinf(dur) THEN 'dur is infinite' WHEN dur < 0 THEN 'dur is negative'
                                 ELSE 'dur out of range' END
                            WHEN dest NOT IN ({tables}) THEN NULL
                            WHEN pid IS NULL THEN ncat || ' event without an integer pid: ' || {why('pid')}
                            WHEN tid IS NULL THEN ncat || ' event without an integer tid: ' || {why('tid')}
                            END AS reason
                FROM d)
            SELECT * EXCLUDE (j, bad, ts, dur, ts_ns0, dest{', b' if careful else ''}),
                   CASE WHEN reason IS NOT NULL THEN {raw} END AS raw,
                   CASE WHEN bad = {_NOT_JSON} THEN 'invalid' WHEN reason IS NOT NULL THEN 'rejected' ELSE dest END
                       AS stored_in
            FROM r"""

    def _split_staged(self, cur, staged: dict[str, pa.Table | None], ev: _Events, src) -> dict[str, pa.Table]:
        """`_kother` into the small per-destination tables, the per-(ph, cat, destination) counts, and the
        rejects with their byte offsets."""
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
        staged["_krej"] = self._reject_rows(staged.pop("_krej"), ev, src)
        return staged

    def _reject_rows(self, rej: pa.Table, ev: _Events, src) -> pa.Table:
        """The rejects table rows: every event rejected while parsing or before, at its first byte."""
        early = ev.early
        ids = np.concatenate([_ints(rej["event_id"]), np.array([e[0] for e in early], dtype=np.int64)])
        reasons = rej["reason"].to_pylist() + [e[2] for e in early]
        raws = rej["raw"].to_pylist() + [e[3] for e in early]
        offsets = np.full(len(ids), -1, dtype=np.int64)
        n_parsed = rej.num_rows
        offsets[n_parsed:] = [e[1] for e in early]
        if n_parsed:
            starts, pos = ev.starts, _ints(rej["event_id"])
            if ev.ids is not None:
                pos = np.searchsorted(ev.ids, pos)
            if starts is None and ev.span is not None and src is not None:
                # Events decoded into a copy: their offsets come from a structural pass, needed only now.
                el = scan_elements(src, ev.span[0], ev.span[1], stop_at_close=False)
                starts = el.starts if len(el) == ev.total else None
            if starts is not None:
                at = starts[pos]
                limit = at + _view_lengths(ev.text)[pos] if ev.starts is not None else at + 64
                offsets[:n_parsed] = skip_whitespace(src, at, limit)
        return pa.table({"record_index": pa.array(ids), "byte_offset": pa.array(offsets, mask=offsets < 0),
                         "reason": pa.array(reasons, pa.string()), "raw": pa.array(raws, pa.string())})

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
        rank = _int32(dist.get("rank"))
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
        self.ctx.write_rejects(self.staged["_krej"])
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
        stallscope.ingest.intervals). Runs on a thread of its own.

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
            SELECT k.event_id, {rank} AS rank, coalesce(k.device, TRY_CAST(k.pid AS INTEGER)) AS device,
                   coalesce(k.stream, TRY_CAST(k.tid AS INTEGER)) AS stream, k.start_ns, k.start_ns + k.dur_ns AS end_ns,
                   k.dur_ns, k.name, k.correlation, k.external_id,
                   k.grid[1] AS grid_x, k.grid[2] AS grid_y, k.grid[3] AS grid_z,
                   k.block[1] AS block_x, k.block[2] AS block_y, k.block[3] AS block_z,
                   k.registers AS registers_per_thread, k.shared_memory AS shared_memory_bytes,
                   k.blocks_per_sm, k.warps_per_sm, k.occupancy AS occupancy_pct,
                   l.launch_event_id, r.is_graph_launch AS graph_launch, r.step_id
            FROM _kgpu k {launch_join} WHERE k.ncat = 'kernel'""")
        w("gpu_memops", f"""
            SELECT k.event_id, {rank} AS rank, CASE k.ncat WHEN 'gpu_memcpy' THEN 'memcpy' ELSE 'memset' END AS kind,
                   coalesce(k.device, TRY_CAST(k.pid AS INTEGER)) AS device,
                   coalesce(k.stream, TRY_CAST(k.tid AS INTEGER)) AS stream, k.start_ns, k.start_ns + k.dur_ns AS end_ns,
                   k.dur_ns, k.name, TRY_CAST(k.nbytes AS BIGINT) AS bytes, k.bandwidth AS bandwidth_gbps,
                   k.kind AS copy_kind, k.correlation, k.external_id, l.launch_event_id, r.step_id
            FROM _kgpu k {launch_join} WHERE k.ncat IN ('gpu_memcpy', 'gpu_memset')""")
        w("gpu_annotations", f"""
            SELECT event_id, {rank} AS rank, coalesce(device, TRY_CAST(pid AS INTEGER)) AS device,
                   coalesce(stream, TRY_CAST(tid AS INTEGER)) AS stream, start_ns, start_ns + dur_ns AS end_ns, dur_ns,
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
                SELECT step_id, TRY_CAST(sum(greatest(end_ns - greatest(start_ns, coalesce(prev_end, start_ns)), 0))
                                         AS BIGINT) AS busy
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
                   TRY_CAST(c.ctx_reqs AS INTEGER) AS ctx_reqs, c.ctx_tokens,
                   TRY_CAST(c.gen_reqs AS INTEGER) AS gen_reqs, c.gen_tokens,
                   coalesce(c.c_total, TRY_CAST(c.ctx_tokens::HUGEINT + c.gen_tokens AS BIGINT)) AS total_tokens,
                   TRY_CAST(c.new_reqs AS INTEGER) AS new_reqs, TRY_CAST(c.cached_reqs AS INTEGER) AS cached_reqs,
                   c.ctx_sum_kv, c.ctx_sum_qq, c.ctx_sum_qkv, c.gen_sum_kv, c.gen_sum_qkv,
                   TRY_CAST(c.batch_size AS INTEGER) AS batch_size
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
        ws, sv = _int32(dist.get("world_size")), _int32(h.get("schemaVersion"))

        def js(v):
            if v is None:
                return None
            try:
                return orjson.dumps(v).decode()
            except TypeError:  # integers beyond 64 bits: plain json writes them; NaN/inf it cannot, so no value
                try:
                    return json.dumps(v, allow_nan=False)
                except ValueError:
                    return None

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
    "_krej": (("rejected",), ("event_id", "reason", "raw")),
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
        except RecursionError:  # a header nested too deep for the decoder: the slow path says so
            return None
        if bytes(header.pop("traceEvents", b"")) != b"[]":
            return None
        return header, start, end
    return None


def _decode_small(raw) -> object:
    try:
        return msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return None


def _all_values(data, el) -> bool:
    """Whether each element is one JSON value (NaN and Infinity allowed, as Python writes them), or nested too
    deep to check (rejected later for its depth). Only pieces that failed to parse get here."""
    for start, n, depth in zip(el.starts, el.lens, el.depth):
        if depth > MAX_DEPTH:
            continue
        try:
            json.loads(bytes(data[start: start + n]))
        except (ValueError, RecursionError):
            return False
    return True


def _view_lengths(text: pa.Array) -> np.ndarray:
    """Byte length of every text (string views hold it in the view itself)."""
    if text.type == pa.string_view():
        v = np.frombuffer(text.buffers()[1], dtype=np.int32).reshape(-1, 4)
        return v[text.offset: text.offset + len(text), 0].astype(np.int64)
    return pc.binary_length(text).to_numpy(zero_copy_only=False).astype(np.int64)


def _strip_end(data, lo: int, end: int) -> int:
    """`end` moved back over trailing JSON whitespace, not before `lo`."""
    buf = np.frombuffer(data, dtype=np.uint8)
    while end > lo:
        a = max(lo, end - 4096)
        solid = np.flatnonzero(~_WHITESPACE[buf[a:end]])
        if len(solid):
            return a + int(solid[-1]) + 1
        end = a
    return lo


def _ends_a_value(data, lo: int, end: int) -> bool:
    """Whether an element cut off by the end of the file still ends like a complete object or array."""
    last = _strip_end(data, lo, end)
    return last > lo and data[last - 1: last] in (b"}", b"]")


def _take(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """values[idx] where idx >= 0, else -1 (idx -1 means "none")."""
    if len(values) == 0:
        return np.full(len(idx), -1, dtype=np.int64)
    return np.where(idx >= 0, values[np.maximum(idx, 0)], -1)


def _int32(v) -> int | None:
    """A header value stored as INTEGER: an int within range, else NULL."""
    return v if isinstance(v, int) and not isinstance(v, bool) and -(1 << 31) <= v < (1 << 31) else None


def _sql_int(v) -> str:
    return "NULL::INTEGER" if v is None else f"{int(v)}::INTEGER"
