"""OpenTelemetry request spans as input: OTLP/JSON as the Collector's `file` exporter writes it, vLLM's `llm_request`.

One `ExportTraceServiceRequest` per line (`{"resourceSpans":[{"resource":…,"scopeSpans":[{"scope":…,"spans":[…]}]}]}`),
64-bit integers as strings (`startTimeUnixNano`, `intValue`). Each `llm_request` span (vLLM `--otlp-traces-endpoint`,
attributes of `vllm/tracing.py`, latencies in seconds) becomes one `requests` row, kind `server`, engine `vllm`:
arrival = the span's start, finish = its end, `ttft_ns` = `gen_ai.latency.time_to_first_token`, `e2e_latency_ns` =
`gen_ai.latency.e2e`, `queue_ns` = `time_in_queue`, `inference_ns` = `time_in_model_inference`, `scheduled_ns` =
arrival + queue, `first_token_ns` = arrival + TTFT, prompt/completion tokens from `gen_ai.usage.*`, and
`time_per_token_ns` = vLLM's mean TPOT (e2e - TTFT) / (completion tokens - 1) (0 for one token), so the goodput views
judge TTFT + TPOT exactly as vLLM's `--goodput` does. Per-token times are not in a span: the ITL criterion cannot be
judged from spans (no `token_gaps` rows; the analysis says so). The file is one run: every row's `line_no` is the
first span's line (the goodput views group requests into runs by it). Other spans are skipped; a line that is not JSON or
not an ExportTraceServiceRequest is rejected with its line number.
"""
from __future__ import annotations

import polars as pl

import re

from .base import InputFile, ParseContext, Parser
from .lines import frame_lines
from .patterns import Pattern, Sample

__all__ = ["PARSER", "PATTERNS", "sniff"]

# No public file of vLLM's spans through the Collector is known: the samples are built from the OTLP/JSON
# specification (opentelemetry-proto, ExportTraceServiceRequest as JSON) and vLLM's vllm/tracing.py attributes.
# Specification: https://github.com/open-telemetry/opentelemetry-proto/blob/main/docs/specification.md#json-protobuf-encoding
REQUEST_LINE = Pattern(
    "request_line", r'^\s*\{\s*"resourceSpans"\s*:\s*\[',
    (Sample('{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"vllm"}}]},'
            '"scopeSpans":[{"scope":{"name":"vllm.llm_engine"},"spans":[{"traceId":"5b8efff798038103d269b633813fc60c",'
            '"spanId":"eee19b7ec3c1b174","name":"llm_request","kind":2,"startTimeUnixNano":"1733871000123456789",'
            '"endTimeUnixNano":"1733871003478000000","attributes":[{"key":"gen_ai.latency.time_to_first_token",'
            '"value":{"doubleValue":0.153}}]}]}]}]}', {}),),
    "One ExportTraceServiceRequest per line, as the Collector's file exporter writes it.")
LLM_REQUEST = Pattern(
    "llm_request_span", r'"name"\s*:\s*"(?P<name>llm_request)"',
    (Sample('"spanId":"eee19b7ec3c1b174","name":"llm_request","kind":2', {"name": "llm_request"}),),
    "vLLM's per-request span (vllm/tracing.py); other spans are counted as skipped.")
PATTERNS = [REQUEST_LINE, LLM_REQUEST]
_REQUEST_LINE_RX = re.compile(REQUEST_LINE.regex.encode())

_SHAPE = ('{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "VARCHAR", "spanId": "VARCHAR", '
          '"name": "VARCHAR", "startTimeUnixNano": "VARCHAR", "endTimeUnixNano": "VARCHAR", '
          '"attributes": [{"key": "VARCHAR", "value": {"stringValue": "VARCHAR", "intValue": "VARCHAR", '
          '"doubleValue": "DOUBLE"}}]}]}]}]}')
_LAT = "gen_ai.latency."


def sniff(head: bytes) -> tuple[str, float] | None:
    h = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if _REQUEST_LINE_RX.match(h[:4096]) and b'"spans"' in h:
        return "otlp_json_traces", 0.95
    return None


def _attr(name: str, kind: str = "double") -> str:
    v = f"a['{name}']"
    if kind == "int":
        return f"TRY_CAST(coalesce({v}.intValue, CAST({v}.doubleValue AS VARCHAR)) AS BIGINT)"
    if kind == "str":
        return f"{v}.stringValue"
    return f"coalesce({v}.doubleValue, TRY_CAST({v}.intValue AS DOUBLE))"


def _ns(seconds_sql: str) -> str:
    return f"CAST(round({seconds_sql} * 1e9) AS BIGINT)"


