"""The vLLM server-log formats as data: every regex the vLLM log parser applies, next to real lines it must read.

Each pattern's `doc` says what text the parser feeds it: the physical line with ANSI codes removed (`line`),
or the message after the envelope and process prefixes (`msg`). Samples come verbatim from the fixtures under
../shared/real/vllm/ (see ../shared/real/SOURCES.md); the few formats no fixture shows carry a sample from a
public vLLM issue, named in `doc`, and no `source`.
"""
from __future__ import annotations

from .patterns import Pattern, Sample
from .prefixes import DEDUP_RX, WRAPS

_R = "../shared/real/vllm/"
_X = _R + "excerpts/"
F800 = _R + "v0_0.8.3_ray_tp4pp2_llama70b_full_server_log_800req_llmk8s.log"
FDS = _R + "v0_0.8.3_ray_deepseekv25_tp8pp2_startup_and_2req_llmk8s.log"
FANSI = _R + "v1_0.10.1.1_ray_tp4_gptoss120b_startup_ansi_dennislee22.log"
FWRAP = _R + "v1_0.10.1.1_mp_tp2_qwen7b_startup_hardwrapped_dennislee22.log"
FREADME = _R + "v1_0.10.1.1_bench_text_summary_and_metrics_with_fragment_line_dennislee22_readme.log"
X1935 = _X + "v0_0.2.x_llm_engine_metrics_no_brackets_trailing_spaces_issue1935.log"
X2731 = _X + "v0_0.3.x_async_llm_engine_received_request_prefix_pos_issue2731.log"
X3094 = _X + "v0_0.3.x_metrics161_no_trailing_period_issue3094.log"
X6689 = _X + "v0_0.5.x_metrics406_idle_zero_lines_trailing_period_issue6689.log"
XTT55 = _X + "v0_0.6.x_fork_metrics396_with_debug_heartbeat_tenstorrent_vllm55.log"
X15018 = _X + "v0_0.8.x_bracketed_metrics481_issue15018.log"
X16361 = _X + "v1_0.8.x_loggers80_no_engine_prefix_received_added_issue16361.log"
X18455 = _X + "v1_0.8.x_enginecore_startup_traceback_no_process_prefix_issue18455.log"
X19680 = _X + "v1_0.9.x_loggers87_engine000_issue19680.log"
XASC = _X + "v1_0.9.2_ascend_startup_config_lines_no_process_prefix_vllmascend1813.log"
XASW = _X + "v1_0.9.2_ascend_worker_rank_prefixed_traceback_then_engine_and_raw_tracebacks_vllmascend1813.log"
XLS154 = _X + "v1_0.9.x_intel_fork_compose_prefixed_runtime_worker_death_traceback_llmscaler154.log"
X28910 = _X + "v1_0.11.x_enginecore_dp0_startup_traceback_logged_then_raw_issue28910.log"
X37307 = _X + "v1_2026_apiserver_loggers259_prefill_saturated_pr37307.log"
X44411 = _X + "v1_2026_enginecore_no_dp_suffix_py313_traceback_markers_issue44411.log"

LEVELS = "DEBUG|INFO|WARNING|ERROR|CRITICAL"
NUM = r"(?:\d+(?:\.\d+)?|nan|inf)"

# -- the envelope --------------------------------------------------------------------------------------------

ANSI = Pattern(
    "ansi", r"\x1b\[[0-9;]*[A-Za-z]",
    (Sample("\x1b[1;36m(APIServer pid=1009)\x1b[0;0m INFO 09-10 23:26:12 [api_server.py:1805] vLLM API server "
            "version 0.10.1.1", {}, FANSI),
     Sample("\x1b[36m(RayWorkerWrapper pid=329, ip=10.244.1.18)\x1b[0m INFO 04-14 16:08:21 [utils.py:990] Found "
            "nccl from library libnccl.so.2", {}, F800)),
    doc="line: ANSI colour codes (vLLM's coloured prefixes and levels, Ray's cyan prefixes); removed everywhere first.")

