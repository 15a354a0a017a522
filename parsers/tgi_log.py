"""TGI (text-generation-inference) router and launcher logs, text and `--json-output`, v0.7 to v3.x, into the
canonical tables: per-request `Success` records (and request-level errors) into `requests`, launcher `Args` and
router startup lines into `engine_config`, the radix `Prefix N - Suffix M` line into `request_events`, errors with
their batch spans, tracebacks and every other record into `log_events`.

A record starts at a timestamped head (`2024-02-14T06:49:51.437631Z  INFO spans: target: file.rs:N: message`), at a
pasted head without a timestamp (`INFO generate{…}: text_generation_router::server: …`) or at a JSON object; lines
that start nothing belong to the record before them (pretty `Args {`, DEBUG `Input:` prompts, shard tracebacks
re-emitted by the launcher, JSON hard-wrapped by a paste). Records are formed with polars: a start flag per line,
group ids from its cumulative sum, `group_by` + `str.join`; no Python loop over lines. The generic pieces
(frames with the cut-gzip check, the record splitter, trailing blanks, config rows) live in `logrecords`, shared with
`sglang_log`.

Times: TGI prints RFC 3339 UTC with `Z`. A line pasted without its timestamp gives a request with NULL times (it
still counts); other untimed records inherit the previous timed record's time (NULL when none precedes).
"""
from __future__ import annotations

import re


import polars as pl

from .base import InputFile, ParseContext, Parser
from .logrecords import (ANSI_RX, WRAPS_RX, MSG_MAX, unwrap, wrap_names, config_rows, event_message, looks_like_traceback,
                         note_rows, record_frames, BufferedWrites, span_of_times, with_body, write_config)
from .lines import ordered_map
from .patterns import Pattern, Sample
from .prefixes import unwrap_text

VERSION = "1.0"
NS_PER_S = 1_000_000_000

# =====================================================================================================================
# TGI formats as data
# =====================================================================================================================

_S = "../shared/real/tgi/"
TS_RX = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?Z"
LEVELS = "TRACE|DEBUG|INFO|WARN|ERROR"
HANDLERS = ["compat_generate", "generate", "generate_stream", "chat_completions", "completions",
            "vertex_compatibility", "sagemaker_compatibility"]
UNIT_NS = {"ns": 1.0, "µs": 1e3, "μs": 1e3, "us": 1e3, "ms": 1e6, "s": 1e9}
DURATION_KEYS = ("total_time", "validation_time", "queue_time", "inference_time", "time_per_token")

_L_SUCCESS = ("2024-02-14T06:49:51.437631Z  INFO generate{parameters=GenerateParameters { best_of: None, temperature: "
              "None, repetition_penalty: None, frequency_penalty: None, top_k: None, top_p: None, typical_p: None, "
              "do_sample: false, max_new_tokens: Some(14), return_full_text: None, stop: [], truncate: None, watermark: "
              "false, details: false, decoder_input_details: false, seed: None, top_n_tokens: None } total_time="
              "\"611.286748ms\" validation_time=\"754.5µs\" queue_time=\"127.337µs\" inference_time=\"610.405028ms\" "
              "time_per_token=\"43.600359ms\" seed=\"None\"}: text_generation_router::server: router/src/server.rs:299: "
              "Success")
_F_SUCCESS = _S + "tgi_v1.4dev_text_connected_and_success_2024-02-14.log"
_L_CHAT = ("2024-12-10T21:50:03.478010Z  INFO chat_completions{total_time=\"735.200735ms\" validation_time=\"955.594µs\" "
           "queue_time=\"73.176µs\" inference_time=\"734.172108ms\" time_per_token=\"36.708605ms\" "
           "seed=\"Some(13465365087046561476)\"}: text_generation_router::server: router/src/server.rs:622: Success")
_F_CHAT = _S + "tgi_v3.0_text_connected_and_chat_completions_success_2024-12-10.log"
_L_UNTIMED = ("INFO generate{parameters=GenerateParameters { best_of: None, temperature: None, repetition_penalty: None, "
              "frequency_penalty: None, top_k: None, top_p: None, typical_p: None, do_sample: false, max_new_tokens: "
              "Some(512), return_full_text: None, stop: [\"//\", \"[Response]\"], truncate: None, watermark: false, "
              "details: false, decoder_input_details: false, seed: None, top_n_tokens: None, grammar: None } "
              "total_time=\"357.867572ms\" validation_time=\"1.96844ms\" queue_time=\"49.382µs\" inference_time="
              "\"355.849981ms\" time_per_token=\"14.827082ms\" seed=\"None\"}: text_generation_router::server: "
              "router/src/server.rs:309: Success")
_F_UNTIMED = _S + "tgi_v1.4.4_text_success_generate_no_timestamp_triton7395.log"
_L_BATCH_ERR = ("2023-12-18T02:36:52.142641Z ERROR batch{batch_size=1}:prefill:prefill{id=7571 size=1}:prefill{id=7571 "
                "size=1}: text_generation_client: router/client/src/lib.rs:33: Server error: Out of available cache "
                "blocks: asked 107, only 4 free blocks")
_F_BATCH_ERR = _S + "tgi_v1.3_text_error_batch_prefill_spans_issue1356.log"
_L_COMPACT = "2024-10-16T10:48:41.374381Z  INFO shard-manager: text_generation_launcher: Waiting for shard to be ready... rank=2"
_F_COMPACT = _S + "tgi_v2.3_text_launcher_compact_shard_manager_issue2657.log"
_L_RADIX = ("2025-05-26T10:46:35.221388Z  INFO text_generation_router_v3::radix: backends/v3/src/radix.rs:108: Prefix 580 "
            "- Suffix 1023")
