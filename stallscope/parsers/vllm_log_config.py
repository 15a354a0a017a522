"""vLLM startup lines → normalised `engine_config` rows (version, V0/V1, model, TP/PP/DP, chunk budget, KV capacity, …).

A log says the same thing several times in different words (the `args: Namespace(…)` dump, the `non-default
args` dict, the `Initializing … with config:` line, the dedicated `Chunked prefill is enabled with
max_num_batched_tokens=N.` line). Each statement becomes a candidate with a rank (0 = a dedicated line stating
the effective value, 1 = the engine config line, 2 = non-default args, 3 = the full args dump, where `None`
means "not set"); the best rank wins, then the latest line. Raw keys are kept as `arg.<name>` and
`engine.<name>`. Config lines are few (one set per server start), so they are handled in small frames.
"""
from __future__ import annotations

import polars as pl
import pyarrow as pa

from . import vllm_log_patterns as P

c = pl.col

# Raw key (as vLLM prints it) → normalised key.
_NORMALISE = {
    "model": "model", "served_model_name": "served_model_name", "tensor_parallel_size": "tensor_parallel_size",
    "pipeline_parallel_size": "pipeline_parallel_size", "data_parallel_size": "data_parallel_size",
    "max_num_batched_tokens": "max_num_batched_tokens", "max_num_seqs": "max_num_seqs",
    "enable_chunked_prefill": "enable_chunked_prefill", "chunked_prefill_enabled": "enable_chunked_prefill",
    "enable_prefix_caching": "enable_prefix_caching", "max_model_len": "max_model_len", "max_seq_len": "max_model_len",
    "gpu_memory_utilization": "gpu_memory_utilization", "block_size": "block_size", "dtype": "dtype",
    "quantization": "quantization", "kv_cache_dtype": "kv_cache_dtype", "enforce_eager": "enforce_eager",
    "num_scheduler_steps": "num_scheduler_steps", "max_num_partial_prefills": "max_num_partial_prefills",
    "scheduling_policy": "scheduling_policy", "enable_expert_parallel": "enable_expert_parallel",
    "speculative_config": "speculative_config",
}

_SCHEMA = {"line_no": pl.Int64, "key": pl.String, "value": pl.String, "origin": pl.String, "rank": pl.Int32}


def _frame(line_no, key, value, origin: str, rank: int) -> pl.DataFrame:
    return pl.DataFrame({"line_no": line_no, "key": key, "value": value}).with_columns(
        pl.lit(origin).alias("origin"), pl.lit(rank, pl.Int32).alias("rank")).select(list(_SCHEMA))


def _pairs(df: pl.DataFrame, body: pl.Expr, pair_regex: str) -> pl.DataFrame:
    """Rows of (line_no, key, value) from `key=value` (or `'key': value`) lists, one per pair."""
    p = (df.select(c("line_no"), body.str.extract_all(pair_regex).alias("pair")).explode("pair")
         .filter(c("pair").is_not_null()))
    g = p.select(c("line_no"), c("pair").str.extract_groups(pair_regex).alias("g")).unnest("g")
    return g.select(c("line_no"), c("key"), c("value").str.strip_chars())


