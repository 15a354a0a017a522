"""The iteration-level serving loop: continuous batching over the real model, on the wall clock.

Scheduling follows the simulator's policies (stallscope/simulate/engine.py), one model step per iteration:
- `chunked` (vLLM V1 / Sarathi-Serve): every step carries all running decodes first, one token each, counted
  against the token budget (max_num_batched_tokens); then continues partial prefills in running order; then
  admits waiting requests, each chunk cut to the budget left.
- `unchunked` (vLLM V0 prefill-first): whenever a waiting request can be admitted, the step is a prefill-only
  batch of whole prompts up to the budget, and the running decodes do not advance in it (the generation
  stall); otherwise a decode step.
Both cap running requests at max_num_seqs. Each running request owns one KV-cache slot of max_model_len
positions, so a request that is admitted always fits and nothing is ever preempted.

Requests arrive on the wall clock at their workload times (the client's send instants); the loop admits them
when it next looks, and the time every token leaves a step is recorded per request, as a streaming client
would see it. Every step runs inside `record_function` with vLLM's batch-composition marker, so the profiler
trace carries the steps.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from stallscope.errors import StallscopeError

from .model import Batch, TinyLM

try:
    import resource
    _RUSAGE = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)

    def _minflt() -> int:
        return resource.getrusage(_RUSAGE).ru_minflt
except ImportError:        # not on POSIX: no fault counts
    def _minflt() -> int:
        return 0

POLICIES = ("chunked", "unchunked")
STATS_INTERVAL_NS = 10_000_000_000   # vLLM V1 logs its stats line every 10 s


@dataclass(frozen=True)
class EngineConfig:
    policy: str
    budget: int
    max_num_seqs: int

    def validate(self, longest_prompt: int, max_model_len: int) -> None:
        if self.policy not in POLICIES:
            raise StallscopeError(f"unknown policy {self.policy!r}; use one of {', '.join(POLICIES)}")
        if self.budget < 1 or self.max_num_seqs < 1:
            raise StallscopeError("--budget and --max-num-seqs must be positive")
        if self.policy == "chunked" and self.budget < self.max_num_seqs:
            raise StallscopeError(f"--budget ({self.budget}) must be >= --max-num-seqs ({self.max_num_seqs}) "
                                  "for chunked prefill (vLLM: max_num_batched_tokens >= max_num_seqs)")
        if self.policy == "unchunked" and longest_prompt > self.budget:
            raise StallscopeError(f"--budget {self.budget} is smaller than the longest prompt ({longest_prompt} "
                                  "tokens); without chunking the prompt could never be scheduled: raise --budget")


@dataclass
class Request:
    index: int
    send_ns: int                       # perf_counter ns at which the client sends it
    prompt: list[int]
    max_tokens: int
    arrival_ns: int = 0                # perf_counter ns at which the engine took it in
    slot: int = -1
    computed: int = 0                  # prompt tokens in the KV cache
    output: list[int] = field(default_factory=list)
    token_ns: list[int] = field(default_factory=list)   # perf_counter ns of every emitted token
    finish_ns: int = 0

    @property
    def cached(self) -> int:
        """Tokens in the KV cache: the prompt part computed plus every generated token but the last."""
        return self.computed + max(len(self.output) - 1, 0)


@dataclass
class StepRecord:
    start_ns: int
    end_ns: int
    ctx_reqs: int
    ctx_tokens: int
    gen_reqs: int
    marker: str
    cpu_ns: int = 0                    # thread CPU time of the step: wall minus this is time not on a core
    kv_read: int = 0                   # KV tokens the decodes attended to (sum of their contexts + 1)
    attn_work: float = 0.0             # sum over chunks of c * (k + c/2): prefill attention work
    minflt: int = 0                    # minor page faults the engine thread took in the step
    probe_ns: int = 0                  # thread CPU time of the machine-speed probe run after the step (0: none)


@dataclass
class StatsRecord:
    ts_ns: int
    prompt_tps: float
    gen_tps: float
    running: int
    waiting: int
    kv_pct: float


@dataclass
class EngineResult:
    requests: list[Request]
    steps: list[StepRecord]
    stats: list[StatsRecord]
    start_ns: int                      # perf_counter ns of the run start (t = 0 of the workload)
    end_ns: int
    unfinished: int
    cpu_s: float

    @property
    def wall_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


def marker(ctx_reqs: int, ctx_tokens: int, gen_reqs: int, gen_tokens: int) -> str:
    """vLLM's per-step batch-composition annotation (`Worker.annotate_profile`)."""
    return f"execute_context_{ctx_reqs}({ctx_tokens})_generation_{gen_reqs}({gen_tokens})"


