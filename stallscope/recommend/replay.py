"""What-if replay: the incident's workload through the project's engine simulator, for a grid of token budgets.

Each replay runs `stallscope.simulate.engine.simulate` with a `Preset` built from a step model (the fitted one, or
for scoring the true one), under the engine semantics the store shows. Step times are drawn from the fitted
model's residuals (t/t_hat ratios), and the uncertainty band comes from replays whose coefficients are drawn from
the fit's covariance. Each replayed request is judged by the same SQL as `analyze` (views request_metrics and
request_verdicts) on a throwaway in-memory store holding the replayed requests.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from stallscope.simulate.engine import EngineConfig, simulate
from stallscope.simulate.stepmodel import Coef, Preset
from stallscope.simulate.workload import Workload

# Tile-aligned budgets (../shared/notes/goodput-and-chunking.md §3.4); None = the unchunked policy.
BUDGETS = (256, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384)
UNCHUNKED = None


@dataclass(frozen=True)
class Semantics:
    """How the engine spends its token budget (the simulator policy) and its limits."""
    policy: str                  # chunked (vLLM V1 / TGI: decodes count in the budget) | sglang (prefill only) | v0
    max_num_seqs: int = 256
    kv_cache_tokens: int | None = None
    mixed_chunk: bool = False
    unchunked_policy: str = "chunked"   # how "no chunking" runs: v0 (prefill-first) or a budget >= every prompt


@dataclass
class BudgetResult:
    chunk_tokens: int | None
    goodput_rps: float
    lo: float
    hi: float
    attainment: float
    p99_itl_ms: float
    mean_tpot_ms: float
    p90_ttft_ms: float
    runs: list = field(default_factory=list)   # per replay: (goodput, p99 itl, mean tpot, p90 ttft)

    def row(self) -> dict:
        return {"chunk_tokens": self.chunk_tokens, "goodput_rps": self.goodput_rps, "lo": self.lo, "hi": self.hi,
                "p99_itl_ms": self.p99_itl_ms, "mean_tpot_ms": self.mean_tpot_ms, "p90_ttft_ms": self.p90_ttft_ms}


def preset_from_model(coef, tile: int, *, host_gap_ms=(0.3, 0.56), kv_cache_tokens: int, max_model_len: int,
                      residual_ratios=None, name: str = "fitted") -> Preset:
    """A simulator preset whose step model is the fitted one (coefficients in fit.TERMS order)."""
    c = [float(max(v, 0.0)) for v in coef]
    src = "fitted on the incident's observed steps (stallscope recommend)"
    r = np.asarray(residual_ratios if residual_ratios is not None else [], dtype=np.float64)
    r = r[np.isfinite(r) & (r > 0)]
    sigma = float(np.std(np.log(r))) if len(r) > 2 else 0.03
    return Preset(
        name=name, model="fitted", gpu="fitted", tp=1, n_layers=1, n_heads=1, n_kv_heads=1, head_dim=1,
        b0=Coef(c[0], "ms", src), b1=Coef(c[3], "ms per tiled token", src), b2=Coef(c[2], "ms per KV token read", src),
        b3=Coef(c[4], "ms per attention unit", src), b4=Coef(c[1], "ms per decode sequence", src),
        sigma=Coef(max(sigma, 1e-6), "log-ratio", src), host_gap_ms=(float(host_gap_ms[0]), float(host_gap_ms[1])),
        host_gap_source="observed inter-step host gaps", kv_cache_tokens=int(kv_cache_tokens),
        kv_cache_source="engine configuration or assumed", max_model_len=int(max_model_len), tile=int(tile),
        extra={"noise_factors": r} if len(r) > 2 else {})


def grid(sem: Semantics, workload: Workload, budgets=BUDGETS) -> list[int | None]:
    """The budgets worth replaying for these semantics, plus the unchunked policy."""
    out = []
    for b in budgets:
        if sem.policy == "chunked" and b < sem.max_num_seqs:
            continue   # vLLM refuses max_num_batched_tokens < max_num_seqs
        out.append(b)
    out.append(UNCHUNKED)
    return out


def config_for(sem: Semantics, budget: int | None, workload: Workload) -> EngineConfig:
    longest = int(workload.prompt_len.max())
    if budget is None:
        if sem.unchunked_policy == "v0":
            return EngineConfig("v0", max(longest, 8192), sem.max_num_seqs, sem.kv_cache_tokens)
        pol = "sglang" if sem.policy == "sglang" else "chunked"
        # No chunking: every prompt fits one step's budget whole.
        b = max(longest + sem.max_num_seqs, 16384) if pol == "chunked" else max(longest, 16384)
        return EngineConfig(pol, b, sem.max_num_seqs, sem.kv_cache_tokens, sem.mixed_chunk)
    pol = "sglang" if sem.policy == "sglang" else "chunked"
    return EngineConfig(pol, int(budget), sem.max_num_seqs, sem.kv_cache_tokens, sem.mixed_chunk)


@dataclass
class ReplayMetrics:
    """Per-request outcome of one replay (engine clock, ns relative to the workload start)."""
    arrival_ns: np.ndarray
    first_ns: np.ndarray
    finish_ns: np.ndarray
    output_len: np.ndarray
    prompt_len: np.ndarray
    max_gap_ns: np.ndarray      # -1 without gaps
    gap_values_ns: np.ndarray   # the distinct gaps of the run ...
    gap_weights: np.ndarray     # ... and how many request gaps each one is (token-weighted, as vLLM's ITL)


def _range_max(a: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """max(a[lo:hi]) for many half-open ranges (-1 where empty), by a sparse table: O(n log n) numpy work."""
    out = np.full(len(lo), -1, dtype=np.int64)
    ok = hi > lo
    if not ok.any() or len(a) == 0:
        return out
    table = [a]
    k = 1
    while 2 * k <= len(a):
        prev = table[-1]
        table.append(np.maximum(prev[:-k], prev[k:]))
        k *= 2
    lo_, hi_ = lo[ok], hi[ok]
    span = hi_ - lo_
    lvl = np.floor(np.log2(span)).astype(np.int64)
    res = np.empty(len(lo_), dtype=np.int64)
    for j in np.unique(lvl):
        m = lvl == j
        t = table[j]
        res[m] = np.maximum(t[lo_[m]], t[hi_[m] - (1 << j)])
    out[ok] = res
    return out


def metrics(sim, workload: Workload) -> ReplayMetrics:
    """Per-request first token, finish and worst gap from a simulator result, without materialising every token.

    A request's tokens come in pieces: one token at the end of each step that completes its (re)prefill, and decode
    segments (tokens at consecutive decode-carrying steps D0..D0+count-1). Gaps inside a segment are the gaps between
    consecutive decode-carrying steps (a range maximum over them); the others lie between consecutive pieces."""
    n = len(workload)
    end = sim.end_ns
    sod = sim.step_of_decode
    dec_end = end[sod] if len(sod) else np.zeros(0, np.int64)
    G = np.diff(dec_end)                      # G[D-1]: gap between decode-carrying steps D-1 and D
    last = sim.ch_last.astype(bool)
    # Pieces: (request, first step time, last step time, internal max gap, internal gap count).
    pr = np.concatenate([sim.ch_req[last], sim.sg_req]).astype(np.int64)
    c_t = end[sim.ch_step[last]]
    d0, cnt = sim.sg_d0.astype(np.int64), sim.sg_count.astype(np.int64)
    s_first = dec_end[d0] if len(d0) else np.zeros(0, np.int64)
    s_last = dec_end[d0 + cnt - 1] if len(d0) else np.zeros(0, np.int64)
    p_first = np.concatenate([c_t, s_first])
    p_last = np.concatenate([c_t, s_last])
    p_max = np.concatenate([np.full(len(c_t), -1, np.int64), _range_max(G, d0, d0 + cnt - 1)])
    order = np.lexsort((p_first, pr))
    pr, p_first, p_last, p_max = pr[order], p_first[order], p_last[order], p_max[order]
    starts = np.searchsorted(pr, np.arange(n), side="left")
    ends = np.searchsorted(pr, np.arange(n), side="right")
    first = p_first[starts]
    finish = p_last[ends - 1]
    same = pr[1:] == pr[:-1]
    bgap = np.where(same, p_first[1:] - p_last[:-1], -1)         # gaps between consecutive pieces
    per_piece = np.maximum(p_max, np.concatenate([[-1], bgap]) if len(bgap) else p_max)
    mx = np.maximum.reduceat(per_piece, starts) if len(per_piece) else np.full(n, -1)
    # Token-weighted gap distribution: G[D-1] counts once per segment holding both D-1 and D.
    w = np.zeros(len(G) + 1, dtype=np.int64)
    has = cnt > 1
    np.add.at(w, d0[has], 1)
    np.add.at(w, (d0 + cnt - 1)[has], -1)
    w = np.cumsum(w)[: len(G)]
    vals = np.concatenate([G, bgap[same]])
    wts = np.concatenate([w, np.ones(int(same.sum()), np.int64)])
    keep = wts > 0
    return ReplayMetrics(workload.arrival_ns, first, finish, workload.output_len, workload.prompt_len,
                         np.where(ends - starts > 0, mx, -1), vals[keep], wts[keep])


def metrics_by_token(sim, workload: Workload) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The same per-request quantities through every token (slow; the reference `metrics` is checked against):
    (first, finish, max gap or -1, all gaps)."""
    req, _, step = sim.token_steps()
    t = sim.end_ns[step]
    n = len(workload)
    starts = np.searchsorted(req, np.arange(n), side="left")
    ends = np.searchsorted(req, np.arange(n), side="right")
    g = np.where(req[1:] == req[:-1], np.diff(t), -1)
    mx = np.full(n, -1, dtype=np.int64)
    if len(g):
        mx = np.where(ends - starts > 1, np.maximum.reduceat(g, np.minimum(starts, len(g) - 1)), -1)
    return t[starts], t[ends - 1], mx, g[g >= 0]


