"""Aggregated versus disaggregated serving: per-GPU goodput of one pool at a token budget against x prefill and y
decode instances of the same GPU count, charging the KV-cache transfer (../shared/notes/goodput-and-chunking.md §4.4).

A fluid model driven by the fitted step model: mean step time E by fixed point (decode concurrency by Little's law,
the share f of steps that carry prefill from the prefill tokens needed per second), M/D/1 queueing for the prefill
side, the conformal p99 step time for the ITL tail. Capacity = the largest arrival rate meeting every SLO (bisection);
per-GPU goodput = capacity / GPUs. It ranks and explains; the replay gives the final numbers for the budget.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from stallscope.errors import StallscopeError

# Line rates per direction, GB/s (vendor figures, note §4.2 [R]); the effective bandwidth is 70 % of them.
LINKS_GBPS = {"nvlink": 450.0, "ib": 50.0, "roce": 25.0, "pcie": 64.0}
LINK_EFFICIENCY = 0.7
KV_SETUP_MS = 2.0
# (layers, KV heads, head dim, dtype bytes) of well-known models (their config.json), matched by name.
MODEL_CONFIGS = {
    "llama-70b": (80, 8, 128, 2), "llama-2-70b": (80, 8, 128, 2), "llama-3-70b": (80, 8, 128, 2),
    "llama-3.1-70b": (80, 8, 128, 2), "llama-3.3-70b": (80, 8, 128, 2), "qwen2.5-72b": (80, 8, 128, 2),
    "llama-8b": (32, 8, 128, 2), "llama-3-8b": (32, 8, 128, 2), "llama-3.1-8b": (32, 8, 128, 2),
    "mistral-7b": (32, 8, 128, 2), "qwen2.5-7b": (28, 4, 128, 2), "llama-2-7b": (32, 32, 128, 2),
}


def kv_bytes_per_token(spec: str | None, model_name: str | None) -> tuple[int | None, str]:
    """Bytes of K and V per token: from `--model-config` (a known name, or LAYERS,KV_HEADS,HEAD_DIM[,DTYPE_BYTES]),
    else from the served model's name; (None, why) when neither says."""
    def known(name: str):
        n = name.lower()
        for key in sorted(MODEL_CONFIGS, key=len, reverse=True):
            k = key.replace("llama-", "llama-").split("-")
            if all(part in n for part in k):
                return key, MODEL_CONFIGS[key]
        return None, None

    if spec:
        if re.fullmatch(r"\d+,\d+,\d+(,\d+)?", spec.strip()):
            parts = [int(x) for x in spec.split(",")]
            layers, heads, dim = parts[:3]
            dtype = parts[3] if len(parts) > 3 else 2
            return 2 * layers * heads * dim * dtype, f"--model-config {spec}"
        key, cfg = known(spec)
        if cfg is None:
            raise StallscopeError(f"unknown --model-config {spec!r}: give LAYERS,KV_HEADS,HEAD_DIM[,DTYPE_BYTES] or "
                                  f"one of {', '.join(sorted(MODEL_CONFIGS))}")
        return 2 * cfg[0] * cfg[1] * cfg[2] * cfg[3], f"--model-config {key}"
    if model_name:
        key, cfg = known(model_name)
        if cfg is not None:
            return 2 * cfg[0] * cfg[1] * cfg[2] * cfg[3], f"{model_name} (config of {key})"
    return None, ("the model's KV geometry (layers, KV heads, head dim): the store names no known model; give "
                  "--model-config LAYERS,KV_HEADS,HEAD_DIM[,DTYPE_BYTES]")


def link_gbps(spec: str | None) -> tuple[float, str]:
    if not spec:
        return LINKS_GBPS["ib"], "ib (InfiniBand NDR, assumed: give --kv-link)"
    s = spec.strip().lower()
    if s in LINKS_GBPS:
        return LINKS_GBPS[s], s
    try:
        v = float(s.removesuffix("gbps").removesuffix("gb/s"))
    except ValueError:
        raise StallscopeError(f"bad --kv-link {spec!r}: use nvlink, ib, roce, pcie or a bandwidth in GB/s") from None
    if v <= 0:
        raise StallscopeError(f"bad --kv-link {spec!r}: the bandwidth must be positive")
    return v, f"{v:g} GB/s"


@dataclass
class Workload:
    rate_rps: float
    isl: float               # mean prompt tokens
    osl: float               # mean output tokens
    isl_p90: float


@dataclass
class Slo:
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    itl_ms: float | None = None


@dataclass
class Option:
    kind: str                # aggregated | disaggregated
    capacity_rps: float      # arrival rate per deployment meeting the SLOs
    per_gpu_rps: float
    split: tuple[int, int] | None
    binding: str             # the SLO or limit that caps it
    chunk_tokens: int | None = None


