"""Server logs of a simulated run, in the envelopes real servers write (see ../shared/notes/vllm-formats.md §1-§4
and ../shared/notes/tgi-sglang-formats.md §1.2-§1.3, §2.1-§2.3):

- vLLM V1 (0.10.1.1 layout): `(APIServer pid=N) INFO MM-DD hh:mm:ss [file:line] msg` with startup configuration
  lines (`non-default args: {...}`, `Chunked prefill is enabled with max_num_batched_tokens=N.`, `Initializing a
  V1 LLM engine (v0.10.1.1) with config: ...`, `GPU KV cache size: N tokens`), `Received request` / `Added request`
  per request, uvicorn access lines and `Engine 000: Avg prompt throughput: ...` stats every 10 s.
- vLLM V0 (0.8.3 layout, used for the `v0` policy): no process prefixes, `Initializing a V0 LLM engine (v0.8.3)`,
  `Received request` / `Added request` / `Finished request`, `[metrics.py:488]` stats every >= 5 s.
- TGI router (v3.0 layout): `Connected` then one `generate_stream{parameters=GenerateParameters { ... }
  total_time="..." ...}: text_generation_router::server: router/src/server.rs:622: Success` per request, with
  Rust Duration Debug formatting (units chosen per value, µ is U+00B5).
- SGLang scheduler (0.5.10 layout, `sglang` policy only): `[YYYY-MM-DD hh:mm:ss TP0] Prefill batch, ...` per prefill
  forward and `Decode batch, ...` every 40 decode forwards.
Lines are built column-wise with polars and sorted by time; no per-line Python formatting loop.
"""
from __future__ import annotations

import numpy as np
import polars as pl

from .logtext import Lines, f1, record, ts_text
from .runner import Run
from .text import BOS, text_of, token_ids

V1_VERSION = "0.10.1.1"
V1_ITERATION_VERSION = "0.12.0"  # --iteration-log: a late-2025 server (EngineCore_DP0 prefix, prompt-less Received)
V0_VERSION = "0.8.3"

SAMPLING = ("SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=1.0, "
            "temperature=0.0, top_p=1.0, top_k=-1, min_p=0.0, seed=None, stop=[], stop_token_ids=[], bad_words=[], "
            "include_stop_str_in_output=False, ignore_eos=True, max_tokens={max_tokens}, min_tokens=0, logprobs=None, "
            "prompt_logprobs=None, skip_special_tokens=True, spaces_between_special_tokens=True, "
            "truncate_prompt_tokens=None, guided_decoding=None, extra_args=None)")


def _prompts(run: Run) -> tuple[list[str], list[str]]:
    ids, req = token_ids(run.spec.seed, run.workload.prompt_len, salt=1)
    pre = run.workload.prefix_len
    if pre is not None and len(ids):
        # Prompts that share the prefix start with the same ids (BOS, then one fixed system prompt).
        starts = np.concatenate([[0], np.cumsum(run.workload.prompt_len)[:-1]])
        pos = np.arange(len(ids)) - starts[req]
        shared = np.random.default_rng([run.spec.seed, 150]).integers(100, 128000, max(int(pre.max()), 1))
        shared[0] = BOS
        m = pos < pre[req]
        ids[m] = shared[pos[m]]
    texts = text_of(ids, req, run.n)
    id_txt = pl.DataFrame({"r": req, "v": ids}).group_by("r", maintain_order=True).agg(
        pl.col("v").cast(pl.String).str.join(", "))["v"].to_list()
    return texts, id_txt


def _request_frame(run: Run) -> pl.DataFrame:
    texts, id_txt = _prompts(run)
    return pl.DataFrame({
        "rid": run.request_ids, "prompt": texts, "ids": id_txt,
        "max_tokens": run.workload.output_len, "arr": run.wall(run.workload.arrival_ns),
        "fin": run.wall(run.finish_ns),
    })


def _stats_series(run: Run, times_rel: np.ndarray, interval_s: np.ndarray):
    """Per log time: prompt and generation throughput over the interval before it, running, waiting, KV %."""
    sim = run.sim
    tok_t = sim.end_ns[run.tok_step]
    ft = run.first_token_ns
    edges = np.concatenate([[times_rel[0] - int(interval_s[0] * 1e9)], times_rel])
    gen = np.diff(np.searchsorted(np.sort(tok_t), edges, side="right"))
    order = np.argsort(ft, kind="stable")
    cum_prompt = np.concatenate([[0], np.cumsum(run.workload.prompt_len[order])])
    prm = np.diff(cum_prompt[np.searchsorted(ft[order], edges, side="right")])
    k = np.searchsorted(sim.start_ns, times_rel, side="right") - 1
    ok = k >= 0
    kk = np.maximum(k, 0)
    running = np.where(ok, sim.n_running[kk], 0)
    # waiting at time t: arrived, not yet admitted (admission happens when its first chunk is scheduled)
    first_chunk = np.full(run.n, np.iinfo(np.int64).max)
    np.minimum.at(first_chunk, run.sim.ch_req, run.sim.start_ns[run.sim.ch_step])
    arr_sorted = np.sort(run.workload.arrival_ns)
    adm_sorted = np.sort(first_chunk)
    waiting = (np.searchsorted(arr_sorted, times_rel, side="right")
               - np.searchsorted(adm_sorted, times_rel, side="right"))
    finished_before = np.searchsorted(np.sort(run.finish_ns), times_rel, side="right")
    admitted = np.searchsorted(adm_sorted, times_rel, side="right")
    running = np.minimum(running, admitted - finished_before)
    kv = np.where(ok, sim.kv_used[kk], 0) / run.sim.config.kv_capacity(run.preset) * 100
    return prm / interval_s, gen / interval_s, np.maximum(running, 0), np.maximum(waiting, 0), kv


