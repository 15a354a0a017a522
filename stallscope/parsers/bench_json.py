"""Benchmark result files into `requests`, `token_gaps` and `engine_config`: vLLM `benchmark_serving.py` /
`vllm bench serve` JSON and JSON Lines (`--append-result`), and SGLang `bench_serving --output-file` JSON Lines.

What one file holds: one or more *runs* (a JSON object each; JSON Lines when appended), each with run-level
figures (`duration`, `completed`, `request_rate`, ...) and, when the tool saved them (vLLM `--save-detailed`
from ~0.9, always before; SGLang `--output-details`), per-request arrays in send order: `input_lens`,
`output_lens`, `ttfts` (s), `itls` (list of chunk gaps in s per request), `errors`, and in new vLLM
`latencies` (s) and `start_times` (`time.perf_counter()` values, NOT epoch).

Rows written (see docs/schema.md):
- `requests`: one per request, `engine` `vllm_bench` / `sglang_bench`, `kind` `client`, `request_id` = the
  0-based send-order index as text (`"<run>:<index>"` when the file holds several runs), `line_no` = the line
  where the run's object starts (1 for a plain JSON file): it names the run in `requests` and `engine_config`.
  Failed requests (non-empty `errors[i]`, or `successes[i]` false) keep their row: `status='failed'`, `error`,
  `ttft_ns`/`e2e_latency_ns` NULL (vLLM writes 0.0 and [] as placeholders there). `e2e_latency_ns` is
  `latencies[i]` when present, else `ttft + sum(itls[i])` (in integer ns, so it equals the last chunk's time).
- `token_gaps`: one per ITL entry (`gap_index` k = gap between chunk k and k+1), `tokens_in_chunk` NULL: an ITL
  entry is a streamed-chunk gap, not necessarily one token.
- `engine_config`, origin `bench_summary`, one row per run-level key (`line_no` = the run): every scalar
  top-level key as written (`request_rate` `inf` becomes value `inf`, value_num +inf; the 0.6.4-0.8.x key
  `request_goodput:` is stored as `request_goodput`, with `request_goodput_key` = the spelling found), nested
  values as JSON text (`server_info`, ...), and derived keys: `tool` (`vllm_bench_serve` / `sglang_bench_serving`),
  `run_index`, `requests`, `requests_failed`, `send_times` (`start_times` or `none`), `itl_ttft_bug_dropped`
  (requests whose itls[0] duplicated the TTFT, vllm#7242), `tz` (zone the `date` was read in),
  `run_start_anchor_ns` (date - duration, see stallscope/ingest/runclock.py), `clock_anchor_note`. Origin `bench_clock`
  rows (written here, replaced by clock alignment): `clock_offset_ns`, `clock_method`, `clock_residual_ns`, `clock_note`,
  `matched_requests`, `server_source_id`.

Record accounting (sources.records_*): a record is one request, plus one per run object. Parsed = run objects
read + requests written. Rejected = requests whose data is unusable (arrays of different lengths: the surplus
indices; a successful request without a valid TTFT, or with a negative/non-numeric gap), and JSON Lines lines
that do not decode or are not a benchmark run (one record each). Skipped = blank lines between JSON Lines runs.

Clock: at parse time each run is placed with `date` (end-of-run local time, zone from `--tz`) minus `duration`
(`bench_date_minus_duration`, coarse); `start_times`, when present, give each request's send time relative to
that anchor. Without `start_times` the request instants stay NULL until clock alignment (stallscope/ingest/align.py,
run by the ingest orchestrator after every file is loaded) matches the run to a server log's `Received request` lines.
"""
from __future__ import annotations

import itertools
import json
import math
import re

import numpy as np
import orjson
import polars as pl

from .base import ParseContext, Parser
from .patterns import Pattern, Sample
from stallscope.ingest import runclock as align
from stallscope.errors import InputError

VERSION = "1.0"

_V = "../shared/real/vllm/"
_Q01 = _V + "bench_serving_0.8.3_llama70b_tp4pp2_sharegpt_qps_01_llmk8s.json"
_QINF = _V + "bench_serving_0.8.3_llama70b_tp4pp2_sharegpt_qps_inf_llmk8s.json"

