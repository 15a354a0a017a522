"""vLLM's OpenTelemetry request spans for a simulated run, as the OpenTelemetry Collector's `file` exporter writes them.

Faithful to the format, not captured from a live server: one `ExportTraceServiceRequest` per line in OTLP/JSON
(`{"resourceSpans":[{"resource":{...},"scopeSpans":[{"scope":{...},"spans":[...]}]}]}`), 64-bit integers as strings
(`startTimeUnixNano`, `intValue`), trace and span ids as lowercase hex; one `llm_request` span (kind SERVER = 2) per
request with the `gen_ai.*` attributes of `vllm/tracing.py` (shared notes production-evidence §6), latencies as
seconds in `doubleValue`. vLLM's definitions, on the engine's clock: the span runs from arrival to the finish;
`time_in_queue` = scheduled - arrival, `time_to_first_token` = first token - arrival, `e2e` = finish - arrival,
`time_in_model_prefill` = first token - scheduled, `time_in_model_decode` = finish - first token,
`time_in_model_inference` = finish - scheduled, where scheduled is the start of the request's first prefill step.
The Collector's batch processor flushes about once a second: the spans of the requests that finished in one second
share a line.
"""
from __future__ import annotations

import json

import numpy as np

from .runner import Run


def _attr(key: str, value) -> dict:
    if isinstance(value, str):
        return {"key": key, "value": {"stringValue": value}}
    if isinstance(value, (int, np.integer)):
        return {"key": key, "value": {"intValue": str(int(value))}}
    return {"key": key, "value": {"doubleValue": float(value)}}


def scheduled_ns(run: Run) -> np.ndarray:
    """Per request: the start of its first prefill step (engine clock, relative ns)."""
    first_chunk = np.full(run.n, np.iinfo(np.int64).max)
    np.minimum.at(first_chunk, run.sim.ch_req, run.sim.start_ns[run.sim.ch_step])
    return first_chunk


def spans(run: Run) -> list[dict]:
    """One `llm_request` span per request, in finish order."""
    rng = np.random.default_rng([run.spec.seed, 9])
    wl = run.workload
    arr, first, fin, sched = run.arrival_ns, run.first_token_ns, run.finish_ns, scheduled_ns(run)
    ids = rng.integers(0, 1 << 62, size=(run.n, 3))
    out = []
    for i in np.argsort(fin, kind="stable"):  # one dict per span: the output has one object per request anyway
        s = lambda a, b: (int(a) - int(b)) / 1e9  # noqa: E731
        attrs = [
            _attr("gen_ai.response.model", run.preset.model), _attr("gen_ai.request.id", run.request_ids[i]),
            _attr("gen_ai.request.temperature", 0.0), _attr("gen_ai.request.top_p", 1.0),
            _attr("gen_ai.request.max_tokens", int(wl.output_len[i])), _attr("gen_ai.request.n", 1),
            _attr("gen_ai.usage.num_sequences", 1),
            _attr("gen_ai.usage.prompt_tokens", int(wl.prompt_len[i])),
            _attr("gen_ai.usage.completion_tokens", int(wl.output_len[i])),
            _attr("gen_ai.latency.time_in_queue", s(sched[i], arr[i])),
            _attr("gen_ai.latency.time_to_first_token", s(first[i], arr[i])),
            _attr("gen_ai.latency.e2e", s(fin[i], arr[i])),
            _attr("gen_ai.latency.time_in_model_prefill", s(first[i], sched[i])),
            _attr("gen_ai.latency.time_in_model_decode", s(fin[i], first[i])),
            _attr("gen_ai.latency.time_in_model_inference", s(fin[i], sched[i])),
        ]
        out.append({"traceId": f"{ids[i, 0]:016x}{ids[i, 1]:016x}", "spanId": f"{ids[i, 2]:016x}",
                    "parentSpanId": "", "name": "llm_request", "kind": 2,
                    "startTimeUnixNano": str(int(run.wall(arr[i]))), "endTimeUnixNano": str(int(run.wall(fin[i]))),
                    "attributes": attrs, "status": {}})
    return out


def jsonl(run: Run) -> bytes:
    """The Collector file exporter's output: one ExportTraceServiceRequest per line, a line per second of finishes."""
    sp = spans(run)
    resource = {"attributes": [_attr("service.name", "vllm"), _attr("telemetry.sdk.language", "python"),
                               _attr("telemetry.sdk.name", "opentelemetry")]}
    sec = np.array([int(x["endTimeUnixNano"]) // 1_000_000_000 for x in sp])
    cuts = np.flatnonzero(np.diff(sec)) + 1
    lines = []
    for lo, hi in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [len(sp)]])):
        doc = {"resourceSpans": [{"resource": resource, "scopeSpans": [
            {"scope": {"name": "vllm.llm_engine"}, "spans": sp[lo:hi]}]}]}
        lines.append(json.dumps(doc, separators=(",", ":")))
    return ("\n".join(lines) + "\n").encode()