_F_RADIX = _S + "tgi_v3.x_text_radix_prefix_suffix_and_batch_errors_issue2593.log"
_F_ARGS1 = _S + "tgi_v0.7_text_launcher_args_single_line_truncated_starcoder22.log"
_F_ARGS2 = _S + "tgi_v2.x_text_launcher_args_pretty_multiline_issue2238.log"
_F_JSON = _S + "tgi_v1.2.0_json_launcher_and_router_startup_wrapped_openshift.log"
_F_K8S = _S + "tgi_v1.4_json_router_startup_k8s_2024-03-09.log"
_F_COMPOSE = _S + "tgi_neuron_v2backend_compose_prefixed_issue3248.log"
_F_CUT = _S + "tgi_v1.1.0_text_success_generate_truncated_issue1440.log"
_F_CUT_JSON = _S + "tgi_v1.3_json_launcher_args_truncated_issue1200.log"

P_HEAD = Pattern(
    "tgi_head",
    rf"^(?P<ts>{TS_RX})\s+(?P<level>{LEVELS})\s+(?P<rest>.*)$",
    (Sample(_L_SUCCESS, {"ts": "2024-02-14T06:49:51.437631Z", "level": "INFO"}, _F_SUCCESS),
     Sample(_L_BATCH_ERR, {"ts": "2023-12-18T02:36:52.142641Z", "level": "ERROR"}, _F_BATCH_ERR),
     Sample(_L_COMPACT, {"level": "INFO", "rest": "shard-manager: text_generation_launcher: Waiting for shard to be "
                                                  "ready... rank=2"}, _F_COMPACT)),
    doc="A timestamped text record (router Full formatter or launcher compact formatter); the level is right-aligned.",
)
P_UNTIMED = Pattern(
    "tgi_untimed_head",
    rf"^(?P<level>{LEVELS}) (?P<rest>(?:[a-z_][a-z0-9_-]*[{{:]|text_generation_).*)$",
    (Sample(_L_UNTIMED, {"level": "INFO"}, _F_UNTIMED),),
    doc="A record pasted without its timestamp: the level, then a span or a text_generation_* target.",
)
P_REST = Pattern(
    "tgi_rest",
    r"^(?:(?P<spans>.*?): )?(?P<target>text_generation_[a-z0-9_]+(?:::[a-z0-9_]+)*): "
    r"(?:(?P<file>[A-Za-z0-9_./-]+\.rs):(?P<line>\d+): )?(?P<msg>.*)$",
    (Sample("batch{batch_size=1}:prefill:prefill{id=7571 size=1}:prefill{id=7571 size=1}: text_generation_client: "
            "router/client/src/lib.rs:33: Server error: Out of available cache blocks: asked 107, only 4 free blocks",
            {"spans": "batch{batch_size=1}:prefill:prefill{id=7571 size=1}:prefill{id=7571 size=1}",
             "target": "text_generation_client", "file": "router/client/src/lib.rs", "line": "33",
             "msg": "Server error: Out of available cache blocks: asked 107, only 4 free blocks"}, _F_BATCH_ERR),
     Sample("shard-manager: text_generation_launcher: Waiting for shard to be ready... rank=2",
            {"spans": "shard-manager", "target": "text_generation_launcher", "file": None,
             "msg": "Waiting for shard to be ready... rank=2"}, _F_COMPACT),
     Sample("text_generation_router_v3::radix: backends/v3/src/radix.rs:108: Prefix 580 - Suffix 1023",
            {"spans": None, "target": "text_generation_router_v3::radix", "line": "108",
             "msg": "Prefix 580 - Suffix 1023"}, _F_RADIX)),
    doc="What follows the level: optional span chain, the tracing target, file:line (router only), the message. "
        "The span chain is never brace-matched: `parameters=` may hold any character.",
)
P_DURATION = Pattern(
    "tgi_duration",
    r"\b(?P<key>total_time|validation_time|queue_time|inference_time|time_per_token)(?:=|\":)\""
    r"(?P<num>\d+(?:\.\d+)?)(?P<unit>ns|µs|μs|us|ms|s)\"",
    (Sample('total_time="611.286748ms"', {"key": "total_time", "num": "611.286748", "unit": "ms"}, _F_SUCCESS),
     Sample('validation_time="754.5µs"', {"key": "validation_time", "num": "754.5", "unit": "µs"}, _F_SUCCESS),
     Sample('queue_time="49.382µs"', {"key": "queue_time", "num": "49.382", "unit": "µs"}, _F_UNTIMED),
     Sample('"total_time":"4.065504959s"', {"key": "total_time", "num": "4.065504959", "unit": "s"})),
    doc="A Rust `Duration` Debug value, quoted, in text (`key=\"…\"`) or JSON (`\"key\":\"…\"`) spans; the unit "
        "changes per value. Rust's Debug never prints compound forms (`1s 5ms`).",
)
P_SEED = Pattern(
    "tgi_seed",
    r"\bseed(?:=|\":)\"(?:None|Some\((?P<seed>\d+)\))\"",
    (Sample('seed="Some(13465365087046561476)"', {"seed": "13465365087046561476"}, _F_CHAT),
     Sample('seed="None"', {"seed": None}, _F_SUCCESS)),
    doc="The seed the sampler used (None for greedy); it can exceed the int64 range.",
)
P_PARAMS = Pattern(
    "tgi_parameters",
    r"parameters(?:=|\":)(?:\"(?P<q>(?:[^\"\\]|\\.)*)\"|(?P<p>GenerateParameters \{.*?\})(?: [a-z_]+=|\}:|\}$))",
    (Sample(_L_UNTIMED[5:], {"q": None}, _F_UNTIMED),),
    doc="The request's `parameters` span field: unquoted Debug in generate spans, a quoted string in v3.2+ chat "
        "spans and in JSON.",
)
P_MAXNEW = Pattern(
    "tgi_max_new_tokens",
    r"max_new_tokens: (?:Some\()?(?P<n>\d+)",
    (Sample("max_new_tokens: Some(14)", {"n": "14"}, _F_SUCCESS),
     Sample("max_new_tokens: 48", {"n": "48"}, _F_CUT)),
    doc="`max_new_tokens` inside parameters: a bare u32 up to v1.0, `Some(N)` after.",
)
P_REQSPAN = Pattern(
    "tgi_request_span",
    r"(?:^|:)(?P<name>[a-z_]+)\{(?:parameters=|total_time=)",
    (Sample("chat_completions{total_time=", {"name": "chat_completions"}, _F_CHAT),
     Sample("generate{parameters=GenerateParameters {", {"name": "generate"}, _F_SUCCESS)),
    doc="The HTTP handler span: the last span whose fields hold `parameters=` or `total_time=`.",
)
P_FIRST_SPAN = Pattern(
    "tgi_first_span",
    r"^(?:HTTP request\{[^}]*\}:)?(?P<first>[a-z_]+)",
    (Sample("chat_completions:generate:generate_stream:schedule:infer:send_error", {"first": "chat_completions"},
            _S + "tgi_v2.2_text_error_chat_spans_and_shard_traceback_issue2310.log"),),
    doc="The outermost span (the route for request errors); the ≤v1.0 OTel `HTTP request{…}` span is skipped.",
)
P_TRACE_ID = Pattern(
    "tgi_trace_id",
    r"\btrace_id=(?P<trace_id>[0-9a-f]{32})",
    (Sample("otel.kind=server trace_id=4bf92f3577b34da6a3ce929d0e0e4736}", {"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"}),),
    doc="≤v1.0.x: the OTel trace id of the outer `HTTP request{…}` span, the only request id TGI text logs ever had.",
)
P_BATCH = Pattern(
    "tgi_batch_span",
    r"^batch(?:\{batch_size=(?P<size>\d+)\})?:(?P<kind>prefill|decode)",
    (Sample("batch{batch_size=1}:prefill:prefill{id=7571 size=1}", {"size": "1", "kind": "prefill"}, _F_BATCH_ERR),
     Sample("batch{batch_size=16}:prefill:prefill{id=8 size=16}", {"size": "16", "kind": "prefill"}, _F_COMPOSE)),
    doc="The batch span chain of a record logged inside a prefill or decode call (only ERROR records in practice).",
)
P_BATCH_ID = Pattern(
    "tgi_batch_id",
    r"(?:\{id=|\"id\":)(?P<id>\d+)",
    (Sample("prefill{id=7571 size=1}", {"id": "7571"}, _F_BATCH_ERR),),
    doc="The batch id of `prefill{id=N size=M}` (text) or `{\"id\":N,…}` (JSON spans).",
)
P_RADIX = Pattern(
    "tgi_radix_prefix",
    r"^Prefix (?P<prefix>\d+) - Suffix (?P<suffix>\d+)$",
    (Sample("Prefix 580 - Suffix 1023", {"prefix": "580", "suffix": "1023"}, _F_RADIX),),
    doc="v2.3+ radix allocator, once per request admitted into a prefill batch: cached prefix tokens, and the rest "
        "(prompt + max_new_tokens + speculate - 1 - prefix, so it includes the decode reservation). No request id.",
)
P_ARGS_PAIR = Pattern(
    "tgi_args_pair",
    r"(?:\{ | )(?P<key>[a-z_][a-z0-9_]*): (?P<value>Some\([^()]*\)|\"(?:[^\"\\]|\\.)*\"|\[[^\]]*\]|[A-Za-z0-9_.+-]+)"
    r"(?:,|\s*\})",
    (Sample(", waiting_served_ratio: 1.2,", {"key": "waiting_served_ratio", "value": "1.2"}, _F_ARGS1),
     Sample('Args { model_id: "/data/starcoder", ', {"key": "model_id", "value": '"/data/starcoder"'}, _F_ARGS1),
     Sample(", num_shard: Some(1),", {"key": "num_shard", "value": "Some(1)"}, _F_ARGS1),
     Sample(", max_batch_prefill_tokens: 4096,", {"key": "max_batch_prefill_tokens", "value": "4096"}, _F_JSON)),
    doc="One complete `key: value` of the launcher `Args { … }` (pretty `{:#?}` records are first folded onto one "
        "line); a value without its closing `,` or `}` (a cut record) is not taken. The separator's comma is "
        "consumed by the previous pair, so a pair starts after `{ ` or a space.",
)
CONFIG_LINES: list[tuple[str, Pattern]] = [
    ("max_batch_total_tokens", Pattern(
        "tgi_setting_max_batch_total_tokens", r"^Setting max batch total tokens to (?P<v>\d+)$",
        (Sample("Setting max batch total tokens to 133696", {"v": "133696"}, _F_K8S),
         Sample("Setting max batch total tokens to 16000", {"v": "16000"}, _F_JSON)),
        doc="Router, after warm-up: the KV budget in tokens (inferred for flash models).")),
    ("max_batch_total_tokens", Pattern(
        "tgi_inferred_max_batch_total_tokens", r"^Inferred max batch total tokens: (?P<v>\d+)$",
        (Sample("Inferred max batch total tokens: 69824", {"v": "69824"}),),
        doc="Router, when `--max-batch-total-tokens` was given for a flash model (ignored, inferred instead).")),
    ("max_batch_prefill_tokens", Pattern(
        "tgi_default_max_batch_prefill_tokens", r"^Default `max_batch_prefill_tokens` to (?P<v>\d+)$",
        (Sample("Default `max_batch_prefill_tokens` to 4096", {"v": "4096"}),),
        doc="Launcher v2+: the per-forward prefill token budget (the chunk size when prefill chunking is on).")),
    ("max_input_tokens", Pattern(
        "tgi_max_input_tokens_defaulted", r"^Maximum input tokens defaulted to (?P<v>\d+)$",
        (Sample("Maximum input tokens defaulted to 4095", {"v": "4095"}),), doc="Router v2+ default.")),
    ("max_total_tokens", Pattern(
        "tgi_max_total_tokens_defaulted", r"^Maximum total tokens defaulted to (?P<v>\d+)$",
        (Sample("Maximum total tokens defaulted to 4096", {"v": "4096"}),), doc="Router v2+ default.")),
    ("enable_chunked_prefill", Pattern(
        "tgi_prefill_chunking", r"^Using prefill chunking = (?P<v>True|False)$",
        (Sample("Using prefill chunking = True", {"v": "True"}),), doc="Shard (Python) v2.4+, via the launcher.")),
    ("enable_prefix_caching", Pattern(
        "tgi_attention_prefix_caching", r"^Using attention (?P<attention>[a-z_]+) - Prefix caching (?P<v>true|false)$",
        (Sample("Using attention flashinfer - Prefix caching true", {"attention": "flashinfer", "v": "true"}),),
        doc="Launcher v2.3+: the attention backend and whether the radix prefix cache is on.")),
]

