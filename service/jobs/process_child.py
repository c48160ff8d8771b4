"""What runs inside a pool process (``service.jobs.process_pool``): its limits, the
attachments it keeps, and the loop that answers one task at a time.

A message is ``(name, payload, needed, sent)``: the task's name and payload, the
references of the attachments it needs, and those the pool sent (pickled each on its
own). The reply is ``("ok", value, held)``, ``("error", exc, held)`` (the task's own
error, with the references now held), ``("missing", refs)`` (send these first) or
``("memory",)`` (out of memory: the process ends and the pool starts another).

The process (``serve``): its memory limit is set on itself (``RLIMIT_DATA``: the
heap and private mappings, where numpy's arrays live, on top of what it holds at
start), it asks the kernel to kill it when its parent dies and to kill it first
when memory runs out, and it answers one task at a time with the handler it was
started with (``"module:function"``, called as ``handler(name, payload, attachments)``).
A ``MemoryError`` empties its caches, answers "memory" and ends the process.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import pickle
import resource
import signal
import sys
import traceback
from collections import OrderedDict
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

PROTOCOL = pickle.HIGHEST_PROTOCOL

Handler = Callable[[str, Any, dict[str, Any]], Any]


class AttachmentCache:
    """The attachments a process holds, least recently used first out."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.items: OrderedDict[str, tuple[Any, int]] = OrderedDict()
        self.size = 0

    def add(self, sent: dict[str, bytes]) -> None:
        for ref, data in sent.items():
            if ref in self.items:
                self.size -= self.items.pop(ref)[1]
            self.items[ref] = (pickle.loads(data), len(data))
            self.size += len(data)

    def take(self, needed: list[str]) -> dict[str, Any]:
        """The attachments ``needed`` (all held); keeps the size under ``max_bytes`` by
        dropping the least recently used ones this task does not use."""
        used = set(needed)
        for ref in used:
            self.items.move_to_end(ref)
        for ref in list(self.items):
            if self.size <= self.max_bytes:
                break
            if ref not in used:
                self.size -= self.items.pop(ref)[1]
        return {ref: self.items[ref][0] for ref in used}

    def clear(self) -> None:
        self.items.clear()
        self.size = 0


def answer(handler: Handler, cache: AttachmentCache, message: bytes) -> tuple[Any, ...]:
    """The reply to one task message (see the module docstring)."""
    name, payload, needed, sent = pickle.loads(message)
    del message
    cache.add(sent)
    del sent
    missing = sorted(set(needed) - set(cache.items))
    if missing:
        return ("missing", missing)
    attachments = cache.take(needed)
    try:
        value = handler(name, payload, attachments)
    except MemoryError:
        raise
    except Exception as exc:
        return ("error", _portable(exc), list(cache.items))
    return ("ok", value, list(cache.items))


def _portable(exc: Exception) -> Exception:
    """``exc`` if it survives a pickle round trip, else a RuntimeError naming it; an
    unexpected error carries the process's traceback as a note."""
    from service.errors import RetargetError

    if not isinstance(exc, RetargetError):
        exc.add_note("in the pool process:\n" + traceback.format_exc())
    try:
        pickle.loads(pickle.dumps(exc, PROTOCOL))
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


def resolve(handler: str) -> Handler:
    """The function ``"module:function"`` names."""
    module, _, attr = handler.partition(":")
    found: Handler = getattr(importlib.import_module(module), attr)
    return found


def serve(conn: Connection, memory_bytes: int, handler: str) -> None:
    """A pool process: set its limits, then answer tasks until its parent goes away."""
    _set_up(memory_bytes)
    run = resolve(handler)
    cache = AttachmentCache(memory_bytes // 4)
    while True:
        try:
            # the message is referenced by ``answer`` alone, which drops it once read
            data = pickle.dumps(answer(run, cache, conn.recv_bytes()), PROTOCOL)
        except (EOFError, OSError):
            return  # the pool closed its end: the service is stopping
        except MemoryError:
            _out_of_memory(conn, cache)
            return
        try:
            conn.send_bytes(data)
        except OSError:
            return
        del data


def _out_of_memory(conn: Connection, cache: AttachmentCache) -> None:
    """Free what can be freed, say why, and let the process end (the pool replaces it)."""
    cache.clear()
    gc.collect()
    with contextlib.suppress(Exception):
        conn.send_bytes(pickle.dumps(("memory",), PROTOCOL))


def _set_up(memory_bytes: int) -> None:
    # ^C in a terminal reaches the whole process group: the API process decides
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform == "linux":
        with contextlib.suppress(Exception):  # killed with its parent (PR_SET_PDEATHSIG)
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
        with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")  # under memory pressure, a pool process goes before the API
    limit = data_size() + memory_bytes
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))


def data_size() -> int:
    """This process's data segment (heap and private writable mappings), in bytes: what
    ``RLIMIT_DATA`` counts. 0 where /proc does not say (the limit is then absolute)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
