"""The SGLang log formats as data: the named regexes the SGLang log parser (sglang_log.py) reads records with, next to
real lines they must read, and the batch-line field keys the formats print (the sniffing regexes and the lean
lane's offset tests stay beside their code).

Each pattern's `doc` says what text the parser feeds it. Samples come verbatim from the fixtures under
../shared/real/sglang/ (see ../shared/real/SOURCES.md); a format no fixture shows carries a sample without a `source`
(the SGLang pull request or issue named beside it). tests/test_patterns.py checks every sample.
"""
from __future__ import annotations

import re

from .patterns import Pattern, Sample

_S = "../shared/real/sglang/"
_F_CHUNK = _S + "sglang_v0.3.6-0.4.3_prefill_chunked_2048_cache_hit_rate_issue2255.log"
_F_HHMMSS = _S + "sglang_v0.2-0.3_decode_hhmmss_tp0_issue1270.log"
_F_BARE = _S + "sglang_v0.2_decode_no_timestamp_issue938.log"
_F_LARGEST = _S + "sglang_v0.4.4_decode_largest_len_trailing_comma_issue4407.log"
_F_UVICORN = _S + "sglang_v0.4.6_prefill_no_tp_prefix_with_uvicorn_access_issue6291.log"
_F_ARGS = _S + "sglang_v0.4.6_server_args_line_truncated_pr6170.log"
_F_COMMA = _S + "sglang_v0.5.x_prefill_comma_style_trailing_comma_pr13023.log"
_F_CUDA = _S + "sglang_v0.5.10plus_decode_cuda_graph_tp0_pr22331.log"
_F_NPU = _S + "sglang_npu_tp0_ep0_spec_decode_pending_token_sglkernelnpu_pr608.log"
_F_MAMBA = _S + "sglang_hybrid_mamba_prefill_pending_token_npu_pr30047.log"
_F_TQDM = _S + "sglang_tqdm_interleaved_mangled_lines_pr25960.log"
_F_FINISH = _S + "sglang_log_requests_finish_line_wrapped_pr11146.log"
_F_BENCH = _S + "sglang_v0.4.0_bench_serving_text_summary_truncated_issue2805.log"

RANK_TAGS = "DP|PP|ATTN_CP|MOE_DP|TP|EP"
TQDM_DEBRIS = r"\d{1,3}%\||\r|it/s\]|s/it\]"

