"""Prometheus text exposition (0.0.4) and OpenMetrics line formats as data: each regex next to real lines it must read.

Every regex is applied to one physical line (no newline) with `re.search` / polars `str.extract` semantics. The
samples come from the scrapes in ../shared/real/metrics/ unless marked as built from the specification (the
Prometheus exposition-format and OpenMetrics documents), which says so next to them.
"""
from __future__ import annotations

from .patterns import Pattern, Sample

_M = "../shared/real/metrics/"
_V25 = _M + "vllm_0.25.1_rtx3090x2_opt125m_tp2_idle_er0080.prom"
_V10 = _M + "vllm_v1_0.10-era_dp2_two_engines_http_summaries_deprecated_gpu_prefix_counters_vllm22227.prom"
_SGL = _M + "sglang_0.5.x_metrics_engine_type_pp_rank_tp_rank_labels_issue13485.prom"

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
# A label set's inside: label names, `=`, commas and blanks outside quotes; anything but an unescaped quote inside.
_LABELS = r'(?:[^"{}]|"(?:[^"\\]|\\.)*")*'

SAMPLE = Pattern(
    "sample",
    r"^(?P<name>" + NAME + r")[ \t]*(?:\{(?P<labels>" + _LABELS + r")\})?[ \t]+(?P<value>[^ \t#]+)"
    r"(?:[ \t]+(?P<ts>[-+]?[0-9][0-9.eE+-]*))?(?:[ \t]+#(?P<exemplar>[ \t].*)?)?[ \t]*$",
    (Sample('vllm:num_requests_waiting_by_reason{engine="0",model_name="opt-125m-tp2",reason="capacity"} 0.0',
            {"name": "vllm:num_requests_waiting_by_reason", "value": "0.0", "ts": None,
             "labels": 'engine="0",model_name="opt-125m-tp2",reason="capacity"'}, _V25),
     Sample('vllm:gpu_prefix_cache_queries_total{engine="1",model_name="/home/jovyan/qwen3-8b"} 26.0',
            {"name": "vllm:gpu_prefix_cache_queries_total", "value": "26.0"}, _V10),
     Sample('sglang:gen_throughput{engine_type="unified",model_name="Qwen-32B",pp_rank="0",tp_rank="0"} '
            '0.8371284457403783', {"name": "sglang:gen_throughput", "value": "0.8371284457403783"}, _SGL),
     Sample('vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="opt-125m-tp2"} 0.0',
            {"name": "vllm:time_to_first_token_seconds_bucket", "value": "0.0"}, _V25),
     Sample("process_open_fds 49.0", {"name": "process_open_fds", "labels": None, "value": "49.0"}, _V25),
     # From the exposition-format specification: a 0.0.4 sample with its own timestamp (ms since the epoch).
     Sample('http_requests_total{method="post",code="200"} 1027 1395066363000',
            {"name": "http_requests_total", "value": "1027", "ts": "1395066363000"}),
     # OpenMetrics: a timestamp in seconds, an exemplar after ` # ` (kept out of the value), a label value with
     # escaped quotes and a brace, and the sglang 2026 sidecar's integer values (its names use `_`, not `:`).
     Sample('vllm:e2e_request_latency_seconds_bucket{le="1.0"} 7 1733871003.478 # {trace_id="KOO5S4vxi0o"} 0.67',
            {"name": "vllm:e2e_request_latency_seconds_bucket", "value": "7", "ts": "1733871003.478",
             "exemplar": ' {trace_id="KOO5S4vxi0o"} 0.67'}),
     Sample(r'msdos_file_access_time_seconds{path="C:\\DIR\\FILE.TXT",error="Cannot find \"{x}\"."} 1.458255915e9',
            {"name": "msdos_file_access_time_seconds", "value": "1.458255915e9"}),
     Sample('sglang_num_running_reqs{model_name="qwen",tp_rank="0"} 3', {"name": "sglang_num_running_reqs",
                                                                          "value": "3"})),
    doc="One sample line: metric name, optional `{label set}`, value (a float, `NaN`, `+Inf`, `-Inf`), optional "
        "timestamp (0.0.4: integer ms; OpenMetrics: seconds), optional OpenMetrics exemplar after ` # `.")