HEAD = Pattern(
    "head",
    r"^(?P<head>(?P<pfx>" + WRAPS + r")"
    r"(?:(?P<wdate>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\.(?P<wms>\d{3}) (?:\d+ )?[A-Za-z_][A-Za-z0-9_.]* )?"
    r"(?:[ \t]*(?P<level>" + LEVELS + r") (?P<md>\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d)(?:\.(?P<ms>\d{3}))? "
    r"\[?(?P<file>[^\s\[\]]+?):(?P<lineno>\d+)\] ?"
    r"|(?P<rdate>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(?P<rms>\d{3})[\t ](?P<rlevel>[A-Z]+) (?P<rfile>\S+?):(?P<rlineno>\d+) -- "
    r"|(?P<ulevel>" + LEVELS + r"|TRACE):[ \t]+"
    r"|(?P<klevel>" + LEVELS + r") \[(?P<kloc>[^\]\s]+)\] "
    r")?)",
    (
        Sample("INFO 04-14 16:15:00 [metrics.py:488] Avg prompt throughput: 9.0 tokens/s",
               {"pfx": "", "level": "INFO", "md": "04-14", "hms": "16:15:00", "file": "metrics.py", "lineno": "488"}, F800),
        Sample("INFO 12-05 19:20:57 llm_engine.py:645] Avg prompt throughput: 0.0 tokens/s",
               {"level": "INFO", "md": "12-05", "hms": "19:20:57", "file": "llm_engine.py", "lineno": "645"}, X1935),
        Sample("(RayWorkerWrapper pid=631, ip=10.244.1.107) INFO 04-20 16:47:23 [utils.py:990] Found nccl from library",
               {"pfx": "(RayWorkerWrapper pid=631, ip=10.244.1.107) ", "level": "INFO", "file": "utils.py"}, FDS),
        Sample("(pid=632, ip=10.244.1.107) INFO 04-20 16:47:14 [__init__.py:239] Automatically detected platform cuda.",
               {"pfx": "(pid=632, ip=10.244.1.107) ", "md": "04-20", "hms": "16:47:14", "lineno": "239"}, FDS),
        Sample("(VllmWorker TP0 pid=3974) INFO 09-03 02:12:00 [shm_broadcast.py:289] vLLM message queue",
               {"pfx": "(VllmWorker TP0 pid=3974) ", "level": "INFO", "file": "shm_broadcast.py"}, FWRAP),
        Sample("(VllmWorker rank=0 pid=281) ERROR 07-15 08:54:44 [multiproc_executor.py:522] WorkerProc hit an exception.",
               {"pfx": "(VllmWorker rank=0 pid=281) ", "level": "ERROR", "file": "multiproc_executor.py", "lineno": "522"}, XASW),
        Sample("(EngineCore_DP0 pid=33630) ERROR 11-18 14:16:34 [core.py:708] Exception: WorkerProc initialization failed",
               {"pfx": "(EngineCore_DP0 pid=33630) ", "level": "ERROR", "md": "11-18", "lineno": "708"}, X28910),
        Sample("(EngineCore pid=395145) ERROR 06-03 12:30:47 [core.py:1165] Exception: WorkerProc initialization failed",
               {"pfx": "(EngineCore pid=395145) ", "level": "ERROR", "lineno": "1165"}, X44411),
        Sample("eap-llm-server-on-arc  | ERROR 11-08 11:01:29 [multiproc_executor.py:135] Worker proc VllmWorker-3 died",
               {"pfx": "eap-llm-server-on-arc  | ", "level": "ERROR", "md": "11-08", "hms": "11:01:29"}, XLS154),
        Sample("eap-llm-server-on-arc  | INFO:     127.0.0.1:48802 - \"GET /health HTTP/1.1\" 200 OK",
               {"pfx": "eap-llm-server-on-arc  | ", "ulevel": "INFO", "level": None}, XLS154),
        Sample("INFO:     10.224.0.6:44208 - \"GET /health HTTP/1.1\" 200 OK",
               {"head": "INFO:     ", "ulevel": "INFO"}, F800),
        Sample("2025-04-14 16:07:44,013\tINFO worker.py:1654 -- Connecting to existing Ray cluster at address: 10.244.2.96:6379...",
               {"rdate": "2025-04-14 16:07:44", "rms": "013", "rlevel": "INFO", "rfile": "worker.py", "rlineno": "1654"}, F800),
        Sample("2025-04-20 16:46:39,823 INFO worker.py:1654 -- Connecting to existing Ray cluster at address: 10.244.2.62:6379...",
               {"rdate": "2025-04-20 16:46:39", "rlevel": "INFO", "rfile": "worker.py"}, FDS),
        Sample("   INFO 04-20 16:47:23 [utils.py:990] Found nccl from library libnccl.so.2",
               {"head": "   INFO 04-20 16:47:23 [utils.py:990] ", "level": "INFO"}, FDS),
        Sample("DEBUG 01-23 06:33:36 client.py:154] Heartbeat successful.",
               {"level": "DEBUG", "file": "client.py", "lineno": "154"}, XTT55),
        Sample("(VllmWorker rank=0 pid=281) ", {"pfx": "(VllmWorker rank=0 pid=281) ", "level": None, "ulevel": None}, XASW),
        Sample("NCCL version 2.21.5+cuda12.4", {"head": "", "level": None}, F800),
    ),
    doc="line: the wrapper prefixes of `prefixes.WRAPS` (docker compose `svc  | `, kubectl `[pod/N/C] `, journald, "
        "nested process / Ray actor prefixes `(Name pid=N[, ip=A])`) as `pfx`, then one of: the vLLM "
        "record envelope `LEVEL MM-DD HH:MM:SS[.mmm] [file.py:N]` (or the pre-0.8 `file.py:N]`), a Ray record with a "
        "full date and a tab, a uvicorn `LEVEL:` line (no time), or a KServe `[file:func():N]` record after a KServe "
        "`YYYY-MM-DD HH:MM:SS.mmm [pid] logger` wrapper. Always matches; `head` is what precedes the message.")

SNIFF = Pattern(
    "sniff_envelope", r"(?:" + LEVELS + r") \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{3})? \[?[^\s\[\]]+\.py:\d+\] ",
    (Sample("\x1b[36m(pid=639)\x1b[0m INFO 04-14 16:08:10 [__init__.py:239] Automatically detected platform cuda.", {}, F800),
     Sample("eap-llm-server-on-arc  | ERROR 11-08 11:01:29 [multiproc_executor.py:135] Worker proc", {}, XLS154)),
    doc="the first 64 KB (bytes), anywhere: vLLM's record envelope, however the line starts (shell echo, Ray, "
        "docker-compose, ANSI codes may come first). Content-based detection counts these.")

HEAD_FAST = Pattern(
    "head_fast",
    r"^" + WRAPS + r"(?:" + LEVELS + r") \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{3})? "
    r"\[?[^\s\[\]]+?:\d+\] ?",
    (Sample("INFO 04-14 16:15:00 [metrics.py:488] Avg prompt throughput: 9.0 tokens/s", {}, F800),
     Sample("(VllmWorker TP0 pid=3974) INFO 09-03 02:12:00 [shm_broadcast.py:289] vLLM message queue", {}, FWRAP),
     Sample("INFO 12-05 19:20:57 llm_engine.py:645] Avg prompt throughput: 0.0 tokens/s", {}, X1935)),
    doc="line: the common case of `head` (process prefixes then a vLLM envelope) matched without captures; the "
        "fields are then cut from the match at fixed offsets. Lines it does not match go through `head`.")

UVI_FAST = Pattern(
    "head_uvicorn",
    r"^(?:" + LEVELS + r"|TRACE):[ \t]+",
    (Sample('INFO:     10.244.1.14:54202 - "POST /v1/completions HTTP/1.1" 200 OK', {}, F800),
     Sample("INFO:     Started server process [5941]", {}, F800)),
    doc="line: a uvicorn record without wrapper prefix (`LEVEL:` and its padding), read without `head`: no wrapper "
        "prefix starts with a level and a colon, so `head` gives it `pfx` empty and `ulevel` the level.")

PFX = Pattern(
    "process_prefixes", r"^" + WRAPS,
    (Sample("(EngineCore_DP0 pid=33630) ERROR 11-18 14:16:34 [core.py:708]", {}, X28910),),
    doc="the `head_fast` match: its wrapper prefixes (`prefixes.WRAPS`; the rest is `LEVEL MM-DD HH:MM:SS[.mmm] "
        "[file:N] `).")

PROCESS_SEP = Pattern(
    "process_separator", r"\)(?:\s|\x1b\[[0-9;]*m)*\(|[ \t]+\|[ \t]*\(?",
    (Sample("\x1b[1;36m(EngineCore_0 pid=1159)\x1b[0;0m \x1b[36m(RayWorkerWrapper pid=1273)\x1b[0m ", {}, FANSI),
     Sample("eap-llm-server-on-arc  | ERROR 11-08 11:01:29", {}, XLS154)),
    doc="pfx (ANSI codes already removed): the joints between nested prefixes (and after a docker-compose service), "
        "replaced by ` / ` to name the "
        "process: `EngineCore_0 pid=1159 / RayWorkerWrapper pid=1273`, `eap-llm-server-on-arc`.")

