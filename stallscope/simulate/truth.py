"""Ground truth of a simulated run (`truth.json`): steps, prefill chunks, token gaps, spikes, culprits, goodput.

The definitions (also in sample_traces/README.md, "How truth.json is computed"):

- Token k of a request is emitted at the end of the step that produced it; the client sees it `d_out` later, so
  client inter-token gaps equal engine gaps. Gap k lies between token k and token k+1 (gap 0 follows the first
  token), exactly `itls[i][k]` of the benchmark file. The steps a gap covers are (s_k, s_k+1].
- Predicted decode-only time of a gap `t_dec`: the noise-free model time of a decode-only step holding the decodes
  of the step that emitted token k+1 (forward-filled over steps without decodes).
- Spike: `gap > itl SLO` (rule "slo", when an ITL SLO is given) or `gap > k * t_dec` (rule "relative", k = 3 by
  default). `ambiguous` marks gaps within +-10 % of a threshold they are judged against.
- Prefill interference of step s: `x_s = max(0, dur_s - t_dec(s))` when the step carried decodes, `dur_s` when it
  did not (a prefill-only forward stalls every decode). It is split over the step's prefill chunks q in
  proportion to `w_q = b1*tokens_q + b3*tokens_q*(k_q + tokens_q/2)`.
- Per gap: `X` = interference of the chunks of *other* requests inside the gap; excess `e = max(0, gap - t_dec)`;
  `blame = min(e, X)` (spikes only). Culprits: the other requests whose chunks ran inside, `overlap_ms` = their
  interference scaled by min(1, e/X), ranked by overlap (ties: lower request index). Cause: "preemption" when the
  request's own recompute chunk is inside the gap, else "prefill" when X > 0, else "other".
- Prefix caching (runs with a shared prefix): the chunks are what the engine computed, `tokens` after the cache
  hit and `context_before` including the cached prefix, so the split above is by the marginal cost of the
  computed work (cached tokens cost nothing but make the attention of the computed ones longer). Each request's
  `cached_tokens` is its hit at first admission; `prefill_chunks.cached` the hit found by each admission.
- Per request (client side, vLLM's definitions on the numbers written to the benchmark file): TTFT, E2EL,
  TPOT = (E2EL - TTFT)/(output - 1) (0 when output <= 1), max ITL; verdicts `<=` each given SLO; good = all pass.
- Counterfactual: each spike's gap loses its blame (never below t_dec), E2EL loses the sum, TTFT stays; TPOT and
  max ITL are recomputed and re-judged. goodput = good / duration, goodput_counterfactual = good_cf / duration,
  goodput_lost = their difference; duration = the benchmark file's `duration` (benchmark start to last token).
"""
from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import orjson

from .engine import KIND_NAMES
from .runner import VERSION, Run

SCHEMA = "stallscope.truth/1"
AMBIGUOUS = 0.10


def _ffill(a: np.ndarray) -> np.ndarray:
    ok = ~np.isnan(a)
    if not ok.any():
        return a
    idx = np.where(ok, np.arange(len(a)), 0)
    np.maximum.accumulate(idx, out=idx)
    out = a[idx]
    first = np.argmax(ok)
    out[:first] = a[first]
    return out