P_HEAD = Pattern(
    "sglang_head",
    r"^(?:\((?P<actor>[A-Za-z_]\w*) pid=(?P<pid>\d+)(?:, ip=(?P<ip>[0-9.]+))?\)\s*)?(?P<debris>.*?)"
    r"\[(?P<ts>(?:\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2}(?:\.\d{3})?)(?P<ranks>(?: (?:" + RANK_TAGS + r")\d+)*)\]"
    r"(?:\[(?P<src>[A-Za-z0-9_.-]+:\d+)\]\[(?P<level>[A-Z]+)\]:)?(?: (?P<msg>.*))?$",
    (Sample("[2024-11-29 10:28:25 TP0] Prefill batch.", {"ts": "2024-11-29 10:28:25", "ranks": " TP0", "debris": ""},
            _F_CHUNK),
     Sample("[04:40:55 TP0] Decode batch.", {"ts": "04:40:55", "ranks": " TP0"}, _F_HHMMSS),
     Sample("[2026-07-21 15:00:13 TP0 EP0] Decode batch, #running-req: 24", {"ranks": " TP0 EP0"}, _F_NPU),
     Sample('[2025-05-14 09:31:43] INFO:     127.0.0.1:20504 - "POST /v1/completions HTTP/1.1" 200 OK',
            {"ts": "2025-05-14 09:31:43", "ranks": "", "msg": 'INFO:     127.0.0.1:20504 - "POST /v1/completions '
                                                             'HTTP/1.1" 200 OK'}, _F_UVICORN),
     Sample("  0%|                                                                            [2026-05-28 02:59:50 TP0] "
            "Prefill batch, #new-seq: 1",
            {"debris": "  0%|                                                                            ",
             "ts": "2026-05-28 02:59:50"}, _F_TQDM),
     Sample("(SGLangEngine pid=41820) [2025-09-01 10:00:00 DP1 TP0] Decode batch, #running-req: 3",
            {"actor": "SGLangEngine", "pid": "41820", "ranks": " DP1 TP0"}),
     # A logging config of the user's (SGLANG_LOGGING_CONFIG_PATH), as in sglang issue 22877.
     Sample("[2026-04-15 17:13:10][scheduler_metrics_mixin.py:424][INFO]: Prefill batch, #new-seq: 1",
            {"ts": "2026-04-15 17:13:10", "ranks": "", "src": "scheduler_metrics_mixin.py:424", "level": "INFO",
             "msg": "Prefill batch, #new-seq: 1"})),
    doc="`[asctime{ rank tags}] message`: date optional (0.2.x-0.3.0 print HH:MM:SS only), `.mmm` with SGLANG_LOG_MS, "
        "rank tags in any order; `[file:line][LEVEL]:` after it where a logging config adds them; an optional Ray "
        "actor prefix; `debris` must be empty or tqdm output glued in front.",
)
P_BATCH = Pattern(
    "sglang_batch",
    r"^(?:\[gpu_id=(?P<gpu>\d+)\] )?(?P<label>Prefill batch|Decode batch)(?: \[(?P<iter>\d+)\])?"
    r"(?:\(mixed #running-req: (?P<mixed>\d+)\))?[.,] (?P<kv>.*)$",
    (Sample("Prefill batch. #new-seq: 2, #new-token: 2048, #cached-token: 2048, cache hit rate: 0.00%, token usage: "
            "0.00, #running-req: 1, #queue-req: 30", {"label": "Prefill batch", "iter": None}, _F_CHUNK),
     Sample("Prefill batch, #new-seq: 3, #new-token: 771, #cached-token: 0, token usage: 0.00, #running-req: 0, "
            "#queue-req: 0, ", {"label": "Prefill batch", "kv": "#new-seq: 3, #new-token: 771, #cached-token: 0, "
                                                                "token usage: 0.00, #running-req: 0, #queue-req: 0, "},
            _F_COMMA),
     Sample("Decode batch. #running-req: 1010, #token: 55006, token usage: 0.93, gen throughput (token/s): 1397.13, "
            "#queue-req: 12279", {"label": "Decode batch"}, _F_BARE),
     Sample("Prefill batch [1234], #new-seq: 1, #new-token: 8, #cached-token: 0, token usage: 0.01, #running-req: 0, "
            "#queue-req: 0, ", {"iter": "1234"}),
     Sample("Prefill batch(mixed #running-req: 7). #new-seq: 1, #new-token: 512, #cached-token: 0, cache hit rate: "
            "0.00%, #queue-req: 0", {"mixed": "7"})),
    doc="The label (`.` before 0.5.5, `,` after; ` [iter]` with SGLANG_LOG_FORWARD_ITERS; the 0.2.x mixed-chunk form; "
        "the 0.2.0 `[gpu_id=N]` prefix), then comma-separated `key: value` fields.",
)
P_OLD_PREFILL = Pattern(
    "sglang_0_1_prefill",
    r"^new fill batch\. #seq: (?P<seq>\d+)\. #cached_token: (?P<cached>\d+)\. #new_token: (?P<new>\d+)\. "
    r"#remaining_req: (?P<queue>\d+)\. #running_req: (?P<running>\d+)\. tree_cache_hit_rate: (?P<hit>[0-9.]+)%\.$",
    (Sample("new fill batch. #seq: 1. #cached_token: 0. #new_token: 15. #remaining_req: 0. #running_req: 0. "
            "tree_cache_hit_rate: 0.00%.", {"seq": "1", "new": "15", "hit": "0.00"}),),
    doc="0.1.x prefill line (from the 0.1.16 wheel's format string; no real sample).",
)
P_OLD_DECODE = Pattern(
    "sglang_0_1_decode",
    r"^#running-req: \d+, #token: \d+, token usage: [0-9.]+, gen throughput \(token/s\): [0-9.]+, #queue-req: \d+$",
    (Sample("#running-req: 1, #token: 68, token usage: 0.00, gen throughput (token/s): 32.71, #queue-req: 0", {}),),
    doc="0.1.x decode line: the fields without a `Decode batch` label (0.1.16 format string; no real sample).",
)
KNOWN_KEYS = [
    "#new-seq", "#new-token", "#cached-token", "cache hit rate", "token usage", "full token usage", "swa token usage",
    "mamba usage", "#token", "#full token", "#swa token", "mamba num", "#running-req", "#queue-req", "#pending-token",
    "#replay-token", "#prealloc-req", "#inflight-req", "#transfer-req", "#retracted-req", "#unbootstrapped-req",
    "#transferring-req", "#bootstrap-req", "#optimistic-req", "pre-allocated usage", "accept len", "accept rate",
    "largest-len", "cuda graph", "cpu graph", "npu graph", "gen throughput (token/s)", "input throughput (token/s)",
    "#gpu token", "#cpu token", "waiting-image-req", "est. prefill TFLOPS/s (per GPU)",
    "est. decode TFLOPS/s (per GPU)", "est. read BW (GB/s per GPU)", "est. write BW (GB/s per GPU)", "fwd occupancy",
]
# A line that does not end with `, ` is complete only if its last field is one a format ends with (early-2026
# prefill lines end with the graph flag: `…, input throughput (token/s): 0.14, cuda graph: False`, sglang PR 18570).
TERMINAL_KEYS = ["#queue-req", "input throughput (token/s)", "#transferring-req", "#inflight-req", "#transfer-req",
                 "#optimistic-req", "#bootstrap-req", "#retracted-req", "est. prefill TFLOPS/s (per GPU)",
                 "est. write BW (GB/s per GPU)", "fwd occupancy", "cuda graph", "npu graph", "cpu graph"]