TORN = Pattern(
    "torn_record",
    r"(?P<level>" + LEVELS + r") (?P<md>\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d)(?:\.(?P<ms>\d{3}))? "
    r"\[?(?P<file>[^\s\[\]]+?):(?P<lineno>\d+)\] ",
    (Sample("deepseek-v2-5-0-1:633:INFO 04-20 16:48:04 [parallel_state.py:957] rank 15 in world size 16",
            {"level": "INFO", "md": "04-20", "hms": "16:48:04", "file": "parallel_state.py", "lineno": "957"}, FDS),),
    doc="msg of a line with no envelope at its start: a record glued behind a torn write (NCCL output cut mid-line); "
        "the text before it is dropped, the record kept.")

RAY_DEDUP = Pattern(
    "ray_dedup_suffix", DEDUP_RX,
    (Sample("(RayWorkerWrapper pid=631, ip=10.244.1.107) INFO 04-20 16:47:23 [utils.py:990] Found nccl from library "
            "libnccl.so.2 [repeated 14x across cluster]", {}, FDS),),
    doc="msg: Ray's log-deduplication suffix (and its advice text); removed from the message.")

# -- periodic stats ------------------------------------------------------------------------------------------

STATS_V0 = Pattern(
    "stats_v0",
    r"^Avg prompt throughput: (?P<prompt>" + NUM + r") tokens/s, Avg generation throughput: (?P<gen>" + NUM
    + r") tokens/s, Running: (?P<running>\d+) reqs, Swapped: (?P<swapped>\d+) reqs, Pending: (?P<pending>\d+) reqs, "
    r"GPU KV cache usage: (?P<gpu_kv>" + NUM + r")%, CPU KV cache usage: (?P<cpu_kv>" + NUM + r")%\.?\s*(?:,\s*)?$",
    (
        Sample("Avg prompt throughput: 9.0 tokens/s, Avg generation throughput: 22.1 tokens/s, Running: 1 reqs, "
               "Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 0.0%, CPU KV cache usage: 0.0%.",
               {"prompt": "9.0", "gen": "22.1", "running": "1", "swapped": "0", "pending": "0", "gpu_kv": "0.0",
                "cpu_kv": "0.0"}, F800),
        Sample("Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 553.9 tokens/s, Running: 110 reqs, "
               "Swapped: 0 reqs, Pending: 507 reqs, GPU KV cache usage: 98.6%, CPU KV cache usage: 0.0%    ",
               {"gen": "553.9", "running": "110", "pending": "507", "gpu_kv": "98.6"}, X1935),
        Sample("Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 44.9 tokens/s, Running: 2 reqs, "
               "Swapped: 0 reqs, Pending: 3 reqs, GPU KV cache usage: 82.1%, CPU KV cache usage: 0.0%",
               {"running": "2", "pending": "3", "gpu_kv": "82.1"}, X3094),
        Sample("Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, "
               "Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 0.0%, CPU KV cache usage: 0.0%.",
               {"prompt": "0.0", "running": "0"}, X6689),
        Sample("Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.4 tokens/s, Running: 2 reqs, "
               "Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 0.6%, CPU KV cache usage: 0.0%.",
               {"gen": "0.4", "gpu_kv": "0.6"}, X15018),
    ),
    doc="msg: V0 engine stats (metrics.py / llm_engine.py), with or without the trailing period (0.2–0.4 have none); "
        "a trailing separator (`, `) after the last field is accepted.")

STATS_V1 = Pattern(
    "stats_v1",
    r"^(?:Engine (?P<engine>\d+): |(?P<n_engines>\d+) Engines Aggregated: )?Avg prompt throughput: (?P<prompt>" + NUM
    + r") tokens/s, Avg generation throughput: (?P<gen>" + NUM + r") tokens/s, Running: (?P<running>\d+) reqs, "
    r"Waiting: (?P<waiting>\d+) reqs(?:, Deferred: (?P<deferred>\d+) reqs)?(?:, Preemptions: (?P<preemptions>\d+))?"
    r"(?:, GPU KV cache usage: (?P<gpu_kv>" + NUM + r")%)?(?:, Prefix cache hit rate: (?P<hit>" + NUM + r")%)?"
    r"(?:, Corrupted: (?P<corrupted>\d+) reqs)?(?:, External prefix cache hit rate: (?P<ext_hit>" + NUM + r")%)?"
    r"(?:, MM cache hit rate: (?P<mm_hit>" + NUM + r")%)?\s*(?:,\s*)?$",
    (
        Sample("Avg prompt throughput: 13.0 tokens/s, Avg generation throughput: 52.1 tokens/s, Running: 0 reqs, "
               "Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 80.0%",
               {"engine": None, "prompt": "13.0", "gen": "52.1", "running": "0", "waiting": "0", "gpu_kv": "0.0",
                "hit": "80.0"}, X16361),
        Sample("Engine 000: Avg prompt throughput: 1254.4 tokens/s, Avg generation throughput: 29.2 tokens/s, Running: "
               "10 reqs, Waiting: 4 reqs, GPU KV cache usage: 57.9%, Prefix cache hit rate: 40.5%",
               {"engine": "000", "prompt": "1254.4", "running": "10", "waiting": "4", "hit": "40.5"}, X19680),
        Sample("Engine 000: Avg prompt throughput: 23998.2 tokens/s, Avg generation throughput: 18.1 tokens/s, Running: "
               "10 reqs, Waiting: 90 reqs, GPU KV cache usage: 19.3%, Prefix cache hit rate: 0.0%",
               {"engine": "000", "prompt": "23998.2", "waiting": "90", "gpu_kv": "19.3", "preemptions": None}, X37307),
        Sample("Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 238.7 tokens/s, Running: 10 "
               "reqs, Waiting: 0 reqs, GPU KV cache usage: 4.1%, Prefix cache hit rate: 53.7%",
               {"gen": "238.7", "gpu_kv": "4.1", "hit": "53.7"}, FREADME),
    ),
    doc="msg: V1 engine stats (v1/metrics/loggers.py), 0.7 → 2026: optional `Engine NNN:` / `N Engines Aggregated:`, "
        "optional Deferred, Preemptions, KV usage, prefix/external/MM cache hit rates, Corrupted.")

