-- The one place that maps each engine's metric names to the concepts the metrics views read: vLLM V1 (`vllm:`),
-- SGLang (`sglang:`, and the 2026 gRPC sidecar's `sglang_`), TGI (`tgi_`). A histogram is named by its family
-- (its `_bucket`/`_sum`/`_count` samples are read); a counter or gauge by its sample name. Concepts: `ttft`, `itl`
-- (one observation per token gap; SGLang's is per streamed chunk, single-token stalls smeared), `tpot` (one
-- per-request mean at the finish), `e2e`, `queue`, `step_tokens` (tokens per engine step), `prompt_tokens`,
-- `generation_tokens`, `requests_finished`, `running`, `waiting`. Times in seconds, as the engines export them.
-- @column name      VARCHAR  Family (histograms) or sample name (counters, gauges) as exported.
-- @column concept   VARCHAR  What it measures (see above).
-- @column kind      VARCHAR  `histogram`, `counter` or `gauge`.
-- @column engine    VARCHAR  `vllm`, `sglang` or `tgi`.
CREATE OR REPLACE TEMP VIEW metric_names AS
SELECT * FROM (VALUES
    ('vllm:time_to_first_token_seconds', 'ttft', 'histogram', 'vllm'),
    ('vllm:inter_token_latency_seconds', 'itl', 'histogram', 'vllm'),
    ('vllm:request_time_per_output_token_seconds', 'tpot', 'histogram', 'vllm'),
    ('vllm:e2e_request_latency_seconds', 'e2e', 'histogram', 'vllm'),
    ('vllm:request_queue_time_seconds', 'queue', 'histogram', 'vllm'),
    ('vllm:iteration_tokens_total', 'step_tokens', 'histogram', 'vllm'),
    ('vllm:prompt_tokens_total', 'prompt_tokens', 'counter', 'vllm'),
    ('vllm:generation_tokens_total', 'generation_tokens', 'counter', 'vllm'),
    ('vllm:request_success_total', 'requests_finished', 'counter', 'vllm'),
    ('vllm:num_requests_running', 'running', 'gauge', 'vllm'),
    ('vllm:num_requests_waiting', 'waiting', 'gauge', 'vllm'),
    ('sglang:time_to_first_token_seconds', 'ttft', 'histogram', 'sglang'),
    ('sglang:inter_token_latency_seconds', 'itl', 'histogram', 'sglang'),
    ('sglang:e2e_request_latency_seconds', 'e2e', 'histogram', 'sglang'),
    ('sglang:queue_time_seconds', 'queue', 'histogram', 'sglang'),
    ('sglang:prompt_tokens_total', 'prompt_tokens', 'counter', 'sglang'),
    ('sglang:generation_tokens_total', 'generation_tokens', 'counter', 'sglang'),
    ('sglang:e2e_request_latency_seconds_count', 'requests_finished', 'counter', 'sglang'),
    ('sglang:num_running_reqs', 'running', 'gauge', 'sglang'),
    ('sglang:num_queue_reqs', 'waiting', 'gauge', 'sglang'),
    ('sglang_time_to_first_token_seconds', 'ttft', 'histogram', 'sglang'),
    ('sglang_inter_token_latency_seconds', 'itl', 'histogram', 'sglang'),
    ('sglang_e2e_request_latency_seconds', 'e2e', 'histogram', 'sglang'),
    ('sglang_queue_time_seconds', 'queue', 'histogram', 'sglang'),
    ('sglang_prompt_tokens_total', 'prompt_tokens', 'counter', 'sglang'),
    ('sglang_generation_tokens_total', 'generation_tokens', 'counter', 'sglang'),
    ('sglang_e2e_request_latency_seconds_count', 'requests_finished', 'counter', 'sglang'),
    ('sglang_num_running_reqs', 'running', 'gauge', 'sglang'),
    ('sglang_num_queue_reqs', 'waiting', 'gauge', 'sglang'),
    ('tgi_request_duration', 'e2e', 'histogram', 'tgi'),
    ('tgi_request_queue_duration', 'queue', 'histogram', 'tgi'),
    ('tgi_request_mean_time_per_token_duration', 'tpot', 'histogram', 'tgi'),
    ('tgi_request_input_length_sum', 'prompt_tokens', 'counter', 'tgi'),
    ('tgi_request_generated_tokens_sum', 'generation_tokens', 'counter', 'tgi'),
    ('tgi_request_duration_count', 'requests_finished', 'counter', 'tgi'),
    ('tgi_batch_current_size', 'running', 'gauge', 'tgi'),
    ('tgi_queue_size', 'waiting', 'gauge', 'tgi')
) AS t(name, concept, kind, engine);