PATTERNS = [
    Pattern(
        "bench_key",
        r'"(?P<key>[A-Za-z_][A-Za-z0-9_.]*:?)"\s*:\s*',
        (
            Sample('"request_goodput:": null', {"key": "request_goodput:"}, _Q01),
            Sample('"request_rate": "inf"', {"key": "request_rate"}, _QINF),
            Sample('"date": "20250414-162000"', {"key": "date"}, _Q01),
        ),
        doc="Object keys in the first 64 KB of a file: the content sniff scores them against the known key sets "
            "(note the 0.6.4-0.8.x `request_goodput:` spelling with a colon inside the key).",
    ),
    Pattern(
        "bench_date",
        align.BENCH_DATE_REGEX,
        (
            Sample("20250414-162000", {"year": "2025", "month": "04", "day": "14", "hour": "16", "minute": "20",
                                       "second": "00"}, _Q01),
            Sample("20250414-162342", {"hour": "16", "minute": "23", "second": "42"}, _QINF),
        ),
        doc="vLLM `date`: `datetime.now().strftime('%Y%m%d-%H%M%S')` when the run ended, client local time, "
            "floored to the second (used by stallscope.ingest.runclock.run_start_anchor_ns).",
    ),
]

_KEY_RX = re.compile(PATTERNS[0].regex)

# Per-request arrays, index-aligned in send order. generated_texts is read only for its length.
PER_REQUEST = ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "errors",
               "successes", "queue_times", "generated_texts")