# Fields of a V1 stats line after `Waiting: N reqs`: (key, value regex with one group, column, STATS_V1's group).
# STATS_V1 reads them in this order by its groups, STATS_V1_LOOSE lines by key.
STATS_V1_FIELDS = [
    ("Deferred", r"(\d+) reqs", "deferred_reqs", "deferred"), ("Preemptions", r"(\d+)", "preemptions", "preemptions"),
    ("GPU KV cache usage", "(" + NUM + ")%", "gpu_kv_cache_usage_pct", "gpu_kv"),
    ("Prefix cache hit rate", "(" + NUM + ")%", "prefix_cache_hit_rate_pct", "hit"),
    ("Corrupted", r"(\d+) reqs", "corrupted_reqs", "corrupted"),
    ("External prefix cache hit rate", "(" + NUM + ")%", "external_prefix_cache_hit_rate_pct", "ext_hit"),
    ("MM cache hit rate", "(" + NUM + ")%", "mm_cache_hit_rate_pct", "mm_hit"),
]
STATS_V1_LOOSE = Pattern(
    "stats_v1_loose",
    r"^(?:Engine (?P<engine>\d+): |(?P<n_engines>\d+) Engines Aggregated: )?Avg prompt throughput: (?P<prompt>" + NUM
    + r") tokens/s, Avg generation throughput: (?P<gen>" + NUM + r") tokens/s, Running: (?P<running>\d+) reqs, "
    r"Waiting: (?P<waiting>\d+) reqs(?P<rest>(?:, [A-Za-z][A-Za-z ]*: [^,]*)*?)\s*(?:,\s*)?$",
    (
        Sample("Engine 000: Avg prompt throughput: 23998.2 tokens/s, Avg generation throughput: 18.1 tokens/s, Running: "
               "10 reqs, Waiting: 90 reqs, GPU KV cache usage: 19.3%, Prefix cache hit rate: 0.0%",
               {"engine": "000", "waiting": "90", "rest": ", GPU KV cache usage: 19.3%, Prefix cache hit rate: 0.0%"},
               X37307),
    ),
    doc="msg: a V1 stats line STATS_V1 does not take (its optional fields in another order, or one it does not know):"
        " the fields up to `Waiting`, then `rest`, whose known fields (STATS_V1_FIELDS) are read by key; the others are "
        "named in a note, not stored.")

PREFIX_HIT_V0 = Pattern(
    "prefix_cache_hit_v0",
    r"^Prefix cache hit rate: GPU: (?P<gpu>" + NUM + r")%, CPU: (?P<cpu>" + NUM + r")%\s*(?:,\s*)?$",
    (Sample("Prefix cache hit rate: GPU: 0.00%, CPU: 0.00%", {"gpu": "0.00", "cpu": "0.00"}, F800),),
    doc="msg: the V0 line that follows a stats line when prefix caching is on: folded into that stats line's "
        "engine_stats row (same process stream, next record, within a second); a row of its own only without one.")

# -- request lifecycle ---------------------------------------------------------------------------------------

_RECV_2026 = ("Received request chatcmpl-a269fdcb7c6ce890: params: SamplingParams(n=1, presence_penalty=0.0, "
              "frequency_penalty=0.0, repetition_penalty=1.0, temperature=0.7, top_p=0.95, top_k=0, min_p=0.0, seed=None, "
              "stop=[], stop_token_ids=[], bad_words=[], include_stop_str_in_output=False, ignore_eos=False, "
              "max_tokens=100, min_tokens=0, logprobs=None, prompt_logprobs=None, skip_special_tokens=True, "
              "spaces_between_special_tokens=True, truncate_prompt_tokens=None, structured_outputs=None, "
              "extra_args=None), lora_request: None.")

RECV_ID = Pattern(
    "received_id", r"^Received request (?P<rid>[^\s:]+):",
    (Sample("Received request cmpl-bfd5818ad84548fdb8fbd3ed075d8a00-0: prompt: None, prefix_pos: None,sampling_params:",
            {"rid": "cmpl-bfd5818ad84548fdb8fbd3ed075d8a00-0"}, X2731),
     Sample("Received request chatcmpl-b654b653c8714431a1096a3be88f1662: prompt: '<|im_start|>system",
            {"rid": "chatcmpl-b654b653c8714431a1096a3be88f1662"}, X16361),
     Sample(_RECV_2026, {"rid": "chatcmpl-a269fdcb7c6ce890"})),
    doc="msg: `Received request ID: ...` (entrypoints/logger.py, 0.4 → 2026; async_llm_engine.py in 0.2–0.3). "
        "The 2026 sample (prompt no longer printed at INFO) is from https://github.com/vllm-project/vllm/issues/34503.")

RECV_IDS = Pattern(
    "received_prompt_token_ids", r"prompt_token_ids: (?P<ids>\[[0-9, ]*\]|None)",
    (Sample("params: SamplingParams(n=1, best_of=1, presence_penalty=0.0, frequency_penalty=0.5, repetition_penalty=1.0, "
            "temperature=0.1, top_p=1.0, top_k=-1, min_p=0.0, use_beam_search=False, length_penalty=1.0, "
            "early_stopping=False, stop=['USER:', 'ASSISTANT:', 'Reference(s):', 'Note:'], stop_token_ids=[], "
            "include_stop_str_in_output=False, ignore_eos=False, max_tokens=250, logprobs=None, prompt_logprobs=None, "
            "skip_special_tokens=True, spaces_between_special_tokens=True), prompt_token_ids: [], lora_request: None.",
            {"ids": "[]"}, X2731),
     Sample("extra_args=None), prompt_token_ids: None, lora_request: None, prompt_adapter_request: None.",
            {"ids": "None"}, X16361),
     Sample("extra_args=None), prompt_token_ids: [128000, 5519, 499, 1440, 279, 2363, 350, 16597, 555, 480, 3394, 75206, "
            "1543], lora_request: None, prompt_adapter_request: None.",
            {"ids": "[128000, 5519, 499, 1440, 279, 2363, 350, 16597, 555, 480, 3394, 75206, 1543]"}, F800)),
    doc="msg of a Received line: the prompt's token ids when printed (completions); prompt length = number of ids. "
        "`None` for chat requests in 0.8; `[]` in 0.3 when the client sent text (length unknown, stored NULL).")