class Judge:
    """Judges replayed requests with analyze's own verdict SQL (request_metrics, request_verdicts)."""

    def __init__(self, slo: dict):
        import duckdb

        from stallscope import sqlviews
        from stallscope.schema import create_all

        self.con = duckdb.connect(":memory:")
        create_all(self.con)
        qs = sqlviews.all_queries()
        sqlviews.set_params(self.con, **slo)
        for name in ("request_metrics", "request_verdicts"):
            self.con.execute(qs[name].sql)
        self.next_source = 1

    def judge(self, batch: list[ReplayMetrics]) -> list[tuple[int, int, float]]:
        """(good, total, duration_s) per replay, in order."""
        import pyarrow as pa

        first_src = self.next_source
        cols: dict[str, list] = {k: [] for k in ("source_id", "request_id", "request_index", "arrival_ns",
                                                  "first_token_ns", "finish_ns", "prompt_tokens", "output_tokens")}
        gcols: dict[str, list] = {"source_id": [], "request_id": [], "gap_index": [], "gap_ns": []}
        for m in batch:
            sid = self.next_source
            self.next_source += 1
            n = len(m.arrival_ns)
            ids = np.arange(n).astype(str)
            cols["source_id"].append(np.full(n, sid, np.int32))
            cols["request_id"].append(ids)
            cols["request_index"].append(np.arange(n, dtype=np.int32))
            cols["arrival_ns"].append(m.arrival_ns)
            cols["first_token_ns"].append(m.first_ns)
            cols["finish_ns"].append(m.finish_ns)
            cols["prompt_tokens"].append(m.prompt_len.astype(np.int32))
            cols["output_tokens"].append(m.output_len.astype(np.int32))
            has = m.max_gap_ns >= 0
            # One gap row per request: its worst gap, the only gap statistic request_verdicts judges.
            gcols["source_id"].append(np.full(int(has.sum()), sid, np.int32))
            gcols["request_id"].append(ids[has])
            gcols["gap_index"].append(np.zeros(int(has.sum()), np.int32))
            gcols["gap_ns"].append(m.max_gap_ns[has])
        req = pa.table({k: np.concatenate(v) for k, v in cols.items()})
        gaps = pa.table({k: np.concatenate(v) for k, v in gcols.items()})
        self.con.register("_rq", req)
        self.con.register("_gp", gaps)
        self.con.execute("""
            INSERT INTO requests (source_id, request_id, request_index, kind, status, arrival_ns, first_token_ns,
                                  finish_ns, prompt_tokens, output_tokens, ttft_ns, e2e_latency_ns)
            SELECT source_id, request_id, request_index, 'client', 'ok', arrival_ns, first_token_ns, finish_ns,
                   prompt_tokens, output_tokens, first_token_ns - arrival_ns, finish_ns - arrival_ns FROM _rq""")
        self.con.execute("INSERT INTO token_gaps (source_id, request_id, gap_index, gap_ns) "
                         "SELECT source_id, request_id, gap_index, gap_ns FROM _gp")
        self.con.unregister("_rq")
        self.con.unregister("_gp")
        rows = self.con.execute(f"""
            SELECT v.source_id, count(*) FILTER (WHERE v.good), count(*),
                   (max(r.finish_ns) - min(r.arrival_ns)) / 1e9
            FROM request_verdicts v JOIN requests r USING (source_id, request_id)
            WHERE v.source_id >= {first_src} GROUP BY v.source_id ORDER BY v.source_id""").fetchall()
        self.con.execute(f"DELETE FROM requests WHERE source_id >= {first_src}")
        self.con.execute(f"DELETE FROM token_gaps WHERE source_id >= {first_src}")
        return [(int(g), int(t), float(d)) for _, g, t, d in rows]


