"""Fuzzing the log parsers with mutations of every real log sample (vLLM, TGI, SGLang): truncation at any offset,
flipped bytes, spliced lines, NaN / inf / huge numbers, invalid UTF-8, stray CR and NUL bytes, cut gzip streams.

Whatever the mutation, ingest must: finish within a time bound proportional to the size; never show a traceback
or an internal exception text (a failed file gets one clear line); and account for every physical line
(parsed + skipped + rejected == the lines a plain byte count finds). Deterministic (hypothesis derandomized, no
example database), about 45 s on 2 cores; `STALLSCOPE_FUZZ_SCALE=N` runs N times as many examples.
"""
from __future__ import annotations

import gzip
import os
import re
import signal
import time
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stallscope
from conftest import REAL
from helpers import physical_lines

pytestmark = pytest.mark.fuzz

SAMPLES = sorted(p for d in ("vllm", "vllm/excerpts", "tgi", "sglang") for p in (REAL / d).glob("*.log"))
LOG_FORMATS = {"vllm_log", "tgi_log", "sglang_log"}
BIG = 1 << 20  # samples above this size get fewer examples (each ingest takes longer)

# What must never reach a user: a traceback, a Python exception class, an engine library's internal message.
INTERNAL = re.compile(r"Traceback \(most recent|\b[A-Z]\w*(?:Error|Exception)\b|Conversion Error|polars|duckdb|"
                      r"pyarrow|ArrowInvalid|PanicException|line \d+, in ")
# An "unknown format" message quotes the file's first bytes; those are the file's, not ours.
QUOTED_HEAD = re.compile(r"starts with .*$")

NUM_RX = re.compile(rb"\d+(?:\.\d+)?")
ODD_NUMBERS = [b"nan", b"NaN", b"inf", b"-inf", b"1e309", b"-0.0", b"99999999999999999999999999", b"1.7976931348623157e308",
               b"-9223372036854775809", b"18446744073709551616", b"0x1F", b""]
BAD_UTF8 = [b"\xff", b"\xfe\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82", b"\x80\x80\x80"]
STRAY = [b"\r", b"\x00", b"\r\n", b"\x1b[", b"\x1b[31m", b"\t", b"\n\n\n", b"\xef\xbb\xbf"]


@st.composite
def mutation(draw, data: bytes, donors: list[bytes]):
    """A list of edits applied in order; each keeps the result a byte string."""
    kinds = st.sampled_from(["truncate", "flip", "splice", "number", "utf8", "stray", "dup_line", "drop_line"])
    edits = draw(st.lists(kinds, min_size=1, max_size=4))
    out = data
    for kind in edits:
        n = len(out)
        if kind == "truncate" and n:
            out = out[: draw(st.integers(0, n - 1))]
        elif kind == "flip" and n:
            b = bytearray(out)
            for _ in range(draw(st.integers(1, 8))):
                i = draw(st.integers(0, n - 1))
                b[i] ^= draw(st.integers(1, 255))
            out = bytes(b)
        elif kind == "splice":
            donor = draw(st.sampled_from(donors))
            dl = donor.split(b"\n")
            a = draw(st.integers(0, max(0, len(dl) - 1)))
            piece = b"\n".join(dl[a: a + draw(st.integers(1, 30))])
            lines = out.split(b"\n")
            at = draw(st.integers(0, len(lines)))
            # Sometimes glued into the middle of a line (a torn write), sometimes as whole lines.
            if draw(st.booleans()) and lines and at < len(lines) and lines[at]:
                cut = draw(st.integers(0, len(lines[at])))
                lines[at] = lines[at][:cut] + piece + lines[at][cut:]
            else:
                lines[at:at] = [piece]
            out = b"\n".join(lines)
        elif kind == "number":
            nums = list(NUM_RX.finditer(out))
            if nums:
                for _ in range(draw(st.integers(1, 6))):
                    m = nums[draw(st.integers(0, len(nums) - 1))]
                    rep = draw(st.sampled_from(ODD_NUMBERS))
                    if m.end() <= len(out):
                        out = out[: m.start()] + rep + out[m.end():]
        elif kind in ("utf8", "stray") and n:
            pool = BAD_UTF8 if kind == "utf8" else STRAY
            for _ in range(draw(st.integers(1, 4))):
                i = draw(st.integers(0, len(out)))
                out = out[:i] + draw(st.sampled_from(pool)) + out[i:]
        elif kind in ("dup_line", "drop_line"):
            lines = out.split(b"\n")
            if lines:
                i = draw(st.integers(0, len(lines) - 1))
                lines[i:i + 1] = [lines[i]] * draw(st.integers(2, 50)) if kind == "dup_line" else []
                out = b"\n".join(lines)
    gz = draw(st.sampled_from([None, None, None, "gzip", "cut_gzip"]))
    return out, gz


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def _lines_in_cut_gzip(blob: bytes) -> int:
    """Lines a reader of this (possibly cut) gzip can see: decompress as far as the bytes allow."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        data = d.decompress(blob)
    except zlib.error:
        data = b""
    return physical_lines(data)


def check_one(store, path: Path, data: bytes, gz: str | None, seq: list[int]) -> None:
    seq[0] += 1
    name = f"m{seq[0]:05d}.log"
    if gz:
        blob = gzip.compress(data, 1, mtime=0)
        if gz == "cut_gzip":
            blob = blob[: max(10, len(blob) * 2 // 3)]
        name += ".gz"
    else:
        blob = data
    f = path / name
    f.write_bytes(blob)
    limit = 10 + 4 * len(data) / (1 << 20)  # seconds: a fixed start-up allowance + 4 s per MB (shared 2-core box)
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    t0 = time.perf_counter()
    try:
        report = store.ingest([f])
    except _Timeout:
        pytest.fail(f"ingest of a {len(data)}-byte mutation ran past {limit:.0f} s")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    dt = time.perf_counter() - t0
    assert dt < limit
    r = report[0]
    text = [QUOTED_HEAD.sub("", r.message)] + list(r.notes) + list(report.notes)
    for t in text:
        assert "\n" not in t.strip(), f"multi-line message: {t!r}"
        assert not INTERNAL.search(t), f"internal text reached the user: {t!r}"
    assert r.status in ("ingested", "failed", "unchanged"), r.status
    if r.status == "failed":
        assert r.message.startswith(str(f)), r.message  # names the file
        return
    if r.status == "unchanged" or r.format not in LOG_FORMATS:
        return
    want = _lines_in_cut_gzip(blob) if gz else physical_lines(data)
    assert r.parsed + r.skipped + r.rejected == want, (r.parsed, r.skipped, r.rejected, want)
    sid = r.source_id
    assert store.sql(f"SELECT count(*) FROM rejects WHERE source_id = {sid}").item() == r.rejected
    assert store.sql(f"SELECT count(*) FROM rejects WHERE source_id = {sid} AND reason IS NULL").item() == 0


@pytest.fixture(scope="module")
def donors():
    return [p.read_bytes() for p in SAMPLES]


@pytest.mark.parametrize("sample", SAMPLES, ids=[p.name[:60] for p in SAMPLES])
def test_mutated_real_log(sample, donors, tmp_path):
    data = sample.read_bytes()
    store = stallscope.open(":memory:")
    seq = [0]
    examples = (3 if len(data) > BIG else 8) * int(os.environ.get("STALLSCOPE_FUZZ_SCALE", "1"))

    @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(mutation(data, donors))
    def run(m):
        check_one(store, tmp_path, m[0], m[1], seq)

    try:
        run()
    finally:
        store.close()