RECV_PARAMS = Pattern(
    "received_params", r"params: (?P<params>[A-Za-z]*Params\(.*?\)|None), (?:prompt_token_ids|lora_request): ",
    (Sample("prefix_pos: None,sampling_params: SamplingParams(n=1, best_of=1, presence_penalty=0.0, frequency_penalty=0.5, "
            "repetition_penalty=1.0, temperature=0.1, top_p=1.0, top_k=-1, min_p=0.0, use_beam_search=False, "
            "length_penalty=1.0, early_stopping=False, stop=['USER:', 'ASSISTANT:', 'Reference(s):', 'Note:'], "
            "stop_token_ids=[], include_stop_str_in_output=False, ignore_eos=False, max_tokens=250, logprobs=None, "
            "prompt_logprobs=None, skip_special_tokens=True, spaces_between_special_tokens=True), prompt_token_ids: [], ",
            {"params": "SamplingParams(n=1, best_of=1, presence_penalty=0.0, frequency_penalty=0.5, repetition_penalty=1.0, "
             "temperature=0.1, top_p=1.0, top_k=-1, min_p=0.0, use_beam_search=False, length_penalty=1.0, "
             "early_stopping=False, stop=['USER:', 'ASSISTANT:', 'Reference(s):', 'Note:'], stop_token_ids=[], "
             "include_stop_str_in_output=False, ignore_eos=False, max_tokens=250, logprobs=None, prompt_logprobs=None, "
             "skip_special_tokens=True, spaces_between_special_tokens=True)"}, X2731),
     Sample(_RECV_2026, {"params": _RECV_2026[len("Received request chatcmpl-a269fdcb7c6ce890: params: "):
                                            -len(", lora_request: None.")]})),
    doc="msg of a Received line: the SamplingParams repr (opaque; its fields change by version). The 2026 sample "
        "is from https://github.com/vllm-project/vllm/issues/34503.")

MAX_TOKENS = Pattern(
    "max_tokens", r"(?:\(|, )max_tokens=(?P<max_tokens>\d+)",
    (Sample("include_stop_str_in_output=False, ignore_eos=False, max_tokens=120, min_tokens=0,", {"max_tokens": "120"}, F800),
     Sample("include_stop_str_in_output=False, ignore_eos=False, max_tokens=512, logprobs=None,", {"max_tokens": "512"}, X2731)),
    doc="params: the requested max_tokens.")

LIFECYCLE = Pattern(
    "lifecycle", r"^(?P<event>Added|Finished|Aborted) request (?P<rid>\S+?)\.?\s*$",
    (Sample("Added request chatcmpl-8d50639d633d4cda959507475b226dfd.",
            {"event": "Added", "rid": "chatcmpl-8d50639d633d4cda959507475b226dfd"}, F800),
     Sample("Finished request chatcmpl-8d50639d633d4cda959507475b226dfd.",
            {"event": "Finished", "rid": "chatcmpl-8d50639d633d4cda959507475b226dfd"}, F800),
     Sample("Added request chatcmpl-b654b653c8714431a1096a3be88f1662.",
            {"event": "Added", "rid": "chatcmpl-b654b653c8714431a1096a3be88f1662"}, X16361),
     Sample("Added request chatcmpl-a269fdcb7c6ce890-a8a65d16.", {"event": "Added", "rid": "chatcmpl-a269fdcb7c6ce890-a8a65d16"}),
     Sample("Aborted request 0e89f1d2d94c4a039f868222c100cc8a.", {"event": "Aborted", "rid": "0e89f1d2d94c4a039f868222c100cc8a"})),
    doc="msg: request lifecycle (V0 async_llm_engine.py; V1 async_llm.py logs only Added). The 2026 Added line (engine "
        "id = API id + `-` + 8 hex) is from https://github.com/vllm-project/vllm/issues/34503, the Aborted line from "
        "https://github.com/vllm-project/vllm/issues/2484 (no fixture has either).")

ENGINE_SUFFIX = Pattern(
    "engine_id_suffix", r"^(?P<base>.+)-(?P<suffix>[0-9a-f]{8})$",
    (Sample("chatcmpl-a269fdcb7c6ce890-a8a65d16", {"base": "chatcmpl-a269fdcb7c6ce890", "suffix": "a8a65d16"}),),
    doc="request id of an Added line (2026): the engine's suffix, stripped when the base is a Received id of the "
        "same log (DuckDB SQL at the end of the parse). Sample from https://github.com/vllm-project/vllm/issues/34503.")

ENGINE_ID_2026 = Pattern(
    "engine_id_2026_shape", r"^[a-z]+-[0-9a-f]{16}(?:-[0-9]+)?-[0-9a-f]{8}$",
    (Sample("chatcmpl-a269fdcb7c6ce890-a8a65d16", {}),),
    doc="request id of an Added line with no Received line to compare with (request logging is off by default "
        "since ~0.10): the 2026 shape API id (`chatcmpl-` + 16 hex) + engine suffix is stripped too. Sample from "
        "https://github.com/vllm-project/vllm/issues/34503.")

# -- uvicorn -------------------------------------------------------------------------------------------------

ACCESS = Pattern(
    "uvicorn_access",
    r"^(?P<client>\S+(?: \S+)?) - \"(?P<method>[A-Z]+) (?P<path>\S+) HTTP/(?P<httpv>[0-9.]+)\" (?P<status>\d{3})",
    (Sample("10.224.0.6:44208 - \"GET /health HTTP/1.1\" 200 OK",
            {"client": "10.224.0.6:44208", "method": "GET", "path": "/health", "status": "200"}, F800),
     Sample("10.244.1.14:60090 - \"POST /v1/completions HTTP/1.1\" 200 OK",
            {"method": "POST", "path": "/v1/completions", "status": "200"}, F800),
     Sample("127.0.0.1:48802 - \"GET /health HTTP/1.1\" 200 OK", {"client": "127.0.0.1:48802", "status": "200"}, XLS154)),
    doc="msg of a uvicorn line: an access record (no timestamp: it inherits the previous record's time).")

# -- startup configuration -----------------------------------------------------------------------------------

CFG_VERSION = Pattern(
    "cfg_api_version", r"^vLLM API server version (?P<version>\S+)",
    (Sample("vLLM API server version 0.8.3", {"version": "0.8.3"}, F800),
     Sample("vLLM API server version 0.10.1.1", {"version": "0.10.1.1"}, FANSI),
     Sample("vLLM API server version 0.9.2", {"version": "0.9.2"}, XASC)),
    doc="msg: the vLLM version (api_server.py).")

