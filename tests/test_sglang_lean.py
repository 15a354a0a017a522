"""The SGLang parser's lean lane (one-line batch and access records behind a plain dated head, read without record
formation; batch lines by layout) gives exactly the store of its generic path and generic batch reader: on every
real log, on the bench's kind of file behind every wrapper prefix, and on lines built to sit on each side of what
the lane takes (continuation and untimed lines right after lean lines, time-only and millisecond heads, ANSI codes,
dedup markers, access lines it must leave, rank tags without a column), also with small frames so that lean lines
and open records meet at frame edges, and in a cut gzip."""
from __future__ import annotations

import gzip

import polars as pl
import pytest

import stallscope.parsers.logrecords as lr
import stallscope.parsers.sglang_log as sg
from stallscope.parsers.base import fast_lanes
from conftest import REAL
from helpers import same_tables, store_tables
from test_sglang_fast import TABLES, _bench_style, fast_rows  # noqa: F401 (a fixture)

B = ("Decode batch, #running-req: 3, #token: 90, token usage: 0.01, cuda graph: True, gen throughput (token/s): "
     "12.50, #queue-req: 0, ")
P = ("Prefill batch. #new-seq: 1, #new-token: 8, #cached-token: 0, cache hit rate: 12.50%, token usage: 0.01, "
     "#running-req: 0, #queue-req: 0")
A = 'INFO:     127.0.0.1:4{i} - "POST /generate HTTP/1.1" 200 OK'


def _edge_lines() -> list[str]:
    h = "[2025-09-01 10:00:{:02d}{}] "
    out = []
    for i in range(40):
        ts = h.format(i % 60, " TP0 EP1" if i % 3 else "")
        out += [ts + B, ts + P, ts + A.format(i=i)]
        k = i % 10
        if k == 0:  # a traceback after a batch line: its own record, untimed, inheriting the batch line's time
            out += ["Traceback (most recent call last):", '  File "x.py", line 1, in <module>', "ValueError: x"]
        elif k == 1:  # blank lines after lean lines, then a head
            out += ["", "  ", h.format(i % 60, "") + "Load weight end."]
        elif k == 2:  # time-only and millisecond heads (the lane takes dated whole-second and ms heads only)
            out += ["[10:00:%02d TP0] " % (i % 60) + B, "[2025-09-01 10:00:01.250 TP0] " + B]
        elif k == 3:  # ANSI codes and dedup markers are the generic path's
            out += ["\x1b[32m" + ts + B, ts + A.format(i=i) + " [repeated 3x across cluster]"]
        elif k == 4:  # access lines the lane leaves: a quote in the path, no status, non-ASCII digits, a tab
            out += [ts + 'INFO:     127.0.0.1:1 - "GET /a"b HTTP/1.1" 200 OK', ts + 'INFO:     1.2.3.4:5 - "GET / HTTP/1.1"',
                    ts + 'INFO:     1.2.3.4:5 - "GET / HTTP/1.1" ٢٠٠ OK', ts + 'INFO:\t1.2.3.4:5 - "GET / HTTP/1.1" 404']
        elif k == 5:  # a head whose message is a lean label glued to its ']' or past the head window; bad dates
            out += ["[2025-09-01 10:00:05]" + B, "[2025-13-45 10:00:05] " + B, "[2025-09-01 10:00:05 XX0] " + B]
        elif k == 6:  # a Finish record wrapped over lines, right after an access line
            out += [h.format(i % 60, "") + "Finish: obj=GenerateReqInput(rid='r%d'), out={'meta_info': {'id': 'r%d', "
                    % (i, i), "'prompt_tokens': 5, 'completion_tokens': 7, 'e2e_latency': 0.5}}"]
        elif k == 7:  # spliced and cut batch lines
            out += [ts + B.replace("#token", "#tokn"), ts + B[:60], ts + "Decode batch, " + "x" * 30]
        elif k == 8:  # rank tags without a column (into `extra`), with and without a field without one
            tags = "[2025-09-01 10:00:%02d DP1 TP0 ATTN_CP2 MOE_DP1] " % (i % 60)
            out += [tags + B, tags + B.replace("#queue-req", "largest-len: 4, #queue-req"), tags + A.format(i=i)]
    return out