class Analysis:
    """The truth quantities of one run, as numpy columns (built once, used by `truth.json` and the tests)."""

    def __init__(self, run: Run):
        self.run = run
        sim, pre, spec = run.sim, run.preset, run.spec
        self.k = float(spec.spike_k)
        self.slo = dict(spec.slo)
        dur_ms = (sim.end_ns - sim.start_ns) / 1e6
        pred_dec = sim.pred_decode_only_ms()
        self.step_dur_ms = dur_ms
        self.step_pred_dec = _ffill(pred_dec.copy())
        has_pf = sim.prefill_tokens > 0
        x_step = np.where(has_pf, np.where(sim.n_decode > 0, np.maximum(0.0, dur_ms - np.nan_to_num(pred_dec)),
                                           dur_ms), 0.0)
        self.step_interference_ms = x_step
        tok = sim.ch_tokens.astype(np.float64)
        w = pre.b1.value * tok + pre.b3.value * tok * (sim.ch_ctx + tok / 2)
        wsum = np.bincount(sim.ch_step, weights=w, minlength=sim.n_steps)
        self.chunk_x = np.where(wsum[sim.ch_step] > 0, x_step[sim.ch_step] * w / np.maximum(wsum[sim.ch_step], 1e-300),
                                0.0)
        self._gaps()
        self._requests()

    # -- gaps ----------------------------------------------------------------------------------------------------
    def _gaps(self):
        run, sim = self.run, self.run.sim
        req, tidx, step = run.tok_req, run.tok_idx, run.tok_step
        same = req[1:] == req[:-1]
        pos = np.nonzero(same)[0]                       # gap between token pos and pos+1
        g_req = req[pos + 1]
        s_prev, s_next = step[pos], step[pos + 1]
        start, end = sim.end_ns[s_prev], sim.end_ns[s_next]
        gap_ms = (end - start) / 1e6
        t_dec = self.step_pred_dec[s_next]
        ch_step = sim.ch_step
        cum_x = np.concatenate([[0.0], np.cumsum(self.chunk_x)])
        cum_p = np.concatenate([[0], np.cumsum(sim.ch_tokens)])
        lo = np.searchsorted(ch_step, s_prev, side="right")
        hi = np.searchsorted(ch_step, s_next, side="right")
        x_all = cum_x[hi] - cum_x[lo]
        p_all = cum_p[hi] - cum_p[lo]
        # The request's own chunks inside its gaps (recompute after preemption).
        gap_of_tok = np.full(len(req), -1, dtype=np.int64)
        gap_of_tok[pos + 1] = np.arange(len(pos))
        n_steps = max(sim.n_steps, 1)
        tkey = req * n_steps + step
        ckey = sim.ch_req * n_steps + ch_step
        tp = np.searchsorted(tkey, ckey, side="left")
        tp_ok = tp < len(req)
        g_own = np.where(tp_ok, gap_of_tok[np.minimum(tp, len(req) - 1)], -1)
        g_own = np.where(tp_ok & (req[np.minimum(tp, len(req) - 1)] == sim.ch_req), g_own, -1)
        x_own = np.zeros(len(pos))
        own_n = np.zeros(len(pos), dtype=np.int64)
        m = g_own >= 0
        np.add.at(x_own, g_own[m], self.chunk_x[m])
        np.add.at(own_n, g_own[m], 1)
        x_other = np.maximum(x_all - x_own, 0.0)
        thr_rel = self.k * t_dec
        itl = self.slo.get("itl")
        slo_fire = gap_ms > itl if itl is not None else np.zeros(len(pos), bool)
        rel_fire = gap_ms > thr_rel
        spike = slo_fire | rel_fire
        amb = (gap_ms > (1 - AMBIGUOUS) * thr_rel) & (gap_ms <= (1 + AMBIGUOUS) * thr_rel)
        if itl is not None:
            amb |= (gap_ms > (1 - AMBIGUOUS) * itl) & (gap_ms <= (1 + AMBIGUOUS) * itl)
        excess = np.maximum(gap_ms - t_dec, 0.0)
        blame = np.where(spike, np.minimum(excess, x_other), 0.0)
        cause = np.where(own_n > 0, 2, np.where(x_other > 0, 1, 0))  # 0 other, 1 prefill, 2 preemption
        self.g = dict(req=g_req, index=tidx[pos], s_prev=s_prev, s_next=s_next, start=start, end=end, gap_ms=gap_ms,
                      t_dec=t_dec, x_other=x_other, prefill_tokens=p_all, own=own_n, spike=spike, slo_fire=slo_fire,
                      rel_fire=rel_fire, ambiguous=amb, excess=excess, blame=blame, cause=cause, lo=lo, hi=hi)

    # -- requests --------------------------------------------------------------------------------------------------
    def _requests(self):
        run = self.run
        n = run.n
        g = self.g
        send = run.send_ns
        # The benchmark file's floats; every per-request quantity below is computed from exactly these values.
        self.ttft_s = ((run.client_first_ns - send) / 1e9).astype(np.float64)
        self.latency_s = ((run.client_finish_ns - send) / 1e9).astype(np.float64)
        self.itl_s = (g["end"] - g["start"]) / 1e9
        out = run.workload.output_len
        with np.errstate(divide="ignore", invalid="ignore"):
            tpot = np.where(out > 1, (self.latency_s - self.ttft_s) / np.maximum(out - 1, 1), 0.0)
        self.tpot_s = tpot
        self.itl_max_s = np.zeros(n)
        np.maximum.at(self.itl_max_s, g["req"], self.itl_s)
        blame_req = np.bincount(g["req"], weights=g["blame"], minlength=n)
        self.blame_ms = blame_req
        self.latency_cf_s = self.latency_s - blame_req / 1e3
        with np.errstate(divide="ignore", invalid="ignore"):
            self.tpot_cf_s = np.where(out > 1, (self.latency_cf_s - self.ttft_s) / np.maximum(out - 1, 1), 0.0)
        self.itl_max_cf_s = np.zeros(n)
        np.maximum.at(self.itl_max_cf_s, g["req"], (g["gap_ms"] - g["blame"]) / 1e3)
        self.verdicts = self._judge(self.ttft_s, self.tpot_s, self.itl_max_s, self.latency_s)
        self.verdicts_cf = self._judge(self.ttft_s, self.tpot_cf_s, self.itl_max_cf_s, self.latency_cf_s)
        self.duration_s = run.bench_end_ns / 1e9

    def _judge(self, ttft, tpot, itl_max, e2el) -> dict:
        n = len(ttft)
        v = {}
        for key, vals in (("ttft", ttft), ("tpot", tpot), ("itl", itl_max), ("e2el", e2el)):
            if key in self.slo:
                v[key] = vals <= self.slo[key] / 1000.0
        v["good"] = np.logical_and.reduce([v[k] for k in v]) if v else np.ones(n, bool)
        return v

    # -- spikes and culprits -----------------------------------------------------------------------------------------
    def spikes(self) -> tuple[dict, dict]:
        g, sim, run = self.g, self.run.sim, self.run
        sp = np.nonzero(g["spike"])[0]
        lo, hi = g["lo"][sp], g["hi"][sp]
        cnt = hi - lo
        rows = np.repeat(np.arange(len(sp)), cnt)
        off = np.repeat(lo - np.concatenate([[0], np.cumsum(cnt)[:-1]]), cnt)
        ch = off + np.arange(int(cnt.sum()), dtype=np.int64)
        c_req = sim.ch_req[ch]
        keep = c_req != g["req"][sp][rows]
        rows, ch, c_req = rows[keep], ch[keep], c_req[keep]
        x = self.chunk_x[ch]
        xo = g["x_other"][sp][rows]
        e = g["excess"][sp][rows]
        scale = np.where(xo > 0, np.minimum(1.0, e / np.where(xo > 0, xo, 1.0)), 0.0)
        key = rows.astype(np.int64) * (run.n + 1) + c_req
        ukey, inv = np.unique(key, return_inverse=True)
        ov = np.bincount(inv, weights=x * scale)
        u_rows = ukey // (run.n + 1)
        u_req = ukey % (run.n + 1)
        order = np.lexsort((u_req, -ov, u_rows))
        u_rows, u_req, ov = u_rows[order], u_req[order], ov[order]
        first = np.concatenate([[True], u_rows[1:] != u_rows[:-1]]) if len(u_rows) else np.zeros(0, bool)
        rank = np.arange(len(u_rows)) - np.maximum.accumulate(np.where(first, np.arange(len(u_rows)), 0)) \
            if len(u_rows) else np.zeros(0, np.int64)
        top = np.full(len(sp), -1, dtype=np.int64)
        top[u_rows[rank == 0]] = u_req[rank == 0]
        decs = sim.decoders[g["s_next"][sp]]
        cause_names = np.array(["other", "prefill", "preemption"])
        spikes = {
            "request": g["req"][sp], "gap_index": g["index"][sp],
            "start_ns": run.wall(g["start"][sp] + run.d_out_ns[g["req"][sp]]),
            "end_ns": run.wall(g["end"][sp] + run.d_out_ns[g["req"][sp]]),
            "gap_ms": g["gap_ms"][sp], "pred_decode_ms": g["t_dec"][sp],
            "rule": np.where(g["slo_fire"][sp], "slo", "relative"),
            "ambiguous": g["ambiguous"][sp], "first_step": g["s_prev"][sp] + 1, "last_step": g["s_next"][sp],
            "prefill_tokens": g["prefill_tokens"][sp], "prefill_interference_ms": g["x_other"][sp],
            "excess_ms": g["excess"][sp], "blame_ms": g["blame"][sp], "cause": cause_names[g["cause"][sp]],
            "stalled_decodes": decs, "top_culprit": top,
        }
        culprits = {"spike": u_rows, "rank": rank, "request": u_req,
                    "prompt_tokens": run.workload.prompt_len[u_req], "overlap_ms": ov}
        return spikes, culprits

    def step_spikes(self) -> np.ndarray:
        return self.step_dur_ms > self.k * self.step_pred_dec

    def summary(self) -> dict:
        v, vc = self.verdicts, self.verdicts_cf
        good, good_cf = int(v["good"].sum()), int(vc["good"].sum())
        d = self.duration_s
        sim = self.run.sim
        sp = self.g["spike"]
        return {
            "requests": int(self.run.n), "good": good, "good_counterfactual": good_cf,
            "requests_lost": good_cf - good, "duration_s": d,
            "goodput_rps": good / d, "goodput_counterfactual_rps": good_cf / d,
            "goodput_lost_rps": (good_cf - good) / d, "attainment": good / self.run.n,
            "slo_pass": {k: int(v[k].sum()) for k in v if k != "good"},
            "steps": int(sim.n_steps), "steps_by_kind": {KIND_NAMES[i]: int((sim.kind == i).sum()) for i in range(3)},
            "gaps": int(len(self.g["req"])), "gaps_with_prefill": int((self.g["prefill_tokens"] > 0).sum()),
            "spikes": int(sp.sum()), "spikes_ambiguous": int((sp & self.g["ambiguous"]).sum()),
            "spikes_by_cause": {c: int((sp & (self.g["cause"] == i)).sum())
                                for i, c in enumerate(("other", "prefill", "preemption"))},
            "step_spikes": int(self.step_spikes().sum()),
            "interference_step_s": float(self.step_interference_ms.sum() / 1e3),
            "interference_gpu_s": float(self.step_interference_ms.sum() / 1e3 * self.run.preset.tp),
            "blame_s": float(self.g["blame"].sum() / 1e3),
            "preemptions": int(sim.preemptions.sum()),
            "median_decode_gap_ms": float(np.median(self.g["gap_ms"])) if len(self.g["gap_ms"]) else None,
            "max_gap_ms": float(self.g["gap_ms"].max()) if len(self.g["gap_ms"]) else None,
            **self._cache_summary(),
        }

    def _cache_summary(self) -> dict:
        sim = self.run.sim
        if sim.cached_tokens is None:
            return {}
        prompt = int(self.run.workload.prompt_len.sum())
        hit = int(sim.cached_tokens.sum())
        return {"cached_tokens": hit, "prompt_tokens": prompt, "prefix_cache_hit_rate": hit / prompt if prompt else 0.0,
                "requests_with_cache_hit": int((sim.cached_tokens > 0).sum())}