CFG_INIT = Pattern(
    "cfg_engine_init",
    r"^Initializing an? (?:(?P<engine>V[01]) )?LLM engine \(v(?P<version>[^)\s]+)\) with config: (?P<config>.*)$",
    (Sample("Initializing a V0 LLM engine (v0.8.3) with config: model='meta-llama/Llama-3.3-70B-Instruct', "
            "speculative_config=None, tokenizer='meta-llama/Llama-3.3-70B-Instruct'",
            {"engine": "V0", "version": "0.8.3"}, F800),
     Sample("Initializing a V1 LLM engine (v0.9.2) with config: model='/models/Qwen3-30B-A3B', speculative_config=None",
            {"engine": "V1", "version": "0.9.2", "config": "model='/models/Qwen3-30B-A3B', speculative_config=None"}, XASC)),
    doc="msg: the engine config line (V0/V1 since 0.8; older `Initializing an LLM engine (v0.5.x)` is V0).")

CFG_CHUNKED = Pattern(
    "cfg_chunked_prefill", r"^Chunked prefill is enabled with max_num_batched_tokens=(?P<tokens>\d+)",
    (Sample("Chunked prefill is enabled with max_num_batched_tokens=2048.", {"tokens": "2048"}, F800),),
    doc="msg: the effective chunk budget (config.py in 0.8/0.9, scheduler.py in 0.10).")

CFG_KV_TOKENS = Pattern(
    "cfg_kv_cache_tokens", r"^GPU KV cache size: (?P<tokens>[0-9,]+) tokens",
    (Sample("GPU KV cache size: 2,640,144 tokens", {"tokens": "2,640,144"}, FANSI),
     Sample("GPU KV cache size: 1,192,160 tokens", {"tokens": "1,192,160"}, FWRAP)),
    doc="msg: V1 KV cache capacity in tokens (kv_cache_utils.py).")

CFG_BLOCKS_V0 = Pattern(
    "cfg_blocks_v0", r"^# (?P<device>\w+) blocks: (?P<gpu>\d+), # CPU blocks: (?P<cpu>\d+)",
    (Sample("# cuda blocks: 25588, # CPU blocks: 6553", {"device": "cuda", "gpu": "25588", "cpu": "6553"}, F800),),
    doc="msg: V0 KV cache blocks (executor_base.py; `# GPU blocks` in older versions).")

CFG_BLOCKS_V1 = Pattern(
    "cfg_blocks_v1", r"num_gpu_blocks is:? (?P<blocks>\d+)",
    (Sample("Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is: 330018",
            {"blocks": "330018"}, FANSI),),
    doc="msg: V1 KV cache blocks (loggers.py, once at start).")

CFG_MAX_LEN = Pattern(
    "cfg_max_model_len", r"^Using max model len (?P<len>\d+)",
    (Sample("Using max model len 16384", {"len": "16384"}, FWRAP), Sample("Using max model len 32768", {"len": "32768"}, XASC)),
    doc="msg: the model length in use.")

CFG_ARGS = Pattern(
    "cfg_args_namespace", r"^args: Namespace\((?P<body>.*?)\)?\s*$",
    (Sample("args: Namespace(host=None, port=8000, uvicorn_log_level='info', disable_uvicorn_access_log=False",
            {}, F800),),
    doc="msg: every CLI argument (≤ 0.8.x), `key=value` pairs read with `cfg_kv`.")

CFG_NONDEFAULT = Pattern(
    "cfg_non_default_args", r"^non-default args: \{(?P<body>.*)\}\s*$",
    (Sample("non-default args: {'model_tag': 'gpt-oss-120b', 'port': 8081, 'model': 'gpt-oss-120b', 'max_model_len': "
            "16384, 'tensor_parallel_size': 4, 'gpu_memory_utilization': 0.8}",
            {"body": "'model_tag': 'gpt-oss-120b', 'port': 8081, 'model': 'gpt-oss-120b', 'max_model_len': 16384, "
                     "'tensor_parallel_size': 4, 'gpu_memory_utilization': 0.8"}, FANSI),),
    doc="msg: the CLI arguments that differ from the defaults (0.9+), a dict repr read with `cfg_dict_kv`.")

CFG_KV = Pattern(
    "cfg_kv",
    r"(?P<key>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>'[^']*'|\"[^\"]*\"|\[[^\]]*\]|\{[^{}]*\}|[A-Za-z_][A-Za-z0-9_]*\([^()]*\)|[^,]*)",
    (Sample("tensor_parallel_size=4, pipeline_parallel_size=2,", {"key": "tensor_parallel_size", "value": "4"}, F800),
     Sample("model='meta-llama/Llama-3.3-70B-Instruct', speculative_config=None,",
            {"key": "model", "value": "'meta-llama/Llama-3.3-70B-Instruct'"}, F800)),
    doc="body of an args Namespace or an engine config line: one `key=value` pair (nested values kept as text).")

CFG_DICT_KV = Pattern(
    "cfg_dict_kv",
    r"'(?P<key>[A-Za-z_][A-Za-z0-9_]*)': (?P<value>'[^']*'|\[[^\]]*\]|\{[^{}]*\}|[^,]*)",
    (Sample("'tensor_parallel_size': 4, 'enable_expert_parallel': True, 'max_num_seqs': 32}",
            {"key": "tensor_parallel_size", "value": "4"}, XASC),
     Sample("'served_model_name': ['qwen30b'], 't", {"key": "served_model_name", "value": "['qwen30b']"}, XASC)),
    doc="body of a non-default args dict: one `'key': value` pair.")

# -- tracebacks ----------------------------------------------------------------------------------------------

TB_HEAD = Pattern(
    "tb_head", r"^Traceback \(most recent call last\):\s*$",
    (Sample("Traceback (most recent call last):", {}, XASW),),
    doc="msg (or the text after the process prefixes): the first line of a Python traceback. Only ever at the start "
        "of a message, so the word inside a prompt (`Received request … Traceback …`) never opens one.")

TB_FRAME = Pattern(
    "tb_frame",
    r"^(?:  File \"(?P<file>[^\"]*)\", line (?P<line>\d+)|    \S|\s+[~^]+\s*$|  \[Previous line repeated \d+ more times?\])",
    (Sample("  File \"/usr/local/python3.10.17/bin/vllm\", line 8, in <module>",
            {"file": "/usr/local/python3.10.17/bin/vllm", "line": "8"}, XASW),
     Sample("    sys.exit(main())", {"file": None}, XASW),
     Sample("                  ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^", {}, X18455),
     Sample("    ~~~~~~~~^^", {}, X44411)),
    doc="msg: a traceback frame line, a code line, or a caret/tilde marker line (Python ≥ 3.11).")