PATTERNS = [P_HEAD, P_UNTIMED, P_REST, P_DURATION, P_SEED, P_PARAMS, P_MAXNEW, P_REQSPAN, P_FIRST_SPAN, P_TRACE_ID,
            P_BATCH, P_BATCH_ID, P_RADIX, P_ARGS_PAIR] + [p for _, p in CONFIG_LINES]

# -- sniffing (Python `re` over the first 64 KB only) -------------------------------------------------------------
_SNIFF_ANSI = re.compile(ANSI_RX)
_SNIFF_TIMED = re.compile(rf"^{WRAPS_RX}{TS_RX}\s+(?:{LEVELS})\s+(?:.*?: )?text_generation_[a-z0-9_]+"
                          r"(?:::[a-z0-9_]+)*: ", re.M)
_SNIFF_JSON = re.compile(r'^' + WRAPS_RX + r'\{"timestamp":"\d{4}-\d{2}-\d{2}T[^"]*","level":"[A-Z]+"', re.M)
# A launcher `Args` record cut before its `target` (a truncated paste): the Args layout alone is TGI's.
_SNIFF_JSON_ARGS = re.compile(r'"fields":\{"message":"Args \{ model_id: \\"')
_SNIFF_UNTIMED = re.compile(rf"^{WRAPS_RX}(?:{LEVELS}) (?:[a-z_]+\{{parameters=GenerateParameters \{{|(?:.*?: )?"
                            r"text_generation_[a-z0-9_]+(?:::[a-z0-9_]+)*: )", re.M)