def summarise(m: ReplayMetrics) -> tuple[float, float, float]:
    """(p99 ITL, mean TPOT, p90 TTFT) in ms, in vLLM's definitions (ITL pooled over gaps; TPOT per request)."""
    p99 = _weighted_quantile(m.gap_values_ns, m.gap_weights, 0.99) / 1e6 if len(m.gap_values_ns) else 0.0
    out = m.output_len.astype(np.float64)
    tpot = np.where(out > 1, (m.finish_ns - m.first_ns) / np.maximum(out - 1, 1), 0.0)
    ttft = (m.first_ns - m.arrival_ns).astype(np.float64)
    return p99, float(tpot.mean()) / 1e6, float(np.quantile(ttft, 0.9)) / 1e6


def _weighted_quantile(v: np.ndarray, w: np.ndarray, q: float) -> float:
    """The q-quantile of v repeated w times (numpy's linear interpolation between order statistics)."""
    o = np.argsort(v, kind="stable")
    v, cw = v[o].astype(np.float64), np.cumsum(w[o])
    pos = q * (cw[-1] - 1)               # 0-based position in the repeated, sorted sample
    i = np.searchsorted(cw, np.floor(pos) + 1)
    j = np.searchsorted(cw, np.floor(pos) + 2)
    j = min(j, len(v) - 1)
    frac = pos - np.floor(pos)
    return float(v[i] + (v[j] - v[i]) * frac)