def parse(ctx: ParseContext, fmt: str) -> None:
    dec = ctx.input.read_all()
    if dec.error:
        ctx.notes.append(dec.error)
    data = bytes(dec.data)
    if not data.endswith(b"\n"):
        data += b"\n"
    ctx.place = "splitting lines"
    lines = frame_lines(data, 1).filter(pl.col("text").str.strip_chars() != "")
    del data
    con = ctx.con
    con.register("_otel_lines", lines.select("line_no", "text").to_arrow())
    ctx.place = "reading the spans"
    try:
        con.execute(f"""
            CREATE OR REPLACE TEMP TABLE _otel_docs AS
            SELECT line_no, text, json_valid(text) AS ok,
                   CASE WHEN json_valid(text) THEN from_json(text, '{_SHAPE}') END AS d
            FROM _otel_lines""")
        bad = con.sql("""
            SELECT line_no, CASE WHEN NOT ok THEN 'not JSON (a cut or damaged line)'
                                 ELSE 'no resourceSpans: not an OTLP/JSON ExportTraceServiceRequest' END AS reason,
                   left(text, 512) AS raw
            FROM _otel_docs WHERE NOT ok OR d.resourceSpans IS NULL ORDER BY line_no""").pl()
        if bad.height:
            ctx.write_rejects(bad.to_arrow())
        con.execute("""
            CREATE OR REPLACE TEMP TABLE _otel_spans AS
            WITH rs AS (SELECT line_no, unnest(d.resourceSpans) AS r FROM _otel_docs WHERE ok),
                 ss AS (SELECT line_no, unnest(r.scopeSpans) AS s FROM rs),
                 sp AS (SELECT line_no, unnest(s.spans) AS x FROM ss)
            SELECT line_no, x.name AS name, x.traceId AS trace_id, x.spanId AS span_id,
                   TRY_CAST(x.startTimeUnixNano AS BIGINT) AS start_ns, TRY_CAST(x.endTimeUnixNano AS BIGINT) AS end_ns,
                   map_from_entries(list_transform(coalesce(x.attributes, []), lambda e: {'k': e.key, 'v': e.value}))
                     AS a
            FROM sp""")
        n_all, n_req = con.execute("SELECT count(*), count(*) FILTER (WHERE name = 'llm_request') "
                                   "FROM _otel_spans").fetchall()[0]
        ctx.counts.skipped += n_all - n_req
        ttft, e2e, queue = _attr(_LAT + "time_to_first_token"), _attr(_LAT + "e2e"), _attr(_LAT + "time_in_queue")
        out_tok = _attr("gen_ai.usage.completion_tokens", "int")
        n = ctx.write_sql("requests", f"""
            WITH r AS (
                SELECT line_no, start_ns AS arrival_ns, end_ns AS finish_ns,
                       coalesce({_attr("gen_ai.request.id", "str")}, span_id) AS request_id,
                       {_ns(ttft)} AS ttft_ns, {_ns(e2e)} AS e2e_latency_ns, {_ns(queue)} AS queue_ns,
                       {_ns(_attr(_LAT + "time_in_model_inference"))} AS inference_ns,
                       {_attr("gen_ai.usage.prompt_tokens", "int")} AS prompt_tokens, {out_tok} AS output_tokens,
                       {_attr("gen_ai.request.max_tokens", "int")} AS max_tokens
                FROM _otel_spans WHERE name = 'llm_request')
            SELECT min(line_no) OVER () AS line_no, request_id, CAST(row_number() OVER (ORDER BY arrival_ns, line_no) - 1 AS INTEGER)
                     AS request_index, request_id AS server_request_id, 'vllm' AS engine, 'server' AS kind,
                   arrival_ns, arrival_ns + ttft_ns AS first_token_ns, finish_ns, arrival_ns + queue_ns AS scheduled_ns,
                   prompt_tokens, output_tokens, max_tokens, ttft_ns, e2e_latency_ns, queue_ns, inference_ns,
                   CASE WHEN output_tokens > 1 THEN CAST(round((e2e_latency_ns - ttft_ns) / (output_tokens - 1.0))
                                                         AS BIGINT)
                        WHEN output_tokens IS NOT NULL THEN 0 END AS time_per_token_ns,
                   'ok' AS status
            FROM r""")
        ctx.counts.parsed += n
        bounds = con.execute("SELECT min(arrival_ns), max(finish_ns) FROM requests WHERE source_id = ?",
                             [ctx.source_id]).fetchall()[0]
    finally:
        con.unregister("_otel_lines")
        for t in ("_otel_docs", "_otel_spans"):
            con.execute(f"DROP TABLE IF EXISTS {t}")
    ctx.set_clock("span_timestamps", "span start/end as written (Unix ns, UTC)")
    if bounds[0] is not None:
        ctx.notes.append(f"{n} llm_request spans: TTFT and mean TPOT judged as vLLM does; the ITL criterion is "
                         "not judgeable from spans (no per-token times)")


class OtelParser(Parser):
    name = "otel"
    version = "1"
    formats = ("otlp_json_traces",)
    duckdb_threads = 1

    def sniff(self, head: bytes, inp: InputFile):
        return sniff(head)

    def parse(self, ctx: ParseContext, fmt: str) -> None:
        parse(ctx, fmt)


PARSER = OtelParser()
