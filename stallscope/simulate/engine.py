"""Discrete-event simulator of an iteration-level (continuous-batching) LLM engine with three scheduler policies.

Policies (one engine iteration = one "step"):
- `v0`      vLLM V0 default scheduling without chunked prefill: whenever a waiting request can be admitted, the
            step is a prefill-only batch of whole prompts (up to `budget` = max_num_batched_tokens tokens); the
            running decodes do not advance in that step (the classic generation stall). Otherwise a decode step.
- `chunked` Sarathi-Serve / vLLM V1 stall-free batching: every step carries all running decodes first (one token
            each, counted in the token budget), then continues partial prefills, then admits new prefills, each
            chunk cut to the budget left.
- `sglang`  SGLang chunked prefill: `budget` is chunked_prefill_size (prefill tokens only); a prefill batch runs
            as its own forward in which decodes do not advance, unless mixed chunking is on (`mixed_chunk`).
Prefix caching (`prefix_caching`, off by default): a request whose prompt starts with the workload's shared prefix
(`Workload.prefix_len`) finds, when it is admitted, the part of that prefix some earlier request has already
computed. vLLM (`v0`, `chunked`) hashes whole KV blocks (`cache_block`, default 16 tokens: only full blocks of the
prefix are shared); SGLang's radix cache is token-granular (page size 1). Either way at least one prompt token is
computed (vLLM caps a hit at num_tokens - 1, SGLang matches at most input_len - 1). The cached tokens are skipped
at admission: they count neither in the step's token budget nor in its computed tokens, but the request's chunks
attend over them (a chunk's context `ch_ctx` starts at the hit), and its KV holds them. The prefix enters the cache
at the end of the step that computed it (vLLM caches a block once it is full and computed; SGLang inserts each
chunk into the radix tree), and then stays: the requests that share it keep it referenced, so LRU eviction of it
is not modelled. KV usage counts each request's whole context (shared blocks are not deduplicated), so under
memory pressure this engine preempts a little earlier than vLLM would. A re-prefill after a preemption hits the
shared prefix again (its own blocks are taken as evicted).
All policies cap running requests at max_num_seqs and hold a KV cache of `kv_cache_tokens` tokens; when a step
cannot get the KV it needs, the most recently admitted running request is preempted (recompute: its KV is freed,
it goes back to the head of the queue and later re-prefills prompt + generated tokens).

Why the state looks the way it does: a step must cost O(1) Python work however many sequences decode. Every
running decode advances once per decode-carrying step, so decode progress is implied by one global counter D
(the number of decode-carrying steps so far): a request that joined the decode set at D0 has produced D - D0
decode tokens, the summed context of all decodes is `S + n*D`, and a min-heap keyed by the D at which each
request finishes retires them. Prefill chunk queues are short Python lists. Token times are reconstructed
afterwards, vectorised, from the step end times (see `SimResult.token_steps`).
"""
from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

import numpy as np

from stallscope.errors import StallscopeError

from .stepmodel import Preset, noise_factors
from .workload import Workload

POLICIES = ("v0", "chunked", "sglang")
KIND_DECODE, KIND_PREFILL, KIND_MIXED = 0, 1, 2
KIND_NAMES = ("decode", "prefill", "mixed")


@dataclass(frozen=True)
class EngineConfig:
    policy: str
    budget: int
    max_num_seqs: int = 256
    kv_cache_tokens: int | None = None   # None: the preset's capacity
    mixed_chunk: bool = False            # sglang --enable-mixed-chunk
    prefix_caching: bool = False         # serve the workload's shared prefix from the KV cache (see the module doc)
    cache_block: int | None = None       # prefix-cache granularity in tokens; None: 16 (vLLM) or 1 (sglang radix)

    def validate(self, workload: Workload, preset: Preset) -> None:
        if self.policy not in POLICIES:
            raise StallscopeError(f"unknown policy {self.policy!r}; use one of {', '.join(POLICIES)}")
        if self.cache_block is not None and self.cache_block < 1:
            raise StallscopeError("the prefix-cache block size must be positive")
        if self.budget < 1 or self.max_num_seqs < 1:
            raise StallscopeError("--budget and --max-num-seqs must be positive")
        if self.policy == "chunked" and self.budget < self.max_num_seqs:
            # vLLM refuses this configuration too: every running decode must fit in one step's budget.
            raise StallscopeError(f"--budget ({self.budget}) must be >= --max-num-seqs ({self.max_num_seqs}) "
                                  "for chunked prefill (vLLM: max_num_batched_tokens >= max_num_seqs)")
        longest = int(workload.prompt_len.max()) if len(workload) else 0
        if self.policy == "v0" and longest > self.budget:
            raise StallscopeError(f"--budget {self.budget} is smaller than the longest prompt ({longest} tokens); "
                                  "without chunking vLLM V0 would reject it: raise --budget (max_num_batched_tokens)")
        cap = self.kv_capacity(preset)
        need = int((workload.prompt_len + workload.output_len).max()) if len(workload) else 0
        if need > cap:
            raise StallscopeError(f"a request needs {need} KV tokens but the KV cache holds {cap}: "
                                  "raise --kv-cache-tokens or shorten the requests")

    def cache_granularity(self) -> int:
        if self.cache_block is not None:
            return int(self.cache_block)
        return 1 if self.policy == "sglang" else 16

    def kv_capacity(self, preset: Preset) -> int:
        return int(self.kv_cache_tokens if self.kv_cache_tokens is not None else preset.kv_cache_tokens)


