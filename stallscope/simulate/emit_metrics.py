"""What Prometheus would hold for a simulated vLLM V1 server, as its HTTP API's `/api/v1/query_range` matrix.

Faithful to the format, not captured from a live server: metric names, label names (`engine`, `model_name`) and
default buckets are vLLM V1's (`vllm/v1/metrics/loggers.py`, see shared notes production-evidence §5); the answer is
`{"status":"success","data":{"resultType":"matrix","result":[{"metric":{...},"values":[[<unix s>,"<value>"],...]}]}}`
with values printed as Go's `strconv.FormatFloat(v, 'f', -1, 64)` does (no exponent). Every scrape is taken every
`interval_s` seconds from the benchmark start until after the last request finished, and the query's step equals the
scrape interval, so each point is one scrape.

What each series observes, on the engine's clock (the simulator's step ends):
- `vllm:time_to_first_token_seconds`: first token - arrival, at the first token;
- `vllm:inter_token_latency_seconds`: each gap between two consecutive tokens of a request, at the later token;
- `vllm:request_time_per_output_token_seconds`: (finish - first token) / (output - 1) at the finish (0 when the
  output is one token), the per-request mean TPOT;
- `vllm:e2e_request_latency_seconds`: finish - arrival, at the finish;
- `vllm:iteration_tokens_total`: the tokens of each engine step (decodes + prefill chunk tokens), at its end;
- counters `vllm:prompt_tokens_total` (a request's prompt at its first token, as vLLM V1 counts it),
  `vllm:generation_tokens_total` (per token), `vllm:request_success_total{finished_reason="length"}` (per finish);
- gauges `vllm:num_requests_running`, `vllm:num_requests_waiting` (as of the last step that ended by the scrape).
`observations` returns these per-event values; the tests judge the views against them (the truth).
"""
from __future__ import annotations

import json

import numpy as np

from .runner import Run

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
               80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
               960.0, 1920.0, 7680.0)
ITER_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)

HISTOGRAMS = {
    "vllm:time_to_first_token_seconds": TTFT_BUCKETS,
    "vllm:inter_token_latency_seconds": ITL_BUCKETS,
    "vllm:request_time_per_output_token_seconds": ITL_BUCKETS,
    "vllm:e2e_request_latency_seconds": E2E_BUCKETS,
    "vllm:iteration_tokens_total": ITER_BUCKETS,
}
COUNTERS = ("vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:request_success_total")


def observations(run: Run) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per metric: (event time ns relative to the benchmark start, observed value), one entry per observation."""
    sim, wl = run.sim, run.workload
    arrival, first, finish = run.arrival_ns, run.first_token_ns, run.finish_ns
    out = wl.output_len
    tok_t = sim.end_ns[run.tok_step]
    same = run.tok_req[1:] == run.tok_req[:-1]
    itl_t = tok_t[1:][same]
    itl_v = (tok_t[1:] - tok_t[:-1])[same] / 1e9
    tpot = np.where(out > 1, (finish - first) / np.maximum(out - 1, 1) / 1e9, 0.0)
    step_tokens = (sim.n_decode + sim.prefill_tokens).astype(np.float64)
    busy = step_tokens > 0
    return {
        "vllm:time_to_first_token_seconds": (first, (first - arrival) / 1e9),
        "vllm:inter_token_latency_seconds": (itl_t, itl_v),
        "vllm:request_time_per_output_token_seconds": (finish, tpot),
        "vllm:e2e_request_latency_seconds": (finish, (finish - arrival) / 1e9),
        "vllm:iteration_tokens_total": (sim.end_ns[busy], step_tokens[busy]),
        "vllm:prompt_tokens_total": (first, wl.prompt_len.astype(np.float64)),
        "vllm:generation_tokens_total": (tok_t, np.ones(len(tok_t))),
        "vllm:request_success_total": (finish, np.ones(run.n)),
    }


def scrape_times(run: Run, interval_s: float) -> np.ndarray:
    """Scrape instants, ns relative to the benchmark start: 0, interval, ... up to the first one after the last
    finish (so every request is counted by the last scrape)."""
    step = int(round(interval_s * 1e9))
    last = int(run.finish_ns.max())
    return np.arange(0, last // step + 2, dtype=np.int64) * step


def _cumulative(t: np.ndarray, w: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Sum of the weights of the events at or before each instant of `at`."""
    order = np.argsort(t, kind="stable")
    cw = np.concatenate([[0.0], np.cumsum(w[order])])
    return cw[np.searchsorted(t[order], at, side="right")]


def _gauge(t_steps: np.ndarray, v: np.ndarray, at: np.ndarray) -> np.ndarray:
    i = np.searchsorted(t_steps, at, side="right") - 1
    return np.where(i >= 0, v[np.maximum(i, 0)], 0).astype(np.float64)


def series(run: Run, interval_s: float = 10.0, *, engine: str = "0",
           instance: str = "10.0.3.17:8000") -> tuple[np.ndarray, list[tuple[dict, np.ndarray]]]:
    """(scrape instants relative ns, [(labels with `__name__`, values per scrape)]) of one vLLM engine."""
    at = scrape_times(run, interval_s)
    base = {"engine": engine, "instance": instance, "job": "vllm", "model_name": run.preset.model}
    obs = observations(run)
    out: list[tuple[dict, np.ndarray]] = []
    for name, edges in HISTOGRAMS.items():
        t, v = obs[name]
        for le in (*edges, float("inf")):
            m = v <= le
            out.append(({"__name__": name + "_bucket", **base, "le": _le(le)}, _cumulative(t[m], np.ones(m.sum()), at)))
        out.append(({"__name__": name + "_sum", **base}, _cumulative(t, v, at)))
        out.append(({"__name__": name + "_count", **base}, _cumulative(t, np.ones(len(t)), at)))
    for name in COUNTERS:
        t, v = obs[name]
        extra = {"finished_reason": "length"} if name == "vllm:request_success_total" else {}
        out.append(({"__name__": name, **base, **extra}, _cumulative(t, v, at)))
    sim = run.sim
    out.append(({"__name__": "vllm:num_requests_running", **base}, _gauge(sim.end_ns, sim.n_running, at)))
    out.append(({"__name__": "vllm:num_requests_waiting", **base}, _gauge(sim.end_ns, sim.n_waiting, at)))
    return at, out


def _le(x: float) -> str:
    return "+Inf" if np.isinf(x) else _num(x)


def _num(x: float) -> str:
    return np.format_float_positional(float(x), trim="-")


def query_range(run: Run, interval_s: float = 10.0) -> bytes:
    """The `/api/v1/query_range` answer (one JSON object, compact as Prometheus writes it)."""
    at, ser = series(run, interval_s)
    ts = [float(np.format_float_positional((run.epoch_start_ns + a) / 1e9, precision=3, trim="-")) for a in at]
    result = [{"metric": {k: lab[k] for k in sorted(lab, key=lambda k: (k != "__name__", k))},
               "values": [[t, _num(v)] for t, v in zip(ts, vals)]} for lab, vals in ser]
    doc = {"status": "success", "data": {"resultType": "matrix", "result": result}}
    return json.dumps(doc, separators=(",", ":")).encode()
