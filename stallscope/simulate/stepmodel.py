"""Step-time model of one engine iteration, and the named hardware/model presets it is evaluated with.

    t_ms = b0 + b1*tile(tokens) + b2*kv_tokens_read + b3*prefill_attention_work + b4*decode_seqs

`tile(n) = ceil(n / 256) * 256` (GEMMs run in 256-token tiles: Vidur's H100 profile shows 256 -> 264 tokens costing
+57 %, see ../shared/notes/goodput-and-chunking.md §3.1). `prefill_attention_work = sum_i c_i * (k_i + c_i / 2)` over
the prefill chunks of the step (chunk c_i on top of k_i tokens already in the KV cache: causal attention work).
`kv_tokens_read` is the context length summed over the decode sequences. The observed time is the prediction times
lognormal noise exp(sigma * z), z ~ N(0, 1) truncated to |z| <= clip: every simulated step lies within
[exp(-clip*sigma), exp(clip*sigma)] of the model, which is the stated noise bound the tests check.

Every coefficient carries the measured figure it comes from; the derivations are in the `source` strings so that a
reader can redo them from the note.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

TILE = 256
NOTE = "../shared/notes/goodput-and-chunking.md"


@dataclass(frozen=True)
class Coef:
    value: float
    unit: str
    source: str


@dataclass(frozen=True)
class Preset:
    name: str
    model: str                 # the Hugging Face id the artifacts name
    gpu: str                   # deviceProperties name
    tp: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    b0: Coef
    b1: Coef
    b2: Coef
    b3: Coef
    b4: Coef
    sigma: Coef
    host_gap_ms: tuple[float, float]   # uniform range of the CPU time between two steps
    host_gap_source: str
    kv_cache_tokens: int               # KV-cache capacity of the instance (tokens)
    kv_cache_source: str
    max_model_len: int
    noise_clip: float = 4.0
    tile: int = TILE
    gpu_mem_bytes: int = 85018279936
    num_sms: int = 132
    architecture: str = "LlamaForCausalLM"
    extra: dict = field(default_factory=dict)

    # -- model ---------------------------------------------------------------------------------------------
    def predict_ms(self, tokens, kv_read, attn_work, decode_seqs):
        """Noise-free step time (ms); numpy-vectorised over any of the arguments."""
        tokens = np.asarray(tokens, dtype=np.float64)
        tiled = np.ceil(tokens / self.tile) * self.tile
        return (self.b0.value + self.b1.value * tiled + self.b2.value * np.asarray(kv_read, dtype=np.float64)
                + self.b3.value * np.asarray(attn_work, dtype=np.float64)
                + self.b4.value * np.asarray(decode_seqs, dtype=np.float64))

    def predict_scalar(self, tokens: int, kv_read: float, attn_work: float, decode_seqs: int) -> float:
        """The same model for one step, in plain Python arithmetic (the engine's hot loop)."""
        tiled = -(-tokens // self.tile) * self.tile
        return (self.b0.value + self.b1.value * tiled + self.b2.value * kv_read + self.b3.value * attn_work
                + self.b4.value * decode_seqs)

    def decode_only_ms(self, decode_seqs, kv_read):
        return self.predict_ms(decode_seqs, kv_read, 0.0, decode_seqs)

    @property
    def noise_bound(self) -> tuple[float, float]:
        s = self.sigma.value * self.noise_clip
        return float(np.exp(-s)), float(np.exp(s))

    def kv_bytes_per_token(self) -> int:
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * 2

    def describe(self) -> dict:
        return {
            "name": self.name, "model": self.model, "gpu": self.gpu, "tensor_parallel_size": self.tp,
            "formula": "t_ms = b0 + b1*tile(tokens) + b2*kv_tokens_read + b3*prefill_attention_work + b4*decode_seqs; "
                       f"tile(n) = ceil(n/{self.tile})*{self.tile}; prefill_attention_work = sum c*(k + c/2); "
                       f"observed = predicted * exp(sigma*z), z~N(0,1) truncated to |z|<={self.noise_clip}",
            "coefficients": {k: {"value": getattr(self, k).value, "unit": getattr(self, k).unit,
                                 "source": getattr(self, k).source}
                             for k in ("b0", "b1", "b2", "b3", "b4", "sigma")},
            "noise_clip_sigmas": self.noise_clip,
            "host_gap_ms": list(self.host_gap_ms), "host_gap_source": self.host_gap_source,
            "kv_cache_tokens": self.kv_cache_tokens, "kv_cache_source": self.kv_cache_source,
            "max_model_len": self.max_model_len,
        }


_H100_SIGMA = Coef(
    0.03, "log-ratio (lognormal sigma)",
    "Spread of the 9 decode steps of the real vLLM V1 H100 TP4 trace (18.28-19.54 ms GPU window, "
    "../shared/real/traces/vllm_h100_tp4_llama_isl1000_osl10_c32.pt.trace.json.gz; std/mean ~ 2.5 %), "
    "rounded up to 3 %.")
_H100_HOST_GAP = ("Inter-step GPU gap of the real H100 TP4 trace: 0.30-0.56 ms (../shared/notes/gpu-traces.md §3).")

LLAMA70B_H100_TP4 = Preset(
    name="llama70b-h100-tp4", model="meta-llama/Llama-3.1-70B-Instruct", gpu="NVIDIA H100 80GB HBM3", tp=4,
    n_layers=80, n_heads=64, n_kv_heads=8, head_dim=128,
    b0=Coef(5.04, "ms",
            f"Intercept of a 1/y-weighted least-squares line through Vidur's H100 TP4 Llama-2-70B linear-layer time "
            f"plus NCCL all-reduce time at tile-aligned token counts: (256: 15.3+6.4 [decode-sized batches share the "
            f"first tile]), (512: 30.0+9.9), (1024: 62.1+15.0), (2048: 110.6+26.7), (4096: 222.8+50.9) ms "
            f"({NOTE} §6 rows V1 and V3; vidur@7d47513 data/profiling/compute/h100/meta-llama/Llama-2-70b-hf/mlp.csv, "
            f"data/profiling/network/h100_dgx/all_reduce.csv)."),
    b1=Coef(0.06663, "ms per tiled token",
            "Slope of the same fit (linear layers ~54 us/token + all-reduce ~12 us/token at TP4; "
            f"{NOTE} §3.6 quotes b1 ~ 54 us/token for the linear part alone)."),
    b2=Coef(3.494e-5, "ms per KV token read",
            f"Decode attention reads 2*80 layers*8 kv heads*128*2 B = 320 KiB per token, 80 KiB per GPU at TP4, at "
            f"0.7 x 3.35 TB/s H100 HBM bandwidth: 81920 B / 2.345e12 B/s = 3.49e-8 s ({NOTE} §3.6 and §6 row K1); "
            f"B=64 sequences at 2048 context -> 4.6 ms, as in §3.6."),
    b3=Coef(1.638e-6, "ms per unit of sum c*(k + c/2)",
            f"Causal prefill attention FLOPs 4*c*(k+c/2)*128 head_dim*16 heads per GPU*80 layers at 400 TFLOP/s "
            f"effective ({NOTE} §3.6): 655360 FLOP / 4e14 FLOP/s = 1.638e-9 s per unit; an 8k prompt -> 55 ms."),
    b4=Coef(0.01, "ms per decode sequence",
            "Per-sequence host work (sampling, input preparation, output processing) that Vidur models as a "
            "function of batch size; not measured in the notes. 10 us/seq keeps it below the 0.3-0.5 ms CPU/GPU "
            "window difference of the real H100 trace at 32 sequences."),
    sigma=_H100_SIGMA,
    host_gap_ms=(0.30, 0.56), host_gap_source=_H100_HOST_GAP,
    kv_cache_tokens=420_000,
    kv_cache_source=("H100 80 GB x 0.9 utilisation - 35 GB of weights per GPU (70B bf16 / TP4) - ~2 GB activations "
                     "= ~35 GB per GPU for KV at 80 KiB per token per GPU ~ 430k tokens; rounded down."),
    max_model_len=32768,
)

LLAMA8B_H100 = Preset(
    name="llama8b-h100", model="meta-llama/Llama-3.1-8B-Instruct", gpu="NVIDIA H100 80GB HBM3", tp=1,
    n_layers=32, n_heads=32, n_kv_heads=8, head_dim=128,
    b0=Coef(3.92, "ms",
            f"Intercept of a 1/y-weighted least-squares line through Vidur's H100 TP1 Llama-2-7B linear-layer time "
            f"(32 layers) at 256/512/1024/2048/4096 tokens: 9.2 / 12.0 / 21.0 / 40.3 / 83.5 ms ({NOTE} §6 row V4; "
            f"vidur@7d47513 data/profiling/compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv). TP1: no all-reduce."),
    b1=Coef(0.01776, "ms per tiled token",
            f"Slope of the same fit (~20 us/token plateau, {NOTE} §3.6)."),
    b2=Coef(5.59e-5, "ms per KV token read",
            f"GQA-8 KV is 2*32*8*128*2 B = 131072 B per token ({NOTE} §6 row K1) read at 0.7 x 3.35 TB/s: "
            f"5.59e-8 s per token; B=64 at 2k context -> 7.3 ms, in line with §3.6 (decode B=64 ~ 13 ms at 2k)."),
    b3=Coef(1.311e-6, "ms per unit of sum c*(k + c/2)",
            f"4*c*(k+c/2)*128 head_dim*32 heads*32 layers FLOPs at 400 TFLOP/s ({NOTE} §3.6 method): "
            f"524288 FLOP / 4e14 = 1.31e-9 s per unit; an 8k prompt -> 44 ms (§3.6: ~36 ms)."),
    b4=Coef(0.005, "ms per decode sequence",
            "Per-sequence host work, as for the 70B preset but halved (no TP broadcast of inputs); not measured."),
    sigma=_H100_SIGMA,
    host_gap_ms=(0.30, 0.56), host_gap_source=_H100_HOST_GAP,
    kv_cache_tokens=430_000,
    kv_cache_source=("H100 80 GB x 0.9 - 16 GB weights - ~2 GB activations = ~54 GB at 128 KiB per token ~ 430k tokens."),
    max_model_len=32768,
)

PRESETS: dict[str, Preset] = {p.name: p for p in (LLAMA70B_H100_TP4, LLAMA8B_H100)}


def get_preset(name: str) -> Preset:
    from stallscope.errors import StallscopeError

    try:
        return PRESETS[name]
    except KeyError:
        raise StallscopeError(f"unknown profile {name!r}; known: {', '.join(sorted(PRESETS))}") from None


def noise_factors(rng: np.random.Generator, n: int, preset: Preset) -> np.ndarray:
    """n multiplicative noise factors exp(sigma*z), z ~ N(0,1) truncated to |z| <= clip (by redrawing).

    A preset whose `extra["noise_factors"]` holds observed ratios (a fitted model's t/t_hat residuals, for the
    recommendation's what-if replay) draws them from those instead, with replacement."""
    pool = preset.extra.get("noise_factors") if preset.extra else None
    if pool is not None and len(pool):
        return rng.choice(np.asarray(pool, dtype=np.float64), n)
    z = rng.standard_normal(n)
    bad = np.abs(z) > preset.noise_clip
    while bad.any():
        z[bad] = rng.standard_normal(int(bad.sum()))
        bad = np.abs(z) > preset.noise_clip
    return np.exp(preset.sigma.value * z)
