"""A coarse chunked-prefill budget from Prometheus metrics alone, when the store holds no steps, logs or benchmark.

Per replica and scrape window (view `metric_windows`) the mean inter-token gap (ITL sum / count: about the mean
engine step time seen by decodes) against the mean tokens per engine step (`vllm:iteration_tokens_total` sum /
count) gives a fixed + per-token step model by least squares over the windows: step_ms = fixed + per_token x tokens.
The largest budget B whose full step fits the ITL SLO, fixed + per_token x B <= itl_ms, is recommended (rounded down
to a multiple of 256, within 256..16384), with a band from the windows' residual spread (the budgets whose step
fits the SLO at ±2 residual standard deviations). Coarse: means over windows hide the per-step mix, the ITL mean is
weighted by the decodes of each step, and nothing is replayed. `"evidence": "metrics"`; or `missing_evidence` says
exactly which metric or SLO is missing.
"""
from __future__ import annotations

import numpy as np

TILE = 256
MIN_BUDGET, MAX_BUDGET = 256, 16384
MIN_WINDOWS = 4


def _round(b: float) -> int:
    return int(min(MAX_BUDGET, max(MIN_BUDGET, np.floor(b / TILE) * TILE)))


def recommend(con, slo: dict) -> dict:
    """The `"recommendation"` object from metrics (the keys of docs/analysis-json.md that apply)."""
    out = {"engine": "vllm", "setting": None, "chunk_tokens": None, "chunk_tokens_band": None, "model": None,
           "evidence": None, "evidence_steps": 0, "missing_evidence": []}
    target = slo.get("itl_ms") or slo.get("tpot_ms")
    rows = np.array(con.execute("""
        SELECT mean_step_tokens, mean_itl_ms FROM metric_windows
        WHERE steps > 0 AND itl_count > 0 AND mean_step_tokens IS NOT NULL AND mean_itl_ms IS NOT NULL""").fetchall(),
                    dtype=float).reshape(-1, 2)
    missing = out["missing_evidence"]
    if target is None:
        missing.append("a per-token SLO: give --slo with itl (or tpot), the step time a budget must fit")
    if not len(rows):
        have = {r[0] for r in con.execute("SELECT DISTINCT concept FROM metric_deltas").fetchall()}
        for concept, name in (("step_tokens", "vllm:iteration_tokens_total (tokens per engine step)"),
                              ("itl", "vllm:inter_token_latency_seconds (its _sum and _count)")):
            if concept not in have:
                missing.append(f"the metric {name}: without it the metrics give no step-time model")
        if not missing:
            missing.append("windows with both engine steps and token gaps")
    elif len(rows) < MIN_WINDOWS or np.ptp(rows[:, 0]) <= 0:
        missing.append(f"load that varies: {len(rows)} windows with {np.ptp(rows[:, 0]):.1f} tokens of spread in "
                       f"the mean step size; a fixed + per-token fit needs at least {MIN_WINDOWS} windows that differ")
    if missing:
        return out
    x, y = rows[:, 0], rows[:, 1]
    per_token, fixed = np.polyfit(x, y, 1)
    resid = y - (fixed + per_token * x)
    sd = float(np.std(resid, ddof=2)) if len(rows) > 2 else 0.0
    r2 = 1 - float(np.sum(resid ** 2)) / max(float(np.sum((y - y.mean()) ** 2)), 1e-300)
    out["model"] = {"fixed_ms": float(fixed), "per_token_ms": float(per_token), "residual_sd_ms": sd, "r2": r2,
                    "windows": int(len(rows))}
    out["evidence"], out["evidence_steps"] = "metrics", int(len(rows))
    if per_token <= 0:
        missing.append("a step time that grows with the tokens per step: the windows show none (too little "
                       "prefill load to see its cost)")
        return out
    if fixed >= target:
        missing.append(f"headroom: the fitted fixed step time {fixed:.1f} ms already exceeds the {target:g} ms SLO")
        return out
    b = (target - fixed) / per_token
    out["chunk_tokens"] = _round(b)
    out["chunk_tokens_band"] = [_round((target - fixed - 2 * sd) / per_token), _round((target - fixed + 2 * sd) / per_token)]
    out["setting"] = f"--max-num-batched-tokens {out['chunk_tokens']}"
    out["predicted_step_ms"] = float(fixed + per_token * out["chunk_tokens"])
    out["slo_ms"] = float(target)
    out["note"] = ("coarse, from metrics alone: a fixed + per-token fit of the mean step time over scrape windows; "
                   "a trace or vLLM iteration lines give the replayed recommendation")
    return out


def describe(rec: dict) -> str:
    """The terminal lines of a metrics-only recommendation."""
    lines = []
    if rec.get("setting"):
        lo, hi = rec["chunk_tokens_band"]
        lines.append(f"recommend {rec['setting']} (band {lo}..{hi} tokens; predicted full step "
                     f"{rec['predicted_step_ms']:.1f} ms against the {rec['slo_ms']:g} ms SLO)")
    m = rec.get("model")
    if m:
        lines.append(f"step model from metrics: {m['fixed_ms']:.2f} ms + {m['per_token_ms'] * 1000:.2f} us/token "
                     f"over {m['windows']} scrape windows (R² {m['r2']:.3f}); coarse: no replay")
    if rec.get("missing_evidence"):
        lines.append("cannot recommend a budget: missing evidence: " + "; ".join(rec["missing_evidence"]))
    return "\n".join(lines)