def build(run: Run, analysis: Analysis | None = None) -> dict:
    """The truth.json document (columnar arrays; see the module docstring for every definition)."""
    a = analysis or Analysis(run)
    sim, wl = run.sim, run.workload
    spikes, culprits = a.spikes()
    req_cols = {
        "index": np.arange(run.n), "request_id": run.request_ids,
        "send_ns": run.wall(run.send_ns), "arrival_ns": run.wall(wl.arrival_ns),
        "first_token_ns": run.wall(run.first_token_ns), "finish_ns": run.wall(run.finish_ns),
        "client_first_token_ns": run.wall(run.client_first_ns), "client_finish_ns": run.wall(run.client_finish_ns),
        "prompt_tokens": wl.prompt_len, "output_tokens": wl.output_len, "incident": wl.incident,
        "first_token_step": run.first_step, "last_token_step": run.last_step, "preemptions": sim.preemptions,
        "ttft_s": a.ttft_s, "e2el_s": a.latency_s, "tpot_s": a.tpot_s, "itl_max_s": a.itl_max_s,
        "blame_ms": a.blame_ms, "e2el_cf_s": a.latency_cf_s, "tpot_cf_s": a.tpot_cf_s, "itl_max_cf_s": a.itl_max_cf_s,
    }
    if sim.cached_tokens is not None:
        req_cols["shared_prefix_tokens"] = wl.prefix_len
        req_cols["cached_tokens"] = sim.cached_tokens
    for k, v in a.verdicts.items():
        req_cols[f"{k}_ok" if k != "good" else "good"] = v
    for k, v in a.verdicts_cf.items():
        req_cols[f"{k}_ok_cf" if k != "good" else "good_counterfactual"] = v
    steps = {
        "start_ns": run.wall(sim.start_ns), "end_ns": run.wall(sim.end_ns), "kind": np.array(KIND_NAMES)[sim.kind],
        "decode_index": sim.decode_index, "n_decode": sim.n_decode, "decoders": sim.decoders,
        "prefill_tokens": sim.prefill_tokens, "prefill_requests": sim.prefill_reqs, "kv_tokens_read": sim.kv_read,
        "attention_work": sim.attn_work, "pred_ms": sim.pred_ms, "pred_decode_only_ms": a.step_pred_dec,
        "noise": sim.noise, "interference_ms": a.step_interference_ms, "step_spike": a.step_spikes(),
        "waiting": sim.n_waiting, "running": sim.n_running, "kv_used_tokens": sim.kv_used,
    }
    chunks = {"step": sim.ch_step, "request": sim.ch_req, "tokens": sim.ch_tokens, "context_before": sim.ch_ctx,
              "completes": sim.ch_last.astype(bool), "recompute": sim.ch_recompute.astype(bool),
              "interference_ms": a.chunk_x}
    if sim.ch_hit is not None:
        chunks["cached"] = sim.ch_hit
    segs = {"request": sim.sg_req, "decode_index_start": sim.sg_d0, "count": sim.sg_count}
    return {
        "schema": SCHEMA,
        "generator": {"tool": "stallscope simulate", "truth_version": VERSION},
        "spec": run.spec.to_dict(),
        "preset": run.preset.describe(),
        "workload": wl.description,
        "clock": {
            "epoch_start_ns": run.epoch_start_ns, "bench_start_ns": run.epoch_start_ns,
            "bench_end_ns": run.wall(run.bench_end_ns), "perf_counter_origin_s": run.perf_origin_s,
            "note": "All *_ns are ns since the Unix epoch (UTC). Steps, chunks and engine token times are on the "
                    "engine clock; client times add the request's d_out (so gaps are equal). bench start_times = "
                    "perf_counter_origin_s + (send_ns - bench_start_ns)/1e9.",
        },
        "slo_ms": a.slo, "spike_rule": {"k": a.k, "ambiguous_band": AMBIGUOUS,
                                         "itl_ms": a.slo.get("itl")},
        "summary": a.summary(),
        "requests": req_cols, "steps": steps, "prefill_chunks": chunks, "decode_segments": segs,
        "decode_steps": sim.step_of_decode,
        "spikes": spikes, "culprits": culprits,
    }


