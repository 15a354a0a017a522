"""One capture end to end: build the model and workload, serve it under torch.profiler, write the three files.

    trace.pt.trace.json      the Kineto trace exactly as torch.profiler writes it (`export_chrome_trace`)
    bench_serve.json         the client-side timings (`vllm bench serve --save-detailed` layout)
    vllm_server.log          the server log (vLLM V1 layout)

Clocks: token instants are taken with `time.perf_counter_ns()` and put on the wall clock with one offset
sampled at the start (`time.time_ns() - perf_counter_ns()`), the same host clock Kineto stamps its events with.
On a GPU the profiler records CUDA activities and the loop synchronises after each step (the sampled token
ids are copied to the host anyway), so a step's end is when its kernels finished; CUDA graphs are never used.
"""
from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from stallscope.errors import StallscopeError
from stallscope.simulate import emit_bench
from stallscope.simulate.workload import Incident, LengthDist, synthesize

from . import writers
from .engine import Engine, EngineConfig, EngineResult, make_requests
from .model import ModelConfig, TinyLM

TRACE_NAME = "trace.pt.trace.json"
BENCH_NAME = "bench_serve.json"
LOG_NAME = "vllm_server.log"


@dataclass
class CaptureSpec:
    device: str = "cpu"
    policy: str = "chunked"
    budget: int | None = None          # default: 512 chunked, max_model_len unchunked
    duration_s: float = 30.0
    rate: float = 4.0
    burstiness: float = 1.0
    prompt_len: str = "96:0.5"
    output_len: str = "64:0.4"
    incident: str | None = "long-prompts:count=3,tokens=1536,spacing=2"
    max_num_seqs: int = 16
    seed: int = 0
    threads: int | None = 1
    drain_s: float = 60.0
    record_shapes: bool = True         # torch 2.13 keeps ~10-20 KB of host memory per op event with it on
    speed_probe: bool = False          # time a fixed probe after every step (StepRecord.probe_ns)
    trace: bool = True                 # run under torch.profiler and write the trace (off: log and bench only)
    model: ModelConfig = field(default_factory=ModelConfig)

    def resolved_budget(self) -> int:
        if self.budget is not None:
            return int(self.budget)
        return 512 if self.policy == "chunked" else self.model.max_model_len

    def model_id(self) -> str:
        m = self.model
        return f"stallscope/tinylm-{m.n_layers}x{m.d_model}-h{m.n_heads}kv{m.n_kv_heads}"


@dataclass
class CaptureResult:
    spec: CaptureSpec
    files: dict[str, Path]
    engine: EngineResult
    export_s: float
    epoch_of_perf_ns: int              # wall clock = perf_counter ns + this
    torch_threads: int = 1             # torch intra-op threads the steps ran on

    def summary(self) -> dict:
        e = self.engine
        steps = e.steps
        dur = np.array([(s.end_ns - s.start_ns) / 1e6 for s in steps]) if steps else np.zeros(1)
        itl = np.concatenate([np.diff(np.asarray(r.token_ns)) / 1e6 for r in e.requests if len(r.token_ns) > 1]
                             or [np.zeros(0)])
        return {"policy": self.spec.policy, "budget": self.spec.resolved_budget(), "torch_threads": self.torch_threads,
                "requests": len(e.requests),
                "unfinished": e.unfinished, "steps": len(steps), "wall_s": round(e.wall_s, 2),
                "cpu_s": round(e.cpu_s, 2), "step_cpu_s": round(sum(s.cpu_ns for s in steps) / 1e9, 2),
                "step_wall_s": round(float(dur.sum()) / 1e3, 2) if steps else 0.0,
                "export_s": round(self.export_s, 2),
                "step_ms_median": round(float(np.median(dur)), 2), "step_ms_max": round(float(dur.max()), 1),
                "itl_ms_p50": round(float(np.percentile(itl, 50)), 2) if len(itl) else None,
                "itl_ms_p99": round(float(np.percentile(itl, 99)), 2) if len(itl) else None,
                "itl_ms_max": round(float(itl.max()), 1) if len(itl) else None}


def _torch():
    try:
        import torch
    except ImportError:
        raise StallscopeError("stallscope capture needs PyTorch: pip install 'stallscope[capture]'") from None
    return torch


