"""Writes the PyTorch-profiler (Kineto) trace of a simulated run, `*.pt.trace.json.gz`, as vLLM's profiler writes it.

Envelope (copied from ../shared/real/traces/vllm_h100_tp4_llama_isl1000_osl10_c32.pt.trace.json.gz): top-level keys
`schemaVersion, deviceProperties, cupti_version, cuda_runtime_version, cuda_driver_version, distributedInfo,
with_stack, trace_id, traceEvents, traceName, displayTimeUnit, baseTimeNanoseconds` in that order; Kineto's
per-event layout; `ts`/`dur` as "<us>.<ns:03>" relative to baseTimeNanoseconds (the wall clock floored to
7,889,238 s). Per step (V1): python_function windows `vllm/v1/worker/gpu_worker.py(263): execute_model` enclosing
`vllm/v1/worker/gpu_model_runner.py(1002): execute_model`, the `execute_context_{n}({tokens})_generation_{n}({tokens})`
user_annotation (or the detailed `execute_{total}_context_...(sq..sk..sqsq..sqsk..)_generation_...` variant) and its
gpu_user_annotation, then launches: cpu_op -> cuda_runtime/cuda_driver launch (correlation, External id) -> kernel
on stream 7, ac2g flow events, and CUDA-graph replays (one cudaGraphLaunch, several kernels sharing its correlation,
no External id) for steps of at most 512 tokens, as vLLM's piecewise graphs do.

Kernel count: a real 80-layer step has ~1,380 kernels; here every step carries `layers` layer groups (default 2),
each standing for n_layers/layers real layers, so a 2-minute run stays a few MB. Kernel durations add up to the
step's GPU time: the linear part of the step model goes to GEMM/all-reduce/norm kernels, the KV-read and prefill
attention parts to the attention kernel, so an analysis can apportion prefill vs decode time per step. Kernel names
(and their launch args) are the ones the real H100 trace has for FA3; FlashInfer and V0 FlashAttention names come
from real profiles quoted in public reports. The text is built column-wise with polars, never one dict per event.
"""
from __future__ import annotations

import gzip

import numpy as np
import polars as pl

from .engine import KIND_DECODE, KIND_MIXED, KIND_PREFILL
from .runner import Run

BASE_PERIOD_NS = 7_889_238 * 1_000_000_000
GRAPH_MAX_TOKENS = 512      # vLLM V1 max_capture_size of the 0.10 startup log
PRO_NS, EPI_NS = 150_000, 60_000

# -- kernel catalogue: name and the launch args Kineto prints for it (from the real H100 trace) -------------------
_FA3_PREFILL = (
    "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2, "
    "cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cute::tuple<cute::C<128>, cute::C<128>, cute::C<128> >, 128, "
    "cutlass::bfloat16_t, float, cutlass::arch::Sm90, true, false, false, true, true, false, false, true, true, true, "
    "false, false>, flash::CollectiveEpilogueFwd<cute::tuple<cute::C<128>, cute::C<128>, cute::C<128> >, "
    "cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cutlass::bfloat16_t, cutlass::arch::Sm90, 256, true, true, "
    "false, false>, flash::VarlenDynamicPersistentTileScheduler<128, 256, 128, false, true, true> > > >("
    "flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, "
    "cute::C<1>, cute::C<1> >, cute::tuple<cute::C<128>, cute::C<128>, cute::C<128> >, 128, cutlass::bfloat16_t, float, "
    "cutlass::arch::Sm90, true, false, false, true, true, false, false, true, true, true, false, false>, "
    "flash::CollectiveEpilogueFwd<cute::tuple<cute::C<128>, cute::C<128>, cute::C<128> >, cute::tuple<cute::C<1>, "
    "cute::C<1>, cute::C<1> >, cutlass::bfloat16_t, cutlass::arch::Sm90, 256, true, true, false, false>, "
    "flash::VarlenDynamicPersistentTileScheduler<128, 256, 128, false, true, true> > >::Params)")
_FA3_DECODE = (
    "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2, "
    "cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cute::tuple<cute::C<64>, cute::C<128>, cute::C<128> >, 128, "
    "cutlass::bfloat16_t, float, cutlass::arch::Sm90, true, false, false, true, true, false, false, true, true, true, "
    "true, false>, flash::CollectiveEpilogueFwd<cute::tuple<cute::C<64>, cute::C<128>, cute::C<128> >, "
    "cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cutlass::bfloat16_t, cutlass::arch::Sm90, 128, true, true, true, "
    "false>, flash::VarlenDynamicPersistentTileScheduler<64, 128, 128, true, true, true> > > >("
    "flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, "
    "cute::C<1>, cute::C<1> >, cute::tuple<cute::C<64>, cute::C<128>, cute::C<128> >, 128, cutlass::bfloat16_t, float, "
    "cutlass::arch::Sm90, true, false, false, true, true, false, false, true, true, true, true, false>, "
    "flash::CollectiveEpilogueFwd<cute::tuple<cute::C<64>, cute::C<128>, cute::C<128> >, cute::tuple<cute::C<1>, "
    "cute::C<1>, cute::C<1> >, cutlass::bfloat16_t, cutlass::arch::Sm90, 128, true, true, true, false>, "
    "flash::VarlenDynamicPersistentTileScheduler<64, 128, 128, true, true, true> > >::Params)")
