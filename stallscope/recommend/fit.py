"""Fit the step-time model on observed engine steps: robust, non-negative, relative-error weighted, with a p99 band.

    t_ms = fixed + per_decode_seq*decode_seqs + per_kv_token*kv_tokens_read + per_prefill_token*tile(tokens)
           + per_attention_unit*attention_units

`tokens` are the step's scheduled tokens (prefill plus decode: the GEMMs run over all of them, in tiles of T
tokens); `attention_units = sum over prefill chunks of c * (k + c/2)` (chunk c on top of k cached tokens). Method
(../shared/notes/goodput-and-chunking.md §3.3): Huber IRLS on relative residuals `(t_hat - t) / t`, each weighted
least-squares pass solved with bounds b >= 0 (scipy's bounded-variable least squares); the tile T learned from the
data when it holds enough distinct token counts; a split-conformal band: the model fitted on 60 % of the steps, the
99th percentile of the ratio residuals `t / t_hat - 1` taken on 20 % (decode-only and prefill-carrying steps
separately, their noise differs) and checked, with the MAPE, on the last 20 %. A coefficient is *identified* when
its relative standard error (from the final weighted pass) is at most 3.3 %, so that a 10 % error is three
standard errors away; otherwise it is reported with its reason (never silently zero).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

TERMS = ("fixed_ms", "per_decode_seq_ms", "per_kv_token_ms", "per_prefill_token_ms", "per_attention_unit_ms")
FEATURES = ("const", "decode seqs", "KV tokens read", "tiled tokens", "attention units")
TILE_CANDIDATES = (1, 16, 32, 64, 128, 256, 512)
DEFAULT_TILE = 256
IDENTIFIED_RSE = 1 / 30
HUBER_K = 1.345
CONF_Q = 0.99


@dataclass
class Observations:
    """Observed steps as float64 columns (one row per step); NaN = the store does not say."""
    step_ms: np.ndarray
    decode_seqs: np.ndarray
    tokens: np.ndarray
    kv_read: np.ndarray
    attn_units: np.ndarray
    has_prefill: np.ndarray          # bool
    notes: dict = field(default_factory=dict)   # feature -> why it is missing

    def __len__(self) -> int:
        return len(self.step_ms)


@dataclass
class StepModel:
    coef: np.ndarray                 # TERMS order, ms per unit
    tile: int
    tile_basis: str
    identified: dict                 # term -> {"identified": bool, "reason": str, "rse": float|None}
    q99_decode: float                # conformal 99th percentile of t/t_hat - 1, decode-only steps
    q99_mixed: float                 # the same for prefill-carrying steps
    residuals: np.ndarray            # calibration ratio residuals t/t_hat (all steps), for replay noise
    mape: float | None
    p99_coverage: float | None
    steps_used: int
    host_gap_ms: tuple[float, float] = (0.3, 0.56)
    cov: np.ndarray | None = None    # covariance of coef (NaN rows for terms at the bound)

    def predict(self, tokens, kv_read, attn, decode_seqs):
        """Median step time, ms (an array for array arguments, a float for scalars)."""
        args = [np.asarray(a, float) for a in (decode_seqs, tokens, kv_read, attn)]
        scalar = all(a.ndim == 0 for a in args)
        args = np.broadcast_arrays(*[np.atleast_1d(a) for a in args])
        r = _design(*args, self.tile) @ self.coef
        return float(r[0]) if scalar else r

    def predict_q99(self, tokens, kv_read, attn, decode_seqs, mixed: bool) -> np.ndarray:
        return self.predict(tokens, kv_read, attn, decode_seqs) * (1 + (self.q99_mixed if mixed else self.q99_decode))

    def coefficients(self) -> dict:
        return {k: float(v) for k, v in zip(TERMS, self.coef)}


class FitError(Exception):
    """The observations cannot support a fit (the message names the missing evidence)."""


def _tiled(tokens: np.ndarray, tile: int) -> np.ndarray:
    return np.ceil(tokens / tile) * tile


# queries/report/report_step_model.sql applies the same design to the report's steps (the step-time figure):
# change both together (test_report checks the figure's predictions against these terms).
def _design(dec, tok, kv, att, tile) -> np.ndarray:
    return np.column_stack([np.ones_like(dec), dec, kv, _tiled(tok, tile), att])


def _irls(X: np.ndarray, t: np.ndarray, active: np.ndarray, iters: int = 30):
    """Huber IRLS on relative residuals with b >= 0 over the active columns; returns (coef, weights, scale)."""
    from scipy.optimize import lsq_linear

    Xa = X[:, active] / t[:, None]          # relative-error weighting: rows divided by the observed time
    y = np.ones(len(t))
    col = np.maximum(np.abs(Xa).max(axis=0), 1e-300)   # column scaling keeps the solver well conditioned
    w = np.ones(len(t))
    b = np.zeros(Xa.shape[1])
    scale = 1.0
    for _ in range(iters):
        sw = np.sqrt(w)
        res = lsq_linear(Xa / col * sw[:, None], y * sw, bounds=(0, np.inf), method="bvls")
        nb = res.x / col
        r = Xa @ nb - y
        scale = max(1.4826 * float(np.median(np.abs(r - np.median(r)))), 1e-6)
        u = np.abs(r) / (HUBER_K * scale)
        w = np.where(u <= 1, 1.0, 1.0 / np.maximum(u, 1e-12))
        if np.allclose(nb, b, rtol=1e-7, atol=0):
            b = nb
            break
        b = nb
    coef = np.zeros(X.shape[1])
    coef[active] = b
    return coef, w, scale


def _cov(X: np.ndarray, t: np.ndarray, w: np.ndarray, coef: np.ndarray, active: np.ndarray) -> np.ndarray:
    """Covariance of the free coefficients of the final weighted pass (terms at the zero bound are held fixed)."""
    k = X.shape[1]
    cov = np.full((k, k), np.nan)
    free = active & ((coef > 0) | (np.arange(k) == 0))
    if not free.any():
        return cov
    A = X[:, free] / t[:, None] * np.sqrt(w)[:, None]
    r = (X @ coef / t - 1) * np.sqrt(w)
    dof = max(len(t) - int(free.sum()), 1)
    s2 = float(r @ r) / dof
    try:
        inv = np.linalg.pinv(A.T @ A)
    except np.linalg.LinAlgError:
        return cov
    idx = np.nonzero(free)[0]
    cov[np.ix_(idx, idx)] = inv * s2
    return cov


def _split(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng([seed, 0xF17])
    perm = rng.permutation(n)
    a, b = int(0.6 * n), int(0.8 * n)
    return perm[:a], perm[a:b], perm[b:]


def _conformal_q(ratio: np.ndarray, q: float = CONF_Q) -> float:
    """Split-conformal quantile: the ceil((n+1)q)-th smallest calibration residual (the max when n is small)."""
    if len(ratio) == 0:
        return float("nan")
    s = np.sort(ratio)
    k = min(int(np.ceil((len(s) + 1) * q)) - 1, len(s) - 1)
    return float(s[max(k, 0)])


def _columns(obs: Observations) -> tuple[np.ndarray, dict]:
    """Which model terms the observations can carry at all (`active`), and why the others cannot."""
    reasons = {}
    active = np.ones(5, bool)
    checks = (("per_decode_seq_ms", obs.decode_seqs, 1), ("per_kv_token_ms", obs.kv_read, 2),
              ("per_prefill_token_ms", obs.tokens, 3), ("per_attention_unit_ms", obs.attn_units, 4))
    for term, x, j in checks:
        if not np.isfinite(x).any():
            active[j] = False
            reasons[term] = obs.notes.get(term, "not observed in the store")
        elif np.nanmax(x) - np.nanmin(x) <= 0:
            active[j] = False
            reasons[term] = (f"{FEATURES[j]} never varies in the observed steps (always {np.nanmax(x):g}): "
                             "its effect cannot be told from the fixed cost")
    return active, reasons


def fit(obs: Observations, *, seed: int = 0, tile: int | None = None) -> StepModel:
    """Fit the step model; raises FitError naming the missing evidence when the steps cannot support it."""
    ok = np.isfinite(obs.step_ms) & (obs.step_ms > 0) & np.isfinite(obs.decode_seqs) & np.isfinite(obs.tokens)
    active, reasons = _columns(obs)
    # A feature the store does not carry is fitted as 0 (inactive) instead of dropping every step.
    feats = {}
    for name, x, j in (("dec", obs.decode_seqs, 1), ("kv", obs.kv_read, 2), ("tok", obs.tokens, 3),
                       ("att", obs.attn_units, 4)):
        feats[name] = np.where(np.isfinite(x), x, 0.0) if not active[j] else x
        if active[j]:
            ok &= np.isfinite(x)
    n = int(ok.sum())
    if n < 20:
        raise FitError(f"only {n} steps with a duration and a batch composition (tokens and decode sequences per "
                       "step) were found; the fit needs at least 20")
    t = obs.step_ms[ok]
    dec, kv, tok, att = (feats[k][ok] for k in ("dec", "kv", "tok", "att"))
    has_pf = obs.has_prefill[ok]
    tr, ca, te = _split(n, seed)

    # Tile: learned when the steps hold enough distinct token counts spread over several tiles. A candidate tile
    # needs steps spanning at least 4 of its tiles; below 4 default tiles (a small budget) the finer candidates
    # compete with the default (at most 5 candidates, so 24 distinct counts suffice to rank them on held-out
    # steps), so a cost that grows inside one 256-token tile (a CPU's GEMMs) is not flattened.
    distinct = len(np.unique(tok))
    top = float(np.nanmax(tok))
    big = top >= 4 * DEFAULT_TILE
    cands = TILE_CANDIDATES if big else tuple(c for c in TILE_CANDIDATES if 4 * c <= top or c == DEFAULT_TILE)
    if tile is not None:
        T, basis = int(tile), "given"
    elif distinct >= (40 if big else 24) and len(cands) > 1:
        losses = {}
        for cand in cands:
            c, _, _ = _irls(_design(dec[tr], tok[tr], kv[tr], att[tr], cand), t[tr], active)
            r = _design(dec[ca], tok[ca], kv[ca], att[ca], cand) @ c / t[ca] - 1
            losses[cand] = float(np.mean(np.abs(r)))
        best = min(losses.values())
        # The coarsest tile whose held-out error is within 2 % of the best: a finer staircase explains noise.
        T = max(c for c, v in losses.items() if v <= best * 1.02)
        basis = f"learned from {distinct} distinct token counts (held-out mean |error| by tile: " + \
                ", ".join(f"{c}: {v:.4f}" for c, v in losses.items()) + ")"
    else:
        T, basis = DEFAULT_TILE, (f"assumed {DEFAULT_TILE} (only {distinct} distinct token counts up to "
                                  f"{int(np.nanmax(tok))}: too few to learn the staircase)")

    X = _design(dec, tok, kv, att, T)
    # Split conformal: fit on the first part, calibrate on the second, test on the third.
    c_tr, _, _ = _irls(X[tr], t[tr], active)
    ratio = t / np.maximum(X @ c_tr, 1e-9)
    cal_d, cal_m = ca[~has_pf[ca]], ca[has_pf[ca]]
    q_d = _conformal_q(ratio[cal_d] - 1)
    q_m = _conformal_q(ratio[cal_m] - 1)
    if not np.isfinite(q_d):
        q_d = q_m
    if not np.isfinite(q_m):
        q_m = q_d
    q_te = np.where(has_pf[te], q_m, q_d)
    mape = float(np.mean(np.abs(ratio[te] - 1))) if len(te) else None
    cover = float(np.mean(ratio[te] - 1 <= q_te)) if len(te) else None

    coef, w, _ = _irls(X, t, active)
    cov = _cov(X, t, w, coef, active)
    identified = {}
    for j, term in enumerate(TERMS):
        if not active[j]:
            identified[term] = {"identified": False, "rse": None, "reason": reasons[term]}
            continue
        if coef[j] <= 0 and j > 0:
            identified[term] = {"identified": False, "rse": None,
                                "reason": "the fit puts it at its zero bound: no effect is visible in these steps"}
            continue
        se = float(np.sqrt(cov[j, j])) if np.isfinite(cov[j, j]) else np.nan
        rse = se / coef[j] if coef[j] > 0 else np.inf
        if np.isfinite(rse) and rse <= IDENTIFIED_RSE:
            identified[term] = {"identified": True, "rse": rse, "reason": None}
        else:
            identified[term] = {"identified": False, "rse": float(rse) if np.isfinite(rse) else None,
                                "reason": _why_not(X, t, j, active, rse, coef)}
    return StepModel(coef=coef, tile=T, tile_basis=basis, identified=identified, q99_decode=q_d, q99_mixed=q_m,
                     residuals=ratio[ca], mape=mape, p99_coverage=cover, steps_used=n, cov=cov)


def _why_not(X: np.ndarray, t: np.ndarray, j: int, active: np.ndarray, rse: float, coef: np.ndarray) -> str:
    """Name the other feature that explains column j best (collinearity) or say it is too small to see."""
    A = X / t[:, None]
    others = [k for k in range(X.shape[1]) if k != j and active[k]]
    best, best_r = None, 0.0
    for k in others[1:] if others and others[0] == 0 else others:
        a, b = A[:, j], A[:, k]
        if a.std() > 0 and b.std() > 0:
            r = abs(float(np.corrcoef(a, b)[0, 1]))
            if r > best_r:
                best, best_r = k, r
    pct = f"relative standard error {rse:.0%}" if np.isfinite(rse) else "no standard error"
    if best is not None and best_r >= 0.9:
        return f"{pct}: moves together with {FEATURES[best]} in these steps (correlation {best_r:.2f})"
    share = float(np.median(X[:, j] * coef[j] / t))
    spread = float(np.std(X[:, j] * coef[j] / t))
    return (f"{pct}: its contribution varies too little across these steps to be told from the others "
            f"(median share of a step {share:.1%}, spread {spread:.1%})")