@dataclass
class SimResult:
    """Everything the emitters and truth need; times are int64 ns relative to the benchmark start."""
    preset: Preset
    config: EngineConfig
    workload: Workload
    # steps
    start_ns: np.ndarray
    end_ns: np.ndarray
    kind: np.ndarray            # 0 decode, 1 prefill, 2 mixed
    n_decode: np.ndarray        # decode sequences in the step
    decode_index: np.ndarray    # D of the step when it carries decodes, else -1
    prefill_tokens: np.ndarray
    prefill_reqs: np.ndarray
    kv_read: np.ndarray         # KV tokens read by the decode part
    attn_work: np.ndarray       # sum c*(k + c/2) of the prefill part
    pred_ms: np.ndarray         # noise-free model time
    noise: np.ndarray           # multiplicative noise factor applied
    n_waiting: np.ndarray       # queue length when the step was scheduled
    n_running: np.ndarray       # running requests (decoding + partially prefilled) after scheduling
    decoders: np.ndarray        # requests in the decode phase when the step was scheduled (stalled if not in it)
    kv_used: np.ndarray         # KV tokens held after the step
    # prefill chunks (one row per request per step)
    ch_step: np.ndarray
    ch_req: np.ndarray
    ch_tokens: np.ndarray
    ch_ctx: np.ndarray          # tokens of this request already in the KV cache before the chunk
    ch_last: np.ndarray         # the chunk completes the (re)prefill: a token is emitted at the step end
    ch_recompute: np.ndarray    # the chunk recomputes a preempted request
    # decode segments: request r emits `count` tokens at the decode-carrying steps D0 .. D0+count-1
    sg_req: np.ndarray
    sg_d0: np.ndarray
    sg_count: np.ndarray
    step_of_decode: np.ndarray  # decode index D -> step index
    preemptions: np.ndarray     # per request
    wall_s: float = 0.0
    # prefix caching (None when it is off): tokens served from the cache at each admission
    ch_hit: np.ndarray | None = None         # per chunk: cached tokens found when this chunk admitted the request
    cached_tokens: np.ndarray | None = None  # per request: cached tokens at its first admission

    @property
    def n_steps(self) -> int:
        return len(self.start_ns)

    @property
    def step_ms(self) -> np.ndarray:
        return (self.end_ns - self.start_ns) / 1e6

    def pred_decode_only_ms(self) -> np.ndarray:
        """Noise-free time of a decode-only step with the same decodes as each step (NaN without decodes)."""
        t = self.preset.decode_only_ms(self.n_decode, self.kv_read)
        return np.where(self.n_decode > 0, t, np.nan)

    def token_steps(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(request, token_index, step) of every emitted token, sorted by request then token index."""
        last = self.ch_last.astype(bool)
        r1, s1 = self.ch_req[last], self.ch_step[last]
        cnt = self.sg_count
        total = int(cnt.sum())
        r2 = np.repeat(self.sg_req, cnt)
        starts = np.repeat(self.sg_d0 - np.concatenate([[0], np.cumsum(cnt)[:-1]]), cnt)
        d = starts + np.arange(total, dtype=np.int64)
        s2 = self.step_of_decode[d]
        req = np.concatenate([r1, r2]).astype(np.int64)
        step = np.concatenate([s1, s2]).astype(np.int64)
        order = np.lexsort((step, req))
        req, step = req[order], step[order]
        first = np.concatenate([[True], req[1:] != req[:-1]]) if len(req) else np.zeros(0, bool)
        grp_start = np.maximum.accumulate(np.where(first, np.arange(len(req)), 0)) if len(req) else req
        return req, np.arange(len(req)) - grp_start, step


class _Buf:
    """Growable typed columns for the per-step records (appending to numpy in blocks, not per element)."""

    def __init__(self, names_types, block=1 << 15):
        self.block = block
        self.n = 0
        self.cols = {n: np.empty(block, dtype=t) for n, t in names_types}

    def grow(self):
        for k, v in self.cols.items():
            self.cols[k] = np.concatenate([v, np.empty(self.block, dtype=v.dtype)])
        self.block *= 2

    def arrays(self):
        return {k: v[: self.n].copy() for k, v in self.cols.items()}


def simulate(workload: Workload, preset: Preset, config: EngineConfig, seed: int) -> SimResult:
    """Run the workload through the engine; the same seed gives the same result."""
    import time

    config.validate(workload, preset)
    t_wall = time.perf_counter()
    rng = np.random.default_rng([seed, 0x5EED])
    policy = config.policy
    C = int(config.budget)
    max_seqs = int(config.max_num_seqs)
    CAP = config.kv_capacity(preset)
    mixed = bool(config.mixed_chunk)

    n = len(workload)
    A = workload.arrival_ns.tolist()
    P = workload.prompt_len.tolist()
    O = workload.output_len.tolist()
    target = list(P)          # tokens the current (re)prefill must compute
    computed = [0] * n        # tokens of the current prefill computed so far
    emitted = [0] * n         # tokens emitted so far (before the current decode segment)
    state = [0] * n           # 0 not arrived, 1 waiting, 2 prefilling, 3 decoding, 4 done
    gen = [0] * n             # invalidates heap entries of preempted requests
    d0 = [0] * n              # D at which the current decode segment started
    p0 = [0] * n              # KV tokens held when the current decode segment started
    preempt = [0] * n
    caching = bool(config.prefix_caching) and workload.prefix_len is not None
    blk = config.cache_granularity()
    PL = workload.prefix_len.tolist() if caching else None
    avail = 0                 # tokens of the shared prefix in the cache (whole blocks)
    first_hit = [-1] * n

    waiting: deque[int] = deque()
    partial: list[int] = []   # requests with an unfinished prefill, in running order
    running_order: list[int] = []
    heap: list[tuple[int, int, int]] = []
    n_dec = 0
    S = 0                     # sum over decoding requests of (p0 - d0 + 1): KV read of step D = S + n_dec*D
    kv_partial = 0            # KV held by partially prefilled requests
    n_running = 0
    D = 0
    next_arr = 0
    now = 0

    sb = _Buf([("start", np.int64), ("end", np.int64), ("kind", np.int8), ("ndec", np.int32), ("didx", np.int64),
               ("ptok", np.int64), ("preq", np.int32), ("kv", np.int64), ("attn", np.float64), ("pred", np.float64),
               ("noise", np.float64), ("nwait", np.int32), ("nrun", np.int32), ("kvused", np.int64),
               ("decoders", np.int32)])
    cb = _Buf([("step", np.int64), ("req", np.int64), ("tok", np.int64), ("ctx", np.int64), ("last", np.int8),
               ("recomp", np.int8), ("hit", np.int64)])
    gb = _Buf([("req", np.int64), ("d0", np.int64), ("cnt", np.int64)])
    dec_steps: list[int] = []
    noise = noise_factors(rng, 1 << 16, preset)
    lo_gap, hi_gap = preset.host_gap_ms
    gaps = np.rint(rng.uniform(lo_gap, hi_gap, 1 << 16) * 1e6).astype(np.int64)
    noise_l, gaps_l = noise.tolist(), gaps.tolist()
    b0, b1, b2, b3, b4 = (preset.b0.value, preset.b1.value, preset.b2.value, preset.b3.value, preset.b4.value)
    tile = preset.tile
    step = 0
    done = 0

    def preempt_one() -> bool:
        """Preempt the most recently admitted running request (recompute). False when nothing can be preempted."""
        nonlocal n_dec, S, kv_partial, n_running
        while running_order:
            r = running_order.pop()
            st = state[r]
            if st == 3:
                k = D - d0[r]
                if k:
                    gb_append(r, d0[r], k)
                emitted[r] += k
                n_dec -= 1
                S -= p0[r] - d0[r] + 1
                gen[r] += 1
                target[r] = P[r] + emitted[r]
            elif st == 2:
                kv_partial -= computed[r]
                partial.remove(r)
            else:
                continue
            computed[r] = 0
            state[r] = 1
            preempt[r] += 1
            n_running -= 1
            waiting.appendleft(r)
            return True
        return False

    def hit(r: int) -> int:
        """Prompt tokens of r the prefix cache serves if r is admitted now (0 without prefix caching)."""
        if not caching or not PL[r]:
            return 0
        h = min(avail, PL[r], target[r] - 1)
        return h - h % blk

    def admit(c: int, h: int = 0) -> int:
        """Admit the head of the waiting queue with `h` cached tokens and a first chunk of `c`; returns `c`."""
        nonlocal n_running, kv_partial
        r = waiting.popleft()
        state[r] = 2
        partial.append(r)
        running_order.append(r)
        n_running += 1
        kv_partial += h
        parts.append((r, c, h))
        hits.append(h)
        if first_hit[r] < 0:
            first_hit[r] = h
        return c

    def gb_append(r, start, cnt):
        if gb.n == len(gb.cols["req"]):
            gb.grow()
        i = gb.n
        gb.cols["req"][i] = r
        gb.cols["d0"][i] = start
        gb.cols["cnt"][i] = cnt
        gb.n += 1

    cols = sb.cols
    ccols = cb.cols
    while done < n:
        while next_arr < n and A[next_arr] <= now:
            state[next_arr] = 1
            waiting.append(next_arr)
            next_arr += 1
        if not waiting and n_dec == 0 and not partial:
            if next_arr >= n:
                break
            now = A[next_arr]
            continue
        n_wait_sched = len(waiting)

        # -- schedule one step ---------------------------------------------------------------------------------
        kv_used = S - n_dec + n_dec * D + kv_partial
        free = CAP - kv_used
        parts: list[tuple[int, int, int]] = []
        hits: list[int] = []      # per part: cached tokens found at admission (0 for a continuing chunk)
        step_dec = n_dec
        if policy == "chunked":
            preempted_now = False
            while free < n_dec and preempt_one():
                preempted_now = True
                kv_used = S - n_dec + n_dec * D + kv_partial
                free = CAP - kv_used
            step_dec = n_dec
            free -= n_dec
            left = C - n_dec
            for r in partial:
                if left <= 0 or free <= 0:
                    break
                c = min(target[r] - computed[r], left, free)
                parts.append((r, c, computed[r]))
                hits.append(0)
                left -= c
                free -= c
            # vLLM V1 admits no waiting request in a step that had to preempt.
            while waiting and left > 0 and n_running < max_seqs and not preempted_now:
                r = waiting[0]
                h = hit(r)
                c = min(target[r] - h, left)
                if c + h > free:
                    break
                admit(c, h)
                left -= c
                free -= c + h
        elif policy == "v0":
            tok = 0
            while waiting and n_running < max_seqs:
                r = waiting[0]
                h = hit(r)
                need = target[r] - h
                if tok + need > C or need + h > free:
                    break
                tok += admit(need, h)
                free -= need + h
            if parts:
                step_dec = 0
            else:
                while free < n_dec and preempt_one():
                    free = CAP - (S - n_dec + n_dec * D + kv_partial)
                step_dec = n_dec
        else:  # sglang
            if mixed:  # decodes ride along in every forward: reserve their KV before admitting prefills
                while free < n_dec and preempt_one():
                    free = CAP - (S - n_dec + n_dec * D + kv_partial)
                free -= n_dec
            left = C
            for r in partial:  # at most one chunked request
                c = min(target[r] - computed[r], left, free)
                if c <= 0:
                    break
                parts.append((r, c, computed[r]))
                hits.append(0)
                left -= c
                free -= c
            while waiting and left > 0 and n_running < max_seqs:
                r = waiting[0]
                h = hit(r)
                c = min(target[r] - h, left)
                if c + h > free:
                    break
                admit(c, h)
                left -= c
                free -= c + h
                if c + h < target[r]:
                    break  # this request is now the chunked request; the batch is full
            if parts:
                step_dec = n_dec if mixed else 0
            else:
                if not mixed:
                    while free < n_dec and preempt_one():
                        free = CAP - (S - n_dec + n_dec * D + kv_partial)
                step_dec = n_dec

        if not parts and step_dec == 0:
            if next_arr < n and not partial and n_dec == 0:
                now = max(now, A[next_arr])
                continue
            raise StallscopeError("the simulated engine cannot make progress (KV cache too small for the head "
                                  "of the queue); raise --kv-cache-tokens")

        decoders_sched = n_dec
        # -- time the step -------------------------------------------------------------------------------------
        ptok = 0
        attn = 0.0
        for r, c, k in parts:
            ptok += c
            attn += c * (k + c * 0.5)
        kv_read = S + step_dec * D if step_dec else 0
        tokens = ptok + step_dec
        pred = (b0 + b1 * (-(-tokens // tile) * tile) + b2 * kv_read + b3 * attn + b4 * step_dec)
        j = step & 0xFFFF
        if j == 0 and step:
            noise_l = noise_factors(rng, 1 << 16, preset).tolist()
            gaps_l = np.rint(rng.uniform(lo_gap, hi_gap, 1 << 16) * 1e6).astype(np.int64).tolist()
        nz = noise_l[j]
        dur = int(pred * nz * 1e6 + 0.5)
        start = now
        end = start + dur

        # -- advance state ---------------------------------------------------------------------------------------
        if step_dec:
            dec_steps.append(step)
            D += 1
            while heap and heap[0][0] <= D:
                fd, r, g = heapq.heappop(heap)
                if g != gen[r] or state[r] != 3:
                    continue
                k = fd - d0[r]
                gb_append(r, d0[r], k)
                emitted[r] += k
                state[r] = 4
                n_dec -= 1
                S -= p0[r] - d0[r] + 1
                n_running -= 1
                done += 1
        if cb.n + len(parts) > len(ccols["req"]):
            cb.grow()
            ccols = cb.cols
        for (r, c, k), h in zip(parts, hits):
            i = cb.n
            ccols["step"][i] = step
            ccols["req"][i] = r
            ccols["tok"][i] = c
            ccols["ctx"][i] = k
            ccols["recomp"][i] = 1 if preempt[r] else 0
            ccols["hit"][i] = h
            cb.n += 1
            computed[r] = k + c
            if caching and PL[r]:
                # The prefix enters the cache once computed: whole blocks in vLLM, every token in SGLang's radix.
                got = min(k + c, PL[r])
                avail = max(avail, got - got % blk)
            if k + c >= target[r]:
                ccols["last"][i] = 1
                partial.remove(r)
                kv_partial -= k
                emitted[r] += 1
                if emitted[r] >= O[r]:
                    state[r] = 4
                    n_running -= 1
                    done += 1
                else:
                    state[r] = 3
                    d0[r] = D
                    p0[r] = target[r]
                    n_dec += 1
                    S += target[r] - D + 1
                    heapq.heappush(heap, (D + O[r] - emitted[r], r, gen[r]))
            else:
                ccols["last"][i] = 0
                kv_partial += c

        if sb.n == len(cols["start"]):
            sb.grow()
            cols = sb.cols
        cols["start"][step] = start
        cols["end"][step] = end
        cols["kind"][step] = (KIND_MIXED if step_dec else KIND_PREFILL) if parts else KIND_DECODE
        cols["ndec"][step] = step_dec
        cols["didx"][step] = D - 1 if step_dec else -1
        cols["ptok"][step] = ptok
        cols["preq"][step] = len(parts)
        cols["kv"][step] = kv_read
        cols["attn"][step] = attn
        cols["pred"][step] = pred
        cols["noise"][step] = nz
        cols["nwait"][step] = n_wait_sched
        cols["nrun"][step] = n_running
        cols["kvused"][step] = S - n_dec + n_dec * D + kv_partial
        cols["decoders"][step] = decoders_sched
        sb.n += 1
        step += 1
        now = end + gaps_l[j]

    s = sb.arrays()
    c = cb.arrays()
    g = gb.arrays()
    return SimResult(
        preset=preset, config=config, workload=workload,
        start_ns=s["start"], end_ns=s["end"], kind=s["kind"], n_decode=s["ndec"], decode_index=s["didx"],
        prefill_tokens=s["ptok"], prefill_reqs=s["preq"], kv_read=s["kv"], attn_work=s["attn"], pred_ms=s["pred"],
        noise=s["noise"], n_waiting=s["nwait"], n_running=s["nrun"], kv_used=s["kvused"],
        decoders=s["decoders"],
        ch_step=c["step"], ch_req=c["req"], ch_tokens=c["tok"], ch_ctx=c["ctx"], ch_last=c["last"],
        ch_recompute=c["recomp"], sg_req=g["req"], sg_d0=g["d0"], sg_count=g["cnt"],
        step_of_decode=np.asarray(dec_steps, dtype=np.int64), preemptions=np.asarray(preempt, dtype=np.int32),
        wall_s=time.perf_counter() - t_wall,
        ch_hit=c["hit"] if caching else None,
        cached_tokens=np.maximum(np.asarray(first_hit, dtype=np.int64), 0) if caching else None,
    )
