"""Streamed S3 downloads read ahead: the same chunks in order, errors raised to the
consumer, and a consumer that stops early stops the reader."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from service.registry.read_ahead import read_ahead


def test_the_chunks_come_in_order_whatever_the_depth() -> None:
    chunks = [bytes([i]) * (i + 1) for i in range(50)]
    for depth in (1, 2, 7):
        assert list(read_ahead(iter(chunks), depth)) == chunks


def test_an_error_of_the_source_reaches_the_consumer_after_the_chunks_before_it() -> None:
    def source() -> Iterator[bytes]:
        yield b"a"
        yield b"b"
        raise OSError("the bucket went away")

    got = []
    with pytest.raises(OSError, match="went away"):
        for chunk in read_ahead(source()):
            got.append(chunk)
    assert got == [b"a", b"b"]


def test_a_consumer_that_stops_early_stops_the_reader() -> None:
    produced = []

    def source() -> Iterator[int]:
        for i in range(10_000):
            produced.append(i)
            yield i

    stream = read_ahead(source(), depth=2)
    assert [next(stream) for _ in range(3)] == [0, 1, 2]
    stream.close()
    assert len(produced) <= 3 + 2 + 1  # consumed, queued, and one being put
    assert not any(t.name == "retarget-read-ahead" and t.is_alive() for t in threading.enumerate())


def test_a_depth_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="depth"):
        next(read_ahead(iter([1]), 0))