_VLLM_KEYS = {"date", "backend", "endpoint_type", "label", "model_id", "tokenizer_id", "num_prompts", "request_rate",
              "burstiness", "max_concurrency", "duration", "completed", "failed", "total_input_tokens",
              "total_output_tokens", "request_throughput", "request_goodput:", "request_goodput",
              "output_throughput", "total_token_throughput", "max_output_tokens_per_s", "max_concurrent_requests",
              "mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "mean_e2el_ms", *PER_REQUEST}
_SGLANG_ONLY = {"dataset_name", "sharegpt_output_len", "random_input_len", "random_output_len", "random_range_ratio",
                "total_output_tokens_retokenized", "input_throughput", "total_throughput", "mean_e2e_latency_ms",
                "median_e2e_latency_ms", "server_info", "total_input_text_tokens", "accept_length", "concurrency"}
_SGLANG_KEYS = _SGLANG_ONLY | {"tag", "backend", "request_rate", "max_concurrency", "duration", "completed",
                               "total_input_tokens", "total_output_tokens", "request_throughput", "output_throughput",
                               "mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms", *PER_REQUEST}
_RESULT_CORE = {"request_throughput", "ttfts", "input_lens", "mean_ttft_ms", "output_throughput", "itls"}

# vllm#7242 (fixed Aug 2024): itl[0] was the TTFT again, taken with a second perf_counter() a few µs later.
ITL_BUG_TOL_S = 1e-4
ITL_BUG_SHARE = 0.9


class BenchJsonParser(Parser):
    name = "bench_json"
    version = VERSION
    formats = ("vllm_bench_json", "vllm_bench_jsonl", "sglang_bench_json", "sglang_bench_jsonl")
    order = 20

    def sniff(self, head: bytes, inp):
        h = head.lstrip(b"\xef\xbb\xbf \t\r\n")
        if h[:1] != b"{":
            return None
        keys = {m.group("key") for m in _KEY_RX.finditer(h.decode("utf-8", "replace"))}
        if not ({"duration", "completed"} & keys) or not (_RESULT_CORE & keys):
            return None
        vllm, sgl = len(keys & _VLLM_KEYS), len(keys & _SGLANG_KEYS)
        if max(vllm, sgl) < 4:
            return None
        tool = "sglang" if (keys & _SGLANG_ONLY) and "date" not in keys else "vllm"
        first_line_end = h.find(b"\n")
        lines = "jsonl" if first_line_end > 0 and h[first_line_end:].lstrip()[:1] == b"{" else "json"
        return f"{tool}_bench_{lines}", 0.9

    def parse(self, ctx: ParseContext, fmt: str) -> None:
        dec = ctx.input.read_all()
        data = dec.data
        ctx.raw_bytes = len(data)
        if data.startswith(b"\xef\xbb\xbf"):
            data = data[3:]
        if not data.strip():
            raise InputError(f"{ctx.path}: " + (dec.error or "no data"))
        runs = _split_runs(ctx, data, dec.error)
        if not runs:
            raise InputError(f"{ctx.path}: no benchmark run object could be read")
        tool = "sglang" if fmt.startswith("sglang") else "vllm"
        multi = len(runs) > 1
        real_fmt = f"{tool}_bench_{'jsonl' if multi else 'json'}"
        if real_fmt != fmt:  # the sniff sees 64 KB; whether more runs follow is known only now
            ctx.con.execute("UPDATE sources SET format = ? WHERE source_id = ?", [real_fmt, ctx.source_id])
        spans = []
        for run_index, (line_no, obj) in enumerate(runs):
            spans.append(_Run(ctx, obj, run_index, line_no, multi, tool).load())
        firsts = [s[0] for s in spans if s[0] is not None]
        lasts = [s[1] for s in spans if s[1] is not None]
        ctx.first_ns = min(firsts) if firsts else None
        ctx.last_ns = max(lasts) if lasts else None
        clocks = [s[2] for s in spans]
        method = clocks[0][0] if len({c[0] for c in clocks}) == 1 else "mixed"
        note = clocks[0][1] if not multi else (
            f"{len(runs)} runs, per-run clock in engine_config (origin bench_clock): "
            + "; ".join(f"run {i}: {c[1]}" for i, c in enumerate(clocks)))
        ctx.set_clock(method, note, offset_ns=clocks[0][2])


PARSER = BenchJsonParser()


# -- decoding ---------------------------------------------------------------------------------------------------

class _BadJson(ValueError):
    """JSON that does not decode, said in words (where and why), not as the decoder's exception."""


def _loads(raw: bytes):
    """orjson first; Python's json for what orjson refuses but Python writes (Infinity, NaN: SGLang's inf rate)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(raw.decode("utf-8", "replace"))
    except RecursionError:
        raise _BadJson("JSON nested deeper than the decoder's depth limit (~1000 levels)") from None
    except json.JSONDecodeError as e:
        raise _BadJson(f"invalid JSON at byte {e.pos} (line {e.lineno}, column {e.colno}): {e.msg}") from None


def _split_runs(ctx: ParseContext, data: bytes, gzip_error: str | None) -> list[tuple[int, dict]]:
    """(line number, run object) for a JSON file (one run) or JSON Lines (one run per line)."""
    whole: BaseException | None = None
    try:
        obj = _loads(data)
    except _BadJson as e:
        whole = e
    if whole is None:
        if not isinstance(obj, dict) or not _is_run(obj):
            raise InputError(f"{ctx.path}: not a benchmark result: " + _describe(obj))
        if gzip_error:
            ctx.notes.append(f"{gzip_error}; the JSON inside is complete")
        return [(1, obj)]
    first_end = data.find(b"\n")
    try:
        first = _loads(data[:first_end]) if first_end > 0 else None
    except _BadJson:
        first = None
    if not isinstance(first, dict):
        where = f" ({gzip_error})" if gzip_error else ""
        raise InputError(f"{ctx.path}: truncated or invalid JSON{where}: {_one_line(whole)}")
    runs: list[tuple[int, dict]] = []
    offset = 0
    for line_no, raw in enumerate(data.split(b"\n"), start=1):  # one line per run: a handful
        start, offset = offset, offset + len(raw) + 1
        if not raw.strip():
            ctx.counts.skipped += 1
            continue
        try:
            rec = _loads(raw)
        except _BadJson as e:
            ctx.reject(f"JSON Lines record does not decode (truncated?): {_one_line(e)}", raw[:2048],
                       line_no=line_no, byte_offset=start)
            continue
        if not isinstance(rec, dict) or not _is_run(rec):
            ctx.reject("JSON Lines record is not a benchmark run: " + _describe(rec), raw[:2048],
                       line_no=line_no, byte_offset=start)
            continue
        runs.append((line_no, rec))
    if gzip_error:  # a cut inside a line is rejected above; runs after the cut are unknowable
        ctx.notes.append(f"{gzip_error}: runs after the cut are lost")
    return runs


def _is_run(obj: dict) -> bool:
    return bool({"duration", "completed"} & obj.keys()) and bool(_RESULT_CORE & obj.keys())


def _describe(obj) -> str:
    if isinstance(obj, dict):
        return "object without duration/completed and result keys (keys: " + ", ".join(list(obj)[:8]) + ")"
    return f"top-level JSON is a {type(obj).__name__}, not an object"


def _one_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


# -- one run ------------------------------------------------------------------------------------------------------

class _Run:
    """One benchmark run object → rows; returns (first_ns, last_ns, (clock method, note, offset))."""

    def __init__(self, ctx: ParseContext, obj: dict, run_index: int, line_no: int, multi: bool, tool: str):
        self.ctx, self.obj, self.run_index, self.line_no, self.multi = ctx, obj, run_index, line_no, multi
        if tool == "vllm" and ({"dataset_name", "total_output_tokens_retokenized"} & obj.keys()) and "date" not in obj:
            tool = "sglang"
        self.tool = tool
        self.engine = f"{tool}_bench"
        self.prefix = f"{run_index}:" if multi else ""

    def load(self):
        ctx, obj = self.ctx, self.obj
        ctx.counts.parsed += 1  # the run object itself
        self.bad_keys = _check_run_fields(obj)
        for key, why in self.bad_keys.items():
            ctx.notes.append(f"run {self.run_index}: `{key}` {why}" + _NEEDS.get(key, ": stored as text only"))
        duration = None if "duration" in self.bad_keys else _num(obj.get("duration"))
        anchor_ns, anchor_note = align.run_start_anchor_ns(obj.get("date"), duration, ctx.options.tz)
        df = self._frame()
        df, bug = self._itl_bug(df)
        if bug:
            df = df.with_columns(
                pl.when(pl.col("bug")).then(pl.col("itl").list.slice(1)).otherwise(pl.col("itl")).alias("itl"))
            ctx.notes.append(f"run {self.run_index}: itls[0] equals the TTFT in {bug}/{df.height} requests "
                             f"(benchmark bug vllm#7242): that first entry was dropped")
        has_start = "start" in df.columns and df.height > 0 and df["start"].null_count() < df.height
        start_min = float(df["start"].min()) if has_start else None
        if has_start:
            offset = None if anchor_ns is None else anchor_ns - int(round(start_min * 1e9))
            method = "bench_date_minus_duration" if anchor_ns is not None else "bench_unanchored"
            note = (anchor_note + "; request sends from start_times (perf_counter)") if anchor_ns is not None else \
                "no `date`: start_times (perf_counter) give relative send times only; times stay NULL until aligned"
        else:
            offset = anchor_ns
            method = "bench_date_minus_duration" if anchor_ns is not None else "bench_unanchored"
            note = (anchor_note if anchor_ns is not None else "no `date` in the run") + \
                "; no start_times: per-request instants are unknown until matched to a server log"
        req = self._requests(df, offset if has_start else None)
        self.ctx.write("requests", req)
        gaps = self._gaps(df, req)
        self.ctx.write("token_gaps", gaps)
        ctx.counts.parsed += df.height
        failed = int((~df["ok"]).sum()) if df.height else 0
        self._summary(df.height, failed, bug, has_start, anchor_ns, note)
        align.write_unit_clock(ctx.con, ctx.source_id, self.line_no, method=method, note=note,
                               offset_ns=offset, residual_ns=None, matched=None, server_source_id=None)
        if failed:
            ctx.notes.append(f"run {self.run_index}: {failed} failed requests kept as status='failed'")
        if df.height == 0:
            ctx.notes.append(f"run {self.run_index}: no per-request data (arrays absent: saved without "
                             f"--save-detailed / --output-details, or empty): run summary only")
        first = req["arrival_ns"].min() if req.height else None
        last = req["finish_ns"].max() if req.height else None
        if first is None and anchor_ns is not None:
            first = anchor_ns
            last = anchor_ns + int(round((duration or 0) * 1e9))
        return first, last, (method, note, offset or 0)

    # -- per-request frame ------------------------------------------------------------------------------------
    def _frame(self) -> pl.DataFrame:
        obj, ctx = self.obj, self.ctx
        arrays = {k: obj[k] for k in PER_REQUEST if isinstance(obj.get(k), list)}
        lens = {k: len(v) for k, v in arrays.items()}
        n = max(lens.values(), default=0)
        common = min(lens.values(), default=0)
        if common < n:
            detail = ", ".join(f"{k} {v}" for k, v in lens.items())
            reason = f"per-request arrays have different lengths ({detail}): index beyond the shortest"
            idx = np.arange(common, n)
            ctx.write_rejects(pl.DataFrame({
                "line_no": np.full(idx.size, self.line_no, dtype=np.int64), "record_index": idx,
                "reason": [reason] * idx.size, "raw": [None] * idx.size},
                schema_overrides={"raw": pl.String}).to_arrow())
        n = common
        cols: dict[str, pl.Series] = {"request_index": pl.Series(np.arange(n, dtype=np.int32))}

        wrong: dict[str, np.ndarray] = {}  # per column: entries of the wrong JSON type (read as null)
        for key, col, dtype in (("input_lens", "prompt_tokens", pl.Int64), ("output_lens", "output_tokens", pl.Int64),
                                ("ttfts", "ttft", pl.Float64), ("latencies", "latency", pl.Float64),
                                ("start_times", "start", pl.Float64), ("itls", "itl", pl.List(pl.Float64)),
                                ("successes", "success", pl.Boolean), ("errors", "error", pl.String)):
            if key in arrays:
                cols[col], bad = _series(arrays[key][:n], dtype)
                if bad is not None:
                    wrong[col] = bad
        df = pl.DataFrame(cols, height=n) if n else pl.DataFrame({"request_index": pl.Series([], dtype=pl.Int32)})
        for c, dtype in (("prompt_tokens", pl.Int64), ("output_tokens", pl.Int64), ("ttft", pl.Float64),
                         ("latency", pl.Float64), ("start", pl.Float64), ("itl", pl.List(pl.Float64)),
                         ("success", pl.Boolean), ("error", pl.String)):
            if c not in df.columns:
                df = df.with_columns(pl.lit(None, dtype=dtype).alias(c))
        # Failure: an error text, a false success flag, or (neither array saved) vLLM's placeholders for a
        # failed request in every array that was saved: ttft 0.0, output_len 0, itl [], latency 0.0.
        failed = (pl.col("error").is_not_null() & (pl.col("error") != "")) | (pl.col("success") == False)  # noqa: E712
        placeholders = [c for k, c in (("ttfts", pl.col("ttft") == 0), ("output_lens", pl.col("output_tokens") == 0),
                                       ("itls", pl.col("itl").list.len() == 0), ("latencies", pl.col("latency") == 0))
                        if k in arrays]
        if "errors" not in arrays and "successes" not in arrays and placeholders:
            failed = failed | pl.all_horizontal([c.fill_null(True) for c in placeholders])
        df = df.with_columns(ok=~failed.fill_null(False))
        for col, bad in wrong.items():
            df = df.with_columns(pl.Series(f"_wrong_{col}", bad))
        # Unusable successful requests: no valid TTFT (when TTFTs were saved), or a gap that is not a finite
        # non-negative number.
        el = pl.element()
        bad_gap = pl.col("itl").list.eval(el.is_null() | ~el.is_finite() | (el < 0) | (el > MAX_SECONDS)).list.any()
        bad_ttft = (pl.col("ttft").is_null() | ~pl.col("ttft").is_finite() | (pl.col("ttft") < 0)
                    | (pl.col("ttft") > MAX_SECONDS)) if "ttfts" in arrays else pl.lit(False)

        def wrong_type(col):
            return pl.col(f"_wrong_{col}") if col in wrong else pl.lit(False)

        def bad_count(col, key):
            return (wrong_type(col) | (pl.col(col) < 0) | (pl.col(col) >= 1 << 31)).fill_null(False) \
                if key in arrays else pl.lit(False)

        bad_start = (wrong_type("start") | ~pl.col("start").is_finite() | (pl.col("start").abs() > MAX_SEND_SECONDS)) \
            .fill_null(False) if "start_times" in arrays else pl.lit(False)
        df = df.with_columns(
            reason=pl.when(~pl.col("ok")).then(None)
            .when(wrong_type("ttft")).then(pl.lit("ttfts[i] is not a number"))
            .when(bad_ttft).then(pl.lit("successful request without a valid TTFT (ttfts[i])"))
            .when(wrong_type("itl")).then(pl.lit("itls[i] is not a list of gaps"))
            .when(bad_gap.fill_null(False)).then(pl.lit("itls[i] holds a gap that is not a finite non-negative number"))
            .when(bad_count("prompt_tokens", "input_lens")).then(pl.lit("input_lens[i] is not a token count"))
            .when(bad_count("output_tokens", "output_lens")).then(pl.lit("output_lens[i] is not a token count"))
            .when(bad_start).then(pl.lit("start_times[i] is not a finite time in seconds"))
            .otherwise(None))
        bad = df.filter(pl.col("reason").is_not_null())
        if bad.height:
            ctx.write_rejects(bad.select(
                pl.lit(self.line_no, dtype=pl.Int64).alias("line_no"),
                pl.col("request_index").cast(pl.Int64).alias("record_index"), "reason",
                pl.format("ttft={} itl[:5]={}", pl.col("ttft").cast(pl.String).fill_null("null"),
                          pl.col("itl").list.head(5).cast(pl.List(pl.String)).list.join(",").fill_null("null"))
                .alias("raw")).to_arrow())
            df = df.filter(pl.col("reason").is_null())
        return df.drop("reason", *(f"_wrong_{c}" for c in wrong))

    def _itl_bug(self, df: pl.DataFrame) -> tuple[pl.DataFrame, int]:
        """Mark (`bug`) requests whose itls[0] repeats the TTFT when that is the rule of the run (vllm#7242)."""
        close = (pl.col("ok") & (pl.col("itl").list.len() > 0)
                 & ((pl.col("itl").list.first() - pl.col("ttft")).abs() <= ITL_BUG_TOL_S)).fill_null(False)
        eligible = (pl.col("ok") & (pl.col("itl").list.len() > 0) & (pl.col("ttft") > 0)).fill_null(False)
        c, e = df.select(close.sum().alias("c"), eligible.sum().alias("e")).row(0) if df.height else (0, 0)
        is_bug = bool(e) and c >= ITL_BUG_SHARE * e
        return df.with_columns((close & pl.lit(is_bug)).alias("bug")), (int(c) if is_bug else 0)

    def _requests(self, df: pl.DataFrame, offset_ns: int | None) -> pl.DataFrame:
        # Non-strict casts: a failed request's placeholders may be anything; a kept request's values were checked.
        ns = lambda c: (pl.col(c) * 1e9).round(0).cast(pl.Int64, strict=False)  # noqa: E731
        gap_sum = pl.col("itl").list.eval((pl.element() * 1e9).round(0).cast(pl.Int64, strict=False)).list.sum()
        ttft_ns = pl.when(pl.col("ok")).then(ns("ttft"))
        latency_ok = pl.col("latency").is_not_null() & pl.col("latency").is_finite() & (pl.col("latency") > 0) \
            & (pl.col("latency") <= MAX_SECONDS)
        e2e_ns = pl.when(pl.col("ok") & latency_ok).then(ns("latency")) \
            .when(pl.col("ok")).then(ns("ttft") + gap_sum.fill_null(0))
        arrival = (ns("start") + offset_ns) if offset_ns is not None else pl.lit(None, dtype=pl.Int64)
        out = df.select(
            pl.lit(self.line_no, dtype=pl.Int64).alias("line_no"),
            (pl.lit(self.prefix) + pl.col("request_index").cast(pl.String)).alias("request_id"),
            pl.col("request_index").cast(pl.Int32),
            pl.lit(self.engine).alias("engine"), pl.lit("client").alias("kind"),
            arrival.alias("arrival_ns"),
            pl.col("prompt_tokens").cast(pl.Int32, strict=False), pl.col("output_tokens").cast(pl.Int32, strict=False),
            ttft_ns.alias("ttft_ns"), e2e_ns.alias("e2e_latency_ns"),
            pl.when(pl.col("ok")).then(pl.lit("ok")).otherwise(pl.lit("failed")).alias("status"),
            pl.when(pl.col("ok")).then(None).otherwise(
                pl.col("error").fill_null("failed (no error text)").str.slice(0, 4096)).alias("error"),
        )
        return out.with_columns(
            (pl.col("arrival_ns") + pl.col("ttft_ns")).alias("first_token_ns"),
            (pl.col("arrival_ns") + pl.col("e2e_latency_ns")).alias("finish_ns"),
        )

    def _gaps(self, df: pl.DataFrame, req: pl.DataFrame) -> pl.DataFrame:
        g = df.select("request_index", "ok", "itl").filter(pl.col("ok") & (pl.col("itl").list.len() > 0))
        if g.height == 0:
            return pl.DataFrame()
        g = g.join(req.select(pl.col("request_index"), "request_id", "arrival_ns", "ttft_ns"), on="request_index")
        g = g.explode("itl").with_columns(
            gap_index=pl.int_range(pl.len(), dtype=pl.Int32).over("request_index"),
            gap_ns=(pl.col("itl") * 1e9).round(0).cast(pl.Int64, strict=False))
        return g.select(
            "request_id", "gap_index", "gap_ns",
            (pl.col("arrival_ns") + pl.col("ttft_ns") + pl.col("gap_ns").cum_sum().over("request_index"))
            .alias("end_ns"),
            pl.lit(None, dtype=pl.Int32).alias("tokens_in_chunk"))

    # -- run summary ------------------------------------------------------------------------------------------
    def _summary(self, n: int, failed: int, bug: int, has_start: bool, anchor_ns: int | None, note: str) -> None:
        keys, values, nums = [], [], []

        def put(k, v):
            keys.append(k)
            values.append(_text(v))
            nums.append(None if k in self.bad_keys else _value_num(v))

        for k, v in self.obj.items():  # a run has tens of keys
            if k in PER_REQUEST:
                continue
            if k == "request_goodput:":
                put("request_goodput", v)
                put("request_goodput_key", k)
            elif k == "request_goodput":
                put("request_goodput", v)
                put("request_goodput_key", k)
            else:
                put(k, v)
        for k, v in (("tool", "vllm_bench_serve" if self.tool == "vllm" else "sglang_bench_serving"),
                     ("run_index", self.run_index), ("requests", n), ("requests_failed", failed),
                     ("send_times", "start_times" if has_start else "none"), ("itl_ttft_bug_dropped", bug),
                     ("tz", self.ctx.options.tz), ("run_start_anchor_ns", anchor_ns), ("clock_anchor_note", note)):
            put(k, v)
        self.ctx.write("engine_config", pl.DataFrame({
            "line_no": pl.Series([self.line_no] * len(keys), dtype=pl.Int64), "key": keys,
            "value": pl.Series(values, dtype=pl.String), "value_num": pl.Series(nums, dtype=pl.Float64),
            "origin": ["bench_summary"] * len(keys)}))


def _num(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def _series(values: list, dtype) -> tuple[pl.Series, np.ndarray | None]:
    """A per-request array as a typed column, and which entries had the wrong JSON type (read as null; None
    when all were right). Clean arrays take polars' strict constructor; only a file with odd entries pays for
    the per-entry check."""
    # Types screened first (at C speed): polars takes super-linear time to refuse a deeply nested entry.
    if isinstance(dtype, pl.List):
        plain = set(map(type, values)) <= {list, type(None)} and \
            set(map(type, itertools.chain.from_iterable(v for v in values if v))) <= _SCALAR_TYPES[pl.Float64]
    else:
        plain = set(map(type, values)) <= _SCALAR_TYPES[dtype]
    if plain:
        try:
            return pl.Series(values, dtype=dtype, strict=True), None
        except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
            pass
    if dtype == pl.String:  # error texts: anything non-empty says the request failed, whatever its type
        return pl.Series([v if v is None or isinstance(v, str) else json.dumps(v, default=str) for v in values],
                         dtype=pl.String), None
    ok = _ENTRY_CHECKS[dtype if not isinstance(dtype, pl.List) else pl.List]
    if dtype == pl.Int64:  # a count written as 12.0 is still a count
        values = [int(v) if isinstance(v, float) and v.is_integer() and abs(v) < 2 ** 63 else v for v in values]
    clean = [v if ok(v) else None for v in values]  # only for a damaged file
    bad = np.fromiter((v is not None and c is None for v, c in zip(values, clean)), dtype=bool, count=len(values))
    return pl.Series(clean, dtype=dtype, strict=True), bad


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and -(1 << 63) <= v < (1 << 63)


def _is_float(v) -> bool:
    return (isinstance(v, float) or _is_int(v)) and not isinstance(v, bool)


_SCALAR_TYPES = {pl.Int64: {int, type(None)}, pl.Float64: {int, float, type(None)}, pl.Boolean: {bool, type(None)},
                 pl.String: {str, type(None)}}
_ENTRY_CHECKS = {
    pl.Int64: _is_int, pl.Float64: _is_float, pl.Boolean: lambda v: isinstance(v, bool),
    pl.List: lambda v: isinstance(v, list) and all(x is None or _is_float(x) for x in v),
}

MAX_SECONDS = 1e7  # a latency, TTFT or gap beyond 115 days is not one
MAX_SEND_SECONDS = 1e9  # start_times are perf_counter() readings: seconds since an arbitrary point, within int64 ns
# Run-level numbers: what each must be, and what needs it.
_COUNTS = ("num_prompts", "completed", "failed", "total_input_tokens", "total_output_tokens", "max_concurrency",
           "max_concurrent_requests")
_NEEDS = {"duration": ": the run start (date - duration) and the run's time window are null; goodput uses the "
                      "requests' own window"}


def _check_run_fields(obj: dict) -> dict[str, str]:
    """Run-level fields whose value is not what the field means: key -> what is wrong (for a note)."""
    bad: dict[str, str] = {}
    for k, v in obj.items():
        # A null is an unknown, not a wrong value, except where a figure needs the field (_NEEDS): said there too.
        if k in PER_REQUEST or (v is None and k not in _NEEDS):
            continue
        if k == "duration":
            if v is None or not (_is_float(v) and math.isfinite(v) and 0 <= v <= MAX_SECONDS):
                bad[k] = f"is {_show(v)}, not a number of seconds"
        elif k in _COUNTS:
            if not (_is_int(v) and v >= 0) and not (isinstance(v, float) and v.is_integer() and v >= 0):
                bad[k] = f"is {_show(v)}, not a count"
        elif k == "request_rate":
            if not ((_is_float(v) and v >= 0) or (isinstance(v, str) and v.strip().lower() in ("inf", "infinity"))):
                bad[k] = f"is {_show(v)}, not a rate"
        elif isinstance(v, float) and math.isnan(v):
            bad[k] = "is NaN"
    return bad


def _show(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("infinite" if v > 0 else "-infinite")
    if isinstance(v, str):
        return f"the text {v[:40]!r}"
    if isinstance(v, (list, dict)):
        return "a list" if isinstance(v, list) else "an object"
    return repr(v)[:40]


def _text(v) -> str | None:
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if isinstance(v, (int, float, str)):
        return str(v)
    return json.dumps(v, default=str)


def _value_num(v) -> float | None:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, int):
        return float(v) if abs(v) < 1e308 else None
    if isinstance(v, float):
        return None if math.isnan(v) else v
    if isinstance(v, str) and v.strip().lower() in ("inf", "infinity"):
        return math.inf
    return None
