"""Tables the analyses read besides the evidence: user-extensible rules (kernel phase labels)."""
from .model import Col, Table

TABLES = [
    Table(
        "phase_rules",
        "How GPU kernels are labelled prefill / decode / shared, as rows a user can extend with SQL "
        "(`INSERT INTO phase_rules VALUES (...)`): the first rule (lowest `priority`) whose `pattern` matches a "
        "kernel name wins. `shared` kernels serve both phases in a mixed step (one varlen attention over the "
        "whole batch, GEMMs over all tokens) and have their time apportioned by the step's composition: "
        "attention by attention work (Σq·kv), everything else by token share. Built-in rules have "
        "`builtin = true` and are restored (never duplicated) when a store is opened.",
        (
            Col("rule_id", "VARCHAR", "", "Stable name of the rule."),
            Col("priority", "INTEGER", "", "Lower wins when several patterns match."),
            Col("pattern", "VARCHAR", "", "RE2 regular expression searched in the kernel name."),
            Col("phase", "VARCHAR", "", "`prefill`, `decode` or `shared`."),
            Col("work", "VARCHAR", "", "`attention`, `gemm`, `comm`, `memory` or `elementwise`: which composition "
                "share apportions a `shared` kernel (attention work for `attention`, tokens otherwise)."),
            Col("note", "VARCHAR", "", "Where the kernel comes from."),
            Col("builtin", "BOOLEAN", "", "Shipped with stallscope (true) or added by a user (false)."),
        ),
        group="Analysis rules",
        per_source=False,
    ),
]

# (rule_id, priority, pattern, phase, work, note). Phase-specific names first; the varlen/unified kernels that
# run prefill and decode in one launch are `shared`; the catch-alls last.
DEFAULT_PHASE_RULES = [
    ("flashinfer_prefill", 10, r"BatchPrefillWith|SinglePrefillWith|PrefillWithRaggedKV", "prefill", "attention",
     "FlashInfer prefill kernels (FlashInfer backend splits the batch by phase)"),
    ("flashinfer_decode", 10, r"BatchDecodeWith|SingleDecodeWith", "decode", "attention", "FlashInfer decode kernels"),
    ("v0_flash_splitkv_decode", 12, r"flash_fwd_splitkv", "decode", "attention",
     "vLLM V0 FlashAttention backend: split-KV kernels serve the decode part"),
    ("v0_flash_prefill", 14, r"flash_fwd_kernel|flash_fwd_varlen_kernel", "prefill", "attention",
     "vLLM V0 FlashAttention backend: flash_fwd_kernel serves the prefill part"),
    ("paged_attention_decode", 16, r"paged_attention_v[12]_", "decode", "attention",
     "PagedAttention v1/v2 decode kernels (vLLM V0 XFormers and ROCm backends)"),
    ("xformers_prefill", 18, r"fmha_cutlassF|fmha.*Forward|mem_efficient", "prefill", "attention",
     "V0 XFormers prefill (cutlass fmha)"),
    ("mla_prefill", 20, r"(?i)mla.*prefill|prefill.*mla", "prefill", "attention", "MLA backends, prefill path"),
    ("mla_decode", 20, r"(?i)mla.*decode|decode.*mla|FlashMLA", "decode", "attention", "MLA backends, decode path"),
    ("fa3_varlen_shared", 30, r"FlashAttnFwdSm90|FlashAttnFwdCombine|flash::|prepare_varlen_num_blocks",
     "shared", "attention", "FlashAttention-3 varlen (vLLM V1 on Hopper): one launch over prefill chunks and decodes"),
    ("unified_attention_shared", 32, r"unified_attention|triton_attention|attention_2d|attention_3d|paged_attention_ll4mi",
     "shared", "attention", "vLLM V1 attention over the whole batch on ROCm: Triton unified attention, and the custom "
     "paged_attention_ll4mi kernels, which the real MI300X V1 trace runs in its prefill and decode steps alike"),
    ("kv_cache_write", 34, r"reshape_and_cache", "shared", "memory", "KV-cache writes, proportional to tokens"),
    ("collectives", 40, r"(?i)nccl|rccl|all_?reduce|all_?gather|reduce_scatter|cross_device_reduce|multimem",
     "shared", "comm", "TP collectives, proportional to tokens"),
    ("gemm", 50, r"(?i)gemm|cutlass|cublas|nvjet|Cijk_|sm90_xmma|sm80_xmma|matmul|wgrad|dgrad|_mm_|fp8.*scaled",
     "shared", "gemm", "GEMMs: cost proportional to tokens"),
    ("elementwise", 1000, r".", "shared", "elementwise", "everything else: norms, activations, rotary, sampling"),
]
