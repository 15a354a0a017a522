"""Request-level and engine-level tables written by the server-log and benchmark parsers."""
from .model import Col, Table

NS = "ns since Unix epoch, UTC"
SRC = Col("source_id", "INTEGER", "", "The file the row came from (`sources.source_id`).")
LINE = Col("line_no", "BIGINT", "line", "1-based physical line of the record's first line (NULL for non-line inputs).")
G = "Serving: requests, token gaps, engine logs"

TABLES = [
    Table(
        "requests",
        "One row per request per source. A server log row and a benchmark row of the same request are two rows; "
        "the benchmark row names the server's id in `server_request_id` once clock alignment matched them.",
        (
            SRC, LINE,
            Col("request_id", "VARCHAR", "", "The source's own stable id: the server's id in a log (`cmpl-…-0`, `chatcmpl-…`); "
                "in a benchmark file the request's 0-based index in send order, as text."),
            Col("request_index", "INTEGER", "", "0-based position of the request in the source (send order for a benchmark file, log order for a log)."),
            Col("server_request_id", "VARCHAR", "", "For client-side rows: the server request id matched by clock alignment (NULL when unmatched). For server rows: equal to request_id."),
            Col("engine", "VARCHAR", "", "`vllm`, `tgi`, `sglang`, or the benchmark tool (`vllm_bench`, `sglang_bench`)."),
            Col("kind", "VARCHAR", "", "`server` (the engine's own record) or `client` (a benchmark's measurement)."),
            Col("arrival_ns", "BIGINT", NS, "When the request was received (server) or sent (client), on the common clock; NULL when unknown."),
            Col("first_token_ns", "BIGINT", NS, "When the first output token arrived (client) / was produced (server); NULL when unknown."),
            Col("finish_ns", "BIGINT", NS, "When the request completed; NULL when unknown."),
            Col("scheduled_ns", "BIGINT", NS, "When the request was admitted into a batch (TGI: arrival + validation_time + queue_time, about the start of its prefill); NULL when unknown."),
            Col("prompt_tokens", "INTEGER", "tokens", "Prompt (input) length."),
            Col("output_tokens", "INTEGER", "tokens", "Generated (output) length as reported (TGI: inference_time / time_per_token, exact because time_per_token is the truncated integer-ns quotient; NULL when the two disagree)."),
            Col("cached_tokens", "INTEGER", "tokens", "Prompt tokens served from the prefix cache (SGLang `cached_tokens`)."),
            Col("max_tokens", "INTEGER", "tokens", "Requested max_tokens / max_new_tokens."),
            Col("ttft_ns", "BIGINT", "ns", "Time to first token (duration)."),
            Col("e2e_latency_ns", "BIGINT", "ns", "End-to-end latency (duration)."),
            Col("queue_ns", "BIGINT", "ns", "Time queued before scheduling (TGI `queue_time`)."),
            Col("validation_ns", "BIGINT", "ns", "TGI `validation_time`."),
            Col("inference_ns", "BIGINT", "ns", "TGI `inference_time` (prefill + decode)."),
            Col("time_per_token_ns", "BIGINT", "ns", "TGI `time_per_token` (inference_time / generated tokens)."),
            Col("status", "VARCHAR", "", "`ok`, `failed`, `aborted`; NULL when the source does not say."),
            Col("error", "VARCHAR", "", "Error text for failed requests."),
            Col("finish_reason", "VARCHAR", "", "e.g. `length`, `stop`, `eos_token`."),
            Col("endpoint", "VARCHAR", "", "`generate`, `generate_stream`, `chat_completions`, `completions`, ..."),
            Col("params", "VARCHAR", "", "Sampling parameters as printed (opaque text)."),
            Col("seed", "UBIGINT", "", "Sampling seed the engine used (TGI `seed=\"Some(N)\"`); NULL for greedy or unknown."),
            Col("shared_prefix_tokens", "INTEGER", "tokens", "Prompt tokens, in whole 16-token blocks, that the prompt shares with one received "
                "earlier in the same log (vLLM `Received request` lines with `prompt_token_ids`): the most vLLM's prefix cache can "
                "serve it. NULL when the log prints no token ids."),
        ),
        group=G,
    ),
    Table(
        "request_events",
        "Request lifecycle events as logged (`Received request`, `Added request`, `Finished request`, `Aborted request`, TGI `Success`, ...).",
        (
            SRC, LINE,
            Col("request_id", "VARCHAR", "", "Request id as printed (the 2026 vLLM engine id suffix `-xxxxxxxx` stripped, kept in `detail`)."),
            Col("event", "VARCHAR", "", "`received`, `added`, `finished`, `aborted`, `success`, `error`, `prefix_match`."),
            Col("ts_ns", "BIGINT", NS, "When it was logged (1 s resolution in vLLM logs)."),
            Col("detail", "VARCHAR", "", "Event-specific text (engine-side id, prefix/suffix lengths, error message)."),
        ),
        group=G,
    ),
    Table(
        "token_gaps",
        "Inter-chunk gaps of streamed responses, one row per gap. A benchmark ITL entry is the gap between two streamed "
        "chunks, which may carry several tokens (speculative decoding, stream intervals): `tokens_in_chunk` says how many when known.",
        (
            SRC,
            Col("request_id", "VARCHAR", "", "`requests.request_id` of the same source."),
            Col("gap_index", "INTEGER", "", "0-based: gap k lies between chunk k and chunk k+1 (chunk 0 carries the first token)."),
            Col("gap_ns", "BIGINT", "ns", "Length of the gap (duration)."),
            Col("end_ns", "BIGINT", NS, "Arrival of chunk k+1 on the common clock (NULL when the request's start is unknown)."),
            Col("tokens_in_chunk", "INTEGER", "tokens", "Tokens carried by chunk k+1; NULL when the source does not say (an ITL entry is a chunk gap, not necessarily one token)."),
        ),
        group=G,
    ),
    Table(
        "engine_stats",
        "Periodic engine statistics lines (vLLM V0 `Avg prompt throughput …` and V1 `Engine 000: …`, prefix-cache lines).",
        (
            SRC, LINE,
            Col("ts_ns", "BIGINT", NS, "When the line was logged."),
            Col("engine_index", "INTEGER", "", "V1 `Engine NNN` index (NULL when absent)."),
            Col("engines_aggregated", "INTEGER", "", "V1 data-parallel `N Engines Aggregated:` line: number of engines summed (NULL otherwise)."),
            Col("process", "VARCHAR", "", "Process prefix, e.g. `APIServer pid=1009`."),
            Col("prompt_throughput_tps", "DOUBLE", "tokens/s", "Average prompt throughput over the interval."),
            Col("generation_throughput_tps", "DOUBLE", "tokens/s", "Average generation throughput over the interval."),
            Col("running_reqs", "INTEGER", "requests", "Running requests."),
            Col("swapped_reqs", "INTEGER", "requests", "Swapped requests (V0)."),
            Col("waiting_reqs", "INTEGER", "requests", "Pending (V0) / Waiting (V1) requests."),
            Col("gpu_kv_cache_usage_pct", "DOUBLE", "%", "GPU KV cache usage."),
            Col("cpu_kv_cache_usage_pct", "DOUBLE", "%", "CPU KV cache usage (V0)."),
            Col("prefix_cache_hit_rate_pct", "DOUBLE", "%", "GPU prefix cache hit rate."),
            Col("cpu_prefix_cache_hit_rate_pct", "DOUBLE", "%", "CPU prefix cache hit rate (V0)."),
            Col("external_prefix_cache_hit_rate_pct", "DOUBLE", "%", "External (KV connector) prefix cache hit rate (V1)."),
            Col("mm_cache_hit_rate_pct", "DOUBLE", "%", "Multi-modal cache hit rate (V1)."),
            Col("preemptions", "INTEGER", "requests", "Cumulative preemptions (V1, when printed)."),
            Col("deferred_reqs", "INTEGER", "requests", "V1 `Deferred: N reqs` (2026, when printed)."),
            Col("corrupted_reqs", "INTEGER", "requests", "V1 `Corrupted: N reqs` (with VLLM_COMPUTE_NANS_IN_LOGITS)."),
        ),
        group=G,
    ),
    Table(
        "engine_config",
        "Configuration read from startup lines, one row per (source, key). Keys are normalised across engines "
        "(`engine`, `engine_version`, `model`, `tensor_parallel_size`, `pipeline_parallel_size`, `data_parallel_size`, "
        "`max_num_batched_tokens`, `max_num_seqs`, `enable_chunked_prefill`, `enable_prefix_caching`, `kv_cache_tokens`, "
        "`chunked_prefill_size`, `max_prefill_tokens`, `max_batch_prefill_tokens`, `max_batch_total_tokens`, `waiting_served_ratio`, ...).",
        (
            SRC, LINE,
            Col("key", "VARCHAR", "", "Normalised key."),
            Col("value", "VARCHAR", "", "Value as text."),
            Col("value_num", "DOUBLE", "", "Numeric value when it has one (booleans as 0/1)."),
            Col("origin", "VARCHAR", "", "Which record it came from (e.g. `Initializing a V0 LLM engine`, `args`, `server_args`)."),
        ),
        group=G,
    ),
    Table(
        "engine_batches",
        "Scheduler batch lines (SGLang `Prefill batch` / `Decode batch`): the engine-side record of prefill and decode iterations.",
        (
            SRC, LINE,
            Col("ts_ns", "BIGINT", NS, "When the line was logged (scheduling time under SGLang's overlap scheduler); a line without a timestamp inherits the previous timed line's time, NULL when none precedes it."),
            Col("forward_iter", "BIGINT", "", "Forward-pass counter `[N]` after the label (SGLang `SGLANG_LOG_FORWARD_ITERS=1`)."),
            Col("process", "VARCHAR", "", "Process prefix, e.g. a Ray actor `SGLangEngine pid=41820`."),
            Col("kind", "VARCHAR", "", "`prefill`, `decode` or `mixed`."),
            Col("tp_rank", "INTEGER", "", "TP rank tag (`TP0`)."),
            Col("dp_rank", "INTEGER", "", "DP rank tag."),
            Col("ep_rank", "INTEGER", "", "EP rank tag."),
            Col("pp_rank", "INTEGER", "", "PP rank tag."),
            Col("new_seqs", "INTEGER", "requests", "`#new-seq`."),
            Col("new_tokens", "INTEGER", "tokens", "`#new-token` (the prefill chunk tokens in this batch)."),
            Col("cached_tokens", "INTEGER", "tokens", "`#cached-token`."),
            Col("running_reqs", "INTEGER", "requests", "`#running-req`."),
            Col("queued_reqs", "INTEGER", "requests", "`#queue-req`."),
            Col("pending_tokens", "INTEGER", "tokens", "`#pending-token`."),
            Col("token_usage", "DOUBLE", "fraction", "`token usage` (or `full token usage`), 0..1."),
            Col("gen_throughput_tps", "DOUBLE", "tokens/s", "`gen throughput (token/s)`."),
            Col("input_throughput_tps", "DOUBLE", "tokens/s", "`input throughput (token/s)`."),
            Col("cuda_graph", "BOOLEAN", "", "`cuda graph:` (or npu/cpu graph) flag."),
            Col("cache_hit_rate_pct", "DOUBLE", "%", "`cache hit rate` (cumulative)."),
            Col("accept_len", "DOUBLE", "tokens", "Speculative decoding `accept len`."),
            Col("accept_rate", "DOUBLE", "fraction", "Speculative decoding `accept rate`, 0..1."),
            Col("kv_tokens", "INTEGER", "tokens", "`#token` (or `#full token`): KV-cache tokens in use."),
            Col("mamba_usage", "DOUBLE", "fraction", "`mamba usage` of hybrid models, 0..1."),
            Col("extra", "VARCHAR", "", "Known fields without a column of their own, as printed (`largest-len: 0, #prealloc-req: 3`, other rank tags)."),
        ),
        group=G,
    ),
    Table(
        "engine_steps",
        "Engine steps from vLLM's per-step log lines (`Iteration(i): a context requests, b context tokens, c generation "
        "requests, d generation tokens, iteration elapsed time: t ms`, vLLM >= 0.11 with "
        "`--enable-logging-iteration-details`), one row per line, one step sequence per EngineCore process and run. "
        "The stamps have 1 s resolution; each step's end is placed inside its stamped second from the order and the "
        "elapsed times: a step ends no earlier than the previous placed end plus its own elapsed time plus the host "
        "gap (`host_gap_ms`) and inside its stamped second; the earliest such chain (forward pass) and the latest "
        "(backward pass) bound every end (`end_lo_ns`, `end_hi_ns`), and the end is placed at their midpoint. Where "
        "steps run back to back the seconds' edges pin the chain and the bounds are tight; after an idle stretch only "
        "the stamp's second bounds it. A benchmark file in the same store is aligned onto these ends (clock method "
        "`matched_iteration_steps`, stallscope/ingest/align.py).",
        (
            SRC, LINE,
            Col("process", "VARCHAR", "", "Process prefix as named by the parser (`EngineCore_DP0 pid=2415`); NULL for lines without one."),
            Col("engine_core", "VARCHAR", "", "The EngineCore process name without its pid (`EngineCore_DP0`, `EngineCore`, `EngineCore_0`); NULL without a prefix."),
            Col("dp_rank", "INTEGER", "", "Data-parallel rank from `EngineCore_DP<k>` (0.10.1: `EngineCore_<k>`); NULL when the prefix does not say."),
            Col("pid", "INTEGER", "", "The EngineCore's pid from its prefix."),
            Col("sequence", "INTEGER", "", "0-based step sequence of this process in the file: a new one whenever the counter does not go up by one from the previous line of the same process (an EngineCore restart sets it back to 0)."),
            Col("iteration", "BIGINT", "", "The printed counter `i` (per EngineCore process, from 0)."),
            Col("stamp_ns", "BIGINT", NS, "The line's own timestamp (1 s resolution): the step ended within [stamp_ns, stamp_ns + 1 s)."),
            Col("start_ns", "BIGINT", NS, "Placed start: end_ns - elapsed_ms."),
            Col("end_ns", "BIGINT", NS, "Placed end: the midpoint of [end_lo_ns, end_hi_ns]."),
            Col("end_lo_ns", "BIGINT", NS, "Earliest end consistent with the stamps, the order and the elapsed times."),
            Col("end_hi_ns", "BIGINT", NS, "Latest such end; (end_hi_ns - end_lo_ns) / 2 is the placement's uncertainty."),
            Col("elapsed_ms", "DOUBLE", "ms", "`iteration elapsed time`: the engine's wait for the step's model output (time.monotonic, printed with 2 decimals)."),
            Col("host_gap_ms", "DOUBLE", "ms", "Host time assumed between two steps of the sequence for the placement: the 25th percentile, over seconds in which steps ran back to back, of (1 s - their elapsed times) / steps; 0 when no such second exists."),
            Col("ctx_reqs", "INTEGER", "requests", "Context requests (prefill or prefill-chunk) in the step."),
            Col("ctx_tokens", "BIGINT", "tokens", "Their scheduled tokens (with prefix caching: the computed tokens, not the prompt length)."),
            Col("gen_reqs", "INTEGER", "requests", "Generation (decode) requests."),
            Col("gen_tokens", "BIGINT", "tokens", "Their scheduled tokens (1 each; more with speculative decoding)."),
            Col("dummy", "BOOLEAN", "", "` (dummy)`: a data-parallel padding step (all counts 0); kept, and left out of step-time fits."),
        ),
        group=G,
    ),
    Table(
        "log_events",
        "Other log records worth keeping: HTTP access lines, errors and warnings, tracebacks (one row per traceback, however many lines).",
        (
            SRC, LINE,
            Col("line_count", "INTEGER", "lines", "Physical lines the record spans."),
            Col("ts_ns", "BIGINT", NS, "When it was logged (inherited from the previous timed record when the line has none, e.g. uvicorn)."),
            Col("level", "VARCHAR", "", "`INFO`, `WARNING`, `ERROR`, ..."),
            Col("process", "VARCHAR", "", "Process prefix."),
            Col("kind", "VARCHAR", "", "`access`, `traceback`, `error`, `warning`, `startup`, `message`, `bench_summary` (a benchmark console summary found in the log, one row per block)."),
            Col("message", "VARCHAR", "", "Message text (a traceback's last line first, then the whole text, truncated to 4096 characters)."),
            Col("http_method", "VARCHAR", "", "Access lines: method."),
            Col("http_path", "VARCHAR", "", "Access lines: path."),
            Col("http_status", "INTEGER", "", "Access lines: status code."),
            Col("target", "VARCHAR", "", "Logger / tracing target (TGI `text_generation_router::server`)."),
            Col("spans", "VARCHAR", "", "Tracing span chain as printed (TGI `batch{batch_size=1}:prefill:prefill{id=7571 size=1}`)."),
            Col("batch_kind", "VARCHAR", "", "`prefill` or `decode` when the record sits in a TGI batch span."),
            Col("batch_id", "BIGINT", "", "TGI batch id (`prefill{id=N}`)."),
            Col("batch_size", "INTEGER", "requests", "TGI `batch{batch_size=N}`."),
        ),
        group=G,
    ),
]