TB_EXC = Pattern(
    "tb_exception", r"^(?P<exc>[A-Za-z_][A-Za-z0-9_.]*)(?::(?P<text>.*))?$",
    (Sample("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
            {"exc": "RuntimeError"}, XASW),
     Sample("Exception: WorkerProc initialization failed due to an exception in a background process. See stack trace "
            "for root cause.", {"exc": "Exception"}, X28910)),
    doc="msg: the exception line that ends a traceback (only counted as one right after a frame line).")

TB_CHAIN = Pattern(
    "tb_chain", r"^(?:During handling of the above exception|The above exception was the direct cause)",
    (Sample("During handling of the above exception", {}),),
    doc="msg: the sentence between chained tracebacks (Python's own text; no fixture has a chained traceback).")

TB_PROCESS = Pattern(
    "tb_process", r"^Process [A-Za-z0-9_-]+:\s*$",
    (Sample("Process EngineCore_0:", {}, XASW), Sample("Process EngineCore:", {}, X44411)),
    doc="msg: multiprocessing's `Process Name:` line printed before a raw traceback (starts the traceback event).")

# -- known noise ---------------------------------------------------------------------------------------------

NOISE_NCCL = Pattern(
    "noise_nccl",
    r"NCCL (?:INFO|WARN)|^NCCL version |^[A-Za-z0-9][A-Za-z0-9_.-]*:\d+:\d+(?: \[\d*\]?(?: N?C?C?L?)?)?$",
    (Sample("llama-3-3-70b-instruct-0-1:327:327 [0] NCCL INFO Bootstrap : Using eth0:10.244.1.18<0>", {}, F800),
     Sample("NCCL version 2.21.5+cuda12.4", {}, F800),
     Sample("llama-3-3-70b-instruct-0-1:327:327", {}, F800),
     Sample("deepseek-v2-5-0-1:630:630 [4] NCCL", {}, FDS)),
    doc="msg: NCCL debug output (NCCL_DEBUG=INFO), including writes glued to or torn from others (the torn header "
        "`host:pid:tid [rank] NCCL`).")

NOISE_TQDM = Pattern(
    "noise_tqdm", r"\d+%\|[^|]*\| *[0-9.]+[kMGTB]*/[0-9.]+[kMGTB]* \[|% Completed \| \d+/\d+ \[",
    (Sample("Capturing CUDA graph shapes:   0%|          | 0/35 [00:00<?, ?it/s]", {}, F800),
     Sample("Loading safetensors checkpoint shards:   0% Completed | 0/15 [00:00<?, ?it/s]", {}, FANSI),
     Sample("config.json: 100%|" + "\u2588" * 226 + "| 1.55k/1.55k [00:00<00:00, 20.2MB/s]", {}, FDS)),
    doc="msg: tqdm progress bars (weight loading, CUDA-graph capture, downloads).")

NOISE_SHELL = Pattern(
    "noise_shell", r"^\+ |^\S+@\S+:\S*[#$](?: |$)|^➜ ",
    (Sample("+ python3 -m vllm.entrypoints.openai.api_server --port 8000", {}, F800),
     Sample("root@deepseek-v2-5-0:/vllm-workspace# bash /vllm-workspace/examples/online_serving/multi-node-serving.sh", {}, FDS),
     Sample("➜  llm-k8s git:(main) ✗ k exec -it deepseek-v2-5-0 -- bash", {}, FDS)),
    doc="msg: shell trace (`set -x`) and prompt lines of a captured terminal.")

NOISE_PYWARN = Pattern(
    "noise_python_warning", r"^\S+\.py:\d+: [A-Za-z]*Warning: ",
    (Sample("/usr/local/lib/python3.12/dist-packages/vllm/distributed/parallel_state.py:411: UserWarning: The given buffer "
            "is not writable", {}, FDS),),
    doc="msg: a Python `warnings` message; the lines after it in the same process (its text and the source line, "
        "e.g. `  warnings.warn(`) are noise too.")

NOISE_TORCH_LOG = Pattern(
    "noise_torch_log", r"^(?:\[rank\d+\]:)?\[[WEIF]\d{3,4} \d\d:\d\d:\d\d\.\d+ [^\s\]]+:\d+\] ",
    (Sample("[rank0]:[W414 16:14:56.177732949 ProcessGroupNCCL.cpp:3436] Warning: TORCH_NCCL_AVOID_RECORD_STREAMS", {}, F800),),
    doc="msg: PyTorch's C++ (c10) log lines `[rankN]:[W0414 hh:mm:ss.ns file.cpp:N] Warning: …`.")

NOISE_RAY_CORE = Pattern(
    "noise_ray_core", r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [IWEF] \d+ \d+\] \S+:\d+: ",
    (Sample("[2025-04-20 16:46:38,300 W 39 39] global_state_accessor.cc:429: Retrying to get node with node ID", {}, FDS),),
    doc="msg: Ray's C++ core log lines.")

NOISE_SHELL_CONT = Pattern(
    "noise_shell_continuation", r"\s\\$",
    (Sample("root@deepseek-v2-5-0:/vllm-workspace# python3 -m vllm.entrypoints.openai.api_server \\", {}, FDS),
     Sample("python /home/cdsw/vllm/benchmarks/benchmark_serving.py --backend vllm \\", {}, FREADME)),
    doc="line: a command continued with a backslash; it and the line after it are shell noise (a pasted command).")

NOISE_BLANK = Pattern(
    "noise_blank", r"^\s*$", (Sample("", {}, XASW),),
    doc="msg: an empty line, or a process prefix with nothing after it (tqdm writes `\\n` before its bar).")

TORN_NCCL = Pattern(
    "torn_nccl_piece",
    r"via (?:P2P|NET|SHM)/\S*$|Connected all|all rings$| rings$|comm 0x|busId|nranks|cudaDev|Channel \d+/|->-?\d+$|p2p channels",
    (Sample("ls channels, 2 p2p channels, 2 p2p channels per peer", {}, F800),
     Sample("l 23/0 : 4[4] -> 5[5] via P2P/IPC/read", {}, FDS)),
    doc="msg of an unrecognised line: a piece of an NCCL line whose write was torn by another process; rejected "
        "with that reason (the missing part is elsewhere, it cannot be joined).")