class Fluid:
    """Mean-value model of one instance on a step model `predict(tokens, kv, attn, decode_seqs) -> ms`."""

    def __init__(self, predict, q99_decode: float, q99_mixed: float, gpus_per_instance: int, prefill_only_budget=False):
        self.p = lambda *a: float(predict(*a))
        self.qd, self.qm = q99_decode, q99_mixed
        self.g = gpus_per_instance
        self.sglang = prefill_only_budget

    def aggregated(self, lam: float, C: int, w: Workload, slo: Slo) -> tuple[bool, str]:
        lam_ms = lam / 1000.0
        ctx = w.isl + w.osl / 2
        E = self.p(1, ctx, 0, 1)
        B = f = t_mix = t_dec = 0.0
        for _ in range(200):
            B = lam_ms * w.osl * E
            c = C if self.sglang else C - B
            if c <= 1:
                return False, "budget"
            t_dec = self.p(max(B, 1), B * ctx, 0, B)
            t_mix = self.p(C if not self.sglang else c + B, B * ctx, c * (w.isl / 2 + c / 2), B)
            f = lam_ms * w.isl * E / c
            if f >= 0.9:
                return False, "prefill capacity"
            En = f * t_mix + (1 - f) * t_dec
            if abs(En - E) < 1e-6 * E:
                E = En
                break
            E = 0.5 * (E + En)
        c = C if self.sglang else C - B
        if slo.tpot_ms is not None and E > slo.tpot_ms:
            return False, "tpot"
        if slo.itl_ms is not None:
            tail = t_mix * (1 + self.qm) if f * w.osl >= 0.1 else t_dec * (1 + self.qd)
            if tail > slo.itl_ms:
                return False, "itl"
        if slo.ttft_ms is not None:
            k = math.ceil(w.isl_p90 / c)
            S = k * t_mix
            W = f * S / (2 * (1 - f))
            if W + S > slo.ttft_ms:
                return False, "ttft"
        return True, ""

    def disaggregated(self, lam: float, x: int, y: int, w: Workload, slo: Slo, t_kv_ms: float) -> tuple[bool, str]:
        lam_ms = lam / 1000.0
        S_p = self.p(w.isl, 0, w.isl * w.isl / 2, 0)
        rho = lam_ms / x * S_p
        if rho >= 0.9:
            return False, "prefill capacity"
        W = rho * S_p / (2 * (1 - rho))
        ctx = w.isl + w.osl / 2
        lam_d = lam_ms / y
        t_dec = self.p(1, ctx, 0, 1)
        for _ in range(200):
            B = lam_d * w.osl * t_dec
            tn = self.p(max(B, 1), B * ctx, 0, B)
            if abs(tn - t_dec) < 1e-6 * t_dec:
                t_dec = tn
                break
            t_dec = 0.5 * (t_dec + tn)
            if t_dec > 1e6:
                return False, "decode capacity"
        if slo.tpot_ms is not None and t_dec > slo.tpot_ms:
            return False, "tpot"
        if slo.itl_ms is not None and t_dec * (1 + self.qd) > slo.itl_ms:
            return False, "itl"
        if slo.ttft_ms is not None:
            S90 = self.p(w.isl_p90, 0, w.isl_p90 ** 2 / 2, 0)
            if W + S90 + t_kv_ms + t_dec > slo.ttft_ms:
                return False, "ttft"
        return True, ""


def _capacity(ok, hi: float = 1000.0) -> tuple[float, str]:
    """Largest rate with ok(rate) true (bisection; ok is monotone in the rate for these models)."""
    good, why = ok(1e-6)
    if not good:
        return 0.0, why
    lo, top = 1e-6, 1.0
    while top < hi:
        g, why = ok(top)
        if not g:
            break
        lo, top = top, top * 2
    bind = why
    for _ in range(40):
        mid = (lo + top) / 2
        g, why = ok(mid)
        if g:
            lo = mid
        else:
            top, bind = mid, why
        if top - lo < 1e-3 * top:
            break
    return lo, bind or "none"


def compare(fluid: Fluid, w: Workload, slo: Slo, *, instances: int, budgets, kv_bytes: int | None,
            link_gbps_: float) -> dict:
    """Best aggregated option over `budgets` and best disaggregated split of `instances` instances."""
    G = fluid.g
    aggs = []
    for C in budgets:
        cap, why = _capacity(lambda lam: fluid.aggregated(lam, C, w, slo))
        aggs.append(Option("aggregated", cap * instances, cap / G, None, why, C))
    agg = max(aggs, key=lambda o: (o.per_gpu_rps, o.chunk_tokens or 0))
    dis = None
    if kv_bytes is not None and instances >= 2:
        t_kv = w.isl_p90 * kv_bytes / (link_gbps_ * 1e9 * LINK_EFFICIENCY * G) * 1e3 + KV_SETUP_MS
        for x in range(1, instances):
            y = instances - x
            cap, why = _capacity(lambda lam: fluid.disaggregated(lam, x, y, w, slo, t_kv))
            o = Option("disaggregated", cap, cap / (instances * G), (x, y), why)
            if dis is None or o.per_gpu_rps > dis.per_gpu_rps:
                dis = o
    return {"aggregated": agg, "aggregated_by_budget": aggs, "disaggregated": dis}


def decide(agg: Option, dis: Option | None) -> tuple[str, float | None, str]:
    """(placement, margin, why). Disaggregation must win by more than 10 % (the fluid model's error): within that
    the simpler single pool is kept."""
    if dis is None:
        return "aggregated", None, "disaggregation not evaluated"
    best = max(agg.per_gpu_rps, dis.per_gpu_rps)
    margin = (dis.per_gpu_rps - agg.per_gpu_rps) / best if best > 0 else 0.0
    if dis.per_gpu_rps > agg.per_gpu_rps * 1.10:
        return "disaggregated", margin, (f"disaggregated {dis.split[0]}P:{dis.split[1]}D serves {margin:+.0%} per GPU "
                                         f"(aggregated is capped by {agg.binding})")
    if margin > 0:
        return "aggregated", margin, (f"disaggregation gains only {margin:+.0%} per GPU, within the model's error: "
                                      "keep one pool (simpler)")
    return "aggregated", margin, (f"aggregated serves {-margin:.0%} more per GPU (disaggregated is capped by "
                                  f"{dis.binding})")