def perturbed(coef: np.ndarray, cov: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
    """Coefficients drawn from the fit's sampling distribution (terms without a covariance kept as fitted)."""
    if cov is None:
        return coef.copy()
    ok = np.isfinite(np.diag(cov))
    out = coef.copy()
    if ok.any():
        sub = cov[np.ix_(ok, ok)]
        sub = (sub + sub.T) / 2
        try:
            draw = rng.multivariate_normal(coef[ok], sub, method="eigh")
        except (np.linalg.LinAlgError, ValueError):
            draw = coef[ok]
        out[ok] = draw
    return np.maximum(out, 0.0)


def sweep(presets: list[Preset], sem: Semantics, workload: Workload, slo: dict, budgets: list,
          *, seed: int = 0, on_step=None) -> list[BudgetResult]:
    """Replay every budget with every preset (one replay each) and judge them; the first preset is the point."""
    judge = Judge(slo)
    out = []
    for b in budgets:
        cfg = config_for(sem, b, workload)
        ms, summ = [], []
        for i, p in enumerate(presets):
            sim = simulate(workload, p, cfg, seed + 7919 * i)
            m = metrics(sim, workload)
            ms.append(m)
            summ.append(summarise(m))
            if on_step:
                on_step()
        verdicts = judge.judge(ms)
        gp = [g / d if d > 0 else 0.0 for g, _, d in verdicts]
        att = [g / t if t else 0.0 for g, t, _ in verdicts]
        arr = np.asarray(summ)
        out.append(BudgetResult(
            chunk_tokens=b, goodput_rps=float(np.mean(gp)), lo=float(np.min(gp)), hi=float(np.max(gp)),
            attainment=float(np.mean(att)), p99_itl_ms=float(arr[:, 0].mean()), mean_tpot_ms=float(arr[:, 1].mean()),
            p90_ttft_ms=float(arr[:, 2].mean()), runs=[(g, *s) for g, s in zip(gp, summ)]))
    return out


def presets_for(model, *, replays: int, kv_cache_tokens: int, max_model_len: int, host_gap_ms, seed: int = 0):
    """The point preset plus `replays - 1` with coefficients drawn from the fit's covariance."""
    rng = np.random.default_rng([seed, 0xB00])
    base = dict(kv_cache_tokens=kv_cache_tokens, max_model_len=max_model_len, host_gap_ms=host_gap_ms,
                residual_ratios=model.residuals)
    out = [preset_from_model(model.coef, model.tile, **base)]
    for i in range(1, replays):
        out.append(preset_from_model(perturbed(model.coef, model.cov, rng), model.tile, name=f"fitted-{i}", **base))
    return out


def rescale(workload: Workload, factor: float) -> Workload:
    """The same requests arriving `factor` times faster (for the load at which a budget meets the target)."""
    a = workload.arrival_ns
    rel = ((a - a[0]) / factor).astype(np.int64) + a[0]
    return replace(workload, arrival_ns=rel)
