"""One simulated benchmark run: the spec, the engine result, and the clocks every artifact is written on.

Clocks. The engine works in ns relative to the benchmark start (t = 0 is `benchmark_start_time` of
`vllm bench serve`). `wall_ns = epoch_start_ns + t`, the common clock of every artifact. A request is sent by the
client at `send`, reaches the server `d_in` later (the server's arrival), and each token reaches the client a
constant `d_out` after the engine step that produced it ended, so client inter-token gaps equal engine gaps exactly.
Every random choice comes from numpy generators seeded by `seed`: the same spec gives byte-identical artifacts.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from stallscope.errors import StallscopeError

from .engine import EngineConfig, SimResult, simulate
from .stepmodel import Preset, get_preset
from .workload import Incident, LengthDist, SharedPrefix, Workload, from_store, synthesize

DEFAULT_START = "2025-04-01T16:00:00Z"
ATTENTION_BACKENDS = ("fa3", "flashinfer", "v0-flash")
VERSION = "1"


def parse_slo(text: str | None) -> dict[str, float]:
    """`ttft=500ms,tpot=50ms,itl=200ms` (any subset; ms or s; a bare number is ms) -> {key: ms}.

    The same grammar as `stallscope analyze --slo` (one parser for both), keyed as truth.json keys SLOs."""
    from ..slo import parse_slo as parse

    return {k.removesuffix("_ms"): v for k, v in parse(text).as_dict().items()}


def parse_start(text: str) -> int:
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise StallscopeError(f"bad --start {text!r}: use an ISO time such as {DEFAULT_START}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp()) * 1_000_000_000 + dt.microsecond * 1000


@dataclass
class RunSpec:
    profile: str = "llama70b-h100-tp4"
    policy: str = "chunked"
    budget: int | None = None        # default: 2048 chunked, 32768 v0, 8192 sglang
    rate: float = 4.0
    duration_s: float = 120.0
    burstiness: float = 1.0
    prompt_len: str = "512:0.6"
    output_len: str = "256:0.4"
    incident: str | None = None
    seed: int = 0
    max_num_seqs: int = 256
    kv_cache_tokens: int | None = None
    mixed_chunk: bool = False
    slo: dict = field(default_factory=dict)
    start: str = DEFAULT_START
    attention_backend: str | None = None   # default per policy
    trace_layers: int = 2
    trace_annotation: str = "basic"        # basic | detailed
    replay: str | None = None
    spike_k: float = 3.0
    shared_prefix: str | None = None        # FRACTION:TOKENS, e.g. 0.7:1536
    prefix_caching: bool | None = None      # default: on when there is a shared prefix
    iteration_log: bool = False             # vLLM log as a 2026 server writes it with per-step Iteration lines

    def resolved_prefix_caching(self) -> bool:
        return bool(self.shared_prefix) if self.prefix_caching is None else bool(self.prefix_caching)

    def resolved_budget(self) -> int:
        if self.budget is not None:
            return int(self.budget)
        return {"chunked": 2048, "v0": 32768, "sglang": 8192}.get(self.policy, 2048)

    def resolved_backend(self) -> str:
        b = self.attention_backend or {"chunked": "fa3", "v0": "v0-flash", "sglang": "flashinfer"}[self.policy]
        if b not in ATTENTION_BACKENDS:
            raise StallscopeError(f"unknown attention backend {b!r}; use one of {', '.join(ATTENTION_BACKENDS)}")
        return b

    def to_dict(self) -> dict:
        d = asdict(self)
        d["budget"] = self.resolved_budget()
        d["attention_backend"] = self.resolved_backend()
        # Written only when used, so that runs without them keep their bytes.
        if self.shared_prefix is None:
            del d["shared_prefix"]
        if not self.iteration_log:
            del d["iteration_log"]
        if self.prefix_caching is None and self.shared_prefix is None:
            del d["prefix_caching"]
        else:
            d["prefix_caching"] = self.resolved_prefix_caching()
        return d


@dataclass
class Run:
    spec: RunSpec
    preset: Preset
    workload: Workload
    sim: SimResult
    epoch_start_ns: int          # wall clock of t = 0 (benchmark start)
    send_ns: np.ndarray          # client send, relative
    d_out_ns: np.ndarray         # per request: engine step end -> token at the client
    request_ids: list[str]       # server ids, cmpl-<32 hex>-0
    tok_req: np.ndarray          # every emitted token: request, index, step
    tok_idx: np.ndarray
    tok_step: np.ndarray
    first_step: np.ndarray       # per request: step of the first token
    last_step: np.ndarray        # per request: step of the last token
    perf_origin_s: float         # perf_counter value of the benchmark start (client clock)
    pids: dict = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.workload)

    def wall(self, rel_ns):
        return self.epoch_start_ns + np.asarray(rel_ns, dtype=np.int64)

    @property
    def arrival_ns(self) -> np.ndarray:
        return self.workload.arrival_ns

    @property
    def first_token_ns(self) -> np.ndarray:   # engine, relative
        return self.sim.end_ns[self.first_step]

    @property
    def finish_ns(self) -> np.ndarray:        # engine, relative
        return self.sim.end_ns[self.last_step]

    @property
    def client_first_ns(self) -> np.ndarray:
        return self.first_token_ns + self.d_out_ns

    @property
    def client_finish_ns(self) -> np.ndarray:
        return self.finish_ns + self.d_out_ns

    @property
    def bench_end_ns(self) -> int:
        return int(self.client_finish_ns.max())


def execute(spec: RunSpec) -> Run:
    preset = get_preset(spec.profile)
    spec.resolved_backend()
    if spec.trace_layers < 1 or spec.trace_layers > preset.n_layers:
        raise StallscopeError(f"--trace-layers must be between 1 and {preset.n_layers}")
    rng = np.random.default_rng([spec.seed, 1])
    out_dist = LengthDist.parse(spec.output_len, hi=preset.max_model_len - 1)
    if spec.replay:
        if not Path(spec.replay).exists():
            raise StallscopeError(f"--replay {spec.replay}: no such store")
        wl = from_store(spec.replay, output=out_dist, rng=rng, max_model_len=preset.max_model_len)
    else:
        wl = synthesize(rng, rate=spec.rate, duration_s=spec.duration_s, burstiness=spec.burstiness,
                        prompt=LengthDist.parse(spec.prompt_len, lo=2, hi=preset.max_model_len - 1),
                        output=out_dist, incident=Incident.parse(spec.incident), max_model_len=preset.max_model_len,
                        shared_prefix=SharedPrefix.parse(spec.shared_prefix))
    if len(wl) == 0:
        raise StallscopeError("the workload has no requests (raise --rate or --duration)")
    if spec.replay and spec.shared_prefix:
        raise StallscopeError("--shared-prefix cannot be combined with --replay (a replayed store has no prompts)")
    cfg = EngineConfig(spec.policy, spec.resolved_budget(), spec.max_num_seqs, spec.kv_cache_tokens, spec.mixed_chunk,
                       prefix_caching=spec.resolved_prefix_caching())
    sim = simulate(wl, preset, cfg, spec.seed)
    crng = np.random.default_rng([spec.seed, 2])
    n = len(wl)
    d_in = np.rint(crng.uniform(0.2e6, 0.8e6, n)).astype(np.int64)
    d_out = np.rint(crng.uniform(0.1e6, 0.4e6, n)).astype(np.int64)
    send = wl.arrival_ns - d_in
    ids = [f"cmpl-{crng.bytes(16).hex()}-0" for _ in range(n)]
    req, idx, step = sim.token_steps()
    first_pos = np.searchsorted(req, np.arange(n), side="left")
    last_pos = np.searchsorted(req, np.arange(n), side="right") - 1
    if not (np.all(req[first_pos] == np.arange(n)) and np.all(idx[last_pos] + 1 == wl.output_len)):
        raise StallscopeError("internal error: simulated token counts do not match the requested output lengths")
    pids = {"api": int(crng.integers(900, 4000)), "engine": 0, "worker": 0}
    pids["engine"] = pids["api"] + int(crng.integers(100, 200))
    pids["worker"] = pids["engine"] + int(crng.integers(50, 120))
    return Run(spec=spec, preset=preset, workload=wl, sim=sim, epoch_start_ns=parse_start(spec.start),
               send_ns=send, d_out_ns=d_out, request_ids=ids, tok_req=req, tok_idx=idx, tok_step=step,
               first_step=step[first_pos], last_step=step[last_pos],
               perf_origin_s=float(np.round(crng.uniform(2e4, 9e5), 6)), pids=pids)
