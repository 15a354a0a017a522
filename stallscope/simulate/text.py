"""Deterministic stand-ins for prompt and output text: token ids and the gibberish they decode to.

`vllm bench serve --dataset-name random` sends prompts made of random token ids, so real prompts and outputs in
such runs are gibberish too. Here a token id maps to a fixed pseudo-word (`id % len(VOCAB)`), so a prompt's text
and its `prompt_token_ids` agree. The vocabulary holds lowercase letters and spaces only, which keeps Python's
`%r` of the text a plain single-quoted string. Everything is built with numpy/polars, one pass per call.
"""
from __future__ import annotations

import numpy as np
import polars as pl

BOS = 128000  # Llama 3 <|begin_of_text|>, first id of every prompt in the real 0.8.3 log


def _vocab() -> np.ndarray:
    rng = np.random.default_rng(20250401)
    letters = np.array(list("etaoinshrdlcumwfgypbvk"))
    n = 4096
    lens = rng.integers(1, 6, n)
    space = rng.random(n) < 0.7
    out = []
    for i in range(n):  # built once at import: 4096 small strings
        w = "".join(rng.choice(letters, lens[i]))
        out.append((" " + w) if space[i] else w)
    return np.array(out, dtype=object)


VOCAB = _vocab()


def token_ids(seed: int, lengths: np.ndarray, salt: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Flat token ids for requests of the given lengths (BOS first) and the request index of each id."""
    lengths = np.asarray(lengths, dtype=np.int64)
    rng = np.random.default_rng([seed, 100 + salt])
    total = int(lengths.sum())
    ids = rng.integers(100, 128000, total)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    ids[starts[lengths > 0]] = BOS
    return ids, np.repeat(np.arange(len(lengths)), lengths)


def join_per_request(values: pl.Series, req: np.ndarray, n: int, sep: str) -> list[str]:
    df = pl.DataFrame({"r": req, "v": values})
    agg = df.group_by("r", maintain_order=True).agg(pl.col("v").str.join(sep))
    full = pl.DataFrame({"r": np.arange(n, dtype=req.dtype if len(req) else np.int64)})
    return full.join(agg, on="r", how="left")["v"].fill_null("").to_list()


def text_of(ids: np.ndarray, req: np.ndarray, n: int) -> list[str]:
    """The decoded text of each request's ids (BOS decodes to nothing, as with skip_special_tokens)."""
    words = np.where(ids == BOS, "", VOCAB[ids % len(VOCAB)]).astype(str)
    return join_per_request(pl.Series(words, dtype=pl.String), req, n, "")


def words_for(seed: int, lengths: np.ndarray, salt: int = 3) -> list[str]:
    """Generated text of `lengths[i]` tokens for each request."""
    lengths = np.asarray(lengths, dtype=np.int64)
    rng = np.random.default_rng([seed, 200 + salt])
    total = int(lengths.sum())
    idx = rng.integers(0, len(VOCAB), total)
    req = np.repeat(np.arange(len(lengths)), lengths)
    return join_per_request(pl.Series(VOCAB[idx].astype(str), dtype=pl.String), req, len(lengths), "")
