"""parsers.lines: the read-ahead thread never outlives a parser that stopped with an error."""
from __future__ import annotations

import threading
import time

import pytest

from stallscope.parsers.lines import prefetch


def test_prefetch_stops_when_the_consumer_fails_with_a_full_queue():
    # The reader has read everything and waits to hand over its end marker on a full queue when the parser fails.
    errors = []

    def consume():
        try:
            for _ in prefetch(iter(range(2)), depth=1):
                time.sleep(0.2)
                raise ValueError("parser failed")
        except ValueError as e:
            errors.append(e)

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    t.join(5)
    assert not t.is_alive(), "prefetch hung after its consumer failed"
    assert len(errors) == 1
    assert not any(x.name == "log-reader" and x.is_alive() for x in threading.enumerate())


def test_prefetch_hands_a_reader_error_to_the_consumer():
    def frames():
        yield 1
        raise OSError("disk gone")

    got = []
    with pytest.raises(OSError, match="disk gone"):
        for x in prefetch(frames(), depth=1):
            got.append(x)
    assert got == [1]


def _python_lines(body: bytes) -> list[str]:
    """What a plain Python reader gives: each line without its newline and one CR before it."""
    out = []
    for raw in body.split(b"\n")[:-1]:
        raw = raw[:-1] if raw.endswith(b"\r") else raw
        out.append(raw.decode("utf-8", "replace"))
    return out


@pytest.mark.parametrize("body", [
    b"\n", b"\r\n", b"\r\r\n", b"a\rb\r\n", b"x" * 12 + b"\n", b"y" * 13 + b"\r\n", b"z" * 12 + b"\r\n",
    "é".encode() * 6 + b"\n" + "é".encode() * 7 + b"\n", b"\n\n\nlast line without much\n",
    b"2024-02-14T10:00:00.123456Z  INFO text_generation_router: router/src/server.rs:1: Success\r\nab\n",
])
def test_frame_lines_cut_lines_as_a_python_reader_does(body):
    from stallscope.parsers.lines import frame_lines

    df = frame_lines(body, 7)
    assert df["text"].to_list() == _python_lines(body)
    assert df["line_no"].to_list() == list(range(7, 7 + len(_python_lines(body))))
    assert not df["bad_utf8"].any()


def test_frame_lines_on_random_lines_and_a_bad_byte():
    import random

    from stallscope.parsers.lines import frame_lines

    rnd = random.Random(14)
    pieces = [b"a", b"\r", b"\n", b" ", "é".encode(), b"0123456789abcdef", "日本".encode()]
    body = b"".join(rnd.choice(pieces) for _ in range(20_000)) + b"\n"
    df = frame_lines(body, 1)
    assert df["text"].to_list() == _python_lines(body)
    bad = body.replace(b"\n", b"\xff\n", 1)  # one line is not UTF-8: that line alone is flagged
    df = frame_lines(bad, 1)
    assert df["text"].to_list() == _python_lines(bad)
    assert df["bad_utf8"].sum() == 1 and df["bad_utf8"][0]