TORN_SHORT = Pattern(
    "torn_short", r"^\S{0,24}$",
    (Sample("llama-3-3-70b-", {}, F800),),
    doc="msg of an unrecognised line: a few characters with no space, the stray piece of an interleaved write; "
        "rejected with that reason.")

PARAMS_HEAD = Pattern(
    "params_head", r"^[A-Za-z]*Params\(",
    (Sample("SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0", {}, F800),),
    doc="params cut from a Received line by byte offsets: it must start like a params repr, else the line goes "
        "through `received_params`.")

# -- per-step iteration lines (vLLM >= 0.11, --enable-logging-iteration-details) ---------------------------------

# No public log carries these lines yet: the samples below are built from the source format
# (vllm/v1/engine/core.py `EngineCore.log_iteration_details`, vllm/v1/utils.py `compute_iteration_details`; see
# ../shared/notes/production-evidence.md §1), with the envelopes of real EngineCore lines (issues 28910, 44411).
_ITER = ("Iteration(1412): 1 context requests, 2048 context tokens, 37 generation requests, 37 generation tokens, "
         "iteration elapsed time: 61.27 ms")

ITERATION = Pattern(
    "iteration",
    r"^Iteration\((?P<iter>-?\d+)\): (?P<ctx_reqs>\d+) context requests, (?P<ctx_tokens>\d+) context tokens, "
    r"(?P<gen_reqs>\d+) generation requests, (?P<gen_tokens>\d+) generation tokens, "
    r"iteration elapsed time: (?P<elapsed>\S+) ms(?P<dummy> \(dummy\))?\s*$",
    (Sample(_ITER, {"iter": "1412", "ctx_reqs": "1", "ctx_tokens": "2048", "gen_reqs": "37", "gen_tokens": "37",
                    "elapsed": "61.27", "dummy": None}),
     Sample("Iteration(0): 0 context requests, 0 context tokens, 0 generation requests, 0 generation tokens, "
            "iteration elapsed time: 0.41 ms (dummy)", {"iter": "0", "ctx_tokens": "0", "elapsed": "0.41",
                                                         "dummy": " (dummy)"}),
     Sample("Iteration(7): 0 context requests, 0 context tokens, 12 generation requests, 12 generation tokens, "
            "iteration elapsed time: nan ms", {"gen_reqs": "12", "elapsed": "nan"})),
    doc="msg: one engine step (`Iteration(i): a context requests, b context tokens, c generation requests, d "
        "generation tokens, iteration elapsed time: t ms[ (dummy)]`, logger vllm.v1.engine.core, INFO, written when "
        "the wait for the step's output ends). `elapsed` is taken as any token and checked as a number by the parser "
        "(negative, NaN or infinite elapsed times are rejected). Samples built from the source format (no public log "
        "has these lines): https://github.com/vllm-project/vllm/blob/main/vllm/v1/engine/core.py "
        "(`log_iteration_details`) and vllm/v1/utils.py (`compute_iteration_details`), see production-evidence.md §1.")

ITERATION_HEAD = Pattern(
    "iteration_head", r"^Iteration\(",
    (Sample(_ITER, {}), Sample("Iteration(3): 2 context requests, iteration elapsed time: 5.00 ms", {})),
    doc="msg: any message that starts like an iteration line; those `iteration` does not read (missing or malformed "
        "fields) become rejects with their line number. Samples built from the source format: "
        "https://github.com/vllm-project/vllm/blob/main/vllm/v1/engine/core.py (see `iteration`).")

ENGINE_CORE = Pattern(
    "engine_core_process",
    r"(?:^|/ )(?P<name>EngineCore(?:_DP(?P<dp>\d+)|_(?P<idx>\d+))?) pid=(?P<pid>\d+)",
    (Sample("EngineCore_DP0 pid=33630", {"name": "EngineCore_DP0", "dp": "0", "pid": "33630"}, X28910),
     Sample("EngineCore pid=395145", {"name": "EngineCore", "dp": None, "idx": None, "pid": "395145"}, X44411),
     Sample("EngineCore_0 pid=1159 / RayWorkerWrapper pid=1273", {"name": "EngineCore_0", "idx": "0", "pid": "1159"})),
    doc="process (the parser's ` / `-joined prefix names): the EngineCore that wrote an iteration line, its data-"
        "parallel rank (`_DP<k>`, 0.10.1's `_<k>`; NULL for `(EngineCore pid=N)` and for lines without a prefix) and "
        "pid. Each EngineCore process keeps its own iteration counter. The first two samples are the prefixes of real "
        "lines; the nested one is the parser's name for the nested prefix `(EngineCore_0 pid=1159) (RayWorkerWrapper "
        "pid=1273)` of the 0.10.1.1 Ray fixture (vLLM's `_add_prefix`, https://github.com/vllm-project/vllm; "
        "vllm-formats.md §1.2).")

STATS_FRAGMENT = Pattern(
    "stats_fragment", r"(?:Running: \d+ reqs|KV cache usage: " + NUM + r"%)",
    (Sample(", Running: 10 reqs, Waiting: 0 reqs, GPU KV cache usage: 3.5%, Prefix cache hit rate: 53.7%", {}, FREADME),),
    doc="msg of an unrecognised line: part of a stats line without its envelope (a pasted or torn fragment): "
        "rejected with that reason.")

PATTERNS = [
    ANSI, SNIFF, HEAD, HEAD_FAST, UVI_FAST, PFX, TORN, RAY_DEDUP, STATS_V0, STATS_V1, STATS_V1_LOOSE, PREFIX_HIT_V0, RECV_ID, RECV_IDS, RECV_PARAMS, MAX_TOKENS,
    LIFECYCLE, ENGINE_SUFFIX, ENGINE_ID_2026, ACCESS, CFG_VERSION, CFG_INIT, CFG_CHUNKED, CFG_KV_TOKENS, CFG_BLOCKS_V0, CFG_BLOCKS_V1,
    CFG_MAX_LEN, CFG_ARGS, CFG_NONDEFAULT, CFG_KV, CFG_DICT_KV, TB_HEAD, TB_FRAME, TB_EXC, TB_CHAIN, TB_PROCESS,
    NOISE_NCCL, NOISE_TQDM, NOISE_SHELL, NOISE_PYWARN, NOISE_TORCH_LOG, NOISE_RAY_CORE,
    NOISE_SHELL_CONT, NOISE_BLANK, STATS_FRAGMENT, TORN_NCCL, TORN_SHORT, PARAMS_HEAD, PROCESS_SEP, ITERATION, ITERATION_HEAD, ENGINE_CORE,
]
