"""The capture engine's parts on their own: the model's KV cache is exact (chunked prefill and batched decodes
give what one full forward gives), the scheduler keeps the simulator's policy semantics, stallscope imports
without torch, and `stallscope capture` without torch says in one line how to install it."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from conftest import ROOT

if not os.environ.get("STALLSCOPE_ALLOW_NO_TORCH"):
    import torch  # noqa: F401  (make dev installs the capture extra: a missing torch is a failure, not a skip)
torch = pytest.importorskip("torch")

from stallscope.capture.engine import Engine, EngineConfig, Request, marker  # noqa: E402
from stallscope.capture.model import Batch, ModelConfig, TinyLM, _DecodePlan  # noqa: E402

pytestmark = pytest.mark.capture

SMALL = ModelConfig(vocab=512, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn=128, max_model_len=256)


def _prompts(lens, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, SMALL.vocab, (n,), generator=g).tolist() for n in lens]


def test_chunked_prefill_gives_the_same_next_token_and_cache_as_one_prefill():
    torch.set_num_threads(1)
    (p,) = _prompts([150])
    one = TinyLM(SMALL, 2, seed=3, dtype=torch.float64)
    full = one.step(Batch(p, [(0, 0, 150)], [], [])).item()
    chunked = TinyLM(SMALL, 2, seed=3, dtype=torch.float64)
    nxt = None
    for k, c in ((0, 40), (40, 64), (104, 46)):
        nxt = chunked.step(Batch(p[k:k + c], [(1, k, c)], [], [])).item()
    assert nxt == full
    for a, b in ((one.k, chunked.k), (one.v, chunked.v)):
        assert torch.allclose(a[:, 0, :, :150], b[:, 1, :, :150], atol=1e-9)


def test_batched_decodes_over_the_real_cache_equal_a_prefill_of_prompt_plus_token():
    torch.set_num_threads(1)
    lens = [200, 7, 90, 31]              # contexts far apart: many blocks for one, a part block for another
    prompts = _prompts(lens, seed=1)
    m = TinyLM(SMALL, 4, seed=5, dtype=torch.float64)
    for s, p in enumerate(prompts):
        m.step(Batch(p, [(s, 0, len(p))], [], []))
    new = [11, 12, 13, 14]
    # one prefill chunk rides along with the decodes, as in a chunked-prefill step
    extra = _prompts([20], seed=2)[0]
    m2 = TinyLM(SMALL, 5, seed=5, dtype=torch.float64)
    for s, p in enumerate(prompts):
        m2.step(Batch(p, [(s, 0, len(p))], [], []))
    got = m2.step(Batch(extra + new, [(4, 0, 20)], [0, 1, 2, 3], lens)).tolist()
    ref = TinyLM(SMALL, 1, seed=5, dtype=torch.float64)
    want = [ref.step(Batch(p + [t], [(0, 0, len(p) + 1)], [], [])).item() for p, t in zip(prompts, new)]
    want_extra = ref.step(Batch(extra, [(0, 0, 20)], [], [])).item()
    assert got == [want_extra] + want
    assert m.step(Batch(new, [], [0, 1, 2, 3], lens)).tolist() == want


def _reference_logits(m: TinyLM, tokens: list[int]) -> torch.Tensor:
    """The last position's logits of one whole sequence through the model's weights with plain attention: full
    score matrix, explicit causal mask and softmax, GQA by repeating the KV heads, RoPE by cos/sin on pairs."""
    cfg = m.cfg
    hd, H, KV = cfg.head_dim, cfg.n_heads, cfg.n_kv_heads
    T = len(tokens)
    x = m.embed[torch.tensor(tokens)]
    inv = 1.0 / cfg.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]

    def rope(t):
        a, b = t[..., 0::2], t[..., 1::2]
        return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)

    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for L in m.layers:
        h = torch.nn.functional.layer_norm(x, (cfg.d_model,), L["norm1"])
        qkv = (h @ L["qkv"]).view(T, H + 2 * KV, hd)
        q, k, v = rope(qkv[:, :H]), rope(qkv[:, H:H + KV]), qkv[:, H + KV:]
        k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
        s = torch.einsum("thd,shd->hts", q, k) / hd ** 0.5
        p = torch.softmax(s.masked_fill(~causal, float("-inf")), dim=-1)
        x = x + torch.einsum("hts,shd->thd", p, v).reshape(T, H * hd) @ L["o"]
        gate, up = (torch.nn.functional.layer_norm(x, (cfg.d_model,), L["norm2"]) @ L["gate_up"]).chunk(2, dim=-1)
        x = x + (torch.nn.functional.silu(gate) * up) @ L["down"]
    return torch.nn.functional.layer_norm(x[-1], (cfg.d_model,), m.norm) @ m.lm_head


def test_paged_decodes_and_tiled_prefill_equal_plain_attention():
    """A mixed step (a chunk on top of a cached prefix, in several query tiles, plus decodes whose contexts end
    before, on and after block boundaries) gives the logits of plain full attention over each whole sequence."""
    torch.set_num_threads(1)
    lens = [1, 31, 32, 33, 95]
    prompts = _prompts(lens + [70], seed=4)
    m = TinyLM(SMALL, 6, seed=9, dtype=torch.float64, block=32, q_tile=16)
    for s, p in enumerate(prompts[:5]):
        m.step(Batch(p, [(s, 0, len(p))], [], []))
    long = prompts[5]
    m.step(Batch(long[:23], [(5, 0, 23)], [], []))
    new = [5, 6, 7, 8, 9]
    got = m.logits(Batch(long[23:] + new, [(5, 23, 47)], [0, 1, 2, 3, 4], lens))
    want = torch.stack([_reference_logits(m, long)] + [_reference_logits(m, p + [t]) for p, t in zip(prompts, new)])
    assert torch.allclose(got, want, rtol=1e-9, atol=1e-9), (got - want).abs().max()


def test_the_decode_block_table_reads_exactly_each_context():
    """The paged plan gathers ceil((ctx + 1) / block) blocks per decode from its own slot, and masks exactly the
    positions past its context: the keys it reads are its context, nothing more."""
    plan = _DecodePlan([3, 0, 2], [0, 64, 100], block=32, blocks_per_slot=8, KV=1, dtype=torch.float64,
                      dev="cpu")
    assert plan.seq.tolist() == [0, 1, 1, 1, 2, 2, 2, 2]
    assert plan.blk_slot.tolist() == [3, 0, 0, 0, 2, 2, 2, 2]
    assert plan.blk.tolist() == [0, 0, 1, 2, 0, 1, 2, 3]
    assert plan.rows.tolist() == [24, 0, 1, 2, 16, 17, 18, 19]     # slot * blocks_per_slot + block, one KV head
    read = torch.isfinite(plan.mask[:, 0, 0, :]).sum(dim=1)
    per_seq = torch.zeros(3, dtype=torch.long).index_add_(0, plan.seq, read)
    assert per_seq.tolist() == [1, 65, 101]


class _FakeModel:
    """Stands in for TinyLM in scheduling tests: one token 7 per chunk and decode."""

    cfg = SMALL

    def step(self, b: Batch):
        return torch.full((len(b.chunks) + len(b.dec_slots),), 7)


def _engine(policy, budget, seqs=4):
    return Engine(_FakeModel(), EngineConfig(policy, budget, seqs), lambda name: _NullCtx())


class _NullCtx:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def _req(i, plen, out=3):
    return Request(i, 0, list(range(1, plen + 1)), out)


def test_chunked_counts_decodes_against_the_budget_then_continues_and_admits_prefills():
    e = _engine("chunked", 16)
    e.waiting.extend([_req(0, 4), _req(1, 30), _req(2, 5)])
    chunks, decodes = e.schedule()                 # nothing decodes yet: 4 + 12 of 30
    assert [(r.index, c) for r, c in chunks] == [(0, 4), (1, 12)] and decodes == []
    e.step(chunks, decodes)
    chunks, decodes = e.schedule()                 # r0 decodes (1 token), r1 continues with 15 of its 18 left
    assert [r.index for r in decodes] == [0] and [(r.index, c) for r, c in chunks] == [(1, 15)]
    rec = e.step(chunks, decodes)
    assert rec.marker == marker(1, 15, 1, 1) == "execute_context_1(15)_generation_1(1)"
    chunks, decodes = e.schedule()                 # r0 decode, r1 last 3, r2 admitted with the 12 left: 5
    assert [(r.index, c) for r, c in chunks] == [(1, 3), (2, 5)] and [r.index for r in decodes] == [0]


def test_unchunked_is_prefill_first_and_decodes_wait():
    e = _engine("unchunked", 64)
    e.waiting.extend([_req(0, 10), _req(1, 50), _req(2, 10)])
    chunks, decodes = e.schedule()                 # whole prompts up to the budget: 10 + 50, r2 waits
    assert [(r.index, c) for r, c in chunks] == [(0, 10), (1, 50)] and decodes == []
    e.step(chunks, decodes)
    chunks, decodes = e.schedule()                 # r2 can be admitted: a prefill-only step, decodes stall
    assert [(r.index, c) for r, c in chunks] == [(2, 10)] and decodes == []
    e.step(chunks, decodes)
    chunks, decodes = e.schedule()
    assert chunks == [] and [r.index for r in decodes] == [0, 1, 2]


def test_max_num_seqs_caps_admission_and_config_is_validated():
    e = _engine("unchunked", 1000, seqs=2)
    e.waiting.extend([_req(i, 5) for i in range(4)])
    chunks, _ = e.schedule()
    assert len(chunks) == 2 and len(e.waiting) == 2
    from stallscope.errors import StallscopeError
    with pytest.raises(StallscopeError, match="max_num_batched_tokens >= max_num_seqs"):
        EngineConfig("chunked", 8, 16).validate(10, 256)
    with pytest.raises(StallscopeError, match="longest prompt"):
        EngineConfig("unchunked", 100, 16).validate(200, 256)


def test_importing_stallscope_stays_torch_free():
    code = ("import sys, stallscope, stallscope.cli, stallscope.capture, stallscope.capture.cli, "
            "stallscope.analyze, stallscope.simulate.cli; "
            "assert 'torch' not in sys.modules, 'torch imported'; print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_capture_without_torch_says_in_one_line_how_to_install(tmp_path):
    # torch made unimportable for this process only, as on a `pip install stallscope` without the extra
    code = ("import sys; sys.modules['torch'] = None; "
            f"sys.argv = ['stallscope', 'capture', '--out', {str(tmp_path / 'x')!r}]; "
            "from stallscope.cli import main; main()")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'stallscope[capture]'" in lines[0], r.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present: --device cuda would capture")
def test_capture_on_cuda_without_a_cuda_device_says_so_in_one_line(tmp_path):
    """The CPU-only torch CI installs has no CUDA: `--device cuda` stops before writing anything, in one line."""
    r = subprocess.run([sys.executable, "-m", "stallscope.cli", "capture", "--device", "cuda", "--out",
                        str(tmp_path / "x"), "--duration", "1"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "no CUDA device" in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "x").exists()


def test_the_capture_extra_pins_the_local_cpu_torch_and_the_package_ships():
    import tomllib

    py = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert py["project"]["optional-dependencies"]["capture"] == ["torch==2.13.0"]
    assert "torch" not in " ".join(py["project"]["dependencies"])
    assert "stallscope.capture" in py["tool"]["setuptools"]["packages"]
    make = (ROOT / "Makefile").read_text()
    # the test environment (make dev, which make test runs) installs the capture extra
    dev = re.search(r"^dev:.*\n\t.*pip install -q -e '\.\[([a-z,]+)\]'", make, re.M)
    assert dev and "capture" in dev.group(1).split(",") and "capture-demo:" in make
    # no other torch spec anywhere in the build files (it would pull a multi-GB CUDA build)
    for f in ("pyproject.toml", "Makefile"):
        for spec in re.findall(r"\btorch\s*[=<>~!]=?\s*[\w.*+]+", (ROOT / f).read_text()):
            assert spec == "torch==2.13.0", (f, spec)


def test_requests_cut_off_by_the_drain_limit_are_failed_requests_that_still_parse(tmp_path):
    import stallscope
    from stallscope.capture.runner import CaptureSpec, capture

    spec = CaptureSpec(policy="chunked", budget=64, duration_s=1.5, drain_s=0.0, rate=20, output_len="400",
                       prompt_len="40:0.3", incident=None, max_num_seqs=8, record_shapes=False,
                       model=ModelConfig(vocab=512, d_model=64, n_layers=1, n_heads=4, n_kv_heads=2, ffn=128,
                                         max_model_len=512))
    res = capture(spec, tmp_path / "cut")
    n_cut = res.engine.unfinished
    assert n_cut > 0     # 400-token outputs at 20 req/s cannot finish inside 1.5 s without a drain
    doc = json.loads((tmp_path / "cut" / "bench_serve.json").read_text())
    assert doc["failed"] == n_cut and doc["completed"] == len(res.engine.requests) - n_cut
    s = stallscope.open(":memory:")
    try:
        report = s.ingest([tmp_path / "cut"])
        assert all(r.status == "ingested" and r.rejected == 0 for r in report), \
            [(r.path, r.rejected, r.message) for r in report]
        assert s.sql("SELECT count(*) FROM requests WHERE kind = 'client' AND status = 'failed'").item() == n_cut
        assert s.sql("SELECT count(*) FROM steps").item() == len(res.engine.steps)
    finally:
        s.close()


def test_a_step_records_its_page_faults_and_the_speed_probe_runs_after_it_outside_its_annotation():
    import mmap

    log = []

    class Touching(_FakeModel):
        fresh = True

        def step(self, b):
            if self.fresh:                      # 4 MB of fresh anonymous pages, each written once: 1024 faults
                m = mmap.mmap(-1, 4 << 20)
                for i in range(0, 4 << 20, 4096):
                    m[i] = 1
                m.close()
            return super().step(b)

    class Ctx(_NullCtx):
        def __init__(self, name):
            self.name = name

        def __enter__(self):
            log.append(("enter", self.name))
            return self

        def __exit__(self, *a):
            log.append(("exit", self.name))
            return False

    def probe():
        t0 = time.thread_time_ns()
        while time.thread_time_ns() - t0 < 200_000:
            pass
        log.append(("probe",))

    model = Touching()
    e = Engine(model, EngineConfig("chunked", 16, 4), Ctx, probe=probe)
    e.waiting.append(_req(0, 4))
    rec = e.step(*e.schedule())
    model.fresh = False
    quiet = e.step(*e.schedule())
    name = rec.marker
    assert log[:3] == [("enter", name), ("exit", name), ("probe",)] and len(log) == 6
    assert rec.probe_ns >= 200_000 and quiet.probe_ns >= 200_000
    assert rec.minflt >= 1024 > quiet.minflt
    plain = Engine(model, EngineConfig("chunked", 16, 4), Ctx)
    plain.waiting.append(_req(0, 4))
    assert plain.step(*plain.schedule()).probe_ns == 0 and len(log) == 8      # no probe: nothing after the exit