# Fields every line of a label prints, in every version (what the real samples' layouts share; either spelling of a
# hybrid model's). A line with all of them and a key this parser does not know carries a newer or forked SGLang's
# field (sglang-jax prints `#cache_miss: 1`): read, the field kept in `extra`. A line that misses one of them and
# holds an unknown key is two lines run together (`#cached-tounning-req` = `#cached-to…` + `…unning-req`): rejected.
CORE_KEYS = {"Prefill": (("#new-seq",), ("#new-token",), ("#cached-token",)),
             "Decode": (("#running-req",), ("#token", "#full token"), ("token usage", "full token usage"))}
NEW_KEY = re.compile(r"#?[A-Za-z][A-Za-z0-9_ .()/%-]*")


def rx_escape(s: str) -> str:
    """Escape for the regex subset shared by Python `re` and Rust `regex` (only real metacharacters)."""
    return re.sub(r"([()\[\]{}.*+?^$|\\])", r"\\\1", s)


VALUE_RX = r"-?\d+(?:\.\d+)?%?|True|False|full=\d+(?:\.\d+)?, swa=\d+(?:\.\d+)?"
PLAIN_VALUE_RX = r"-?\d+(?:\.\d+)?%?|True|False"


def kv_grammar(keys) -> str:
    """P_KV_GRAMMAR over these keys (the known ones, and the new fields a frame's layouts carry)."""
    alts = "|".join(rx_escape(k) for k in sorted(keys, key=len, reverse=True))
    return rf"^(?:(?:{alts}): (?:{VALUE_RX})(?:, |$))+$"


