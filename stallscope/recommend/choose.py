"""Pick the chunk budget from the replayed goodput curve, cross-check it with the closed-form rule, and say it in
each engine's words (../shared/notes/goodput-and-chunking.md §3.2, §3.4, §3.5)."""
from __future__ import annotations

import math

import numpy as np

MARGIN = 0.1          # the closed form keeps t_mix within (1 - margin) x the ITL SLO
NOISE_FLOOR = 0.02    # budgets within 2 % of the best goodput (or within the replay band) count as ties


def pick(results) -> tuple[int, list[int]]:
    """Index of the chosen budget: the largest whose replayed goodput is within noise of the best; and the ties."""
    means = np.array([r.goodput_rps for r in results])
    best = int(np.argmax(means))
    b = results[best]
    ties = []
    for i, r in enumerate(results):
        tol = max((b.hi - b.lo) / 2, (r.hi - r.lo) / 2, NOISE_FLOOR * b.goodput_rps)
        if r.goodput_rps >= b.goodput_rps - tol and r.goodput_rps > 0:
            ties.append(i)
    if not ties:
        return best, [best]
    # "Largest": the unchunked policy (chunk_tokens None) counts as the largest budget.
    key = lambda i: math.inf if results[i].chunk_tokens is None else results[i].chunk_tokens  # noqa: E731
    return max(ties, key=key), ties


def closed_form(model, *, budgets, B90: float, kv90: float, prompts: np.ndarray, osl_median: float,
                rate_rps: float, slo: dict, prefill_only: bool) -> dict:
    """§3.4: the largest budget whose predicted p99 mixed step at the p90 decode batch fits the ITL SLO with a
    margin, whose mean gap fits the TPOT SLO, and whose prefill capacity keeps up; plus each budget's TTFT cost."""
    rows = []
    lam = rate_rps / 1000.0   # per ms
    t_dec = float(model.predict(B90, kv90, 0.0, B90))
    t_dec99 = t_dec * (1 + model.q99_decode)
    dec = 0.0 if prefill_only else B90
    prompts = np.asarray(prompts, dtype=np.float64)
    prompt_mean, prompt_p90 = float(prompts.mean()), float(np.quantile(prompts, 0.9))
    # The ITL tail is set by the longest prompts that arrive often enough for one in ten requests to live through
    # one: quantile q with rate x (1 - q) x request lifetime = 0.1.
    life_ms = osl_median * t_dec
    q_tail = float(np.clip(1 - 0.1 / max(rate_rps / 1000.0 * life_ms, 1e-9), 0.5, 1.0))
    prompt_tail = float(np.quantile(prompts, q_tail))

    def t_mix(c: float, L: float) -> float:
        # A chunk of c tokens from the middle of an L-token prompt (a whole prompt when c >= L).
        k = max(L - c, 0.0) / 2
        return float(model.predict(c + dec, kv90 if dec else 0.0, c * (k + c / 2), dec))

    for C in budgets:
        room = np.inf if C is None else (C if prefill_only else C - B90)
        if room <= 0:
            rows.append({"chunk_tokens": C, "feasible": False, "binding": "budget below the decode batch"})
            continue
        # Mean-load chunk (one typical prompt, or the budget's room) and the tail chunk (a p90 prompt).
        c_mean, c_tail, c90 = min(room, prompt_mean), min(room, prompt_tail), min(room, prompt_p90)
        tm = t_mix(c_mean, prompt_mean)
        gap99 = t_mix(c_tail, prompt_tail) * (1 + model.q99_mixed) + (t_dec99 if prefill_only else 0.0)
        a = lam * prompt_mean / c_mean
        denom = 1 - a * (tm - (0 if prefill_only else t_dec))
        E = t_dec / denom if denom > 0 else np.inf
        f = a * E if np.isfinite(E) else 1.0
        binding = None
        if f >= 0.8:
            binding = f"prefill capacity (prefill steps would be {min(f, 1):.0%} of all steps)"
        if slo.get("itl_ms") is not None and f * osl_median >= 0.1 and gap99 > (1 - MARGIN) * slo["itl_ms"]:
            binding = binding or (f"ITL tail (p99 mixed step {gap99:.0f} ms > {(1 - MARGIN) * slo['itl_ms']:.0f} ms)")
        if slo.get("tpot_ms") is not None and E > slo["tpot_ms"]:
            binding = binding or f"mean TPOT ({E:.1f} ms > {slo['tpot_ms']:g} ms)"
        k = int(np.ceil(prompt_p90 / c90))
        S = k * t_mix(c90, prompt_p90)
        W = f * S / (2 * (1 - f)) if f < 1 else np.inf
        ttft = float(W + S)
        if slo.get("ttft_ms") is not None and ttft > slo["ttft_ms"]:
            binding = binding or f"TTFT ({ttft:.0f} ms > {slo['ttft_ms']:g} ms at the p90 prompt)"
        rows.append({"chunk_tokens": C, "feasible": binding is None, "binding": binding, "t_mix_ms": tm,
                     "t_mix_p99_ms": float(gap99), "mean_gap_ms": float(E), "prefill_share": float(f),
                     "ttft_ms": ttft})
    feas = [r for r in rows if r["feasible"]]
    key = lambda r: math.inf if r["chunk_tokens"] is None else r["chunk_tokens"]  # noqa: E731
    choice = max(feas, key=key)["chunk_tokens"] if feas else "none"
    return {"chunk_tokens": choice, "rows": rows, "t_dec_ms": t_dec, "decode_batch_p90": B90,
            "tail_prompt_tokens": prompt_tail, "tail_prompt_quantile": q_tail}


