"""The client-side and server-side files of a capture, in the formats vLLM and its benchmark write.

- `bench_serve.json`: `vllm bench serve --save-result --save-detailed` (key names and order of
  `vllm/benchmarks/serve.py`; arrays per request in send order; `start_times` are the client's
  `time.perf_counter()` send instants, `ttfts`/`itls`/`latencies` seconds, `date` the end of the run; the
  `*_ms` statistics computed as vLLM's `calculate_metrics` does). Requests cut off by the drain limit are
  failed requests there (ttft 0, itls [], output_len 0, an error text), as vLLM records them.
- `vllm_server.log`: vLLM V1 (0.10.1.1 envelope, `(APIServer pid=N) INFO MM-DD hh:mm:ss [file:line] msg`) with
  the startup configuration lines, `Received request` (with the prompt and its token ids), `Added request`
  and `Finished request` per request (received when sent: vLLM's API server is its own process and takes
  requests in while the engine core is busy with a step; the wait for the engine shows in the TTFT), and the
  `Engine 000: Avg prompt throughput ...` stats line the engine computed every 10 s, and one
  `Iteration(i): …` line per engine step with its measured wall time (vLLM >= 0.11
  `--enable-logging-iteration-details`, the simulator's writer: stallscope/simulate/emit_logs.py). V1 since 0.8 prints no
  `Finished request` line (the first V1 AsyncLLM and V0 did); it is kept because it gives the server-side
  finish instant to whoever reads the log.
Both files are written on the capture's wall clock (UTC), the profiler's clock.
"""
from __future__ import annotations

import os
from datetime import datetime, timezone

import numpy as np
import polars as pl

from stallscope.simulate.emit_bench import latency_summary
from stallscope.simulate.emit_logs import SAMPLING, V1_VERSION, iteration_lines
from stallscope.simulate.logtext import Lines, f1, record, ts_text
from stallscope.simulate.text import text_of

from .engine import EngineResult


