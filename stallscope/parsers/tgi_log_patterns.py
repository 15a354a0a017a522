"""The TGI log formats as data: the named regexes the TGI log parser (tgi_log.py) reads records with, next to real
lines they must read (the sniffing regexes and a few literal-led search fragments stay beside their code).

Each pattern's `doc` says what text the parser feeds it and on which path (the generic record path, or a fast lane
that reads lines by their layout). Samples come verbatim from the fixtures under ../shared/real/tgi/ (see
../shared/real/SOURCES.md); a format no fixture shows carries a sample without a `source`. tests/test_patterns.py
checks every sample.
"""
from __future__ import annotations

import re

from .patterns import Pattern, Sample

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
_DUR = r"\d+(?:\.\d+)?(?:ns|µs|μs|us|ms|s)"
P_SUCCESS_TIMINGS = Pattern(
    "tgi_success_timings",
    r'^total_time="(?P<total_time>' + _DUR + r')" validation_time="(?P<validation_time>' + _DUR + r')" queue_time="'
    r'(?P<queue_time>' + _DUR + r')" inference_time="(?P<inference_time>' + _DUR + r')" time_per_token="'
    r'(?P<time_per_token>' + _DUR + r')" seed="(?P<seed>None|Some\(\d+\))"\}$',
    (Sample(_L_SUCCESS[_L_SUCCESS.index("total_time="):_L_SUCCESS.index("}: text_") + 1],
            {"total_time": "611.286748ms", "validation_time": "754.5µs", "time_per_token": "43.600359ms",
             "seed": "None"}, _F_SUCCESS),
     Sample(_L_CHAT[_L_CHAT.index("total_time="):_L_CHAT.index("}: text_") + 1],
            {"queue_time": "73.176µs", "seed": "Some(13465365087046561476)"}, _F_CHAT),
     Sample(_L_UNTIMED[_L_UNTIMED.index("total_time="):_L_UNTIMED.index("}: text_") + 1],
            {"inference_time": "355.849981ms"}, _F_UNTIMED)),
    doc="Fast path only: the end of a text `Success` span, from `total_time=` to the span's closing brace, in the "
        "fixed order TGI prints (`tracing` fields in declaration order). Where it holds and nothing before it looks "
        "like a timing field, the timings are cut out by splitting at the quotes instead of one P_DURATION capture "
        "per key; the values are the same (see `_timings`).",
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


def _literal_lead(rx: str) -> str:
    """The literal text an anchored pattern's matches start with (up to its first metacharacter)."""
    m = re.match(r"\^((?:[^\\.^$*+?()\[\]{}|]|\\[^A-Za-z0-9])*)", rx)
    lead = m.group(1) if m else ""
    return re.sub(r"\\(.)", r"\1", lead)


CONFIG_LEAD = "^(?:" + "|".join(re.escape(_literal_lead(p.regex)) for _, p in CONFIG_LINES) + ")"


# -- the fast lanes and the generic head's leads (polars, on the raw line) ------------------------------------------
# The time in ASCII digits (TS_RX's `\d` is Unicode): the lead is then ASCII, its byte offsets are characters too.
_TS_ASCII = TS_RX.replace(r"\d", "[0-9]")
P_FAST_SUCCESS_HEAD = Pattern(
    "tgi_fast_success_head",
    rf"^(?:{_TS_ASCII} {{1,8}})?INFO (?:{'|'.join(HANDLERS)})\{{(?:parameters=|total_time=)",
    (Sample(_L_SUCCESS, {}, _F_SUCCESS), Sample(_L_CHAT, {}, _F_CHAT), Sample(_L_UNTIMED, {}, _F_UNTIMED)),
    doc="Fast lane (capture-free): a `Success` record of a request handler, timed (INFO, the level right-aligned by "
        "at most a few spaces) or pasted without its time: the head, then the handler's span (its fields start "
        "with `parameters=` or `total_time=`).",
)
P_FAST_SUCCESS_TAIL = Pattern(
    "tgi_fast_success_tail",
    r": text_generation_[a-z0-9_]+(?:::[a-z0-9_]+)*: (?:[A-Za-z0-9_./-]+\.rs:\d+: )?Success$",
    (Sample(_L_SUCCESS, {}, _F_SUCCESS), Sample(_L_CHAT, {}, _F_CHAT)),
    doc="Fast lane (capture-free): what follows a Success line's span chain: the target, file:line, the message "
        "`Success`, nothing else.",
)
P_FAST_RADIX = Pattern(
    "tgi_fast_radix",
    rf"^{_TS_ASCII} {{1,8}}(?:{LEVELS}) text_generation_[a-z0-9_]+(?:::[a-z0-9_]+)*: "
    r"(?:[A-Za-z0-9_./-]+\.rs:\d+: )?Prefix \d+ - Suffix \d+$",
    (Sample(_L_RADIX, {}, _F_RADIX),),
    doc="Fast lane (capture-free): a whole timed radix line, one record of its own.",
)
P_HEAD_LEAD = Pattern(
    "tgi_head_lead",
    rf"^(?P<lead>(?P<ts>{TS_RX})\s+(?P<level>{LEVELS})\s+)",
    (Sample(_L_RADIX, {"lead": "2025-05-26T10:46:35.221388Z  INFO ", "level": "INFO"}, _F_RADIX),
     Sample(_L_BATCH_ERR, {"ts": "2023-12-18T02:36:52.142641Z", "level": "ERROR"}, _F_BATCH_ERR)),
    doc="Generic path: P_HEAD's timestamp and level read from the first 64 characters of a line, with the lead "
        "they span (the rest is cut off the line by its length).",
)
P_TARGET_LEAD = Pattern(
    "tgi_target_lead",
    r"^(?P<tlead>(?P<target>text_generation_[a-z0-9_]+(?:::[a-z0-9_]+)*): "
    r"(?:(?P<file>[A-Za-z0-9_./-]+\.rs):(?P<line>\d+): )?)",
    (Sample("text_generation_router_v3::radix: backends/v3/src/radix.rs:108: Prefix 580 - Suffix 1023",
            {"target": "text_generation_router_v3::radix", "file": "backends/v3/src/radix.rs", "line": "108"},
            _F_RADIX),
     Sample("text_generation_launcher: Waiting for shard to be ready... rank=2",
            {"tlead": "text_generation_launcher: ", "file": None}, _F_COMPACT)),
    doc="Generic path: P_REST's target and file:line where they open the text after the span chain, with the lead "
        "they span.",
)

PATTERNS = [P_HEAD, P_UNTIMED, P_REST, P_DURATION, P_SEED, P_PARAMS, P_MAXNEW, P_REQSPAN, P_FIRST_SPAN, P_TRACE_ID,
            P_BATCH, P_BATCH_ID, P_RADIX, P_ARGS_PAIR, P_SUCCESS_TIMINGS, P_FAST_SUCCESS_HEAD,
            P_FAST_SUCCESS_TAIL, P_FAST_RADIX, P_HEAD_LEAD, P_TARGET_LEAD] + [p for _, p in CONFIG_LINES]
