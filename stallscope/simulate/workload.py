"""Workloads for the engine simulator: arrivals, prompt and output lengths, incident injections, store replay.

Arrivals follow `vllm bench serve`: inter-arrival gaps are gamma-distributed with shape `burstiness` and mean
1/rate (burstiness 1 is a Poisson process, < 1 is burstier). Lengths are fixed or lognormal with a given mean.
An incident injects extra requests, for example a burst of 8k-token prompts at t = 60 s. A shared prefix
(`--shared-prefix 0.7:1536`) puts one common prefix of 1536 tokens (a system prompt) in front of the prompts of
70 % of the requests, the incident's included; their prompt length grows by it. All times are integer ns
relative to the start of the benchmark; the simulator puts them on the wall clock.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from stallscope.errors import StallscopeError


@dataclass
class Workload:
    arrival_ns: np.ndarray     # int64, sorted, relative to the benchmark start
    prompt_len: np.ndarray     # int64 tokens
    output_len: np.ndarray     # int64 tokens (the requests ignore EOS, so this is exact)
    incident: np.ndarray       # bool: injected by an incident
    description: dict = field(default_factory=dict)
    prefix_len: np.ndarray | None = None   # int64 tokens of the shared prefix each prompt starts with (0: none);
                                           # None: the workload has no shared prefix

    def __len__(self) -> int:
        return len(self.arrival_ns)


@dataclass(frozen=True)
class LengthDist:
    mean: float
    sigma: float = 0.0          # sigma of log(length); 0 = fixed length
    lo: int = 1
    hi: int = 1 << 20

    @classmethod
    def parse(cls, text: str, *, lo: int = 1, hi: int = 1 << 20) -> "LengthDist":
        """`512` (fixed) or `512:0.6` (lognormal with mean 512 and log-sigma 0.6)."""
        try:
            parts = text.split(":")
            mean = float(parts[0])
            sigma = float(parts[1]) if len(parts) > 1 else 0.0
        except (ValueError, IndexError):
            raise StallscopeError(f"bad length distribution {text!r}: use MEAN or MEAN:SIGMA, e.g. 512:0.6") from None
        if mean < 1 or sigma < 0:
            raise StallscopeError(f"bad length distribution {text!r}: mean must be >= 1 and sigma >= 0")
        return cls(mean, sigma, lo, hi)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.sigma == 0:
            x = np.full(n, self.mean)
        else:
            mu = np.log(self.mean) - self.sigma ** 2 / 2  # so that E[x] = mean
            x = rng.lognormal(mu, self.sigma, n)
        return np.clip(np.rint(x), self.lo, self.hi).astype(np.int64)

    def text(self) -> str:
        return f"{self.mean:g}" if self.sigma == 0 else f"lognormal(mean={self.mean:g}, sigma={self.sigma:g})"


@dataclass(frozen=True)
class Incident:
    kind: str                   # long-prompts | burst | none
    at_s: float | None = None   # default: half the duration
    count: int = 4
    tokens: int = 8192
    spacing_s: float = 0.25

    @classmethod
    def parse(cls, text: str | None) -> "Incident":
        """`long-prompts`, `long-prompts:count=4,tokens=8192,at=60,spacing=0.25`, `burst:count=64,at=30`, `none`."""
        if not text or text == "none":
            return cls("none")
        name, _, opts = text.partition(":")
        if name not in ("long-prompts", "burst"):
            raise StallscopeError(f"unknown incident {name!r}: use long-prompts, burst or none")
        kw: dict = {}
        for item in filter(None, opts.split(",")):
            k, _, v = item.partition("=")
            try:
                if k == "count":
                    kw["count"] = int(v)
                elif k == "tokens":
                    kw["tokens"] = int(v)
                elif k == "at":
                    kw["at_s"] = float(v)
                elif k == "spacing":
                    kw["spacing_s"] = float(v)
                else:
                    raise ValueError
            except ValueError:
                raise StallscopeError(f"bad incident option {item!r} in {text!r} "
                                      "(count=N, tokens=N, at=SECONDS, spacing=SECONDS)") from None
        if name == "burst":
            kw.setdefault("count", 64)
            kw.setdefault("spacing_s", 0.0)
        return cls(name, **kw)

    def describe(self, duration_s: float) -> dict:
        if self.kind == "none":
            return {"kind": "none"}
        return {"kind": self.kind, "at_s": self.at(duration_s), "count": self.count,
                "prompt_tokens": self.tokens if self.kind == "long-prompts" else None, "spacing_s": self.spacing_s}

    def at(self, duration_s: float) -> float:
        return duration_s / 2 if self.at_s is None else self.at_s


@dataclass(frozen=True)
class SharedPrefix:
    fraction: float
    tokens: int

    @classmethod
    def parse(cls, text: str | None) -> "SharedPrefix | None":
        """`0.7:1536`: 70 % of the requests start with one common 1536-token prefix; None or `none`: no prefix."""
        if not text or text == "none":
            return None
        try:
            f, t = text.split(":")
            frac, tokens = float(f), int(t)
        except ValueError:
            raise StallscopeError(f"bad --shared-prefix {text!r}: use FRACTION:TOKENS, e.g. 0.7:1536") from None
        if not 0 <= frac <= 1 or tokens < 1:
            raise StallscopeError(f"bad --shared-prefix {text!r}: the fraction must be in [0, 1], tokens >= 1")
        return cls(frac, tokens)

    def describe(self) -> dict:
        return {"fraction": self.fraction, "tokens": self.tokens}


def synthesize(rng: np.random.Generator, *, rate: float, duration_s: float, burstiness: float = 1.0,
               prompt: LengthDist, output: LengthDist, incident: Incident = Incident("none"),
               max_model_len: int = 32768, shared_prefix: SharedPrefix | None = None) -> Workload:
    """Requests arriving over `duration_s` at `rate` req/s, plus the incident's requests (and a shared prefix)."""
    if rate <= 0 or duration_s <= 0:
        raise StallscopeError("--rate and --duration must be positive")
    if burstiness <= 0:
        raise StallscopeError("--burstiness must be positive")
    n_guess = int(rate * duration_s * 1.5 + 50)
    theta = 1.0 / (rate * burstiness)
    gaps = rng.gamma(burstiness, theta, n_guess)
    t = np.cumsum(gaps)
    while t[-1] < duration_s:  # rare: extend until the window is covered
        more = np.cumsum(rng.gamma(burstiness, theta, n_guess)) + t[-1]
        t = np.concatenate([t, more])
    t = t[t < duration_s]
    n = len(t)
    p = prompt.sample(rng, n)
    o = output.sample(rng, n)
    inc = np.zeros(n, dtype=bool)
    if incident.kind != "none":
        k = incident.count
        at = incident.at(duration_s)
        ti = at + incident.spacing_s * np.arange(k)
        pi = (np.full(k, incident.tokens, dtype=np.int64) if incident.kind == "long-prompts"
              else prompt.sample(rng, k))
        oi = output.sample(rng, k)
        t = np.concatenate([t, ti])
        p = np.concatenate([p, pi])
        o = np.concatenate([o, oi])
        inc = np.concatenate([inc, np.ones(k, dtype=bool)])
    pre = None
    if shared_prefix is not None:
        # Drawn after everything else, so the same seed gives the same requests with and without a prefix.
        has = rng.random(len(p)) < shared_prefix.fraction
        pre = np.where(has, shared_prefix.tokens, 0).astype(np.int64)
        p = p + pre
    over = p + o > max_model_len
    if over.any():
        # The server would reject these (prompt + max_tokens beyond max_model_len): cap the output instead.
        o = np.where(over, np.maximum(max_model_len - p, 1), o)
        p = np.minimum(p, max_model_len - 1)
    if pre is not None:
        pre = np.minimum(pre, p - 1)
    arrival = np.rint(t * 1e9).astype(np.int64)
    order = np.argsort(arrival, kind="stable")
    desc = {
        "arrivals": "poisson" if burstiness == 1 else f"gamma(shape={burstiness:g})",
        "rate_rps": rate, "duration_s": duration_s, "burstiness": burstiness,
        "prompt_tokens": prompt.text(), "output_tokens": output.text(),
        "incident": incident.describe(duration_s), "requests": int(len(order)),
    }
    if shared_prefix is not None:
        desc["shared_prefix"] = {**shared_prefix.describe(), "requests": int((pre > 0).sum())}
    return Workload(arrival[order], p[order], o[order], inc[order], desc,
                    prefix_len=pre[order] if pre is not None else None)