P_KV_GRAMMAR = Pattern(
    "sglang_batch_fields",
    kv_grammar(KNOWN_KEYS),
    (Sample("#running-req: 24, #token: 233600, token usage: 0.66, accept len: 3.05, accept rate: 0.68, npu graph: True, "
            "gen throughput (token/s): 239.06, #queue-req: 2", {}, _F_NPU),
     Sample("#new-seq: 12, #new-token: 43008, #cached-token: 0, full token usage: 0.14, mamba usage: 0.20, "
            "#running-req: 1, #queue-req: 97, #pending-token: 109585, npu graph: False, input throughput (token/s): "
            "15734.14", {}, _F_MAMBA),
     Sample("#running-req: 509, #token: 180776, token usage: 0.43, gen throughput (token/s): 7897.87, largest-len: 0, "
            "#queue-req: 0, ", {}, _F_LARGEST)),
    doc="The whole field list of a batch line: known keys only, well-formed values, `, ` between, an optional "
        "trailing `, `. A spliced line (`#cached-tounning-req: 1`) fails it.",
)
P_LAST_FIELD = Pattern(
    "sglang_last_field",
    r"(?:^|, )(?P<key>[^,:]+): (?P<value>[^:]*)$",
    (Sample("#running-req: 5, #token: 20800, token usage: 0.29, cuda graph: True, gen throughput (token/s): 144.95, "
            "#queue-req: 0", {"key": "#queue-req", "value": "0"}, _F_CUDA),),
    doc="The last field of a batch line without a trailing `, `: it must be one a format ends with.",
)
P_ACCESS = Pattern(
    "sglang_uvicorn_access",
    r'^INFO:\s+(?P<client>\S+) - "(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[0-9.]+"(?: (?P<status>\d{3})(?: .*)?)?$',
    (Sample('INFO:     127.0.0.1:20504 - "POST /v1/completions HTTP/1.1" 200 OK',
            {"client": "127.0.0.1:20504", "method": "POST", "path": "/v1/completions", "status": "200"}, _F_UVICORN),
     Sample('INFO:     127.0.0.1:43514 - "POST /generate HTTP/1.1" 200 OK', {"path": "/generate"}, _F_NPU),
     Sample('INFO:     127.0.0.1:37664 - "POST /v1/completions HTTP/1.1"', {"status": None}, _F_TQDM)),
    doc="uvicorn access line (no rank tag; a paste cut before the status keeps status NULL).",
)
P_SERVER_ARGS_PAIR = Pattern(
    "sglang_server_args_pair",
    r"(?:\(| )(?P<key>[a-z_][a-z0-9_]*)=(?P<value>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|\[[^\]]*\]|\{[^}]*\}|"
    r"[^,()\[\]{}'\"]+)(?:,|\)$)",
    (Sample("(model_path='qwen/qwen2.5-0.5b-instruct',", {"key": "model_path", "value": "'qwen/qwen2.5-0.5b-instruct'"},
            _F_ARGS),
     Sample(" chunked_prefill_size=8192,", {"key": "chunked_prefill_size", "value": "8192"}, _F_ARGS),
     Sample(" schedule_policy='fcfs',", {"key": "schedule_policy", "value": "'fcfs'"}, _F_ARGS),
     Sample(" tp_size=1,", {"key": "tp_size", "value": "1"}, _F_ARGS)),
    doc="One complete `key=value` of `server_args=ServerArgs(…)` (a dataclass repr); the cut last value of a "
        "truncated line has no terminator and is not taken.",
)
P_SCHED_CFG = Pattern(
    "sglang_scheduler_config",
    r"^max_total_num_tokens=(?P<kv>\d+), chunked_prefill_size=",
    (Sample("max_total_num_tokens=1343284, chunked_prefill_size=8192, max_prefill_tokens=16384, "
            "max_running_requests=4097, context_len=131072, available_gpu_mem=13.27 GB", {"kv": "1343284"}),),
    doc="Scheduler init (0.4+): KV pool size and batch limits, `key=value` pairs (no real sample).",
)
P_CFG_PAIR = Pattern(
    "sglang_scheduler_config_pair",
    r"(?:^| )(?P<key>[a-z_]+)=(?P<value>[^,]+)(?:,|$)",
    (Sample("max_total_num_tokens=1343284, chunked_prefill_size=8192,", {"key": "max_total_num_tokens",
                                                                        "value": "1343284"}),),
    doc="One pair of the scheduler config line.",
)
P_FINISH = Pattern(
    "sglang_finish_meta",
    r"'id': '(?P<rid>[^']*)'",
    (Sample("{'id': '24fa397b7cab4418b3f6a5c903ae310f',", {"rid": "24fa397b7cab4418b3f6a5c903ae310f"}, _F_FINISH),),
    doc="`--log-requests` `Finish: obj=GenerateReqInput(…), out={'meta_info': {'id': rid, …}}` (a Python repr, "
        "often hard-wrapped in pastes: the record's lines are joined back without separator).",
)
FINISH_FIELDS = [
    ("prompt_tokens", Pattern("sglang_finish_prompt_tokens", r"'prompt_tokens': (?P<v>\d+)[,}]",
                              (Sample("'prompt_tokens': 50,", {"v": "50"}, _F_FINISH),))),
    ("output_tokens", Pattern("sglang_finish_completion_tokens", r"'completion_tokens': (?P<v>\d+)[,}]",
                              (Sample("'completion_tokens': 97,", {"v": "97"}, _F_FINISH),))),
    ("cached_tokens", Pattern("sglang_finish_cached_tokens", r"'cached_tokens': (?P<v>\d+)[,}]",
                              (Sample("'cached_tokens': 1,", {"v": "1"}, _F_FINISH),))),
    ("e2e_latency_s", Pattern("sglang_finish_e2e_latency", r"'e2e_latency': (?P<v>\d+(?:\.\d+)?(?:[eE]-?\d+)?)[,}]",
                              # The real record is hard-wrapped right after `'e2e_latency': `; this is it joined.
                              (Sample("'e2e_latency': 0.6632676124572754}}", {"v": "0.6632676124572754"}),))),
    ("finish_reason", Pattern("sglang_finish_reason", r"'finish_reason': \{'type': '(?P<v>[a-z_]+)'",
                              (Sample("'finish_reason': {'type': 'stop', 'matched': 128009}", {"v": "stop"},
                                      _F_FINISH),))),
]
P_SUMMARY = Pattern(
    "sglang_bench_summary_header",
    r"^=+ Serving Benchmark Result =+\s*$",
    (Sample("============ Serving Benchmark Result ============", {}, _F_BENCH),),
    doc="bench_serving console summary: this header and the `label:  value` lines after it become one log event.",
)
P_TQDM = Pattern(
    "sglang_tqdm",
    r"\d{1,3}%\|",
    (Sample("  0%|", {}, _F_TQDM),),
    doc="A tqdm progress bar (a line holding one is noise; glued in front of a head it is stripped as debris).",
)