_OPTS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def _jsonable(obj, key: str = ""):
    if isinstance(obj, dict):
        return {k: _jsonable(v, str(k)) for k, v in obj.items()}
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind in "US":
            return obj.tolist()
        if obj.dtype.kind == "f" and (key.endswith("_ms") or key in ("attention_work", "noise")):
            # ms to the ns; other floats (the *_s client metrics) stay exact, equal to the benchmark file's.
            return np.round(obj, 6 if key != "noise" else 9)
        return np.ascontiguousarray(obj)
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    return obj


def dumps(doc: dict) -> bytes:
    return orjson.dumps(_jsonable(doc), option=_OPTS)


def write(doc: dict, path: Path) -> Path:
    data = dumps(doc)
    if path.suffix == ".gz":
        with open(path, "wb") as f:
            with gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0, compresslevel=9) as gz:
                gz.write(data)
    else:
        path.write_bytes(data)
    return path


def load(path: str | Path) -> dict:
    """Read a truth.json (or truth.json.gz) back as plain Python lists."""
    p = Path(path)
    raw = p.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = orjson.loads(raw)
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"{p}: not a stallscope truth file (schema {doc.get('schema')!r})")
    return doc


def gaps_frame(doc: dict):
    """Every token gap of every request, rebuilt from a truth document (polars DataFrame).

    Columns: request, gap_index, start_ns, end_ns, gap_ms (engine clock), first_step, last_step, prefill_tokens
    (all requests' prefill tokens in the covered steps). Spikes and culprits are in the document itself."""
    import polars as pl

    steps = doc["steps"]
    end = np.asarray(steps["end_ns"], dtype=np.int64)
    chunks = doc["prefill_chunks"]
    segs = doc["decode_segments"]
    dsteps = np.asarray(doc["decode_steps"], dtype=np.int64)
    c_req = np.asarray(chunks["request"], dtype=np.int64)
    c_step = np.asarray(chunks["step"], dtype=np.int64)
    last = np.asarray(chunks["completes"], dtype=bool)
    s_req = np.asarray(segs["request"], dtype=np.int64)
    s_d0 = np.asarray(segs["decode_index_start"], dtype=np.int64)
    s_cnt = np.asarray(segs["count"], dtype=np.int64)
    r2 = np.repeat(s_req, s_cnt)
    d = np.repeat(s_d0 - np.concatenate([[0], np.cumsum(s_cnt)[:-1]]), s_cnt) + np.arange(int(s_cnt.sum()))
    req = np.concatenate([c_req[last], r2])
    st = np.concatenate([c_step[last], dsteps[d]])
    o = np.lexsort((st, req))
    req, st = req[o], st[o]
    same = req[1:] == req[:-1]
    pos = np.nonzero(same)[0]
    first = np.concatenate([[True], ~same])
    tok_index = np.arange(len(req)) - np.maximum.accumulate(np.where(first, np.arange(len(req)), 0))
    cum_p = np.concatenate([[0], np.cumsum(np.asarray(chunks["tokens"], dtype=np.int64))])
    lo = np.searchsorted(c_step, st[pos], side="right")
    hi = np.searchsorted(c_step, st[pos + 1], side="right")
    return pl.DataFrame({
        "request": req[pos + 1], "gap_index": tok_index[pos], "start_ns": end[st[pos]], "end_ns": end[st[pos + 1]],
        "gap_ms": (end[st[pos + 1]] - end[st[pos]]) / 1e6, "first_step": st[pos] + 1, "last_step": st[pos + 1],
        "prefill_tokens": cum_p[hi] - cum_p[lo],
    })