def _hit_rates(run: Run, times_rel: np.ndarray, window: int | None) -> np.ndarray:
    """Prefix-cache hit rate (%) at each log time from the engine's admissions scheduled before it: hits over
    prompt tokens queried, over the last `window` admissions (vLLM V1 keeps the last 1000 requests' queries) or
    since start (None, V0's cumulative GPU block hit rate). Zero without prefix caching."""
    sim = run.sim
    if sim.ch_hit is None:
        return np.zeros(len(times_rel))
    adm = sim.ch_ctx == sim.ch_hit            # an admission's chunk starts at its hit; continuations start later
    t = sim.start_ns[sim.ch_step[adm]]
    q = run.workload.prompt_len[sim.ch_req[adm]].astype(np.float64)
    h = sim.ch_hit[adm].astype(np.float64)
    order = np.argsort(t, kind="stable")
    t, q, h = t[order], q[order], h[order]
    cq, ch = np.concatenate([[0.0], np.cumsum(q)]), np.concatenate([[0.0], np.cumsum(h)])
    hi = np.searchsorted(t, times_rel, side="right")
    lo = np.maximum(hi - window, 0) if window else np.zeros_like(hi)
    qs = cq[hi] - cq[lo]
    return np.where(qs > 0, (ch[hi] - ch[lo]) / np.where(qs > 0, qs, 1.0) * 100, 0.0)