_FA3_COMBINE = (
    "void cutlass::device_kernel<flash::FlashAttnFwdCombine<cute::tuple<cute::C<8>, cute::C<128> >, 5, 256, 1, false, "
    "true, cutlass::bfloat16_t, float, cutlass::arch::Sm90> >(flash::FlashAttnFwdCombine<cute::tuple<cute::C<8>, "
    "cute::C<128> >, 5, 256, 1, false, true, cutlass::bfloat16_t, float, cutlass::arch::Sm90>::Params)")
# FlashInfer: names as a public SGLang profile prints them (kernel summary of an nsys report).
_FI_PREFILL = (
    "void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<(flashinfer::MaskMode)1, "
    "(unsigned int)128, (unsigned int)2, (unsigned int)2, (unsigned int)8, (unsigned int)8, (unsigned int)4, "
    "(unsigned int)1, (flashinfer::PosEncodingMode)0, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, int, "
    "flashinfer::DefaultAttention<(bool)0, (bool)0, (bool)0, (bool)0>>, PagedParams>(T2)")
_FI_DECODE = (
    "void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0, (unsigned int)2, "
    "(unsigned int)1, (unsigned int)8, (unsigned int)16, (unsigned int)2, (unsigned int)4, "
    "flashinfer::DefaultAttention<(bool)0, (bool)0, (bool)0, (bool)0>, Params>(T9)")
# vLLM V0 FlashAttention backend (vllm_flash_attn FA2): torch.profiler spellings from public profiles.
_FA2_PREFILL = (
    "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, "
    "Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, false, true, false, "
    "false>(flash::Flash_fwd_params)")
_FA2_DECODE = (
    "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::bfloat16_t, "
    "Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, false, false, false, false, true, false, true, "
    "false>(flash::Flash_fwd_params)")
_FA2_COMBINE = ("void flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128, 64, 128, 8, false, false, "
                "cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> >, 4, 4, false>"
                "(flash::Flash_fwd_params)")

_ARGS = {  # registers, shared memory, blocks per SM, warps per SM, grid, block, occupancy (real H100 values)
    "big_gemm": (168, 231424, 0.909091, 10.909091, "[120, 1, 1]", "[384, 1, 1]", 0),
    "graph_gemm": (168, 231424, 0.848485, 10.181818, "[112, 1, 1]", "[384, 1, 1]", 0),
    "qkv_gemm": (150, 147456, 0.909091, 3.636364, "[8, 3, 5]", "[128, 1, 1]", 0),
    "lm_head": (168, 231424, 0.954545, 11.454545, "[126, 1, 1]", "[384, 1, 1]", 0),
    "custom_ar": (48, 0, 0.015152, 0.242424, "[2, 1, 1]", "[512, 1, 1]", 0),
    "nccl_ar": (96, 103072, 0.181818, 3.090909, "[24, 1, 1]", "[544, 1, 1]", 0),
    "norm": (29, 64, 7.94697, 127.151512, "[1049, 1, 1]", "[512, 1, 1]", 100),
    "reshape": (22, 0, 7.94697, 63.575756, "[1049, 1, 1]", "[256, 1, 1]", 99),
    "fa3_prefill": (168, 166912, 1.0, 12.0, "[132, 1, 1]", "[384, 1, 1]", 0),
    "fa3_decode": (255, 150528, 1.0, 8.0, "[132, 1, 1]", "[256, 1, 1]", 0),
    "combine": (42, 17536, 0.015152, 0.121212, "[2, 1, 1]", "[256, 1, 1]", 0),
    "prepare": (16, 4, 0.007576, 0.242424, "[1, 1, 1]", "[1024, 1, 1]", 0),
    "argmax": (32, 8208, 0.007576, 0.121212, "[1, 1, 1]", "[512, 1, 1]", 0),
}

K = {  # kernel key -> (name, args key)
    "gemm_eager": ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k"
                   "_off_kernel__5x_cublas", "big_gemm"),
    "gemm_graph": ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x128x64_warpgroupsize1x1x1_execute_segment_k"
                   "_off_kernel__5x_cublas", "graph_gemm"),
    "qkv_gemm": ("void cutlass::Kernel2<cutlass_80_tensorop_s16816gemm_bf16_128x64_64x6_tn_align8>("
                 "cutlass_80_tensorop_s16816gemm_bf16_128x64_64x6_tn_align8::Params)", "qkv_gemm"),
    "lm_head": ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x256x64_warpgroupsize1x1x1_execute_segment_k_off"
                "_kernel__5x_cublas", "lm_head"),
    "custom_ar": ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, {tp}>(vllm::RankData*, vllm::RankSignals, "
                  "vllm::Signal*, __nv_bfloat16*, int, int)", "custom_ar"),
    "nccl_ar": ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "nccl_ar"),
    "norm": ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", "norm"),
    "reshape": ("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>("
                "__nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, __nv_bfloat16*, long const*, long, long, "
                "long, long, long, int, int, int, float const*, float const*)", "reshape"),
    "prepare": ("flash::prepare_varlen_num_blocks_kernel(int, int, int, int const*, int const*, int const*, int const*, "
                "int const*, int const*, int, int, int, int, int, cutlass::FastDivmod, cutlass::FastDivmod, int*, int*, "
                "bool)", "prepare"),
    "argmax": ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, "
               "unsigned int, long, 4> >(at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, "
               "4>)", "argmax"),
    "fa3_prefill": (_FA3_PREFILL, "fa3_prefill"), "fa3_decode": (_FA3_DECODE, "fa3_decode"),
    "fa3_combine": (_FA3_COMBINE, "combine"),
    "fi_prefill": (_FI_PREFILL, "fa3_prefill"), "fi_decode": (_FI_DECODE, "fa3_decode"),
    "fa2_prefill": (_FA2_PREFILL, "fa3_prefill"), "fa2_decode": (_FA2_DECODE, "fa3_decode"),
    "fa2_combine": (_FA2_COMBINE, "combine"),
    "memcpy": ("Memcpy HtoD (Pinned -> Device)", None),
}