def agreement(replay_choice, cf: dict, budgets) -> tuple[bool, str | None]:
    """Whether the replay and the closed form agree (same or neighbouring budget), and why not."""
    order = list(budgets)
    cf_choice = cf["chunk_tokens"]
    if cf_choice == "none":
        return False, ("the closed form finds no budget feasible at the p90 decode batch (it judges every mixed step "
                       "at the tail and the queue by its mean); the replay judges each request, and some budgets "
                       "still serve most requests within the SLO")
    i, j = order.index(replay_choice), order.index(cf_choice)
    if abs(i - j) <= 1:
        return True, None
    row = {r["chunk_tokens"]: r for r in cf["rows"]}
    nxt = order[j + 1] if j + 1 < len(order) else None
    if j < i:
        why = row.get(nxt, {}).get("binding") if nxt is not None else None
        return False, (f"the closed form stops at {_name(cf_choice)} because larger budgets hit the {why}; the replay "
                       f"of the actual arrivals shows that few requests meet such steps (bursts are rare or short), "
                       f"so {_name(replay_choice)} still maximises goodput")
    why = row.get(order[i + 1], {}).get("binding") if i + 1 < len(order) else None
    return False, (f"the closed form allows up to {_name(cf_choice)} (mean-value queue, typical prompts); the replay "
                   f"of the actual arrivals loses goodput above {_name(replay_choice)}"
                   + (f" ({why} in the closed form too)" if why else
                      " to queueing bursts and long prompts the mean-value rule does not see"))


def _name(c) -> str:
    return "no chunking" if c is None else str(c)


def setting(engine: str, policy_observed: str, C: int | None, *, longest_prompt: int, prompt_p50: float,
            prompt_p99: float, prompt_p90: float, itl_binds: bool, max_num_seqs: int) -> str:
    """The recommendation in the engine's own flags."""
    heavy = prompt_p99 > 4 * max(prompt_p50, 1)
    if engine == "sglang":
        if C is None:
            return "--chunked-prefill-size -1"
        # itl_binds: the replay with decodes riding in prefill forwards served more under the per-token SLO.
        return f"--chunked-prefill-size {C}" + (" --enable-mixed-chunk" if itl_binds else "")
    if engine == "tgi":
        n = C if C is not None else max(longest_prompt, 4096)
        return f"--max-batch-prefill-tokens {n}"
    if C is None:
        if policy_observed == "v0":
            return "keep chunked prefill off (vLLM V0 prefill-first scheduling)"
        n = int(math.ceil((longest_prompt + max_num_seqs) / 256) * 256)
        return f"--max-num-batched-tokens {n} (no prefill is ever chunked)"
    s = ("--enable-chunked-prefill " if policy_observed == "v0" else "") + f"--max-num-batched-tokens {C}"
    if heavy:
        thr = int(min(C, max(256, math.ceil(prompt_p90 / 256) * 256)))
        if thr < C:
            s += f" --long-prefill-token-threshold {thr}"
    return s