def vllm_v1(run: Run) -> bytes:
    spec, pre = run.spec, run.preset
    it = spec.iteration_log
    pa, pe, pw = run.pids["api"], run.pids["engine"], run.pids["worker"]
    A, E, W = f"(APIServer pid={pa}) ", f"(EngineCore_0 pid={pe}) ", f"(VllmWorker TP0 pid={pw}) "
    version = V1_VERSION
    if it:
        E, W, version = f"(EngineCore_DP0 pid={pe}) ", f"(Worker_TP0 pid={pw}) ", V1_ITERATION_VERSION
    L = Lines()
    t0 = run.epoch_start_ns - 150_000_000_000
    model = pre.model
    budget = spec.resolved_budget()
    cap = run.sim.config.kv_capacity(pre)
    blocks = cap // 16
    nd = {"model_tag": model, "model": model, "max_model_len": pre.max_model_len,
          "tensor_parallel_size": pre.tp, "max_num_batched_tokens": budget, "max_num_seqs": spec.max_num_seqs,
          "enable_log_requests": True}
    if it:
        nd["enable_logging_iteration_details"] = True
    apc = run.sim.config.prefix_caching or spec.shared_prefix is None  # V1 default: on
    if not apc:
        nd["enable_prefix_caching"] = False
    nd_txt = "{" + ", ".join(f"'{k}': {v!r}" for k, v in nd.items()) + "}"
    comp = ('{"level":3,"debug_dump_path":"","cache_dir":"","backend":"","custom_ops":[],"splitting_ops":'
            '["vllm.unified_attention","vllm.unified_attention_with_output","vllm.mamba_mixer2"],"use_inductor":true,'
            '"compile_sizes":[],"inductor_compile_config":{"enable_auto_functionalized_v2":false},"inductor_passes":{},'
            '"cudagraph_mode":1,"use_cudagraph":true,"cudagraph_num_of_warmups":1,"cudagraph_capture_sizes":[512,504,'
            '496,488,480,472,464,456,448,440,432,424,416,408,400,392,384,376,368,360,352,344,336,328,320,312,304,296,'
            '288,280,272,264,256,248,240,232,224,216,208,200,192,184,176,168,160,152,144,136,128,120,112,104,96,88,80,'
            '72,64,56,48,40,32,24,16,8,4,2,1],"cudagraph_copy_inputs":false,"full_cuda_graph":false,"pass_config":{},'
            '"max_capture_size":512,"local_cache_dir":null}')
    init = (f"Initializing a V1 LLM engine (v{version}) with config: model='{model}', speculative_config=None, "
            f"tokenizer='{model}', skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, "
            f"override_neuron_config={{}}, tokenizer_revision=None, trust_remote_code=False, dtype=torch.bfloat16, "
            f"max_seq_len={pre.max_model_len}, download_dir=None, load_format=auto, tensor_parallel_size={pre.tp}, "
            f"pipeline_parallel_size=1, disable_custom_all_reduce=False, quantization=None, enforce_eager=False, "
            f"kv_cache_dtype=auto, device_config=cuda, decoding_config=DecodingConfig(backend='auto', "
            f"disable_fallback=False, disable_any_whitespace=False, disable_additional_properties=False, "
            f"reasoning_backend=''), observability_config=ObservabilityConfig(show_hidden_metrics_for_version=None, "
            f"otlp_traces_endpoint=None, collect_detailed_traces=None"
            f"{', enable_logging_iteration_details=True' if it else ''}), seed=0, served_model_name={model}, "
            f"enable_prefix_caching={apc}, chunked_prefill_enabled=True, use_async_output_proc=True, "
            f"pooler_config=None, compilation_config={comp}")
    kv_gib = cap * pre.kv_bytes_per_token() / pre.tp / 2 ** 30
    startup = [
        (0.0, "", "INFO", "__init__.py:241", "Automatically detected platform cuda."),
        (6.1, A, "INFO", "api_server.py:1805", f"vLLM API server version {version}"),
        (6.1, A, "INFO", "utils.py:326", f"non-default args: {nd_txt}"),
        (14.2, A, "INFO", "__init__.py:711", f"Resolved architecture: {pre.architecture}"),
        (14.2, A, "INFO", "__init__.py:1750", f"Using max model len {pre.max_model_len}"),
        (14.3, A, "INFO", "scheduler.py:222", f"Chunked prefill is enabled with max_num_batched_tokens={budget}."),
        (24.0, "", "INFO", "__init__.py:241", "Automatically detected platform cuda."),
        (28.4, E, "INFO", "core.py:636", "Waiting for init message from front-end."),
        (28.4, E, "INFO", "core.py:74", init),
        (36.9, W, "INFO", "parallel_state.py:1134",
         f"rank 0 in world size {pre.tp} is assigned as DP rank 0, PP rank 0, TP rank 0, EP rank 0"),
        (37.0, W, "INFO", "gpu_model_runner.py:1953", f"Starting to load model {model}..."),
        (37.1, W, "INFO", "cuda.py:328", "Using Flash Attention backend on V1 engine."),
        (37.2, W, "INFO", "gpu_worker.py:91", "Torch profiling enabled. Traces will be saved to: /tmp/vllm_profile"),
        (88.6, W, "INFO", "gpu_worker.py:276", f"Available KV cache memory: {kv_gib:.2f} GiB"),
        (88.9, E, "INFO", "kv_cache_utils.py:849", f"GPU KV cache size: {cap:,} tokens"),
        (88.9, E, "INFO", "kv_cache_utils.py:853",
         f"Maximum concurrency for {pre.max_model_len:,} tokens per request: {cap / pre.max_model_len:.2f}x"),
        (96.4, E, "INFO", "core.py:214", "init engine (profile, create kv cache, warmup model) took 68.01 seconds"),
        (97.2, A, "INFO", "loggers.py:142",
         f"Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is: {blocks}"),
        (97.3, A, "INFO", "api_server.py:1880", "Starting vLLM API server 0 on http://0.0.0.0:8000"),
        (97.3, A, "INFO", "launcher.py:36", "Available routes are:"),
    ]
    for k, (dt, pref, lvl, fl, msg) in enumerate(startup):
        L.add(t0 + int(dt * 1e9) + k, record(pref, lvl, fl, np.array([t0 + int(dt * 1e9)]), msg))
    for k, (route, meth) in enumerate((("/health", "GET"), ("/v1/models", "GET"), ("/v1/chat/completions", "POST"),
                                       ("/v1/completions", "POST"), ("/start_profile", "POST"),
                                       ("/stop_profile", "POST"), ("/metrics", "GET"))):
        t = t0 + int(97.3e9) + 10 + k
        L.add(t, record(A, "INFO", "launcher.py:44", np.array([t]), f"Route: {route}, Methods: {meth}"))
    t = t0 + int(97.4e9)
    for k, msg in enumerate((f"Started server process [{pa}]", "Waiting for application startup.",
                             "Application startup complete.")):
        L.add(t + k, f"{A}INFO:     {msg}")
    # The benchmark client: /start_profile before the run, /stop_profile after it.
    ports = np.random.default_rng([run.spec.seed, 4]).integers(33000, 60000, run.n + 2)
    L.add(run.epoch_start_ns - 2_000_000_000,
          f'{A}INFO:     127.0.0.1:{ports[-2]} - "POST /start_profile HTTP/1.1" 200 OK')
    _requests_v1(run, L, A, ports)
    _stats_v1(run, L, A)
    if it:
        _iterations_v1(run, L, E)
    L.add(run.epoch_start_ns + run.bench_end_ns + 1_500_000_000,
          f'{A}INFO:     127.0.0.1:{ports[-1]} - "POST /stop_profile HTTP/1.1" 200 OK')
    return L.text()


