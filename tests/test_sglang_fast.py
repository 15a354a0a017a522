"""The SGLang parser's fast ways (batch lines read by layout) give exactly the rows of its generic reader: every
table, on the bench's kind of file behind every wrapper prefix, and on edge lines built to sit on each side of the
validation (cut, spliced, trailing separators, SWA values, missing fields); every real log is checked with both fast
lanes in test_sglang_lean.py. Fast lanes off is `base.fast_lanes(False)`, every parser's one switch."""
from __future__ import annotations

import re

import pytest

import stallscope.parsers.sglang_log as sg
from stallscope.parsers.base import fast_lanes
from conftest import REAL
from helpers import same_tables, store_tables

TABLES = ("requests", "request_events", "engine_batches", "log_events", "engine_config", "rejects")

WRAPS = [
    lambda ln: b"(SGLangEngine pid=41820) " + ln,
    # Ray's log monitor strips the line's end: the trailing `, ` becomes `,`.
    lambda ln: b"(SGLangEngine pid=41820, ip=10.0.0.7) " + (ln[:-1] if ln.endswith(b", ") else ln),
    lambda ln: b"sglang-1  | " + ln,
    lambda ln: b"[pod/sglang-0/server] " + ln,
    lambda ln: b"Sep  1 10:00:00 node7 sglang[1201]: " + ln,
    lambda ln: b"\x1b[36m(SGLangEngine pid=7)\x1b[0m " + ln,
    lambda ln: ln + b" [repeated 3x across cluster]",
    lambda ln: ln,
]

H = b"[2025-09-01 10:00:0%d TP0] "
EDGES = [
    b"Decode batch, #running-req: 3, #token: 90, token usage: 0.01, cuda graph: True, gen throughput (token/s): "
    b"12.50, #queue-req: 0,\t ",
    b"Decode batch, #running-req: 3, #token: 90, token usage: 0.01, gen throughput (token/s): 12.50, #queue-req: 7 ",
    # cut: the last value has more decimals than a format prints / the last key is not one a line ends with
    b"Decode batch, #running-req: 3, #token: 90, token usage: 0.01, gen throughput (token/s): 12.50, #queue-req: 0.5",
    b"Decode batch, #running-req: 3, #token: 90, token usage: 0.01, gen throughput (token/s): 12.5",
    b"Decode batch, #running-req: 3, #token: 90, token usage: 0.01, gen throughput (token/s): 12.50, #queue-req: 0,,",
    b"Decode batch, #running-req: 3, #token: 90, token usage: 0.01 , gen throughput (token/s): 12.50, #queue-req: 0",
    b"Decode batch, #token: 90, token usage: 0.01, gen throughput (token/s): 12.50, #queue-req: 0",
    b"Decode batch, #running-req: 3, #tokn: 90, token usage: 0.01, gen throughput (token/s): 12.50, #queue-req: 0",
    b"Decode batch, #running-req: 3, #token: full=90, swa=40, token usage: 0.01, #queue-req: 0",
    b"Decode batch, #running-req: 3.5, #token: -90, token usage: 1%, cuda graph: False, #queue-req: 0",
    b"Decode batch, #running-req: True, #token: 90, token usage: 0.01, token usage: 0.02, #queue-req: 0",
    b"Prefill batch. #new-seq: 1, #new-token: 8, #cached-token: 0, cache hit rate: 12.50%, token usage: 0.01, "
    b"#running-req: 0, #queue-req: 0",
    b"Prefill batch, #new-seq: 1, #cached-token: 0, token usage: 0.01, #running-req: 0, #queue-req: 0, ",
    b"Prefill batch, #new-seq: 1, #new-token: 8, #cached-token: 0, full token usage: 0.1, swa token usage: 0.2, "
    b"#running-req: 0, #queue-req: 0, ",
    b"Prefill batch [12], #new-seq: 1, #new-token: 8, #cached-token: 0, token usage: 0.01, #running-req: 0, "
    b"#queue-req: 0, ",
    b"Prefill batch(mixed #running-req: 7). #new-seq: 1, #new-token: 512, #cached-token: 0, cache hit rate: 0.00%, "
    b"#queue-req: 0",
    b"Decode batch. #running-req: 1, #token: 68, token usage: 0.00, gen throughput (token/s): 32.71, largest-len: 0, "
    b"#queue-req: 0, ",
]


def _bench_style(path):
    """The bench's mix (real dated logs once, then their batch and access lines many times), in runs of lines
    behind one wrapper each, then the edge lines under each wrapper."""
    dated = re.compile(rb"(?m)^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
    files = sorted(p for p in (REAL / "sglang").glob("*.log") if dated.search(p.read_bytes()))
    mix = b"".join(b if b.endswith(b"\n") else b + b"\n" for b in (p.read_bytes() for p in files))
    body = [ln for ln in mix.split(b"\n") if re.search(rb"\] (?:Prefill|Decode) batch[.,]|\] INFO: +\S+ - \"", ln)]
    out = [mix]
    for i, w in enumerate(WRAPS * 3):
        out += [w(ln) for ln in body[(i * 37) % len(body):][:120]]
        out += [w(H % (j % 10) + e) for j, e in enumerate(EDGES)]
    path.write_bytes(b"\n".join(out) + b"\n")
    return path


def _tables(paths, fast: bool) -> dict:
    with fast_lanes(fast):
        return store_tables(paths, TABLES)


@pytest.fixture
def fast_rows(monkeypatch):
    """Counts the lines the fast way read (so these checks cannot pass with it switched off)."""
    n = []
    orig = sg._fast_rows
    monkeypatch.setattr(sg, "_fast_rows", lambda g, *a: (n.append(g.height), orig(g, *a))[1])
    return n


def test_fast_batches_equal_the_generic_reader_behind_wrappers_and_on_edge_lines(tmp_path, fast_rows):
    path = _bench_style(tmp_path / "bench_style.log")
    fast = _tables([path], True)
    assert sum(fast_rows) > 0.4 * fast["engine_batches"].height
    assert fast["rejects"].height > 0 and fast["engine_batches"]["extra"].drop_nulls().len() > 0
    n = sum(fast_rows)
    same_tables(fast, _tables([path], False))
    assert sum(fast_rows) == n  # switched off, the fast way read nothing