RT = {  # runtime call -> (category, cbid, CPU duration ns)
    "cudaLaunchKernel": ("cuda_runtime", 211, 5_200), "cudaLaunchKernelExC": ("cuda_runtime", 430, 6_100),
    "cuLaunchKernel": ("cuda_driver", 307, 8_300), "cudaGraphLaunch": ("cuda_runtime", 311, 41_000),
    "cudaMemcpyAsync": ("cuda_runtime", 41, 12_400),
}


class G:
    """One launch: an optional cpu_op, the enclosing op of its block (`outer`, shared by the launches of one
    attention call), the runtime call, and the kernels it starts."""

    def __init__(self, rt, kernels, op=None, outer=None, ext=True, blk=-1):
        self.rt, self.kernels, self.op, self.outer, self.ext, self.blk = rt, kernels, op, outer, ext, blk


def _lin(key, w):
    return (key, "lin", w)


def _att(key, w=1.0):
    return (key, "att", w)


def _fix(key, us):
    return (key, "fix", us)


def template(kind: int, graph: bool, backend: str, layers: int, tp: int) -> list[G]:
    """The launches of one step of the given composition (kind), mode (CUDA graph or eager) and backend."""
    ar = "custom_ar" if graph else "nccl_ar"
    lin_w = [("big", 0.55), ("ar", 0.22 if tp > 1 else 0.0), ("norm", 0.05), ("qkv", 0.18)]
    tot = sum(w for _, w in lin_w)
    w = {k: v / tot / layers for k, v in lin_w}
    out: list[G] = []
    v0 = backend == "v0-flash"
    out.append(G("cudaMemcpyAsync", [_fix("memcpy", 3.0)], op="aten::copy_"))
    if backend == "fa3":
        out.append(G("cudaLaunchKernel", [_fix("prepare", 2.8)], op="_vllm_fa3_C::get_scheduler_metadata"))
    if v0 and graph:  # V0 captures the whole decode forward, attention included, in one graph
        ks = []
        for _ in range(layers):
            ks += [_lin("qkv_gemm", w["qkv"]), _att("fa2_decode", 1.0 / layers), _fix("fa2_combine", 3.0),
                   _lin("gemm_graph", w["big"])]
            if tp > 1:
                ks.append(_lin("custom_ar", w["ar"]))
            ks.append(_lin("norm", w["norm"]))
        out.append(G("cudaGraphLaunch", ks, ext=False))
    else:
        for layer in range(layers):
            if graph:
                ks = [_lin("gemm_graph", w["big"])]
                if tp > 1:
                    ks.append(_lin(ar, w["ar"]))
                ks += [_lin("norm", w["norm"]), _lin("qkv_gemm", w["qkv"])]
                out.append(G("cudaGraphLaunch", ks, ext=False))
            else:
                out.append(G("cudaLaunchKernelExC", [_lin("gemm_eager", w["big"])], op="aten::mm"))
                if tp > 1:
                    out.append(G("cudaLaunchKernelExC", [_lin("nccl_ar", w["ar"])], op="vllm::all_reduce"))
                out.append(G("cuLaunchKernel", [_lin("norm", w["norm"])], op=K["norm"][0]))
                out.append(G("cudaLaunchKernelExC", [_lin("qkv_gemm", w["qkv"])], op="aten::mm"))
            att = "vllm::unified_attention_with_output"
            aw = 1.0 / layers
            out.append(G("cudaLaunchKernel", [_fix("reshape", 3.2)], op="_C_cache_ops::reshape_and_cache_flash",
                         outer=att, blk=layer))
            if backend == "fa3":
                if kind == KIND_DECODE:
                    out.append(G("cudaLaunchKernel", [_att("fa3_decode", aw)], op="_vllm_fa3_C::fwd", outer=att,
                                 blk=layer))
                    out.append(G("cudaLaunchKernelExC", [_fix("fa3_combine", 3.1)], op="_vllm_fa3_C::fwd", outer=att,
                                 blk=layer))
                else:
                    out.append(G("cudaLaunchKernel", [_att("fa3_prefill", aw)], op="_vllm_fa3_C::fwd", outer=att,
                                 blk=layer))
            elif backend == "flashinfer":
                # FlashInfer splits the batch: prefill tokens and decode tokens run separate kernels.
                if kind in (KIND_PREFILL, KIND_MIXED):
                    out.append(G("cudaLaunchKernel", [("fi_prefill", "attp", aw)], outer=att, blk=layer))
                if kind in (KIND_DECODE, KIND_MIXED):
                    out.append(G("cudaLaunchKernel", [("fi_decode", "attd", aw)], outer=att, blk=layer))
            else:  # v0-flash, eager: prefill-only steps
                out.append(G("cudaLaunchKernel", [_att("fa2_prefill", aw)], op="_vllm_fa2_C::varlen_fwd", outer=att,
                             blk=layer))
    out.append(G("cudaLaunchKernelExC", [_fix("lm_head", 190.0)], op="aten::mm"))
    out.append(G("cudaLaunchKernel", [_fix("argmax", 25.0)], op="aten::argmax"))
    return out