def _requests_v1(run: Run, L: Lines, A: str, ports) -> None:
    rf = _request_frame(run).with_columns(port=pl.Series(ports[:run.n]))
    if run.spec.iteration_log:
        # Since ~0.10/0.11 the INFO line has no prompt (it moved to a DEBUG `Request … details` line).
        recv = rf.select(pl.concat_str([
            pl.lit(f"{A}INFO "), ts_text(pl.col("arr"), "%m-%d %H:%M:%S"), pl.lit(" [logger.py:49] Received request "),
            pl.col("rid"), pl.lit(": params: "), pl.lit(SAMPLING.split("{max_tokens}")[0]),
            pl.col("max_tokens").cast(pl.String), pl.lit(SAMPLING.split("{max_tokens}")[1]),
            pl.lit(", lora_request: None.")]).alias("s"))["s"]
    else:
        recv = _received_with_prompt(rf, A)
    L.add(rf["arr"].to_numpy(), recv)
    added = rf.select(pl.concat_str([
        pl.lit(f"{A}INFO "), ts_text(pl.col("arr") + 1_000_000, "%m-%d %H:%M:%S"),
        pl.lit(" [async_llm.py:290] Added request "), pl.col("rid"), pl.lit(".")]).alias("s"))["s"]
    L.add(rf["arr"].to_numpy() + 1_000_000, added)
    acc = rf.select(pl.concat_str([pl.lit(f'{A}INFO:     127.0.0.1:'), pl.col("port").cast(pl.String),
                                   pl.lit(' - "POST /v1/completions HTTP/1.1" 200 OK')]).alias("s"))["s"]
    L.add(rf["arr"].to_numpy() + 1_500_000, acc)


def _iterations_v1(run: Run, L: Lines, E: str) -> None:
    """One `Iteration(i): …` line per engine step (vllm/v1/engine/core.py `log_iteration_details`), written when
    the step's wait ends (its end, stamped to the second): the step's true composition (context = prefill chunks,
    generation = decodes, one token each) and its model time as the elapsed time, `.2f` ms."""
    sim = run.sim
    t = run.wall(sim.end_ns)
    L.add(t, iteration_lines(t, sim.prefill_reqs, sim.prefill_tokens, sim.n_decode, (sim.end_ns - sim.start_ns) / 1e6,
                             E))


def iteration_lines(t_end_ns, ctx_reqs, ctx_tokens, gen_reqs, elapsed_ms, E: str) -> pl.Series:
    """The `Iteration(i): …` lines of steps ending at wall instants `t_end_ns` (one counter from 0), prefix `E`;
    shared by the simulator and `stallscope capture` (stallscope/capture/writers.py)."""
    df = pl.DataFrame({"t": np.asarray(t_end_ns, dtype=np.int64), "i": np.arange(len(t_end_ns), dtype=np.int64),
                       "cr": np.asarray(ctx_reqs, dtype=np.int64), "ct": np.asarray(ctx_tokens, dtype=np.int64),
                       "gr": np.asarray(gen_reqs, dtype=np.int64), "el": np.asarray(elapsed_ms, dtype=float)})
    return df.select(pl.concat_str([
        pl.lit(f"{E}INFO "), ts_text(pl.col("t"), "%m-%d %H:%M:%S"), pl.lit(" [core.py:457] Iteration("),
        pl.col("i").cast(pl.String), pl.lit("): "), pl.col("cr").cast(pl.String), pl.lit(" context requests, "),
        pl.col("ct").cast(pl.String), pl.lit(" context tokens, "), pl.col("gr").cast(pl.String),
        pl.lit(" generation requests, "), pl.col("gr").cast(pl.String),
        pl.lit(" generation tokens, iteration elapsed time: "), _f2ms("el"), pl.lit(" ms")]).alias("s"))["s"]