def _tables(paths, lean: bool, monkeypatch, frame_bytes: int | None = None) -> dict:
    """The store with the fast lanes on (the lean lane and the batch layouts), or with every line and field the
    generic way (`fast_lanes(False)`, every parser's one switch)."""
    if frame_bytes:
        monkeypatch.setattr(lr, "FRAME_BYTES", frame_bytes)
    with fast_lanes(lean):
        return store_tables(paths, TABLES, said=True)


@pytest.fixture
def lean_lines(monkeypatch):
    """Counts the lines the lean lane took (so these checks cannot pass with it switched off)."""
    n = []
    orig = sg._lean_prepare

    def counting(tz):
        prep = orig(tz)

        def f(df):
            out = prep(df)
            n.append(int((out["_lk"] > 0).sum()))
            return out
        return f
    monkeypatch.setattr(sg, "_lean_prepare", counting)
    return n


def test_fast_lanes_equal_the_generic_path_on_every_real_log(monkeypatch, lean_lines, fast_rows):
    paths = sorted((REAL / "sglang").glob("*.log"))
    lean = _tables(paths, True, monkeypatch)
    assert sum(lean_lines) >= 20 and sum(fast_rows) >= 20
    taken = sum(lean_lines), sum(fast_rows)
    same_tables(lean, _tables(paths, False, monkeypatch))
    assert (sum(lean_lines), sum(fast_rows)) == taken  # switched off, neither lane read a line


@pytest.mark.parametrize("frame_bytes", [None, 2000])
def test_lean_lane_equals_the_generic_path_on_edge_lines(tmp_path, monkeypatch, lean_lines, frame_bytes):
    path = tmp_path / "edges.log"
    path.write_text("\n".join(_edge_lines()) + "\n", encoding="utf-8")
    lean = _tables([path], True, monkeypatch, frame_bytes)
    assert sum(lean_lines) >= 100
    assert lean["rejects"].height > 0 and lean["requests"].height > 0
    # The untimed traceback after a batch line inherits its time.
    tb = lean["log_events"].filter(pl.col("kind") == "traceback")
    assert tb.height and tb["ts_ns"].null_count() == 0
    same_tables(lean, _tables([path], False, monkeypatch, frame_bytes))


def test_lean_lane_equals_the_generic_path_behind_wrappers(tmp_path, monkeypatch, lean_lines):
    path = _bench_style(tmp_path / "bench_style.log")
    lean = _tables([path], True, monkeypatch, 30_000)
    assert sum(lean_lines) >= 100
    same_tables(lean, _tables([path], False, monkeypatch, 30_000))


@pytest.mark.parametrize("frame_bytes", [None, 3000])
def test_lean_lane_equals_the_generic_path_on_a_cut_gzip_with_bad_bytes(tmp_path, monkeypatch, lean_lines,
                                                                         frame_bytes):
    lines = [x.encode() for x in _edge_lines()]
    lines[7] = lines[7].replace(b"Decode", b"Dec\xc3\x28ode")  # invalid UTF-8 in a lean-looking line
    data = b"\n".join(lines) + b"\n"
    z = gzip.compress(data)
    path = tmp_path / "cut.log.gz"
    path.write_bytes(z[: len(z) * 3 // 4])  # cut mid-stream: its last line is rejected
    lean = _tables([path], True, monkeypatch, frame_bytes)
    assert sum(lean_lines) >= 50 and "gzip" in lean["rejects"].sort("line_no")["reason"][-1]
    same_tables(lean, _tables([path], False, monkeypatch, frame_bytes))
