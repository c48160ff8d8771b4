"""Reading ahead of a consumer: the next chunks of a stream fetched by a thread while
the current one is being sent, so a download from object storage does not wait for
each part's round trip after sending the previous one."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")

_END = object()


def read_ahead(chunks: Iterable[T], depth: int = 2) -> Iterator[T]:
    """The items of ``chunks`` in order, at most ``depth`` fetched ahead by a thread; an
    error of the source is raised here, and closing this stops the thread."""
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    ready: queue.Queue[object] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def fill() -> None:
        try:
            for item in chunks:
                while not stop.is_set():
                    try:
                        ready.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            ready.put(_END)
        except BaseException as exc:  # handed to the consumer
            ready.put(exc)

    thread = threading.Thread(target=fill, name="retarget-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            item = ready.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item  # type: ignore[misc]
    finally:
        stop.set()
        thread.join()