# -- the lean lane and the batch reader's lead (polars, on the raw line or the message) ------------------------------
P_LEAN_HEAD = Pattern(
    "sglang_lean_head",
    r"^\[[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{3})?(?: (?:" + RANK_TAGS + r")[0-9]+)*\]$",
    (Sample("[2024-11-29 10:28:25 TP0]", {}, _F_CHUNK), Sample("[2026-07-21 15:00:13 TP0 EP0]", {}, _F_NPU),
     Sample("[2025-05-14 09:31:43]", {}, _F_UVICORN)),
    doc="Lean lane (capture-free), on a line's text up to its first `]`: a plain dated head in ASCII (its characters "
        "are bytes, so `str.find` offsets are character offsets too); its fields sit at known offsets.",
)
P_LEAN_ACCESS = Pattern(
    "sglang_lean_access",
    r'^\[[^\]]*\] INFO: +[!#-~]+ - "[A-Z]+ [!#-~]+ HTTP/[0-9.]+"(?: [0-9]{3}(?: .*)?)?$',
    (Sample('[2025-05-14 09:31:43] INFO:     127.0.0.1:20504 - "POST /v1/completions HTTP/1.1" 200 OK', {}, _F_UVICORN),),
    doc="Lean lane (capture-free), on the raw line: an access line P_ACCESS reads whole, with client, method, path and "
        "version free of spaces and quotes (so the line's first `\"` opens the request and its second closes it) "
        "and ASCII digits in the status.",
)
P_LEAD_ONLY = Pattern(
    "sglang_lead_only",
    r"^\[(?P<ts>(?:\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2}(?:\.\d{3})?)(?P<ranks>(?: (?:" + RANK_TAGS + r")\d+)*)\]$",
    (Sample("[2024-11-29 10:28:25 TP0]", {"ts": "2024-11-29 10:28:25", "ranks": " TP0"}, _F_CHUNK),
     Sample("[04:40:55 TP0]", {"ts": "04:40:55", "ranks": " TP0"}, _F_HHMMSS)),
    doc="Generic path, per distinct head text up to its `]`: P_HEAD's time and rank tags where nothing precedes the "
        "head (most lines); P_HEAD itself runs only where this fails.",
)
P_BATCH_LEAD = Pattern(
    "sglang_batch_lead",
    r"^(?P<lead>(?:\[gpu_id=(?P<gpu>\d+)\] )?(?P<label>Prefill batch|Decode batch)(?: \[(?P<iter>\d+)\])?"
    r"(?:\(mixed #running-req: (?P<mixed>\d+)\))?[.,] )",
    (Sample("Prefill batch. #new-seq: 2, #new-token: 2048", {"lead": "Prefill batch. ", "label": "Prefill batch"},
            _F_CHUNK),
     Sample("Decode batch, #running-req: 24", {"label": "Decode batch", "gpu": None}, _F_NPU)),
    doc="The batch reader, on a batch message's first characters: its label (P_BATCH without its fields).",
)

PATTERNS = [P_HEAD, P_BATCH, P_OLD_PREFILL, P_OLD_DECODE, P_KV_GRAMMAR, P_LAST_FIELD, P_ACCESS, P_SERVER_ARGS_PAIR,
            P_SCHED_CFG, P_CFG_PAIR, P_FINISH, P_SUMMARY, P_TQDM, P_LEAN_HEAD, P_LEAN_ACCESS, P_LEAD_ONLY,
            P_BATCH_LEAD] + [p for _, p in FINISH_FIELDS]