def _f2ms(col: str) -> pl.Expr:
    """`%.2f` of a non-negative float column."""
    c = (pl.col(col) * 100).round(0).cast(pl.Int64)
    return pl.concat_str([(c // 100).cast(pl.String), pl.lit("."), (c % 100).cast(pl.String).str.zfill(2)])


def _received_with_prompt(rf: pl.DataFrame, A: str) -> pl.Series:
    return rf.select(pl.concat_str([
        pl.lit(f"{A}INFO "), ts_text(pl.col("arr"), "%m-%d %H:%M:%S"), pl.lit(" [logger.py:43] Received request "),
        pl.col("rid"), pl.lit(": prompt: '"), pl.col("prompt"), pl.lit("', params: "),
        pl.lit(SAMPLING.split("{max_tokens}")[0]), pl.col("max_tokens").cast(pl.String),
        pl.lit(SAMPLING.split("{max_tokens}")[1]), pl.lit(", prompt_token_ids: ["), pl.col("ids"),
        pl.lit("], prompt_embeds shape: None, lora_request: None.")]).alias("s"))["s"]


def _stats_v1(run: Run, L: Lines, A: str) -> None:
    end_rel = run.bench_end_ns + 10_000_000_000
    phase = int(np.random.default_rng([run.spec.seed, 5]).integers(1_000_000_000, 9_000_000_000))
    times = np.arange(phase, end_rel, 10_000_000_000, dtype=np.int64)
    if len(times) == 0:
        return
    prm, gen, running, waiting, kv = _stats_series(run, times, np.full(len(times), 10.0))
    hit = _hit_rates(run, times, 1000)
    keep = (prm > 0) | (gen > 0) | (running > 0) | (waiting > 0)  # idle intervals are logged at DEBUG
    df = pl.DataFrame({"t": run.wall(times[keep]), "p": prm[keep], "g": gen[keep], "r": running[keep],
                       "w": waiting[keep], "kv": kv[keep], "h": hit[keep]})
    s = df.select(pl.concat_str([
        pl.lit(f"{A}INFO "), ts_text(pl.col("t"), "%m-%d %H:%M:%S"),
        pl.lit(" [loggers.py:123] Engine 000: Avg prompt throughput: "), f1("p"),
        pl.lit(" tokens/s, Avg generation throughput: "), f1("g"), pl.lit(" tokens/s, Running: "),
        pl.col("r").cast(pl.String), pl.lit(" reqs, Waiting: "), pl.col("w").cast(pl.String),
        pl.lit(" reqs, GPU KV cache usage: "), f1("kv"), pl.lit("%, Prefix cache hit rate: "), f1("h"),
        pl.lit("%")]).alias("s"))["s"]
    L.add(df["t"].to_numpy(), s)


def vllm_v0(run: Run) -> bytes:
    spec, pre = run.spec, run.preset
    L = Lines()
    t0 = run.epoch_start_ns - 200_000_000_000
    model = pre.model
    budget = spec.resolved_budget()
    cap = run.sim.config.kv_capacity(pre)
    apc = "True" if run.sim.config.prefix_caching else "None"
    args = (f"args: Namespace(host=None, port=8000, uvicorn_log_level='info', disable_uvicorn_access_log=False, "
            f"allow_credentials=False, allowed_origins=['*'], allowed_methods=['*'], allowed_headers=['*'], "
            f"api_key=None, lora_modules=None, prompt_adapters=None, chat_template=None, response_role='assistant', "
            f"model='{model}', task='auto', tokenizer=None, skip_tokenizer_init=False, revision=None, "
            f"code_revision=None, tokenizer_revision=None, tokenizer_mode='auto', trust_remote_code=False, "
            f"load_format='auto', dtype='auto', kv_cache_dtype='auto', max_model_len={pre.max_model_len}, "
            f"distributed_executor_backend=None, pipeline_parallel_size=1, tensor_parallel_size={pre.tp}, "
            f"block_size=None, enable_prefix_caching={apc}, disable_sliding_window=False, use_v2_block_manager=True, "
            f"seed=None, swap_space=4, cpu_offload_gb=0, gpu_memory_utilization=0.9, num_gpu_blocks_override=None, "
            f"max_num_batched_tokens={budget}, max_num_partial_prefills=1, max_long_partial_prefills=1, "
            f"long_prefill_token_threshold=0, max_num_seqs={spec.max_num_seqs}, max_logprobs=20, "
            f"disable_log_stats=False, quantization=None, enforce_eager=False, enable_chunked_prefill=False, "
            f"disable_log_requests=False, max_log_len=None, disable_fastapi_docs=False, enable_prompt_tokens_details=False)")
    init = (f"Initializing a V0 LLM engine (v{V0_VERSION}) with config: model='{model}', speculative_config=None, "
            f"tokenizer='{model}', skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, "
            f"override_neuron_config=None, tokenizer_revision=None, trust_remote_code=False, dtype=torch.bfloat16, "
            f"max_seq_len={pre.max_model_len}, download_dir=None, load_format=LoadFormat.AUTO, "
            f"tensor_parallel_size={pre.tp}, pipeline_parallel_size=1, disable_custom_all_reduce=False, "
            f"quantization=None, enforce_eager=False, kv_cache_dtype=auto,  device_config=cuda, "
            f"decoding_config=DecodingConfig(guided_decoding_backend='xgrammar', reasoning_backend=None), "
            f"observability_config=ObservabilityConfig(show_hidden_metrics=False, otlp_traces_endpoint=None, "
            f"collect_model_forward_time=False, collect_model_execute_time=False), seed=0, "
            f"served_model_name={model}, num_scheduler_steps=1, multi_step_stream_outputs=True, "
            f"enable_prefix_caching={apc}, chunked_prefill_enabled=False, use_async_output_proc=True, "
            f"disable_mm_preprocessor_cache=False, mm_processor_kwargs=None, pooler_config=None, "
            f'compilation_config={{"splitting_ops":[],"compile_sizes":[],"cudagraph_capture_sizes":[256,248,240,232,'
            f'224,216,208,200,192,184,176,168,160,152,144,136,128,120,112,104,96,88,80,72,64,56,48,40,32,24,16,8,4,2,1],'
            f'"max_capture_size":256}}, use_cached_outputs=True, ')
    startup = [
        (0.0, "__init__.py:239", "Automatically detected platform cuda."),
        (2.0, "api_server.py:1034", f"vLLM API server version {V0_VERSION}"),
        (2.0, "api_server.py:1035", args),
        (11.0, "config.py:600", "This model supports multiple tasks: {'generate', 'score', 'embed', 'classify', "
                                "'reward'}. Defaulting to 'generate'."),
        (11.1, "llm_engine.py:242", init),
        (13.0, "cuda.py:292", "Using Flash Attention backend."),
        (14.0, "worker.py:267", "Memory profiling takes 2.60 seconds"),
        (14.1, "executor_base.py:112", f"# cuda blocks: {cap // 16}, # CPU blocks: 6553"),
        (14.1, "executor_base.py:117",
         f"Maximum concurrency for {pre.max_model_len} tokens per request: {cap / pre.max_model_len:.2f}x"),
    ]
    for k, (dt, fl, msg) in enumerate(startup):
        t = t0 + int(dt * 1e9)
        L.add(t + k, record("", "INFO", fl, np.array([t]), msg))
    t = t0 + int(40e9)
    for k, msg in enumerate(("Started server process [%d]" % run.pids["api"], "Waiting for application startup.",
                             "Application startup complete.")):
        L.add(t + k, f"INFO:     {msg}")
    ports = np.random.default_rng([run.spec.seed, 4]).integers(33000, 60000, run.n)
    rf = _request_frame(run).with_columns(port=pl.Series(ports))
    recv = rf.select(pl.concat_str([
        pl.lit("INFO "), ts_text(pl.col("arr"), "%m-%d %H:%M:%S"), pl.lit(" [logger.py:39] Received request "),
        pl.col("rid"), pl.lit(": prompt: '"), pl.col("prompt"), pl.lit("', params: "),
        pl.lit(SAMPLING.split("{max_tokens}")[0]), pl.col("max_tokens").cast(pl.String),
        pl.lit(SAMPLING.split("{max_tokens}")[1]), pl.lit(", prompt_token_ids: ["), pl.col("ids"),
        pl.lit("], lora_request: None, prompt_adapter_request: None.")]).alias("s"))["s"]
    L.add(rf["arr"].to_numpy(), recv)
    L.add(rf["arr"].to_numpy() + 1_000_000, rf.select(pl.concat_str([
        pl.lit("INFO "), ts_text(pl.col("arr") + 1_000_000, "%m-%d %H:%M:%S"),
        pl.lit(" [async_llm_engine.py:211] Added request "), pl.col("rid"), pl.lit(".")]).alias("s"))["s"])
    L.add(rf["fin"].to_numpy() + 300_000, rf.select(pl.concat_str([
        pl.lit("INFO "), ts_text(pl.col("fin") + 300_000, "%m-%d %H:%M:%S"),
        pl.lit(" [async_llm_engine.py:179] Finished request "), pl.col("rid"), pl.lit(".")]).alias("s"))["s"])
    # Streaming: the access line is written when the response starts, right after the request is added.
    L.add(rf["arr"].to_numpy() + 1_500_000, rf.select(pl.concat_str([
        pl.lit("INFO:     127.0.0.1:"), pl.col("port").cast(pl.String),
        pl.lit(' - "POST /v1/completions HTTP/1.1" 200 OK')]).alias("s"))["s"])
    # V0 logs stats from inside an engine step once >= 5 s have passed since the last line.
    ends = run.sim.end_ns
    times = []
    last = int(ends[0]) if len(ends) else 0
    while True:
        i = int(np.searchsorted(ends, last + 5_000_000_000, side="left"))
        if i >= len(ends):
            break
        times.append(int(ends[i]))
        last = int(ends[i])
    if times:
        tr = np.asarray(times, dtype=np.int64)
        iv = np.diff(np.concatenate([[tr[0] - 5_000_000_000], tr])) / 1e9
        prm, gen, running, waiting, kv = _stats_series(run, tr, iv)
        df = pl.DataFrame({"t": run.wall(tr), "p": prm, "g": gen, "r": running, "w": waiting, "kv": kv})
        s = df.select(pl.concat_str([
            pl.lit("INFO "), ts_text(pl.col("t"), "%m-%d %H:%M:%S"), pl.lit(" [metrics.py:488] Avg prompt throughput: "),
            f1("p"), pl.lit(" tokens/s, Avg generation throughput: "), f1("g"), pl.lit(" tokens/s, Running: "),
            pl.col("r").cast(pl.String), pl.lit(" reqs, Swapped: 0 reqs, Pending: "), pl.col("w").cast(pl.String),
            pl.lit(" reqs, GPU KV cache usage: "), f1("kv"), pl.lit("%, CPU KV cache usage: 0.0%.")]).alias("s"))["s"]
        L.add(df["t"].to_numpy(), s)
        if run.sim.config.prefix_caching:
            # With --enable-prefix-caching V0 follows each stats line with its cumulative block hit rates.
            df = df.with_columns(h=pl.Series(_hit_rates(run, tr, None)))
            L.add(df["t"].to_numpy(), df.select(pl.concat_str([
                pl.lit("INFO "), ts_text(pl.col("t"), "%m-%d %H:%M:%S"),
                pl.lit(" [metrics.py:504] Prefix cache hit rate: GPU: "), _f2("h"),
                pl.lit("%, CPU: 0.00%")]).alias("s"))["s"])
    return L.text()


def _rust_duration(ns: pl.Expr) -> pl.Expr:
    """Rust `{:?}` of a Duration: unit by magnitude, fractional digits with trailing zeros trimmed."""
    def part(scale: int, digits: int, unit: str) -> pl.Expr:
        whole = (ns // scale).cast(pl.String)
        frac = (ns % scale).cast(pl.String).str.zfill(digits).str.strip_chars_end("0")
        return pl.when(frac == "").then(pl.concat_str([whole, pl.lit(unit)])).otherwise(
            pl.concat_str([whole, pl.lit("."), frac, pl.lit(unit)]))
    return (pl.when(ns >= 1_000_000_000).then(part(1_000_000_000, 9, "s"))
            .when(ns >= 1_000_000).then(part(1_000_000, 6, "ms"))
            .when(ns >= 1_000).then(part(1_000, 3, "\u00b5s"))
            .otherwise(pl.concat_str([ns.cast(pl.String), pl.lit("ns")])))


def tgi(run: Run) -> bytes:
    """TGI v3.0 router log: Connected, then one streaming Success record per request at its completion."""
    L = Lines()
    rng = np.random.default_rng([run.spec.seed, 6])
    t_conn = run.epoch_start_ns - 30_000_000_000 + int(rng.integers(0, 1_000_000))
    L.add(t_conn, pl.Series([_tgi_ts_py(t_conn) + "  INFO text_generation_router::server: router/src/server.rs:2402: "
                                                  "Connected"]))
    wl = run.workload
    val = (250_000 + 80 * wl.prompt_len + rng.integers(0, 150_000, run.n)).astype(np.int64)
    first_chunk = np.full(run.n, np.iinfo(np.int64).max)
    np.minimum.at(first_chunk, run.sim.ch_req, run.sim.start_ns[run.sim.ch_step])
    recv = wl.arrival_ns - val                       # router receives, validates, then queues
    queue = first_chunk - wl.arrival_ns
    infer = run.finish_ns - first_chunk
    fin = run.finish_ns + rng.integers(20_000, 120_000, run.n)
    total = fin - recv
    tpt = infer // wl.output_len
    df = pl.DataFrame({"t": run.wall(fin), "tot": total, "val": val, "q": queue, "inf": infer, "tpt": tpt,
                       "mx": wl.output_len})
    params = ("GenerateParameters { best_of: None, temperature: None, repetition_penalty: None, "
              "frequency_penalty: None, top_k: None, top_p: None, typical_p: None, do_sample: false, "
              "max_new_tokens: Some(")
    params2 = ("), return_full_text: None, stop: [], truncate: None, watermark: false, details: false, "
               "decoder_input_details: false, seed: None, top_n_tokens: None, grammar: None, adapter_id: None }")
    s = df.select(pl.concat_str([
        ts_text(pl.col("t"), "%Y-%m-%dT%H:%M:%S%.6fZ"), pl.lit("  INFO generate_stream{parameters="), pl.lit(params),
        pl.col("mx").cast(pl.String), pl.lit(params2),
        pl.lit(' total_time="'), _rust_duration(pl.col("tot")), pl.lit('" validation_time="'),
        _rust_duration(pl.col("val")), pl.lit('" queue_time="'), _rust_duration(pl.col("q")),
        pl.lit('" inference_time="'), _rust_duration(pl.col("inf")), pl.lit('" time_per_token="'),
        _rust_duration(pl.col("tpt")),
        pl.lit('" seed="None"}: text_generation_router::server: router/src/server.rs:622: Success')]).alias("s"))["s"]
    L.add(df["t"].to_numpy(), s)
    return L.text()


def _tgi_ts_py(t_ns: int) -> str:
    return pl.select(ts_text(pl.lit(t_ns, dtype=pl.Int64), "%Y-%m-%dT%H:%M:%S%.6fZ")).item()


def sglang(run: Run) -> bytes:
    """SGLang 0.5.10 scheduler log: a Prefill batch line per prefill forward, a Decode batch line every 40."""
    sim, pre = run.sim, run.preset
    cap = sim.config.kv_capacity(pre)
    tag = " TP0" if pre.tp > 1 else ""
    L = Lines()
    t_init = run.epoch_start_ns - 60_000_000_000
    L.add(t_init, pl.Series([_sgl_head(t_init, tag) +
                             f"max_total_num_tokens={cap}, chunked_prefill_size={run.spec.resolved_budget()}, "
                             f"max_prefill_tokens=16384, max_running_requests={run.spec.max_num_seqs}, "
                             f"context_len={pre.max_model_len}, available_gpu_mem=7.12 GB"]))
    t_ready = run.epoch_start_ns - 20_000_000_000
    L.add(t_ready, pl.Series([_sgl_head(t_ready, "") + "The server is fired up and ready to roll!"]))
    # Prefill lines: one per step with prefill work, at its scheduling time (the step start).
    pf = np.nonzero(sim.prefill_tokens > 0)[0]
    ch = pl.DataFrame({"step": sim.ch_step, "ctx": sim.ch_ctx}).group_by("step").agg(
        pl.col("ctx").sum().alias("cached"), pl.len().alias("nseq")).sort("step")
    idx = np.searchsorted(ch["step"].to_numpy(), pf)
    cached = ch["cached"].to_numpy()[idx] if len(pf) else np.zeros(0, np.int64)
    nseq = ch["nseq"].to_numpy()[idx] if len(pf) else np.zeros(0, np.int64)
    t_pf = sim.start_ns[pf]
    prev_tok = np.concatenate([[0], sim.prefill_tokens[pf][:-1]])
    prev_t = np.concatenate([[t_pf[0] if len(pf) else 0], t_pf[:-1]])
    dt = np.maximum((t_pf - prev_t) / 1e9, 1e-9)
    thr = np.where(np.arange(len(pf)) > 0, prev_tok / dt, 0.0)
    usage = sim.kv_used[pf] / cap
    df = pl.DataFrame({"t": run.wall(t_pf), "n": nseq, "new": sim.prefill_tokens[pf], "cached": cached,
                       "u": usage, "run": sim.decoders[pf], "q": sim.n_waiting[pf] - nseq.clip(0, None), "thr": thr})
    s = df.select(pl.concat_str([
        pl.lit("["), ts_text(pl.col("t"), "%Y-%m-%d %H:%M:%S"), pl.lit(f"{tag}] Prefill batch, #new-seq: "),
        pl.col("n").cast(pl.String), pl.lit(", #new-token: "), pl.col("new").cast(pl.String),
        pl.lit(", #cached-token: "), pl.col("cached").cast(pl.String), pl.lit(", token usage: "), _f2("u"),
        pl.lit(", #running-req: "), pl.col("run").cast(pl.String), pl.lit(", #queue-req: "),
        pl.col("q").clip(0).cast(pl.String), pl.lit(", cuda graph: False, input throughput (token/s): "),
        _f2("thr")]).alias("s"))["s"]
    L.add(df["t"].to_numpy(), s)
    # Decode lines: after every 40th decode forward.
    dec = np.nonzero(sim.n_decode > 0)[0]
    if len(dec) >= 40:
        pick = dec[39::40]
        prev = np.concatenate([[dec[0]], pick[:-1]])
        cum = np.concatenate([[0], np.cumsum(sim.n_decode)])
        gen_tok = cum[pick + 1] - cum[np.where(np.arange(len(pick)) > 0, prev + 1, dec[0])]
        dt = np.maximum((sim.end_ns[pick] - np.where(np.arange(len(pick)) > 0, sim.end_ns[prev],
                                                       sim.start_ns[dec[0]])) / 1e9, 1e-9)
        df = pl.DataFrame({"t": run.wall(sim.end_ns[pick]), "run": sim.n_decode[pick], "tok": sim.kv_used[pick],
                           "u": sim.kv_used[pick] / cap, "g": gen_tok / dt, "q": sim.n_waiting[pick]})
        s = df.select(pl.concat_str([
            pl.lit("["), ts_text(pl.col("t"), "%Y-%m-%d %H:%M:%S"), pl.lit(f"{tag}] Decode batch, #running-req: "),
            pl.col("run").cast(pl.String), pl.lit(", #token: "), pl.col("tok").cast(pl.String),
            pl.lit(", token usage: "), _f2("u"), pl.lit(", cuda graph: True, gen throughput (token/s): "), _f2("g"),
            pl.lit(", #queue-req: "), pl.col("q").cast(pl.String)]).alias("s"))["s"]
        L.add(df["t"].to_numpy(), s)
    return L.text()


def _sgl_head(t_ns: int, tag: str) -> str:
    return "[" + pl.select(ts_text(pl.lit(t_ns, dtype=pl.Int64), "%Y-%m-%d %H:%M:%S")).item() + f"{tag}] "


def _f2(col: str) -> pl.Expr:
    """`%.2f` of a non-negative float column."""
    c = (pl.col(col) * 100).round(0).cast(pl.Int64)
    return pl.concat_str([(c // 100).cast(pl.String), pl.lit("."), (c % 100).cast(pl.String).str.zfill(2)])