def from_store(db_path: str, *, source_id: int | None = None, output: LengthDist | None = None,
               rng: np.random.Generator | None = None, max_model_len: int = 32768) -> Workload:
    """Replay the arrivals and lengths of the `requests` table of an ingested store (one source)."""
    import duckdb

    try:
        con = duckdb.connect(db_path, read_only=True)
    except duckdb.Error as e:
        raise StallscopeError(f"cannot open store {db_path}: {str(e).splitlines()[0]}") from None
    try:
        src = source_id
        if src is None:
            row = con.execute("""SELECT source_id FROM requests WHERE arrival_ns IS NOT NULL AND prompt_tokens IS NOT NULL
                                 GROUP BY source_id ORDER BY count(*) DESC, source_id LIMIT 1""").fetchall()
            row = row[0] if row else None
            if row is None:
                raise StallscopeError(f"{db_path}: no requests with arrival times and prompt lengths to replay")
            src = row[0]
        cols = con.execute("""SELECT arrival_ns, prompt_tokens, output_tokens FROM requests
                              WHERE source_id = ? AND arrival_ns IS NOT NULL AND prompt_tokens IS NOT NULL
                              ORDER BY arrival_ns, request_index""", [src]).fetchnumpy()
    except duckdb.Error as e:
        raise StallscopeError(f"{db_path}: cannot read requests: {str(e).splitlines()[0]}") from None
    finally:
        con.close()
    arr = np.asarray(cols["arrival_ns"], dtype=np.int64)
    if len(arr) == 0:
        raise StallscopeError(f"{db_path}: source {src} has no replayable requests")
    p = np.asarray(cols["prompt_tokens"], dtype=np.int64)
    o_raw = cols["output_tokens"]
    o_mask = np.ma.getmaskarray(o_raw) if isinstance(o_raw, np.ma.MaskedArray) else np.zeros(len(arr), bool)
    o = np.asarray(np.ma.filled(o_raw, 0) if isinstance(o_raw, np.ma.MaskedArray) else o_raw, dtype=np.int64)
    if o_mask.any() or (o <= 0).any():
        if output is None or rng is None:
            raise StallscopeError(f"{db_path}: some requests have no output length; give --output-len to fill them")
        fill = output.sample(rng, len(o))
        o = np.where(o_mask | (o <= 0), fill, o)
    p = np.clip(p, 1, max_model_len - 1)
    o = np.clip(o, 1, np.maximum(max_model_len - p, 1))
    rel = arr - arr[0] + 250_000_000  # the first request goes out 0.25 s after the benchmark starts
    return Workload(rel, p, o, np.zeros(len(arr), bool), {
        "arrivals": f"replayed from {db_path} source {src}", "requests": int(len(arr)),
        "duration_s": float(rel[-1] / 1e9), "rate_rps": float(len(arr) / max(rel[-1] / 1e9, 1e-9)),
        "incident": {"kind": "none"},
    })