def sniff_tgi(head: bytes) -> tuple[str, float] | None:
    text = unwrap_text(head.decode("utf-8", "replace"))
    if _SNIFF_TIMED.search(text):
        return "tgi_log", 0.95
    if _SNIFF_JSON.search(text) and ('"target":"text_generation_' in text
                                     or _SNIFF_JSON_ARGS.search(text) is not None):
        return "tgi_log", 0.95
    if _SNIFF_UNTIMED.search(text):
        return "tgi_log", 0.85
    return None


# =====================================================================================================================
# Parsing
# =====================================================================================================================

def _prepare(df: pl.DataFrame) -> pl.DataFrame:
    """Per-line columns: cleaned text, blank flag, head fields (timed or pasted), JSON start and self-contained JSON."""
    df = unwrap(df)
    t = pl.col("t")
    # Heads are read off the line's first characters and the rest cut at that offset (a capture over the whole line
    # costs a pass over its bytes); pasted heads without a timestamp are tried only on lines starting with a level.
    head = t.str.slice(0, 64).str.extract_groups(_HEAD_LEAD)
    df = df.with_columns(head.alias("_h"), t.str.contains(r"^\s*$").alias("blank"),
                         t.str.starts_with('{"').alias("is_json"))
    h = pl.col("_h").struct.field
    df = df.with_columns(h("ts").alias("ts"), h("level").alias("level"),
                         pl.when(h("lead").is_not_null()).then(t.str.slice(h("lead").str.len_chars())).alias("rest"))
    df = df.drop("_h")
    un = df.filter(pl.col("level").is_null() & t.str.contains(_UNTIMED_START))
    if un.height:
        # P_UNTIMED, read off the start: the level word, then a rest that starts like a span or a target.
        lv = t.str.extract(_UNTIMED_START.replace("(?:", "(", 1), 1)
        rest = t.str.slice(lv.str.len_chars() + 1)
        ok = rest.str.slice(0, 80).str.contains(r"^(?:[a-z_][a-z0-9_-]*[{:]|text_generation_)")
        u = un.select("line_no", pl.when(ok).then(lv).alias("level"), pl.when(ok).then(rest).alias("rest"))
        df = df.update(u.filter(pl.col("level").is_not_null()), on="line_no")
    # Whether a JSON line is a whole record on its own; parsed only where JSON lines exist (text logs skip it).
    json_ok = (pl.col("is_json") & t.str.json_path_match("$.timestamp").is_not_null()) if df["is_json"].any() \
        else pl.lit(False)
    df = df.with_columns(json_ok.alias("json_ok"))
    return df.with_columns(_split_rest(df))


_HEAD_LEAD = rf"^(?P<lead>(?P<ts>{TS_RX})\s+(?P<level>{LEVELS})\s+)"
_UNTIMED_START = rf"^(?:{LEVELS}) "
_TARGET_LEAD = (r"^(?P<tlead>(?P<target>text_generation_[a-z0-9_]+(?:::[a-z0-9_]+)*): "
                r"(?:(?P<file>[A-Za-z0-9_./-]+\.rs):(?P<line>\d+): )?)")