class Engine:
    def __init__(self, model: TinyLM, config: EngineConfig, record_function: Callable[[str], object],
                 sync: Callable[[], None] = lambda: None, probe: Callable[[], None] | None = None):
        self.model = model
        self.cfg = config
        self.record_function = record_function
        self.sync = sync
        # A fixed piece of work run after every step, outside its annotation and invisible to the profiler: its
        # thread CPU time tracks how fast this core runs at the moment (a shared VM's speed drifts by tens of %)
        self.probe = probe
        self.free_slots = deque(range(config.max_num_seqs))
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []   # admission order; prefilling ones have computed < len(prompt)

    # -- scheduling ----------------------------------------------------------------------------------------------
    def schedule(self) -> tuple[list[tuple[Request, int]], list[Request]]:
        """(prefill chunks as (request, tokens), decodes) of the next step."""
        C, cap = self.cfg.budget, self.cfg.max_num_seqs
        decodes = [r for r in self.running if r.computed == len(r.prompt)]
        chunks: list[tuple[Request, int]] = []
        if self.cfg.policy == "chunked":
            left = C - len(decodes)
            for r in self.running:
                if left <= 0:
                    break
                if r.computed < len(r.prompt):
                    c = min(len(r.prompt) - r.computed, left)
                    chunks.append((r, c))
                    left -= c
            while self.waiting and left > 0 and len(self.running) < cap:
                r = self._admit()
                c = min(len(r.prompt), left)
                chunks.append((r, c))
                left -= c
            return chunks, decodes
        tok = 0
        while self.waiting and len(self.running) < cap and tok + len(self.waiting[0].prompt) <= C:
            r = self._admit()
            chunks.append((r, len(r.prompt)))
            tok += len(r.prompt)
        return (chunks, []) if chunks else ([], decodes)

    def _admit(self) -> Request:
        r = self.waiting.popleft()
        r.slot = self.free_slots.popleft()
        self.running.append(r)
        return r

    # -- one step ------------------------------------------------------------------------------------------------
    def step(self, chunks: list[tuple[Request, int]], decodes: list[Request]) -> StepRecord:
        ctx_tokens = sum(c for _, c in chunks)
        name = marker(len(chunks), ctx_tokens, len(decodes), len(decodes))
        tokens: list[int] = []
        for r, c in chunks:
            tokens.extend(r.prompt[r.computed:r.computed + c])
        tokens.extend(r.output[-1] for r in decodes)
        batch = Batch(tokens, [(r.slot, r.computed, c) for r, c in chunks], [r.slot for r in decodes],
                      [r.cached for r in decodes])
        f0 = _minflt()
        c0 = time.thread_time_ns()
        t0 = time.perf_counter_ns()
        with self.record_function(name):
            nxt = self.model.step(batch)
            self.sync()
            out = nxt.tolist()
        # the tokens leave once the traced step has ended (a streaming client sees them after the step)
        t1 = time.perf_counter_ns()
        c1 = time.thread_time_ns()
        faults = _minflt() - f0
        probe_ns = 0
        if self.probe is not None:
            p0 = time.thread_time_ns()
            self.probe()
            probe_ns = time.thread_time_ns() - p0
        for i, (r, c) in enumerate(chunks):
            r.computed += c
            if r.computed == len(r.prompt):   # the chunk that completes the prompt yields the first token
                self._emit(r, out[i], t1)
        for j, r in enumerate(decodes):
            self._emit(r, out[len(chunks) + j], t1)
        return StepRecord(t0, t1, len(chunks), ctx_tokens, len(decodes), name, c1 - c0,
                          sum(batch.dec_ctx) + len(decodes), sum(c * (k + c / 2) for _, k, c in batch.chunks),
                          faults, probe_ns)

    def _emit(self, r: Request, token: int, t_ns: int) -> None:
        r.output.append(token)
        r.token_ns.append(t_ns)
        if len(r.output) >= r.max_tokens:
            r.finish_ns = t_ns
            self.running.remove(r)
            self.free_slots.append(r.slot)

    # -- the loop ------------------------------------------------------------------------------------------------
    def run(self, requests: list[Request], *, arrivals_until_ns: int, drain_s: float,
            on_progress: Callable[[dict], None] | None = None) -> EngineResult:
        """Serve `requests` (send_ns relative to the run start) until all finish or the drain limit passes."""
        kv_total = self.cfg.max_num_seqs * self.model.cfg.max_model_len
        cpu0 = time.process_time()
        start = time.perf_counter_ns()
        for r in requests:
            r.send_ns += start
        pending = deque(sorted(requests, key=lambda r: r.send_ns))
        steps: list[StepRecord] = []
        stats: list[StatsRecord] = []
        deadline = start + arrivals_until_ns + int(drain_s * 1e9)
        next_stats = start + STATS_INTERVAL_NS
        last_stats = start
        prompt_done = gen_done = 0          # interval counters for the stats line
        done = 0
        last_report = 0
        n = len(requests)
        while done < n:
            now = time.perf_counter_ns()
            while pending and pending[0].send_ns <= now:
                r = pending.popleft()
                r.arrival_ns = now
                self.waiting.append(r)
            if now >= next_stats:
                running = len(self.running)
                if prompt_done or gen_done or running or self.waiting:  # idle intervals go to DEBUG in vLLM
                    dt = (now - last_stats) / 1e9
                    kv = sum(r.cached for r in self.running) / kv_total * 100
                    stats.append(StatsRecord(now, prompt_done / dt, gen_done / dt, running, len(self.waiting), kv))
                prompt_done = gen_done = 0
                last_stats = now
                next_stats = now + STATS_INTERVAL_NS
            if now > deadline:
                break
            if on_progress is not None and now - last_report > 200_000_000:
                last_report = now
                on_progress({"t_s": (now - start) / 1e9, "steps": len(steps), "running": len(self.running),
                             "waiting": len(self.waiting), "finished": done, "requests": n})
            if not self.running and not self.waiting:
                if not pending:
                    break
                time.sleep(max(0.0, (pending[0].send_ns - time.perf_counter_ns()) / 1e9))
                continue
            chunks, decodes = self.schedule()
            if not chunks and not decodes:
                raise StallscopeError("internal error: the engine scheduled an empty step")
            rec = self.step(chunks, decodes)
            steps.append(rec)
            for r, _ in chunks:
                if len(r.output) == 1:
                    prompt_done += len(r.prompt)
            gen_done += sum(1 for r, _ in chunks if r.computed == len(r.prompt)) + len(decodes)
            done += sum(1 for r, _ in chunks if r.finish_ns) + sum(1 for r in decodes if r.finish_ns)
        end = time.perf_counter_ns()
        unfinished = sum(1 for r in requests if not r.finish_ns)
        return EngineResult(requests, steps, stats, start, end, unfinished, time.process_time() - cpu0)


def make_requests(send_rel_ns: np.ndarray, prompt_len: np.ndarray, output_len: np.ndarray, vocab: int,
                  seed: int) -> list[Request]:
    """Requests with random prompt token ids (the ids the server log prints); sends relative to the run start."""
    rng = np.random.default_rng([seed, 7])
    ids = rng.integers(1, vocab, int(prompt_len.sum())).tolist()
    out, off = [], 0
    for i, (t, p, o) in enumerate(zip(send_rel_ns.tolist(), prompt_len.tolist(), output_len.tolist())):
        out.append(Request(i, int(t), ids[off:off + p], int(o)))
        off += p
    return out