class ConfigCollector:
    """Collects the config lines frame by frame; `rows()` reads every statement they make (all the frames' lines at
    once: a few dozen polars calls per file, not per frame) and resolves them into engine_config rows."""

    def __init__(self):
        self.parts: list[pl.DataFrame] = []
        self.lines: list = []  # Arrow tables: compact copies that do not keep a whole frame's text alive

    def add(self, cfg: pl.DataFrame) -> None:
        """`cfg`: the config-tagged records of a frame, columns line_no and msg (kept as they are until `rows()`)."""
        if cfg.height:
            self.lines.append(cfg.select("line_no", "msg").to_arrow())

    def _read(self, cfg: pl.DataFrame) -> None:
        """Every statement the config lines `cfg` (line_no, msg) make, as candidates in `parts`."""
        msg = c("msg")
        parts = self.parts
        # One pass computes every statement a config line can make (polars runs the expressions in parallel).
        g = cfg.select(
            c("line_no"), msg.str.extract(P.CFG_VERSION.regex, 1).alias("version"),
            msg.str.extract_groups(P.CFG_INIT.regex).alias("init"),
            msg.str.extract(P.CFG_CHUNKED.regex, 1).alias("chunked"),
            msg.str.extract(P.CFG_KV_TOKENS.regex, 1).str.replace_all(",", "").alias("kv_tokens"),
            msg.str.extract_groups(P.CFG_BLOCKS_V0.regex).alias("b0"),
            msg.str.extract(P.CFG_BLOCKS_V1.regex, 1).alias("b1"),
            msg.str.extract(P.CFG_MAX_LEN.regex, 1).alias("max_len"),
            msg.str.extract(P.CFG_ARGS.regex, 1).alias("args"),
            msg.str.extract(P.CFG_NONDEFAULT.regex, 1).alias("nondefault"))
        init = g.select("line_no", "init").unnest("init").drop_nulls("version")
        if init.height:
            ev = init.select(pl.coalesce(c("engine"), pl.lit("V0"))).to_series()
            parts.append(_frame(init["line_no"], ["engine_version"] * init.height, ev, "Initializing ... LLM engine", 1))
            parts.append(_frame(init["line_no"], ["vllm_version"] * init.height, init["version"],
                                "Initializing ... LLM engine", 1))
            self._kv(_pairs(init, c("config"), P.CFG_KV.regex), "engine.", "Initializing ... LLM engine", 1)
        b0 = g.select("line_no", "b0").unnest("b0").drop_nulls("gpu")
        for key, col, origin in (("vllm_version", "version", "vLLM API server version"),
                                 ("max_num_batched_tokens", "chunked", "Chunked prefill is enabled"),
                                 ("enable_chunked_prefill", "chunked", "Chunked prefill is enabled"),
                                 ("kv_cache_tokens", "kv_tokens", "GPU KV cache size"),
                                 ("num_gpu_blocks", "b1", "cache_config_info"),
                                 ("max_model_len", "max_len", "Using max model len")):
            v = g.select("line_no", col).drop_nulls(col)
            if v.height:
                val = ["True"] * v.height if key == "enable_chunked_prefill" else v[col]
                parts.append(_frame(v["line_no"], [key] * v.height, val, origin, 0))
        if b0.height:
            parts.append(_frame(b0["line_no"], ["num_gpu_blocks"] * b0.height, b0["gpu"], "# GPU blocks", 0))
            parts.append(_frame(b0["line_no"], ["num_cpu_blocks"] * b0.height, b0["cpu"], "# GPU blocks", 0))
        args = g.select("line_no", "args").drop_nulls("args")
        if args.height:
            self._kv(_pairs(args, c("args"), P.CFG_KV.regex), "arg.", "args: Namespace", 3)
        nd = g.select("line_no", "nondefault").drop_nulls("nondefault")
        if nd.height:
            self._kv(_pairs(nd, c("nondefault"), P.CFG_DICT_KV.regex), "arg.", "non-default args", 2)

    def _kv(self, kv: pl.DataFrame, raw_prefix: str, origin: str, rank: int) -> None:
        if kv.height == 0:
            return
        self.parts.append(_frame(kv["line_no"], (raw_prefix + kv["key"]).to_list(), kv["value"], origin, 9))
        norm = kv.filter(c("key").is_in(list(_NORMALISE)) & (c("value") != "None"))
        if norm.height:
            keys = norm["key"].replace_strict(_NORMALISE, return_dtype=pl.String)
            self.parts.append(_frame(norm["line_no"], keys, norm["value"], origin, rank))

    def rows(self, extra: pl.DataFrame | None = None) -> pl.DataFrame:
        """The resolved engine_config rows: one per key (best rank, then the latest line)."""
        if self.lines:
            self._read(pl.from_arrow(pa.concat_tables(self.lines)))
            self.lines = []
        parts = [p for p in self.parts if p.height]
        if extra is not None and extra.height:
            parts.append(extra.select(list(_SCHEMA)).cast(_SCHEMA))
        if not parts:
            return pl.DataFrame(schema={"line_no": pl.Int64, "key": pl.String, "value": pl.String,
                                        "value_num": pl.Float64, "origin": pl.String})
        allc = pl.concat([p.cast(_SCHEMA) for p in parts])
        best = (allc.sort(["key", "rank", "line_no"], descending=[False, False, True])
                .group_by("key", maintain_order=True).first())
        val = c("value").str.strip_chars("'\"")
        num = (pl.when(val == "True").then(1.0).when(val == "False").then(0.0)
               .otherwise(val.cast(pl.Float64, strict=False)))
        return best.select(c("line_no"), c("key"), val.alias("value"), num.alias("value_num"), c("origin")).sort("key")
