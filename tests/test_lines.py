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