# -- text formatting -----------------------------------------------------------------------------------------------
def _ts(col: str) -> pl.Expr:
    """Kineto's "{us}.{ns:03}" of a non-negative ns column."""
    c = pl.col(col)
    return pl.concat_str([(c // 1000).cast(pl.String), pl.lit("."), (c % 1000).cast(pl.String).str.zfill(3)])


def _q(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"')


def _x_event(cat: str, pid: str, tid: str, args: pl.Expr) -> pl.Expr:
    return pl.concat_str([
        pl.lit('  {\n    "ph": "X", "cat": "' + cat + '", "name": "'), pl.col("name"),
        pl.lit(f'", "pid": {pid}, "tid": {tid},\n    "ts": '), _ts("ts"), pl.lit(', "dur": '), _ts("dur"),
        pl.lit(',\n    "args": {\n      '), args, pl.lit("\n    }\n  }")])


def _ext_prefix() -> pl.Expr:
    e = pl.col("ext")
    return pl.when(e.is_null()).then(pl.lit("      ")).otherwise(
        pl.concat_str([pl.lit('"External id": '), e.cast(pl.String), pl.lit(",      ")]))


def build(run: Run) -> bytes:
    """The whole trace file (uncompressed JSON bytes)."""
    sim, pre, spec = run.sim, run.preset, run.spec
    backend = spec.resolved_backend()
    layers = int(spec.trace_layers)
    tp = pre.tp
    pid = run.pids["worker"]
    rng = np.random.default_rng([spec.seed, 7])
    prof_start = run.epoch_start_ns - 2_000_000_000
    base = (prof_start // BASE_PERIOD_NS) * BASE_PERIOD_NS
    off = run.epoch_start_ns - base          # engine t = 0 relative to baseTimeNanoseconds
    n = sim.n_steps
    start = sim.start_ns + off
    end = sim.end_ns + off
    dur = end - start
    tokens = sim.prefill_tokens + sim.n_decode
    if backend == "v0-flash" or spec.policy == "sglang":
        graph = sim.kind == KIND_DECODE       # V0 and SGLang replay graphs for decode batches only
    else:
        graph = tokens <= GRAPH_MAX_TOKENS    # V1 piecewise graphs up to the largest captured size
    tiled = np.ceil(tokens / pre.tile) * pre.tile
    comp = {  # model components of each step, ms, noise included
        "lin": (pre.b0.value + pre.b1.value * tiled + pre.b4.value * sim.n_decode) * sim.noise,
        "attd": pre.b2.value * sim.kv_read * sim.noise,
        "attp": pre.b3.value * sim.attn_work * sim.noise,
    }
    comp["att"] = comp["attd"] + comp["attp"]
    names: dict[str, int] = {}

    def nid(s: str) -> int:
        return names.setdefault(s, len(names))

    launch_parts, kernel_parts = [], []
    for kind in (KIND_DECODE, KIND_PREFILL, KIND_MIXED):
        for gmode in (True, False):
            steps = np.nonzero((sim.kind == kind) & (graph == gmode))[0]
            if len(steps) == 0:
                continue
            tpl = template(kind, gmode, backend, layers, tp)
            _expand(steps, tpl, comp, start, dur, nid, launch_parts, kernel_parts, tp)
    launches = pl.concat(launch_parts).sort(["step", "gi"]).with_row_index("li")
    launches = launches.with_columns(li=pl.col("li").cast(pl.Int64), corr=pl.col("li").cast(pl.Int64) + 16)
    kernels = pl.concat(kernel_parts).join(launches.select("step", "gi", "li", "corr"), on=["step", "gi"])
    name_list = sorted(names, key=names.get)
    name_tbl = pl.DataFrame({"id": np.arange(len(name_list)), "name": [_q(x) for x in name_list]})

    # CPU side: the step annotation, one op per launch that has one, one enclosing op per attention block.
    steps_df = pl.DataFrame({"step": np.arange(n), "start": start, "end": end, "kind": sim.kind,
                             "ndec": sim.n_decode, "ptok": sim.prefill_tokens})
    ann = _annotations(run, steps_df, sim) if (spec.policy == "sglang" or backend != "v0-flash") else None
    ops = launches.filter(pl.col("op") >= 0).select(
        "step", (pl.col("ts") - 6_000).alias("ts"), (pl.col("dur") + 10_000).alias("dur"), pl.col("op").alias("nm"),
        pl.lit(2).alias("lvl"), "li", pl.lit(-1).alias("blk"))
    blocks = launches.filter(pl.col("blk") >= 0).group_by(["step", "blk"]).agg(
        pl.col("outer").first().alias("nm"), pl.col("ts").min().alias("t0"),
        (pl.col("ts") + pl.col("dur")).max().alias("t1")).select(
        "step", (pl.col("t0") - 12_000).alias("ts"), (pl.col("t1") - pl.col("t0") + 20_000).alias("dur"), "nm",
        pl.lit(1).alias("lvl"), pl.lit(-1, dtype=pl.Int64).alias("li"), "blk")
    parts = [ops, blocks]
    if ann is not None:
        parts.append(ann.select("step", "ts", "dur", pl.lit(-1).alias("nm"), pl.lit(0).alias("lvl"),
                                pl.lit(-1, dtype=pl.Int64).alias("li"), pl.lit(-1).alias("blk")))
    cpu = pl.concat([p.with_columns(pl.col("nm").cast(pl.Int64), pl.col("lvl").cast(pl.Int32),
                                    pl.col("blk").cast(pl.Int64)) for p in parts])
    cpu = cpu.sort(["ts", "lvl"]).with_row_index("ev").with_columns(ev=pl.col("ev").cast(pl.Int64),
                                                                      ext=pl.col("ev").cast(pl.Int64) + 3)
    # A launch carries the External id of its innermost op; graph replays carry none.
    inner = cpu.filter(pl.col("lvl") == 2).select("li", pl.col("ext").alias("e_in"))
    outer = cpu.filter(pl.col("lvl") == 1).select("step", "blk", pl.col("ext").alias("e_out"))
    launches = launches.join(inner, on="li", how="left").join(outer, on=["step", "blk"], how="left").with_columns(
        ext=pl.when(~pl.col("has_ext")).then(None).otherwise(pl.coalesce("e_in", "e_out")))
    kernels = kernels.join(launches.select("li", "ext"), on="li", how="left")

    prof_rel = prof_start - base
    prof_end_rel = int(end.max()) + 500_000_000 if n else prof_rel + 1_000_000_000
    chunks: list[str] = []
    # -- block 1: cpu_op and user_annotation, in time order ----------------------------------------------------------
    cpu_txt = cpu.join(name_tbl.rename({"id": "nm"}), on="nm", how="left")
    if ann is not None:
        cpu_txt = cpu_txt.join(ann.select("step", pl.col("name").alias("aname")), on="step", how="left").with_columns(
            name=pl.when(pl.col("lvl") == 0).then(pl.col("aname")).otherwise(pl.col("name")))
    cpu_txt = cpu_txt.sort("ev")
    cat = pl.when(pl.col("lvl") == 0).then(pl.lit("user_annotation")).otherwise(pl.lit("cpu_op"))
    t = cpu_txt.select(pl.concat_str([
        pl.lit('  {\n    "ph": "X", "cat": "'), cat, pl.lit('", "name": "'), pl.col("name"),
        pl.lit(f'", "pid": {pid}, "tid": {pid},\n    "ts": '), _ts("ts"), pl.lit(', "dur": '), _ts("dur"),
        pl.lit(',\n    "args": {\n      "External id": '), pl.col("ext").cast(pl.String),
        pl.lit(',"Record function id": 0, "Ev Idx": '), pl.col("ev").cast(pl.String), pl.lit("\n    }\n  }")
    ]).alias("s"))["s"]
    chunks.append(",\n".join(t.to_list()))
    n_cpu = len(cpu_txt)
    # -- block 2: python functions: the worker window encloses the model-runner window (the step markers) ------------
    if spec.policy != "sglang":
        if backend == "v0-flash":
            o_name, i_name = ("vllm/worker/worker_base.py(420): execute_model",
                              "vllm/worker/model_runner.py(1745): execute_model")
        else:
            o_name, i_name = ("vllm/v1/worker/gpu_worker.py(263): execute_model",
                              "vllm/v1/worker/gpu_model_runner.py(1002): execute_model")
        py = pl.concat([
            steps_df.select("step", pl.lit(0).alias("o"), (pl.col("start") - 25_000).alias("ts"),
                            (pl.col("end") - pl.col("start") + 60_000).alias("dur"), pl.lit(o_name).alias("name")),
            steps_df.select("step", pl.lit(1).alias("o"), pl.col("start").alias("ts"),
                            (pl.col("end") - pl.col("start")).alias("dur"), pl.lit(i_name).alias("name")),
        ]).sort(["step", "o"]).with_row_index("pi").with_columns(pi=pl.col("pi").cast(pl.Int64))
        py = py.with_columns(pyid=pl.col("pi") + 2, ev=pl.col("pi") + n_cpu + 1,
                             parent=pl.when(pl.col("o") == 0).then(pl.lit(1, dtype=pl.Int64)).otherwise(pl.col("pi") + 1))
        root_dur = prof_end_rel - prof_rel - 2_000
        root = (f'  {{\n    "ph": "X", "cat": "python_function", "name": "multiprocessing/process.py(314): _bootstrap", '
                f'"pid": {pid}, "tid": {pid},\n    "ts": {_fmt(prof_rel + 1_000)}, "dur": {_fmt(root_dur)},\n'
                f'    "args": {{\n      "Python parent id": null, "Python id": 1, "Ev Idx": {n_cpu}\n    }}\n  }}')
        t = py.select(_x_event("python_function", str(pid), str(pid), pl.concat_str([
            pl.lit('"Python parent id": '), pl.col("parent").cast(pl.String), pl.lit(', "Python id": '),
            pl.col("pyid").cast(pl.String), pl.lit(', "Ev Idx": '), pl.col("ev").cast(pl.String)])).alias("s"))["s"]
        chunks.append(",\n".join([root] + t.to_list()))
    # -- block 3: each launch's kernels (with their ac2g end flows), then the launch and its start flow ---------------
    arg_tbl = pl.DataFrame({"akey": [nid(k) for k in _ARGS], "atxt": [
        f'"registers per thread": {a[0]},      "shared memory": {a[1]},      "blocks per SM": {a[2]},      '
        f'"warps per SM": {a[3]},      "grid": {a[4]},      "block": {a[5]},      "est. achieved occupancy %": {a[6]}'
        for a in _ARGS.values()]})
    kt = kernels.join(name_tbl.rename({"id": "kname"}), on="kname", how="left").join(arg_tbl, on="akey", how="left")
    k_ev = pl.when(pl.col("memcpy")).then(_x_event("gpu_memcpy", "0", "7", pl.concat_str([
        _ext_prefix(), pl.lit('"device": 0, "context": 1,      "stream": 7, "correlation": '),
        pl.col("corr").cast(pl.String), pl.lit(',      "bytes": 32768, "memory bandwidth (GB/s)": '),
        (pl.lit(32768.0) / pl.col("dur")).cast(pl.String)]))).otherwise(_x_event("kernel", "0", "7", pl.concat_str([
            _ext_prefix(), pl.lit('"queued": 0, "device": 0, "context": 1,      "stream": 7, "correlation": '),
            pl.col("corr").cast(pl.String), pl.lit(",      "), pl.col("atxt")])))
    f_ev = pl.concat_str([pl.lit('  {\n    "ph": "f", "id": '), pl.col("corr").cast(pl.String),
                          pl.lit(', "pid": 0, "tid": 7, "ts": '), _ts("ts"),
                          pl.lit(',\n    "cat": "ac2g", "name": "ac2g", "bp": "e"\n  }')])
    kx = kt.select("li", (pl.col("kj") * 2).alias("o"), k_ev.alias("s"))
    kf = kt.select("li", (pl.col("kj") * 2 + 1).alias("o"), f_ev.alias("s"))
    lt = launches.join(name_tbl.rename({"id": "rt", "name": "rtname"}), on="rt", how="left")
    rcat = pl.when(pl.col("cat") == 0).then(pl.lit("cuda_runtime")).otherwise(pl.lit("cuda_driver"))
    r_ev = pl.concat_str([
        pl.lit('  {\n    "ph": "X", "cat": "'), rcat, pl.lit('", "name": "'), pl.col("rtname"),
        pl.lit(f'", "pid": {pid}, "tid": {pid},\n    "ts": '), _ts("ts"), pl.lit(', "dur": '), _ts("dur"),
        pl.lit(',\n    "args": {\n      '), _ext_prefix(), pl.lit('"cbid": '), pl.col("cbid").cast(pl.String),
        pl.lit(', "correlation": '), pl.col("corr").cast(pl.String), pl.lit("\n    }\n  }")])
    s_ev = pl.concat_str([pl.lit('  {\n    "ph": "s", "id": '), pl.col("corr").cast(pl.String),
                          pl.lit(f', "pid": {pid}, "tid": {pid}, "ts": '), _ts("ts"),
                          pl.lit(',\n    "cat": "ac2g", "name": "ac2g"\n  }')])
    rx = lt.select("li", pl.lit(100_000).alias("o"), r_ev.alias("s"))
    rs = lt.select("li", pl.lit(100_001).alias("o"), s_ev.alias("s"))
    gpu = pl.concat([x.with_columns(pl.col("o").cast(pl.Int64)) for x in (kx, kf, rx, rs)]).sort(["li", "o"])
    chunks.append(",\n".join(gpu["s"].to_list()))
    if ann is not None:  # gpu_user_annotation: the GPU span of each annotated step
        gk = kernels.group_by("step").agg(pl.col("ts").min().alias("g0"),
                                          (pl.col("ts") + pl.col("dur")).max().alias("g1"))
        ga = ann.join(cpu.filter(pl.col("lvl") == 0).select("step", "ext"), on="step").join(gk, on="step").select(
            "name", "ext", (pl.col("g0") - 1).alias("ts"), (pl.col("g1") - pl.col("g0") + 2).alias("dur")).sort("ts")
        t = ga.select(_x_event("gpu_user_annotation", "0", "7", pl.concat_str([
            pl.lit('"External id": '), pl.col("ext").cast(pl.String)])).alias("s"))["s"]
        chunks.append(",\n".join(t.to_list()))
    chunks.append(_metadata(pid, prof_rel, prof_end_rel, pre))
    trace_id = rng.bytes(16).hex().upper()
    tmp = "".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz0123456789_"), 8))
    text = (_header(pre, tp) + f'  "trace_id": "{trace_id}",\n  "traceEvents": [\n' + ",\n".join(c for c in chunks if c)
            + f'\n  ],\n  "traceName": "/tmp/tmp{tmp}.json",\n  "displayTimeUnit": "ms",\n'
            f'  "baseTimeNanoseconds": {base}\n}}')
    return text.encode()


def _fmt(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def _expand(steps, tpl, comp, start, dur, nid, launch_parts, kernel_parts, tp) -> None:
    """Launch and kernel rows of every step in `steps` for one template: kernels run back to back from the
    step's GPU start, each taking its share of its model component; launches precede their first kernel."""
    m = len(steps)
    kern = [(gi, k) for gi, g in enumerate(tpl) for k in g.kernels]
    fixed = np.array([k[2] * 1000 if k[1] == "fix" else 0.0 for _, k in kern])
    var = np.maximum((dur[steps] - PRO_NS - EPI_NS) - fixed.sum(), 0).astype(np.float64)
    parts = {c: comp[c][steps] for c in ("lin", "att", "attp", "attd")}
    used = [c for c in ("lin", "att", "attp", "attd") if any(k[1] == c for _, k in kern)]
    total = sum(parts[c] for c in used)
    scale = var / np.where(total > 0, total, 1.0)
    kd = np.tile(fixed, (m, 1))
    for c in used:
        w = np.array([k[2] if k[1] == c else 0.0 for _, k in kern])
        kd += np.outer(parts[c] * scale, w / w.sum())
    kd_ns = np.maximum(np.rint(kd).astype(np.int64), 1)
    kstart = (start[steps] + PRO_NS)[:, None] + np.concatenate(
        [np.zeros((m, 1), np.int64), np.cumsum(kd_ns, axis=1)[:, :-1]], axis=1)
    first_k = np.array([next(j for j, (gi, _) in enumerate(kern) if gi == g) for g in range(len(tpl))])
    sched = start[steps][:, None] + 30_000 + 50_000 * (np.arange(len(tpl))[None, :] + 1)
    launch = np.maximum(np.minimum(sched, kstart[:, first_k] - 4_000), start[steps][:, None] + 10_000)
    for gi, g in enumerate(tpl):
        cat, cbid, rtd = RT[g.rt]
        launch_parts.append(pl.DataFrame({
            "step": steps, "gi": np.full(m, gi), "ts": launch[:, gi], "dur": np.full(m, rtd, dtype=np.int64),
            "rt": np.full(m, nid(g.rt)), "cat": np.full(m, 0 if cat == "cuda_runtime" else 1),
            "cbid": np.full(m, cbid), "has_ext": np.full(m, g.ext),
            "op": np.full(m, nid(g.op) if g.op else -1), "outer": np.full(m, nid(g.outer) if g.outer else -1),
            "blk": np.full(m, g.blk)}))
    for j, (gi, k) in enumerate(kern):
        kname, akey = K[k[0]]
        kernel_parts.append(pl.DataFrame({
            "step": steps, "gi": np.full(m, gi), "kj": np.full(m, j), "ts": kstart[:, j], "dur": kd_ns[:, j],
            "kname": np.full(m, nid(kname.replace("{tp}", str(tp)))),
            "akey": np.full(m, nid(akey) if akey else -1), "memcpy": np.full(m, k[0] == "memcpy")}))


def _annotations(run: Run, steps_df: pl.DataFrame, sim) -> pl.DataFrame:
    """Per-step composition marker: vLLM `execute_context_...` (or `step[...]` for the sglang policy)."""
    spec = run.spec
    ch = pl.DataFrame({"step": sim.ch_step, "c": sim.ch_tokens, "k": sim.ch_ctx}).group_by("step").agg(
        pl.len().alias("nc"), pl.col("c").sum().alias("sq"), (pl.col("c") + pl.col("k")).sum().alias("sk"),
        (pl.col("c") * pl.col("c")).sum().alias("sqsq"), (pl.col("c") * (pl.col("c") + pl.col("k"))).sum().alias("sqsk"))
    df = steps_df.join(ch, on="step", how="left").with_columns(
        pl.col("nc").fill_null(0), pl.col("sq").fill_null(0), pl.col("sk").fill_null(0), pl.col("sqsq").fill_null(0),
        pl.col("sqsk").fill_null(0), gsk=pl.lit(pl.Series(sim.kv_read)))
    s = lambda c: pl.col(c).cast(pl.String)  # noqa: E731
    if spec.policy == "sglang":
        name = (pl.when(pl.col("ptok") == 0).then(pl.concat_str([pl.lit("step[DECODE bs="), s("ndec"), pl.lit("]")]))
                .when(pl.col("ndec") > 0).then(pl.concat_str([pl.lit("step[MIXED bs="), (pl.col("nc") + pl.col("ndec"))
                                                                .cast(pl.String), pl.lit(" toks="),
                                                                (pl.col("ptok") + pl.col("ndec")).cast(pl.String),
                                                                pl.lit("]")]))
                .otherwise(pl.concat_str([pl.lit("step[EXTEND bs="), s("nc"), pl.lit(" toks="), s("ptok"), pl.lit("]")])))
    elif spec.trace_annotation == "detailed":
        name = pl.concat_str([
            pl.lit("execute_"), (pl.col("ptok") + pl.col("ndec")).cast(pl.String), pl.lit("_context_"), s("nc"),
            pl.lit("(sq"), s("sq"), pl.lit("sk"), s("sk"), pl.lit("sqsq"), s("sqsq"), pl.lit("sqsk"), s("sqsk"),
            pl.lit(")_generation_"), s("ndec"), pl.lit("(sq"), s("ndec"), pl.lit("sk"), s("gsk"), pl.lit("sqsq"),
            s("ndec"), pl.lit("sqsk"), s("gsk"), pl.lit(")")])
    else:
        name = pl.concat_str([pl.lit("execute_context_"), s("nc"), pl.lit("("), s("sq"), pl.lit(")_generation_"),
                              s("ndec"), pl.lit("("), s("ndec"), pl.lit(")")])
    return df.select("step", name.alias("name"), (pl.col("start") - 10_000).alias("ts"),
                     (pl.col("end") - pl.col("start") + 20_000).alias("dur"))


def _metadata(pid: int, prof_rel: int, prof_end_rel: int, pre) -> str:
    t = f"{prof_rel // 1000}.{prof_rel % 1000:03d}"
    out = []

    def m(name, p, tid, key, val):
        v = f'"{val}"' if isinstance(val, str) else str(val)
        out.append(f'  {{\n    "name": "{name}", "ph": "M", "ts": {t}, "pid": {p}, "tid": {tid},\n'
                   f'    "args": {{\n      "{key}": {v}\n    }}\n  }}')
    m("process_name", pid, 0, "name", "python3")
    m("process_labels", pid, 0, "labels", "CPU")
    m("process_sort_index", pid, 0, "sort_index", pid)
    for d in range(8):
        m("process_name", d, 0, "name", "python3")
        m("process_labels", d, 0, "labels", f"GPU {d}")
        m("process_sort_index", d, 0, "sort_index", 5000000 + d)
    m("thread_name", 0, 7, "name", "stream 7 ")
    m("thread_sort_index", 0, 7, "sort_index", 7)
    m("thread_name", pid, pid, "name", f"thread {pid} (python3)")
    m("thread_sort_index", pid, pid, "sort_index", pid)
    e = prof_end_rel
    te = f"{e // 1000}.{e % 1000:03d}"
    d = prof_end_rel - prof_rel
    out.append(f'  {{\n    "ph": "X", "cat": "Trace", "ts": {t}, "dur": {d // 1000}.{d % 1000:03d},\n'
               f'    "pid": "Spans", "tid": "PyTorch Profiler",\n    "name": "PyTorch Profiler (0)",\n'
               f'    "args": {{\n      "Op count": 0\n    }}\n  }}')
    out.append(f'  {{\n    "name": "process_sort_index", "ph": "M", "ts": {t},\n    "pid": "Spans", "tid": 0,\n'
               f'    "args": {{\n      "sort_index": 536870912\n    }}\n  }}')
    out.append(f'  {{\n    "name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g",\n'
               f'    "pid": "Traces", "tid": "Trace PyTorch Profiler", "ts": {t}\n  }}')
    out.append(f'  {{\n    "name": "Record Window End", "ph": "i", "s": "g",\n    "pid": "", "tid": "", "ts": {te}\n  }}')
    return ",\n".join(out)


def _header(pre, tp: int) -> str:
    props = []
    for d in range(8):
        props.append(
            f'    {{\n      "id": {d}, "name": "{pre.gpu}", "totalGlobalMem": {pre.gpu_mem_bytes},\n'
            f'      "computeMajor": 9, "computeMinor": 0,\n'
            f'      "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,\n'
            f'      "regsPerBlock": 65536, "warpSize": 32,\n'
            f'      "sharedMemPerBlock": 49152, "numSms": {pre.num_sms}\n'
            f'    , "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 232448, '
            f'"sharedMemPerMultiprocessor": 233472\n    }}')
    ranks = ", ".join(str(r) for r in range(tp))
    pgs = [f'{{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": {tp}, '
           f'"ranks": [{ranks}]}}',
           f'{{"pg_name": "1", "pg_desc": "undefined", "backend_config": "cuda:nccl", "pg_size": {tp}, '
           f'"ranks": [{ranks}]}}',
           f'{{"pg_name": "2", "pg_desc": "undefined", "backend_config": "cpu:gloo,cuda:gloo", "pg_size": {tp}, '
           f'"ranks": [{ranks}]}}']
    dist = (f'{{"backend": "nccl", "rank": 0, "world_size": {tp}, "pg_count": {len(pgs)}, '
            f'"pg_config": [{", ".join(pgs)}], "nccl_version": "2.21.5"}}')
    return ("{\n  \"schemaVersion\": 1,\n  \"deviceProperties\": [\n" + ",\n".join(props) + "\n  ],\n"
            '  "cupti_version": 22,\n  "cuda_runtime_version": 12040,\n  "cuda_driver_version": 12090,\n'
            f'  "distributedInfo": {dist},\n  "with_stack": 1,\n')


def write(run: Run, path) -> int:
    data = build(run)
    with open(path, "wb") as f:
        with gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0, compresslevel=9) as gz:
            gz.write(data)
    return len(data)