def bench_json(res: EngineResult, *, model_id: str, rate: float, burstiness: float, epoch_of_perf_ns: int,
               perf_origin_s: float) -> dict:
    """The result document; `perf_origin_s` is the client's perf_counter value at the run start."""
    reqs = res.requests
    n = len(reqs)
    ok = np.array([r.finish_ns > 0 for r in reqs], dtype=bool)
    send = np.array([r.send_ns for r in reqs], dtype=np.int64)
    first = np.array([r.token_ns[0] if r.token_ns else 0 for r in reqs], dtype=np.int64)
    fin = np.array([r.finish_ns for r in reqs], dtype=np.int64)
    out = np.array([len(r.output) for r in reqs], dtype=np.int64)
    out = np.where(ok, out, 0)
    ttft = np.where(ok, (first - send) / 1e9, 0.0)
    lat = np.where(ok, (fin - send) / 1e9, 0.0)
    itl_lists = [(np.diff(np.asarray(r.token_ns, dtype=np.int64)) / 1e9).tolist() if ok[i] else []
                 for i, r in enumerate(reqs)]
    itl_all = np.concatenate([np.asarray(x) for x in itl_lists]) if n else np.zeros(0)
    tpots = np.where(out > 1, (lat - ttft) / np.maximum(out - 1, 1), 0.0)
    t0 = int(send.min()) if n else res.start_ns
    end = int(fin[ok].max()) if ok.any() else res.end_ns
    duration = (end - res.start_ns) / 1e9
    # peak output tokens in a 1-s bucket and the concurrent requests (vLLM's max_output_tokens_per_s)
    tok = np.concatenate([np.asarray(r.token_ns, dtype=np.int64) for r in reqs if r.finish_ns]) \
        if ok.any() else np.zeros(0, np.int64)
    span = int(np.ceil((end - t0) / 1e9)) + 1
    per_s = np.bincount(((tok - t0) // 1_000_000_000).astype(np.int64), minlength=span)[:span] if len(tok) \
        else np.zeros(1)
    s0 = (send - t0) // 1_000_000_000
    s1 = (np.where(ok, fin, send) - t0) // 1_000_000_000
    diff = np.zeros(span + 2, dtype=np.int64)
    np.add.at(diff, s0, 1)
    np.add.at(diff, s1 + 1, -1)
    conc = np.cumsum(diff)[:span]
    date = datetime.fromtimestamp((epoch_of_perf_ns + end) / 1e9, tz=timezone.utc)
    prompt_len = np.array([len(r.prompt) for r in reqs], dtype=np.int64)
    tot_in, tot_out = int(prompt_len.sum()), int(out.sum())
    completed = int(ok.sum())
    out_ids = np.concatenate([np.asarray(r.output, dtype=np.int64) for r in reqs]) if n else np.zeros(0, np.int64)
    out_req = np.repeat(np.arange(n), [len(r.output) for r in reqs])
    texts = text_of(out_ids, out_req, n)
    doc: dict = {
        "date": date.strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": "vllm", "backend": "vllm", "label": None,
        "model_id": model_id, "tokenizer_id": model_id, "num_prompts": n,
        "request_rate": rate, "burstiness": burstiness, "max_concurrency": None,
        "duration": duration, "completed": completed, "failed": n - completed,
        "total_input_tokens": tot_in, "total_output_tokens": tot_out,
        "request_throughput": completed / duration, "request_goodput": None,
        "output_throughput": tot_out / duration, "total_token_throughput": (tot_in + tot_out) / duration,
        "input_lens": prompt_len.tolist(), "output_lens": out.tolist(),
        "ttfts": ttft.tolist(), "itls": itl_lists, "latencies": lat.tolist(),
        "start_times": (perf_origin_s + (send - res.start_ns) / 1e9).tolist(),
        "generated_texts": [t if ok[i] else "" for i, t in enumerate(texts)],
        "errors": ["" if ok[i] else "stallscope capture: not finished when the drain limit passed"
                   for i in range(n)],
        "max_output_tokens_per_s": float(per_s.max()) if len(per_s) else 0.0,
        "max_concurrent_requests": int(conc.max()) if len(conc) else 0,
    }
    doc.update(latency_summary({"ttft": ttft[ok], "tpot": tpots[ok & (out > 1)], "itl": itl_all}))
    return doc


def server_log(res: EngineResult, *, model_id: str, policy: str, budget: int, max_num_seqs: int,
               max_model_len: int, device: str, epoch_of_perf_ns: int, request_ids: list[str],
               kv_cache_gib: float, startup_ns: int) -> bytes:
    """The vLLM V1 server log of the run; `startup_ns` (perf) is when the engine process was started."""
    api_pid = os.getpid()
    A = f"(APIServer pid={api_pid}) "
    E = f"(EngineCore_0 pid={api_pid}) "   # one process serves here: the same pid behind both prefixes
    L = Lines()
    wall = lambda t: int(epoch_of_perf_ns + t)  # noqa: E731
    t0 = wall(startup_ns)
    chunked = policy == "chunked"
    tokens_cap = max_num_seqs * max_model_len
    nd = {"model_tag": model_id, "model": model_id, "max_model_len": max_model_len,
          "max_num_batched_tokens": budget, "max_num_seqs": max_num_seqs, "enable_chunked_prefill": chunked,
          "enforce_eager": True, "enable_log_requests": True, "device": device,
          "enable_logging_iteration_details": True}
    nd_txt = "{" + ", ".join(f"'{k}': {v!r}" for k, v in nd.items()) + "}"
    init = (f"Initializing a V1 LLM engine (v{V1_VERSION}) with config: model='{model_id}', speculative_config=None, "
            f"tokenizer='{model_id}', skip_tokenizer_init=True, tokenizer_mode=auto, revision=None, "
            f"tokenizer_revision=None, trust_remote_code=False, dtype=torch.float32, max_seq_len={max_model_len}, "
            f"download_dir=None, load_format=dummy, tensor_parallel_size=1, pipeline_parallel_size=1, "
            f"quantization=None, enforce_eager=True, kv_cache_dtype=auto, device_config={device}, seed=0, "
            f"served_model_name={model_id}, enable_prefix_caching=False, chunked_prefill_enabled={chunked}, "
            f"pooler_config=None, compilation_config={{\"level\":0,\"cudagraph_mode\":0,\"use_cudagraph\":false}}")
    startup = [
        (A, "api_server.py:1805", f"vLLM API server version {V1_VERSION}"),
        (A, "utils.py:326", f"non-default args: {nd_txt}"),
        (A, "__init__.py:1750", f"Using max model len {max_model_len}"),
    ]
    if chunked:
        startup.append((A, "scheduler.py:222", f"Chunked prefill is enabled with max_num_batched_tokens={budget}."))
    startup += [
        (E, "core.py:74", init),
        (E, "gpu_worker.py:276", f"Available KV cache memory: {kv_cache_gib:.2f} GiB"),
        (E, "kv_cache_utils.py:849", f"GPU KV cache size: {tokens_cap:,} tokens"),
        (E, "kv_cache_utils.py:853",
         f"Maximum concurrency for {max_model_len:,} tokens per request: {max_num_seqs:.2f}x"),
        (A, "api_server.py:1880", "Starting vLLM API server 0 on http://0.0.0.0:8000"),
    ]
    for k, (pref, fl, msg) in enumerate(startup):
        L.add(t0 + k, record(pref, "INFO", fl, np.array([t0 + k]), msg))
    L.add(t0 + len(startup), f"{A}INFO:     Application startup complete.")
    reqs = res.requests
    if reqs:
        prompt_ids = np.concatenate([np.asarray(r.prompt, dtype=np.int64) for r in reqs])
        preq = np.repeat(np.arange(len(reqs)), [len(r.prompt) for r in reqs])
        texts = text_of(prompt_ids, preq, len(reqs))
        ids_txt = pl.DataFrame({"r": preq, "v": prompt_ids}).group_by("r", maintain_order=True).agg(
            pl.col("v").cast(pl.String).str.join(", "))["v"].to_list()
        arrived = np.array([r.send_ns <= res.end_ns for r in reqs])   # sent before the run ended
        rf = pl.DataFrame({
            "rid": request_ids, "prompt": texts, "ids": ids_txt,
            "max_tokens": [r.max_tokens for r in reqs],
            "arr": [wall(r.send_ns) for r in reqs], "fin": [wall(r.finish_ns) if r.finish_ns else None
                                                              for r in reqs],
        }).filter(pl.Series(arrived))
        head, tail = SAMPLING.split("{max_tokens}")
        recv = rf.select(pl.concat_str([
            pl.lit(f"{A}INFO "), ts_text(pl.col("arr"), "%m-%d %H:%M:%S"), pl.lit(" [logger.py:43] Received request "),
            pl.col("rid"), pl.lit(": prompt: '"), pl.col("prompt"), pl.lit("', params: "), pl.lit(head),
            pl.col("max_tokens").cast(pl.String), pl.lit(tail), pl.lit(", prompt_token_ids: ["), pl.col("ids"),
            pl.lit("], prompt_embeds shape: None, lora_request: None.")]).alias("s"))["s"]
        L.add(rf["arr"].to_numpy(), recv)
        added = rf.select(pl.concat_str([
            pl.lit(f"{A}INFO "), ts_text(pl.col("arr") + 1, "%m-%d %H:%M:%S"),
            pl.lit(" [async_llm.py:290] Added request "), pl.col("rid"), pl.lit(".")]).alias("s"))["s"]
        L.add(rf["arr"].to_numpy() + 1, added)
        done = rf.filter(pl.col("fin").is_not_null())
        fin = done.select(pl.concat_str([
            pl.lit(f"{A}INFO "), ts_text(pl.col("fin"), "%m-%d %H:%M:%S"),
            pl.lit(" [async_llm.py:346] Finished request "), pl.col("rid"), pl.lit(".")]).alias("s"))["s"]
        L.add(done["fin"].to_numpy(), fin)
    if res.steps:
        # vLLM >= 0.11 with --enable-logging-iteration-details: one line per step, its measured wall time as the
        # elapsed time (the loop synchronises after each step, so the step's window is the wait for its output).
        st = res.steps
        t_end = np.array([wall(s.end_ns) for s in st], dtype=np.int64)
        L.add(t_end, iteration_lines(t_end, [s.ctx_reqs for s in st], [s.ctx_tokens for s in st],
                                     [s.gen_reqs for s in st], [(s.end_ns - s.start_ns) / 1e6 for s in st], E))
    if res.stats:
        st = pl.DataFrame({"t": [wall(s.ts_ns) for s in res.stats], "p": [s.prompt_tps for s in res.stats],
                           "g": [s.gen_tps for s in res.stats], "r": [s.running for s in res.stats],
                           "w": [s.waiting for s in res.stats], "kv": [s.kv_pct for s in res.stats]})
        s = st.select(pl.concat_str([
            pl.lit(f"{A}INFO "), ts_text(pl.col("t"), "%m-%d %H:%M:%S"),
            pl.lit(" [loggers.py:123] Engine 000: Avg prompt throughput: "), f1("p"),
            pl.lit(" tokens/s, Avg generation throughput: "), f1("g"), pl.lit(" tokens/s, Running: "),
            pl.col("r").cast(pl.String), pl.lit(" reqs, Waiting: "), pl.col("w").cast(pl.String),
            pl.lit(" reqs, GPU KV cache usage: "), f1("kv"), pl.lit("%, Prefix cache hit rate: 0.0%"),
        ]).alias("s"))["s"]
        L.add(st["t"].to_numpy(), s)
    return L.text()