def capture(spec: CaptureSpec, out: Path, on_progress: Callable[[dict], None] | None = None) -> CaptureResult:
    torch = _torch()
    from torch.profiler import ProfilerActivity, profile, record_function

    if spec.device not in ("cpu", "cuda"):
        raise StallscopeError(f"unknown device {spec.device!r}: use cpu or cuda")
    if spec.device == "cuda" and not torch.cuda.is_available():
        raise StallscopeError("--device cuda but torch sees no CUDA device (this torch build or machine has none)")
    if spec.duration_s <= 0:
        raise StallscopeError("--duration must be positive")
    try:
        spec.model.validate()
    except ValueError as e:
        raise StallscopeError(f"bad model shape: {e}") from None
    if spec.threads:
        torch.set_num_threads(int(spec.threads))
    mcfg = spec.model
    rng = np.random.default_rng([spec.seed, 1])
    wl = synthesize(rng, rate=spec.rate, duration_s=spec.duration_s, burstiness=spec.burstiness,
                    prompt=LengthDist.parse(spec.prompt_len, lo=2, hi=mcfg.max_model_len - 1),
                    output=LengthDist.parse(spec.output_len, lo=1, hi=mcfg.max_model_len - 1),
                    incident=Incident.parse(spec.incident), max_model_len=mcfg.max_model_len)
    if len(wl) == 0:
        raise StallscopeError("the workload has no requests (raise --rate or --duration)")
    cfg = EngineConfig(spec.policy, spec.resolved_budget(), spec.max_num_seqs)
    cfg.validate(int(wl.prompt_len.max()), mcfg.max_model_len)
    out.mkdir(parents=True, exist_ok=True)
    startup_ns = time.perf_counter_ns()
    model = TinyLM(mcfg, spec.max_num_seqs, seed=spec.seed, device=spec.device)
    sync = torch.cuda.synchronize if spec.device == "cuda" else (lambda: None)
    if not spec.trace:
        # No profiler: the steps' markers are no-ops and the measured times carry no profiler overhead.
        from contextlib import nullcontext

        record_function = lambda name: nullcontext()  # noqa: E731
        profile = lambda **kw: nullcontext()  # noqa: E731
    engine = Engine(model, cfg, record_function, sync, probe=_speed_probe() if spec.speed_probe else None)
    _warm_up(engine, mcfg)
    reqs = make_requests(wl.arrival_ns, wl.prompt_len, wl.output_len, mcfg.vocab, spec.seed)
    crng = np.random.default_rng([spec.seed, 2])
    request_ids = [f"cmpl-{crng.bytes(16).hex()}-0" for _ in reqs]
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if spec.device == "cuda" else [])
    # One offset from the perf_counter clock to the wall clock, sampled back to back.
    epoch_of_perf = time.time_ns() - time.perf_counter_ns()
    # A cyclic-GC pause inside the loop would be a decode stall nobody's work caused (vLLM freezes its heap
    # for the same reason); the loop makes no reference cycles, so refcounting frees everything meanwhile.
    gc_was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        with profile(activities=activities, record_shapes=spec.record_shapes) as prof:
            res = engine.run(reqs, arrivals_until_ns=int(spec.duration_s * 1e9), drain_s=spec.drain_s,
                             on_progress=on_progress)
    finally:
        if gc_was:
            gc.enable()
    if on_progress is not None:
        on_progress({"phase": "export", "steps": len(res.steps)})
    t = time.perf_counter()
    trace = out / TRACE_NAME
    if spec.trace:
        prof.export_chrome_trace(str(trace))
    export_s = time.perf_counter() - t
    doc = writers.bench_json(res, model_id=spec.model_id(), rate=spec.rate, burstiness=spec.burstiness,
                             epoch_of_perf_ns=epoch_of_perf, perf_origin_s=res.start_ns / 1e9)
    bench = out / BENCH_NAME
    bench.write_bytes(emit_bench.dumps(doc))
    log = out / LOG_NAME
    log.write_bytes(writers.server_log(
        res, model_id=spec.model_id(), policy=spec.policy, budget=cfg.budget, max_num_seqs=cfg.max_num_seqs,
        max_model_len=mcfg.max_model_len, device=spec.device, epoch_of_perf_ns=epoch_of_perf,
        request_ids=request_ids, kv_cache_gib=model.cache_bytes() / 2 ** 30, startup_ns=startup_ns))
    files = {"trace": trace, "bench": bench, "vllm": log} if spec.trace else {"bench": bench, "vllm": log}
    return CaptureResult(spec, files, res, export_s, epoch_of_perf,
                         torch.get_num_threads())


def _speed_probe() -> Callable[[], None]:
    """A fixed piece of work outside the profiler's view (numpy, not ATen): 40 multiply-adds over three 64 KB
    arrays, L2-resident and single-threaded, about 0.3 ms. Its thread CPU time moves with the core's speed (on a
    shared VM it tracked a fixed decode step with correlation 0.9 while both drifted 20-40 %), so a step's time
    divided by the probe's local median is the step's cost on a machine of constant speed."""
    rng = np.random.default_rng(0)
    x, y, z = (rng.random(16384, dtype=np.float32) for _ in range(3))

    def probe() -> None:
        for _ in range(40):
            np.multiply(x, y, out=z)
            np.add(z, x, out=z)
    return probe


def _warm_up(engine: Engine, mcfg: ModelConfig) -> None:
    """A few unprofiled steps (a prefill, then decodes) so one-time allocations stay out of the trace."""
    from .model import Batch

    n = min(64, mcfg.max_model_len - 2)
    engine.model.step(Batch(list(range(1, n + 1)), [(0, 0, n)], [], []))
    for i in range(3):
        engine.model.step(Batch([1], [], [0], [n + i]))
    engine.sync()