def _split_rest(df: pl.DataFrame) -> list[pl.Series]:
    """spans, target, msg1 of every head (P_REST's fields): the span chain ends at the first `: text_generation_`
    (a literal search), the target and file:line are read from a short window after it; rows where that does not
    give a target, or where a later `: text_generation_` could be the real one, go through P_REST itself."""
    r = pl.col("rest")
    i = r.str.find(": text_generation_", literal=True)
    at0 = r.str.starts_with("text_generation_")
    # `find` gives a byte offset: cut as bytes (at an ASCII `: `, so both halves stay valid UTF-8).
    rb = r.cast(pl.Binary)
    after = pl.when(at0).then(r).otherwise(rb.bin.slice(i + 2).cast(pl.String))
    g = df.select(r, r.is_not_null().alias("_has"), at0.alias("_at0"), i.alias("_i"),
                  after.alias("_after")).with_columns(
        pl.col("_after").str.slice(0, 200).str.extract_groups(_TARGET_LEAD).alias("_g"))
    tl = pl.col("_g").struct.field("tlead")
    g = g.with_columns(
        pl.when(pl.col("_at0")).then(None).otherwise(pl.col("_i")).alias("_spans_end"),
        pl.col("_after").str.slice(tl.str.len_chars()).alias("msg1"),
        pl.col("_g").struct.field("target").alias("target"))
    # The fast reading is P_REST's unless the first `: text_generation_` gives no target, or a line starting with a
    # target also holds one later (P_REST then takes the later one as the end of a span chain).
    # (Without any `: text_generation_` after the start P_REST cannot match at all.)
    odd = pl.col("_has") & pl.col("_i").is_not_null() & (pl.col("target").is_null() | pl.col("_at0"))
    g = g.with_columns(odd.alias("_odd"))
    g = g.with_columns(pl.when(pl.col("target").is_not_null() & pl.col("_spans_end").is_not_null()).then(
        rb.bin.slice(0, pl.col("_spans_end")).cast(pl.String)).alias("spans"))
    spans_s, target_s, msg_s = g["spans"], g["target"], g["msg1"]
    if g["_odd"].any():
        idx = g["_odd"].arg_true()
        slow = df.select(r).gather(idx).select(r.str.extract_groups(P_REST.regex).alias("x")).unnest("x")
        spans_s = spans_s.scatter(idx, slow["spans"])
        target_s = target_s.scatter(idx, slow["target"])
        msg_s = msg_s.scatter(idx, slow["msg"])
    return [spans_s.alias("spans"), target_s.alias("target"), msg_s.alias("msg1")]


def _flag(df: pl.DataFrame) -> pl.DataFrame:
    # Records that are always one line (JSON objects, Success, radix): a line after them that starts nothing
    # begins a record of its own instead of being swallowed.
    head = pl.col("level").is_not_null()
    single = pl.col("json_ok") | (head & pl.col("msg1").is_in(["Success"])) | (
        head & pl.col("msg1").str.contains(P_RADIX.regex))
    return df.with_columns((head | pl.col("is_json") | single.shift(1).fill_null(False)).alias("start"))


def _ts_ns(ts: pl.Expr) -> pl.Expr:
    return (ts.str.strptime(pl.Datetime("ns"), "%Y-%m-%dT%H:%M:%S%.fZ", strict=False)
            .dt.replace_time_zone("UTC").dt.epoch("ns"))


_GEN_PARAMS = "parameters=GenerateParameters {"


def _params(req: pl.DataFrame) -> pl.Series:
    """The request's `parameters` (P_PARAMS): an unquoted `GenerateParameters { … }` followed by the next span field
    is cut out by literal search (as bytes: `find` gives byte offsets, the cut is at ASCII); the other rows (quoted
    values of v3.2+ chat spans and JSON, cut lines) go through P_PARAMS."""
    f = pl.col("fields")
    fb = f.cast(pl.Binary)
    a = f.str.find(_GEN_PARAMS, literal=True)
    z = f.str.find("} total_time=", literal=True)
    fast = pl.when(a.is_not_null() & (z > a)).then(fb.bin.slice(a + 11, z - a - 10).cast(pl.String))
    out = req.select(fast.alias("params"))["params"]
    slow = (out.is_null() & req["fields"].str.contains("parameters", literal=True)).fill_null(False)
    if slow.any():
        idx = slow.arg_true()
        pm = req.select(f).gather(idx).select(f.str.extract_groups(P_PARAMS.regex).alias("m"))["m"]
        # A quoted value (v3.2+ chat spans, JSON) is an escaped string: undo `\\x` escapes in one pass.
        got = pl.select(pl.coalesce(pl.lit(pm).struct.field("p"),
                                    pl.lit(pm).struct.field("q").str.replace_all(r"\\(.)", "$1"))).to_series()
        out = out.scatter(idx, got)
    return out.alias("params")


def _duration_ns(fields: pl.Expr, key: str) -> pl.Expr:
    m = fields.str.extract_groups(
        rf"\b{key}(?:=|\":)\"(?P<num>\d+(?:\.\d+)?)(?P<unit>ns|µs|μs|us|ms|s)\"")
    mult = m.struct.field("unit").replace_strict(UNIT_NS, default=None, return_dtype=pl.Float64)
    return (m.struct.field("num").cast(pl.Float64, strict=False) * mult).round(0).cast(pl.Int64, strict=False)


class _State:
    def __init__(self):
        self.last_ts: int | None = None
        self.req_index = 0
        self.config: list[pl.DataFrame] = []
        self.timed = 0


