"""A compact decoder-only transformer in plain PyTorch (random weights, GQA, RoPE, SwiGLU, LayerNorm) with a KV cache.

The model serves a *flattened* batch the way vLLM V1 does: the new tokens of every scheduled request are
concatenated into one [T, d] activation, so the projections and the MLP are single GEMMs over all tokens
(prefill chunks and decodes alike), and attention reads the real cache with the cost structure of a paged-attention
engine: the decodes of a step read exactly their contexts, block by block (32 positions per block, one block table
for all decodes, a segment softmax over each decode's blocks: work linear in the KV tokens read, a fixed op count
per layer), and a prefill chunk of c tokens on top of k cached ones attends causally in query tiles, each tile
reading only its own prefix (work about c*(k + c/2), what a causal kernel does). The cache is one slot of
`max_model_len` positions (whole blocks) per running request, so it never needs preemption.

Why the code looks the way it does: every ATen call is an event in the profiler trace, so a step issues as few
as possible: weights stored transposed for a bare `mm`, RoPE as one in-place complex multiply over the q and k
heads, LayerNorm rather than RMSNorm (7 events against 26 in torch 2.13), K and V in one cache tensor written
and gathered with one index op, additive float masks and the block table built once per step.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class ModelConfig:
    vocab: int = 4096
    d_model: int = 512
    n_layers: int = 2
    n_heads: int = 8
    n_kv_heads: int = 2
    ffn: int = 1536
    max_model_len: int = 4096
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def validate(self) -> None:
        if self.d_model % self.n_heads or self.n_heads % self.n_kv_heads or self.head_dim % 2:
            raise ValueError("d_model must split into an even head_dim, and n_heads into groups of n_kv_heads")
        if min(self.vocab, self.n_layers, self.ffn, self.max_model_len) < 1:
            raise ValueError("vocab, n_layers, ffn and max_model_len must be positive")

    def params(self) -> int:
        hd = self.head_dim
        per_layer = (self.d_model * (self.n_heads + 2 * self.n_kv_heads) * hd + self.n_heads * hd * self.d_model
                     + 3 * self.d_model * self.ffn + 2 * self.d_model)
        return 2 * self.vocab * self.d_model + self.n_layers * per_layer + self.d_model

    def describe(self) -> dict:
        return {**asdict(self), "head_dim": self.head_dim, "params": self.params()}


@dataclass
class Batch:
    """One step's flattened batch: the prefill chunks first (one per request), then the decodes.

    `chunks`: (slot, context, tokens) per prefill chunk; context = tokens of that request already cached.
    `dec_slots` / `dec_ctx`: slot and cached context of each decoding request (each brings one new token).
    """
    tokens: list[int]
    chunks: list[tuple[int, int, int]]
    dec_slots: list[int]
    dec_ctx: list[int]

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)


class TinyLM:
    """Random-weight decoder; `step(batch)` runs one engine iteration and returns the greedy next tokens."""

    def __init__(self, cfg: ModelConfig, max_seqs: int, seed: int = 0, dtype=torch.float32, device="cpu",
                 block: int = 32, q_tile: int = 128):
        cfg.validate()
        self.cfg = cfg
        self.block = block            # KV-cache block (page) size the decode attention reads in
        self.q_tile = q_tile          # prefill query tile: each tile reads only its causal prefix
        self.blocks_per_slot = -(-cfg.max_model_len // block)
        self.device = torch.device(device)
        self.dtype = dtype
        g = torch.Generator().manual_seed(seed)
        hd, H, KV, d = cfg.head_dim, cfg.n_heads, cfg.n_kv_heads, cfg.d_model

        def w(n_in, n_out):  # stored [in, out] so a projection is one `mm`; scaled to keep activations O(1)
            return (torch.randn(n_in, n_out, generator=g) / n_in ** 0.5).to(device=self.device, dtype=dtype)

        self.embed = w(cfg.vocab, d) * cfg.vocab ** 0.5
        self.layers = [{
            "norm1": torch.ones(d, device=self.device, dtype=dtype),
            "qkv": w(d, (H + 2 * KV) * hd), "o": w(H * hd, d),
            "norm2": torch.ones(d, device=self.device, dtype=dtype),
            "gate_up": w(d, 2 * cfg.ffn), "down": w(cfg.ffn, d),
        } for _ in range(cfg.n_layers)]
        self.norm = torch.ones(d, device=self.device, dtype=dtype)
        self.lm_head = w(d, cfg.vocab)
        # [layer][slot, position, K heads then V heads, head_dim]
        # K and V caches [layer, slot, kv head, position, head_dim]: a head's positions are contiguous (a prefill
        # tile reads its prefix as one strided view), and a slot is whole blocks, so a layer's cache also reads as
        # [slot, kv head, block, block position, head_dim]: a decode block is one contiguous [block, hd] matrix
        shape = (cfg.n_layers, max_seqs, KV, self.blocks_per_slot * block, hd)
        self.k = torch.zeros(shape, dtype=dtype, device=self.device)
        self.v = torch.zeros(shape, dtype=dtype, device=self.device)
        inv = 1.0 / cfg.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        ang = torch.arange(cfg.max_model_len, dtype=torch.float64)[:, None] * inv[None, :]
        cdt = torch.complex64 if dtype != torch.float64 else torch.complex128
        self.cis = torch.polar(torch.ones_like(ang), ang).to(device=self.device, dtype=cdt)

    def weight_bytes(self) -> int:
        ts = [self.embed, self.norm, self.lm_head] + [t for layer in self.layers for t in layer.values()]
        return sum(t.numel() * t.element_size() for t in ts)

    def cache_bytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()

    @torch.inference_mode()
    def step(self, b: Batch) -> torch.Tensor:
        """Greedy next token for every chunk (the last position of the chunk) and every decode, in batch order."""
        return self.logits(b).argmax(dim=-1)

    @torch.inference_mode()
    def logits(self, b: Batch) -> torch.Tensor:
        """Next-token logits [chunks + decodes, vocab] of one engine iteration (writes the new K/V to the cache)."""
        cfg = self.cfg
        hd, H, KV = cfg.head_dim, cfg.n_heads, cfg.n_kv_heads
        dev = self.device
        positions: list[int] = []
        for _, k, c in b.chunks:
            positions.extend(range(k, k + c))
        positions.extend(b.dec_ctx)
        n_pre = len(positions) - len(b.dec_ctx)
        tok = torch.tensor(b.tokens, device=dev)
        pos = torch.tensor(positions, device=dev)
        cis = self.cis[pos][:, None, :]
        x = F.embedding(tok, self.embed)
        tiles = [_prefill_tiles(k, c, self.q_tile, self.dtype, dev) for _, k, c in b.chunks]
        dec = _DecodePlan(b.dec_slots, b.dec_ctx, self.block, self.blocks_per_slot, KV, self.dtype, dev) \
            if b.dec_slots else None
        for li, L in enumerate(self.layers):
            h = F.layer_norm(x, (cfg.d_model,), L["norm1"])
            qkv = torch.mm(h, L["qkv"]).view(-1, H + 2 * KV, hd)
            rot = torch.view_as_complex(qkv.view(-1, H + 2 * KV, hd // 2, 2)[:, :H + KV])
            rot.mul_(cis)                                      # RoPE on q and k heads, in place
            q, kn, vn = qkv[:, :H], qkv[:, H:H + KV], qkv[:, H + KV:]
            K, V = self.k[li], self.v[li]
            outs = []
            off = 0
            for (slot, ctx, c), chunk_tiles in zip(b.chunks, tiles):
                K[slot, :, ctx:ctx + c] = kn[off:off + c].transpose(0, 1)
                V[slot, :, ctx:ctx + c] = vn[off:off + c].transpose(0, 1)
                for t0, t1, m in chunk_tiles:   # query tile [t0, t1) reads its causal prefix only
                    a = F.scaled_dot_product_attention(q[off + t0:off + t1].transpose(0, 1)[None],
                                                       K[slot, :, :ctx + t1][None], V[slot, :, :ctx + t1][None],
                                                       attn_mask=m, enable_gqa=True)
                    outs.append(a[0].transpose(0, 1))
                off += c
            if dec is not None:
                K[dec.slots, :, dec.pos] = kn[n_pre:]
                V[dec.slots, :, dec.pos] = vn[n_pre:]
                outs.append(dec.attend(q[n_pre:], K, V, self.block))
            a = torch.cat(outs) if len(outs) > 1 else outs[0]
            x = torch.addmm(x, a.reshape(-1, H * hd), L["o"])
            gate, up = torch.mm(F.layer_norm(x, (cfg.d_model,), L["norm2"]), L["gate_up"]).chunk(2, dim=-1)
            x = torch.addmm(x, F.silu(gate).mul_(up), L["down"])
        last = []
        off = 0
        for _, _, c in b.chunks:
            off += c
            last.append(off - 1)
        last.extend(range(n_pre, n_pre + len(b.dec_slots)))
        h = F.layer_norm(x[torch.tensor(last, device=dev)], (cfg.d_model,), self.norm)
        return torch.mm(h, self.lm_head)


def _prefill_tiles(k: int, c: int, q_tile: int, dtype, dev) -> list[tuple[int, int, torch.Tensor]]:
    """(start, end, additive mask) per query tile of a chunk of c tokens on top of k cached ones: tile [t0, t1)
    attends to positions < k + t1, masked causally inside its own rows, so the chunk reads about c*(k + c/2) keys
    (what a causal kernel reads), not c*(k + c)."""
    out = []
    for t0 in range(0, c, q_tile):
        t1 = min(c, t0 + q_tile)
        m = torch.zeros((t1 - t0, k + t1), dtype=dtype, device=dev)
        m.masked_fill_(torch.ones((t1 - t0, k + t1), dtype=torch.bool, device=dev).triu_(k + t0 + 1),
                       float("-inf"))
        out.append((t0, t1, m))
    return out


class _DecodePlan:
    """Paged decode attention over the cache in blocks of `block` positions, the way a paged-attention kernel
    with split-KV reads it: every decode's context is cut into its blocks (the last one partly masked), all the
    blocks of all decodes are gathered by one block table into one [blocks, block, 2KV, hd] tensor, scored and
    weighted with two batched matmuls, and reduced per decode with a segment softmax (scatter max, index_add
    sums). The work is linear in the KV tokens actually read (plus under one block of padding per decode) and the
    op count per layer is fixed, whatever the contexts are. Built once per step, shared by the layers."""

    def __init__(self, slots: list[int], ctx: list[int], block: int, blocks_per_slot: int, KV: int, dtype, dev):
        self.slots = torch.tensor(slots, device=dev)
        self.pos = torch.tensor(ctx, device=dev)              # the new token's position = its cached context
        n_blk = (self.pos + 1 + block - 1) // block           # blocks holding positions 0..ctx
        self.seq = torch.repeat_interleave(torch.arange(len(slots), device=dev), n_blk)   # [NB] decode of a block
        first = torch.cumsum(n_blk, 0) - n_blk
        j = torch.arange(len(self.seq), device=dev) - first[self.seq]                       # block index in its seq
        self.blk_slot = self.slots[self.seq]                  # block table: (slot, block index) per block
        self.blk = j
        # the cache rows to gather: one contiguous [block, hd] row per (block, kv head) of a layer's cache
        # viewed as [slot, kv head, block, ...]
        self.rows = ((self.blk_slot[:, None] * KV + torch.arange(KV, device=dev)) * blocks_per_slot
                     + j[:, None]).view(-1)
        key_pos = j[:, None] * block + torch.arange(block, device=dev)[None, :]
        self.mask = torch.zeros(key_pos.shape, dtype=dtype, device=dev).masked_fill_(
            key_pos > self.pos[self.seq][:, None], float("-inf"))[:, None, None, :]          # [NB, 1, 1, block]
        self.n = len(slots)

    def attend(self, q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, block: int) -> torch.Tensor:
        nd, H, hd = q.shape
        KV = K.shape[1]
        kb = K.view(-1, block, hd).index_select(0, self.rows).view(-1, KV, block, hd)     # [NB, KV, block, hd]
        vb = V.view(-1, block, hd).index_select(0, self.rows).view(-1, KV, block, hd)
        qb = q.view(nd, KV, H // KV, hd).index_select(0, self.seq)     # [NB, KV, G, hd]
        s = torch.matmul(qb, kb.transpose(-1, -2)).mul_(hd ** -0.5).add_(self.mask)   # [NB, KV, G, block]
        m = torch.full((nd, KV, H // KV), float("-inf"), dtype=s.dtype, device=s.device)
        m = m.scatter_reduce_(0, self.seq[:, None, None].expand(-1, KV, H // KV), s.amax(dim=-1), "amax")
        p = s.sub_(m.index_select(0, self.seq)[..., None]).exp_()
        den = torch.zeros_like(m).index_add_(0, self.seq, p.sum(dim=-1))
        o = torch.matmul(p, vb)                                         # [NB, KV, G, hd]
        o = torch.zeros((nd, KV, H // KV, hd), dtype=o.dtype, device=o.device).index_add_(0, self.seq, o)
        return o.div_(den[..., None]).view(nd, H, hd)