# One label pair inside a label set, with the comma after it (a trailing comma is legal).
LABEL_PAIR = r'[ \t]*(?P<key>[a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"(?P<val>(?:[^"\\]|\\.)*)"[ \t]*(?:,|$)'

HELP = Pattern(
    "help", r"^#[ \t]+HELP[ \t]+(?P<family>" + NAME + r")(?:[ \t](?P<help>.*))?$",
    (Sample("# HELP http_request_size_bytes Content length of incoming requests by handler. Only value of header is "
            "respected. Otherwise ignored. No percentile calculated. ",
            {"family": "http_request_size_bytes", "help": "Content length of incoming requests by handler. Only value "
             "of header is respected. Otherwise ignored. No percentile calculated. "}, _V10),
     Sample("# HELP sglang:token_usage The token usage.", {"family": "sglang:token_usage",
                                                          "help": "The token usage."}, _SGL)),
    doc="`# HELP name text`: the text as printed (a trailing blank kept), `\\\\` and `\\n` escapes undone later.")

TYPE = Pattern(
    "type", r"^#[ \t]+TYPE[ \t]+(?P<family>" + NAME + r")[ \t]+(?P<type>[A-Za-z]+)[ \t]*$",
    (Sample("# TYPE vllm:iteration_tokens_total histogram", {"family": "vllm:iteration_tokens_total",
                                                            "type": "histogram"}, _V25),
     Sample("# TYPE http_request_size_bytes summary", {"family": "http_request_size_bytes", "type": "summary"}, _V10),
     Sample("# TYPE vllm:gpu_prefix_cache_hits_total counter", {"type": "counter"}, _V10)),
    doc="`# TYPE name type`; the type must be one of TYPES.")

TYPES = ("counter", "gauge", "histogram", "gaugehistogram", "summary", "untyped", "unknown", "info", "stateset")

UNIT = Pattern(
    "unit", r"^#[ \t]+UNIT[ \t]+(?P<family>" + NAME + r")(?:[ \t]+(?P<unit>[^ \t]*))?[ \t]*$",
    # From the OpenMetrics specification (no real OpenMetrics scrape is in ../shared/real/).
    (Sample("# UNIT vllm:e2e_request_latency_seconds seconds", {"family": "vllm:e2e_request_latency_seconds",
                                                               "unit": "seconds"}),),
    doc="OpenMetrics `# UNIT name unit`.")

EOF = Pattern("eof", r"^#[ \t]*EOF[ \t]*$", (Sample("# EOF", {}),),
              doc="OpenMetrics' end of an exposition: the next line, if any, starts another scrape.")

_ISO = r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?"
_DATE_CMD = (r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d{1,2} "
             r"\d\d:\d\d:\d\d(?: [A-Z]{2,5})? \d{4}")
MARKER = Pattern(
    "scrape_marker",
    r"^(?:#[ \t]*)?(?:(?:scrape(?:_time|_ts|d at| at| time)?|time(?:stamp)?)[ \t]*[:=]?[ \t]*)?"
    r"(?:(?P<iso>" + _ISO + r")|(?P<epoch>\d{9,10}(?:\.\d{1,9})?)|(?P<date>" + _DATE_CMD + r"))[ \t]*$",
    # Built, not copied: what a scrape loop writes between scrapes (`date -Ins; curl …/metrics`, `date; curl …`,
    # `echo "# scrape_time=$(date +%s.%N)"`).
    (Sample("2026-05-12T07:41:29,271265228+00:00", {"iso": "2026-05-12T07:41:29,271265228+00:00"}),
     Sample("# 2026-05-12T07:41:29Z", {"iso": "2026-05-12T07:41:29Z"}),
     Sample("# scrape_time=1778571689.271", {"epoch": "1778571689.271"}),
     Sample("Tue May 12 07:41:29 UTC 2026", {"date": "Tue May 12 07:41:29 UTC 2026"}),
     Sample("Tue May  5 07:41:29 2026", {"date": "Tue May  5 07:41:29 2026"})),
    doc="A line that only states a time, between two concatenated scrapes: the scrape that follows was taken then. "
        "Without a zone the time is in the ingest's `--tz`; `date`'s named zones other than UTC/GMT are taken as "
        "`--tz` too (a name like CEST is ambiguous).")

PATTERNS = [SAMPLE, HELP, TYPE, UNIT, EOF, MARKER]