def _normalise(rec: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Text, JSON and orphan records → one frame (ts, level, spans, fields, target, msg, origin, ...); also the
    JSON records that do not parse (cut or corrupt)."""
    j = pl.col("joined")
    is_json = pl.col("is_json")
    jrec = rec.filter(is_json)
    ok = j.str.json_path_match("$.timestamp").is_not_null()
    bad_json = jrec.filter(~ok)
    common = [pl.col("gid"), pl.col("line_no"), pl.col("line_count"), pl.col("wrap")]

    # A head whose target is missing was cut inside its span fields: the rest of the line is that span chain.
    spans = pl.coalesce(pl.col("spans"), pl.when(pl.col("target").is_null() & pl.col("rest").str.contains(r"^[a-z_]+\{"))
                        .then(pl.col("rest")))
    text = rec.filter(pl.col("level").is_not_null() & ~is_json).select(
        *common, pl.col("ts"), pl.col("level"), spans.alias("spans"), spans.alias("fields"),
        pl.col("target"),
        with_body(pl.coalesce(pl.col("msg1"), pl.col("rest")), pl.col("cont")).alias("msg"),
        spans.str.extract_all(P_REQSPAN.regex).list.last().str.extract(r"([a-z_]+)\{", 1).alias("hspan"),
        pl.when(pl.col("target").is_null()).then(pl.lit("cut")).otherwise(pl.lit("text")).alias("origin"),
    )

    js = jrec.filter(ok)
    span = j.str.json_path_match("$.span")
    spans = j.str.json_path_match("$.spans")
    json = js.select(
        *common, j.str.json_path_match("$.timestamp").alias("ts"), j.str.json_path_match("$.level").alias("level"),
        spans.str.extract_all(r'"name":"[^"]*"').list.eval(pl.element().str.slice(8).str.strip_suffix('"'))
        .list.join(":").alias("spans"),
        pl.concat_str([span, spans], separator=" ", ignore_nulls=True).alias("fields"),
        j.str.json_path_match("$.target").alias("target"),
        pl.coalesce(j.str.json_path_match("$.message"), j.str.json_path_match("$.fields.message"))
        .str.strip_suffix("\n").alias("msg"),
        pl.when(span.str.contains(r'"(?:total_time|parameters)":')).then(j.str.json_path_match("$.span.name"))
        .alias("hspan"),
        pl.lit("json").alias("origin"),
    )

    orphan = rec.filter(pl.col("level").is_null() & ~is_json).select(
        *common, pl.lit(None, pl.String).alias("ts"), pl.lit(None, pl.String).alias("level"),
        pl.lit(None, pl.String).alias("spans"), pl.lit(None, pl.String).alias("fields"),
        pl.lit(None, pl.String).alias("target"), with_body(pl.col("t"), pl.col("cont")).alias("msg"),
        pl.lit(None, pl.String).alias("hspan"), pl.lit("orphan").alias("origin"),
    )
    out = pl.concat([text, json, orphan], how="vertical").sort("gid")
    return out, bad_json


def _salvage_json(bad: pl.DataFrame) -> pl.DataFrame:
    """A JSON record cut off before its end: its timestamp, level and (escaped) message prefix, when they are there."""
    m = pl.col("joined").str.extract_groups(
        r'^\{"timestamp":"(?P<ts>[^"]+)","level":"(?P<level>[A-Z]+)",(?:"fields":\{)?"message":"'
        r'(?P<msg>(?:[^"\\]|\\.)*)')
    msg = (m.struct.field("msg").str.replace_all('\\"', '"', literal=True)
           .str.replace_all("\\n", "\n", literal=True).str.replace_all("\\\\", "\\", literal=True))
    return bad.select("gid", "line_no", "line_count", m.struct.field("ts").alias("ts"),
                      m.struct.field("level").alias("level"), msg.alias("msg"))


def _args_pairs(rec: pl.DataFrame, origin: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(config rows, per-record summary with the number of fields and whether the record was complete)."""
    folded = (pl.col("msg").str.replace_all(r"\s*\n\s*", " ").str.replace_all(r"([(\[]) ", "$1")
              .str.replace_all(r",? ([)\]])", "$1"))
    a = rec.select("line_no", folded.alias("f"))
    pairs = a.select("line_no", pl.col("f").str.extract_all(P_ARGS_PAIR.regex).alias("p")).explode("p").drop_nulls("p")
    kv = pairs.select("line_no", pl.col("p").str.extract_groups(P_ARGS_PAIR.regex).alias("m")).select(
        "line_no", pl.col("m").struct.field("key").alias("key"), pl.col("m").struct.field("value").alias("value"),
        pl.lit(origin).alias("origin"))
    summary = a.select("line_no", pl.col("f").str.contains(r"\}\s*$").alias("complete")).join(
        kv.group_by("line_no").len(), on="line_no", how="left")
    return config_rows(kv), summary


def _work(item: tuple[pl.DataFrame, pl.DataFrame]) -> dict:
    """Everything one frame's records give, computed without the parse's running state (so frames are worked on in
    parallel): `_apply` adds that state (the time carried from the previous frame, the running request index) and
    writes, in file order."""
    lines, recs = item
    recs, bad = _normalise(recs)
    plan: dict = {"bad": None}
    if bad.height:
        salv = _salvage_json(bad)
        args = salv.filter(pl.col("msg").str.starts_with("Args {").fill_null(False))
        cut_args = _args_pairs(args, "Args (cut JSON record)") if args.height else None
        lost = bad.filter(~pl.col("gid").is_in(args["gid"].implode()))
        rej = lines.filter(pl.col("gid").is_in(lost["gid"].implode())).select(
            "line_no", pl.concat_str([
                pl.lit("JSON record that does not parse (cut off or corrupt), starting at line "),
                pl.col("gid").replace_strict(lost["gid"], lost["line_no"].cast(pl.String), default="?")]).alias("reason"),
            pl.col("t").alias("raw"))
        plan["bad"] = (cut_args, int(args["line_count"].sum()) if args.height else 0, rej)
    plan["emit"] = _compute(recs)
    plan["parsed"] = int(recs["line_count"].sum()) if recs.height else 0
    return plan


def _apply(ctx: ParseContext, out, plan: dict, st: _State) -> None:
    if plan["bad"] is not None:
        cut_args, n_args, rej = plan["bad"]
        if cut_args is not None:
            rows, summary = cut_args
            st.config.append(rows)
            note_rows(ctx, summary, lambda r: f"line {r['line_no']}: JSON record cut off; kept "
                      f"{r['len'] or 0} complete Args fields from its message")
            ctx.counts.parsed += n_args
        if rej.height:
            ctx.write_rejects(rej.to_arrow())
    _emit(out, plan["emit"], st)
    ctx.counts.parsed += plan["parsed"]


def _compute(recs: pl.DataFrame) -> dict | None:
    """The rows of one frame's records: requests, request events, config, log events (`_emit` writes them)."""
    if recs.height == 0:
        return None
    plan: dict = {}
    msg, lvl, fields, spans = pl.col("msg"), pl.col("level"), pl.col("fields"), pl.col("spans")
    first_span = spans.str.extract(P_FIRST_SPAN.regex, 1)
    recs = recs.with_columns(
        _ts_ns(pl.col("ts")).alias("ts_ns"),
        first_span.alias("first_span"),
        ((msg == "Success") & fields.str.contains(r"\btotal_time(?:=|\":)\"")).alias("is_success"),
        ((pl.col("origin") == "cut") & (lvl == "INFO") & fields.str.contains(r"\btotal_time=\"")).alias("is_cut"),
        ((lvl == "ERROR") & first_span.is_in(HANDLERS)).alias("is_req_error"),
        msg.str.contains(P_RADIX.regex).fill_null(False).alias("is_radix"),
        msg.str.starts_with("Args {").fill_null(False).alias("is_args"),
    )
    # Forward-filled within the frame; the leading NULLs get the previous frame's last time in `_emit`.
    recs = recs.with_columns(pl.col("ts_ns").forward_fill().alias("ts_ff"))
    last = recs["ts_ns"].drop_nulls()
    plan["last_ts"] = int(last[-1]) if last.len() else None
    plan["timed"] = last.len()

    # -- requests: Success, a Success cut before its message, request-level errors ------------------------------
    req = recs.filter(pl.col("is_success") | pl.col("is_cut") | pl.col("is_req_error"))
    plan["requests"] = None
    if req.height:
        durs = {k: _duration_ns(fields, k).alias(k) for k in DURATION_KEYS}
        req = req.with_columns(_params(req))
        req = req.with_columns(*durs.values(),
                               fields.str.extract(P_SEED.regex, 1).cast(pl.UInt64, strict=False).alias("seed"),
                               fields.str.extract(P_TRACE_ID.regex, 1).alias("trace_id"))
        total, inf, tpt = pl.col("total_time"), pl.col("inference_time"), pl.col("time_per_token")
        n_out = (inf.cast(pl.Float64, strict=False) / tpt.cast(pl.Float64, strict=False)).round(0).cast(pl.Int64, strict=False)
        # time_per_token is inference_time / generated_tokens truncated to whole ns (Rust Duration / u32): keep the
        # count only when it reproduces the printed quotient.
        n_ok = (n_out >= 1) & ((inf // n_out.clip(lower_bound=1) - tpt).abs() <= 1)
        finish = pl.when(pl.col("is_req_error") | pl.col("is_success")).then(pl.col("ts_ns"))
        arrival = pl.when(pl.col("is_success")).then(pl.col("ts_ns") - total)
        rid = pl.coalesce(pl.col("trace_id"), pl.lit("L") + pl.col("line_no").cast(pl.String))
        out = req.select(
            pl.col("line_no"), rid.alias("request_id"),
            pl.int_range(pl.len()).cast(pl.Int32).alias("request_index"),  # + the running index, in `_emit`
            rid.alias("server_request_id"), pl.lit("tgi").alias("engine"), pl.lit("server").alias("kind"),
            arrival.alias("arrival_ns"), finish.alias("finish_ns"),
            (arrival + pl.col("validation_time") + pl.col("queue_time")).alias("scheduled_ns"),
            pl.when(n_ok).then(n_out).cast(pl.Int32, strict=False).alias("output_tokens"),
            pl.col("params").str.extract(P_MAXNEW.regex, 1).cast(pl.Int32, strict=False).alias("max_tokens"),
            total.alias("e2e_latency_ns"), pl.col("queue_time").alias("queue_ns"),
            pl.col("validation_time").alias("validation_ns"), inf.alias("inference_ns"),
            tpt.alias("time_per_token_ns"),
            pl.when(pl.col("is_success")).then(pl.lit("ok")).when(pl.col("is_req_error")).then(pl.lit("failed"))
            .alias("status"),
            pl.when(pl.col("is_req_error")).then(msg.str.extract(r"^([^\n]*)", 1)).alias("error"),
            pl.coalesce(pl.col("hspan"), pl.col("first_span")).alias("endpoint"),
            pl.col("params"), pl.col("seed"),
        )
        ev = out.filter(pl.col("status").is_not_null()).select(
            "line_no", "request_id",
            pl.when(pl.col("status") == "ok").then(pl.lit("success")).otherwise(pl.lit("error")).alias("event"),
            pl.col("finish_ns").alias("ts_ns"), pl.col("error").alias("detail"))
        plan["requests"] = (out, ev, req.filter(pl.col("is_cut")).select("line_no", *DURATION_KEYS))

    # -- radix prefix-cache admissions ----------------------------------------------------------------------------
    rad = recs.filter(pl.col("is_radix"))
    plan["radix"] = None
    if rad.height:
        m = msg.str.extract_groups(P_RADIX.regex)
        plan["radix"] = rad.select(
            "line_no", pl.lit(None, pl.String).alias("request_id"), pl.lit("prefix_match").alias("event"),
            pl.col("ts_ff").alias("ts_ns"),
            pl.concat_str([pl.lit("prefix="), m.struct.field("prefix"), pl.lit(" suffix="),
                           m.struct.field("suffix")]).alias("detail"))

    # -- configuration ----------------------------------------------------------------------------------------------
    args = recs.filter(pl.col("is_args"))
    plan["args"] = _args_pairs(args, "Args") if args.height else None
    config = []
    cfg_hit = pl.lit(False)
    for key, pat in CONFIG_LINES:
        hit = msg.str.contains(pat.regex).fill_null(False)
        cfg_hit = cfg_hit | hit
        got = recs.filter(hit)
        if got.height:
            m = msg.str.extract_groups(pat.regex)
            config.append(config_rows(got.select(
                "line_no", pl.lit(key).alias("key"), m.struct.field("v").alias("value"),
                pl.lit(pat.name).alias("origin"))))
            if "attention" in pat.regex:
                config.append(config_rows(got.select(
                    "line_no", pl.lit("attention").alias("key"), m.struct.field("attention").alias("value"),
                    pl.lit(pat.name).alias("origin"))))
    plan["config"] = config

    # -- everything else (and request errors, which are errors too) → log_events -----------------------------------
    ev = recs.filter(~(pl.col("is_success") | pl.col("is_cut") | pl.col("is_radix") | pl.col("is_args") | cfg_hit)
                     | pl.col("is_req_error"))
    plan["events"] = None
    if ev.height:
        tb = looks_like_traceback(msg).fill_null(False)
        bm = spans.str.extract_groups(P_BATCH.regex)
        level = pl.when(lvl == "WARN").then(pl.lit("WARNING")).otherwise(lvl)
        kind = (pl.when(tb).then(pl.lit("traceback")).when(lvl == "ERROR").then(pl.lit("error"))
                .when(lvl == "WARN").then(pl.lit("warning")).otherwise(pl.lit("message")))
        ev = ev.with_columns(wrap_names(ev["wrap"]))
        plan["events"] = ev.select(
            "line_no", pl.col("line_count").cast(pl.Int32), pl.col("ts_ff").alias("ts_ns"), level.alias("level"),
            "process",
            kind.alias("kind"), event_message(msg.fill_null(""), tb).alias("message"), pl.col("target"),
            spans.str.slice(0, MSG_MAX).alias("spans"), bm.struct.field("kind").alias("batch_kind"),
            pl.when(bm.struct.field("kind").is_not_null()).then(fields.str.extract(P_BATCH_ID.regex, 1))
            .cast(pl.Int64, strict=False).alias("batch_id"),
            pl.coalesce(bm.struct.field("size"), pl.when(bm.struct.field("kind").is_not_null())
                        .then(fields.str.extract(r"\"batch_size\":(\d+)", 1)))
            .cast(pl.Int32, strict=False).alias("batch_size"),
        )
    return plan


def _emit(ctx: ParseContext, plan: dict | None, st: _State) -> None:
    """Write one frame's rows (`_compute`) in file order, with the running state applied."""
    if plan is None:
        return
    prev_ts = st.last_ts
    if plan["last_ts"] is not None:
        st.last_ts = plan["last_ts"]
    st.timed += plan["timed"]

    def carried(df: pl.DataFrame) -> pl.DataFrame:
        return df if prev_ts is None else df.with_columns(pl.col("ts_ns").fill_null(prev_ts))

    if plan["requests"] is not None:
        out, ev, cut = plan["requests"]
        out = out.with_columns((pl.col("request_index") + st.req_index).cast(pl.Int32))
        ctx.write("requests", out)
        st.req_index += out.height
        ctx.write("request_events", ev)
        note_rows(ctx, cut, lambda r: (
            f"line {r['line_no']}: Success record cut off before its message; kept "
            f"{', '.join(k for k in DURATION_KEYS if r[k] is not None) or 'no timing'} (status NULL)"))
    if plan["radix"] is not None:
        ctx.write("request_events", carried(plan["radix"]))
    if plan["args"] is not None:
        rows, summary = plan["args"]
        st.config.append(rows)
        note_rows(ctx, summary.filter(~pl.col("complete")),
                  lambda r: f"line {r['line_no']}: Args record cut off; kept its {r['len'] or 0} complete fields")
    st.config.extend(plan["config"])
    if plan["events"] is not None:
        ctx.write("log_events", carried(plan["events"]))


class TgiLogParser(Parser):
    name = "tgi_log"
    version = VERSION
    formats = ("tgi_log",)
    order = 50

    def sniff(self, head: bytes, inp: InputFile):
        return sniff_tgi(head)

    def parse(self, ctx: ParseContext, fmt: str) -> None:
        st = _State()
        out = BufferedWrites(ctx)
        # Frames are worked on by two threads at once (`_work`, pure); their rows are written here in file order.
        for plan in ordered_map(_work, record_frames(ctx, _flag, _prepare)):
            _apply(ctx, out, plan, st)
        out.flush()
        write_config(ctx, st.config, {"model_id": "model", "num_shard": "tensor_parallel_size"}, "tgi")
        if st.timed:
            ctx.set_clock("log_wallclock_utc", "RFC 3339 UTC timestamps printed by TGI (µs); untimed records: "
                          "requests keep NULL times, other records inherit the previous timed record's time")
        else:
            ctx.set_clock("none", "no timestamps in this log (lines pasted without them): times are NULL")
        span_of_times(ctx)


PARSER = TgiLogParser()
