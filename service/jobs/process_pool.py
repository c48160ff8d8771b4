"""A pool of a few persistent child processes that compute pure tasks within limits.

The caller keeps its I/O; a task (a name, a payload and the attachments it needs)
runs in one of ``size`` processes, each within a wall-clock deadline and a memory
limit. What a name runs is the caller's handler (``"module:function"``, resolved in
the child: ``service.jobs.process_child``); nothing here knows a task. The plans use
it (``service.plans.pool``):

- past its deadline the process is killed (SIGKILL) and the task fails with
  ``ComputeLimitExceeded`` (``limit: "wall_clock"``);
- a process that runs out of memory (``MemoryError`` under its ``RLIMIT_DATA``)
  answers so and ends; one that dies (the kernel's OOM killer, an allocation a
  library did not check) is noticed through its sentinel; either way the task
  fails with ``ComputeLimitExceeded`` (``limit: "memory"``);
- a process that ended is replaced at once; the others and the service go on.

Attachments are content-addressed objects (a reference fixes their content): a
process keeps those it was sent (``process_child.AttachmentCache``) and says which it
holds after each task, so a task over objects a process holds sends only their
references; a task goes to the idle process holding most of what it needs.

Processes start from a clean server process, never by forking the threaded API
process: with 'forkserver' (Linux, macOS) the server imports the caller's modules
once (``preload``) and each process forks from it in milliseconds; elsewhere they
are spawned. They start on the first task, or all together with ``start_soon``
(the app's start-up), and ``close`` ends them within ``TERM_GRACE_S`` (SIGTERM,
then SIGKILL). Each is also killed by the kernel when its parent dies.

A caller waits for a free process up to its deadline, or ``wait_s`` when given
(then ``Busy``: 429).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import pickle
import signal
import threading
import time
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any

from service.errors import Busy, ComputeLimitExceeded
from service.jobs import process_child
from service.jobs.process_child import PROTOCOL

log = logging.getLogger(__name__)

#: how long a process has to end after SIGTERM (then SIGKILL), and to be reaped
TERM_GRACE_S = 2.0


#: what every pool of this process asked the fork server to import (it is one server per
#: process: whichever pool starts it first, it preloads what all of them named so far)
_PRELOAD: list[str] = []


def start_context(preload: list[str]) -> BaseContext:
    """'forkserver' where the platform has it, else 'spawn'; never 'fork' (the API
    process has threads, and a forked copy would hold its locks and its memory)."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        _PRELOAD.extend(m for m in preload if m not in _PRELOAD)
        ctx.set_forkserver_preload(list(_PRELOAD))  # no effect once its server runs
        return ctx
    return multiprocessing.get_context("spawn")


@dataclass(eq=False)
class _Child:
    process: BaseProcess
    conn: Connection
    #: the attachments it said it holds after its last task
    held: set[str] = field(default_factory=set)


def _mib(n: int) -> str:
    return f"{n / 2**20:g} MiB"


def _stop(children: Iterable[_Child], kill: bool = False) -> None:
    """End ``children``: SIGTERM (or SIGKILL), then SIGKILL whatever is left."""
    children = list(children)
    for child in children:
        with contextlib.suppress(Exception):
            child.conn.close()
        with contextlib.suppress(Exception):
            child.process.kill() if kill else child.process.terminate()
    end = time.monotonic() + TERM_GRACE_S
    for child in children:
        with contextlib.suppress(Exception):
            child.process.join(max(0.0, end - time.monotonic()))
            if child.process.exitcode is None:
                child.process.kill()
                child.process.join(TERM_GRACE_S)


@dataclass(frozen=True)
class Labels:
    """How the pool's failures name things: each task (by name), the processes, and the
    settings that set the limits."""

    nouns: Mapping[str, str] = field(default_factory=dict)
    process: str = "process"
    budget_setting: str = "the budget"
    memory_setting: str = "the memory limit"

    def noun(self, name: str) -> str:
        return self.nouns.get(name, f"the task {name!r}")


class ProcessPool:
    """At most ``size`` processes, each limited to ``memory_bytes`` beyond its start, each
    answering tasks with ``handler`` ("module:function", see ``process_child.serve``)."""

    def __init__(
        self,
        size: int,
        memory_bytes: int,
        *,
        handler: str,
        preload: list[str] | None = None,
        labels: Labels | None = None,
        name: str = "retarget-pool",
    ) -> None:
        if size < 1 or memory_bytes < 1:
            raise ValueError(f"size >= 1 and memory_bytes >= 1 needed, got {size}, {memory_bytes}")
        self.size = size
        self.memory_bytes = memory_bytes
        self.handler = handler
        self.preload = list(preload or [])
        # named now, so a fork server another pool starts first preloads them too
        _PRELOAD.extend(m for m in self.preload if m not in _PRELOAD)
        self.labels = labels or Labels()
        self.name = name
        self._cond = threading.Condition()
        self._children: set[_Child] = set()
        self._idle: list[_Child] = []
        #: processes running or being started (at most ``size``), and those being started
        self._count = 0
        self._starting = 0
        self._closed = False
        # a pool dropped without ``close`` still ends its processes
        weakref.finalize(self, _stop, self._children)

    # -- processes ---------------------------------------------------------------

    def _spawn(self) -> _Child:
        """A new process in a slot taken (``_take_slot``), which is given back if it fails."""
        try:
            return self._start_process()
        except BaseException:
            with self._cond:
                self._count -= 1
            raise
        finally:
            with self._cond:
                self._starting -= 1
                self._cond.notify_all()

    def _take_slot(self) -> None:
        self._count += 1
        self._starting += 1

    def _start_process(self) -> _Child:
        """A new process; Busy once the pool is closed."""
        ctx = start_context(self.preload)
        mine, theirs = ctx.Pipe(duplex=True)
        process = ctx.Process(  # type: ignore[attr-defined]
            target=process_child.serve,
            args=(theirs, self.memory_bytes, self.handler),
            name=self.name,
            daemon=True,
        )
        process.start()
        theirs.close()
        child = _Child(process, mine)
        with self._cond:
            closed = self._closed
            if not closed:
                self._children.add(child)
        if closed:
            _stop([child])
            raise Busy("the service is stopping")
        return child

    def start(self) -> None:
        """Start the missing processes and wait for those being started (the first start
        of all also starts the fork server, which imports the accounting: seconds)."""
        while True:
            with self._cond:
                while self._count >= self.size and self._starting and not self._closed:
                    self._cond.wait()
                if self._closed or self._count >= self.size:
                    return
                self._take_slot()
            self._put_back(self._spawn(), alive=True)

    def start_soon(self) -> None:
        """``start`` in a background thread (the app's start-up does not wait for it)."""

        def run() -> None:
            try:
                self.start()
            except Busy:
                pass
            except Exception:
                log.exception(
                    "%ss failed to start; tasks start them on demand", self.labels.process
                )

        threading.Thread(target=run, name=f"{self.name}-start", daemon=True).start()

    def pids(self) -> list[int]:
        """The processes' ids (running or starting)."""
        with self._cond:
            return sorted(c.process.pid for c in self._children if c.process.pid is not None)

    def close(self) -> None:
        """End every process within seconds; tasks in flight fail with ``Busy``."""
        with self._cond:
            self._closed = True
            children = list(self._children)
            self._children.clear()
            self._idle.clear()
            self._cond.notify_all()
        _stop(children)

    def _release_slot(self) -> None:
        with self._cond:
            self._count -= 1
            self._cond.notify_all()

    def _put_back(self, child: _Child, alive: bool) -> None:
        """Make ``child`` available again, or (it ended, or must end) stop and replace it."""
        with self._cond:
            keep = alive and not self._closed
            if keep:
                self._idle.append(child)
                self._cond.notify_all()
                return
            self._children.discard(child)
            closed = self._closed
        _stop([child], kill=True)
        self._release_slot()
        if not closed:
            self.start_soon()  # replaced at once, not on the next task

    def _acquire(self, wanted: set[str], until: float) -> _Child | None:
        """A free process (the one holding most of ``wanted``), or None at ``until``."""
        with self._cond:
            while True:
                if self._closed:
                    raise Busy("the service is stopping")
                if self._idle:
                    child = max(self._idle, key=lambda c: len(c.held & wanted))
                    self._idle.remove(child)
                    return child
                if self._count < self.size:
                    self._take_slot()
                    break
                remaining = until - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)
        return self._spawn()

    # -- tasks -------------------------------------------------------------------

    def call(
        self,
        name: str,
        payload: Any,
        attachments: Mapping[str, Any],
        *,
        deadline: float,
        budget_s: float,
        wait_s: float | None = None,
    ) -> Any:
        """Task ``name`` on ``payload`` in a process, done by ``deadline``
        (``time.monotonic()``; ``budget_s`` is the budget it stands for, in messages).
        ``attachments`` are what it needs by reference: sent to a process that does not
        hold them yet. Its own errors are raised here as they were raised there."""
        until = deadline if wait_s is None else min(deadline, time.monotonic() + wait_s)
        child = self._acquire(set(attachments), until)
        if child is None or time.monotonic() >= deadline:
            if child is not None:
                self._put_back(child, alive=True)
            elif time.monotonic() < deadline:
                raise Busy(
                    f"every {self.labels.process} is busy (waited {wait_s or 0:g} s); retry shortly"
                )
            raise self._over_time(name, budget_s)
        alive = False
        try:
            reply = self._exchange(child, name, payload, attachments, deadline, budget_s)
            alive = True
        finally:
            self._put_back(child, alive)
        if reply[0] == "ok":
            return reply[1]
        raise reply[1]

    def _exchange(
        self,
        child: _Child,
        name: str,
        payload: Any,
        attachments: Mapping[str, Any],
        deadline: float,
        budget_s: float,
    ) -> tuple[Any, ...]:
        needed = list(attachments)
        send = [r for r in needed if r not in child.held]
        for _ in range(2):
            sent = {r: pickle.dumps(attachments[r], PROTOCOL) for r in send}
            message = pickle.dumps((name, payload, needed, sent), PROTOCOL)
            del sent
            with contextlib.suppress(OSError):  # it ended: its reply, if any, says why
                child.conn.send_bytes(message)
            del message
            reply = self._receive(child, name, deadline, budget_s)
            if reply[0] != "missing":
                if reply[0] in ("ok", "error"):
                    child.held = set(reply[2])
                return reply
            send = list(reply[1])
        raise RuntimeError(f"a {self.labels.process} asked twice for what it was sent")

    def _receive(
        self, child: _Child, name: str, deadline: float, budget_s: float
    ) -> tuple[Any, ...]:
        ready = wait([child.conn, child.process.sentinel], max(0.0, deadline - time.monotonic()))
        if not ready:
            child.process.kill()  # past its deadline: killed now, replaced by _put_back
            raise self._over_time(name, budget_s)
        try:
            reply: tuple[Any, ...] = pickle.loads(child.conn.recv_bytes())
        except (EOFError, OSError):
            raise self._died(child, name) from None
        if reply[0] == "memory":
            raise ComputeLimitExceeded(
                f"{self.labels.noun(name)} needs more memory than it may use "
                f"({_mib(self.memory_bytes)}, {self.labels.memory_setting}); it was stopped",
                limit="memory",
                memory_bytes=self.memory_bytes,
            )
        return reply

    def _over_time(self, name: str, budget_s: float) -> ComputeLimitExceeded:
        return ComputeLimitExceeded(
            f"{self.labels.noun(name)} ran past its wall-clock budget of {budget_s:g} s "
            f"({self.labels.budget_setting}); it was stopped",
            limit="wall_clock",
            budget_s=budget_s,
        )

    def _died(self, child: _Child, name: str) -> Exception:
        with self._cond:
            if self._closed:
                return Busy("the service is stopping")
        child.process.join(TERM_GRACE_S)
        code = child.process.exitcode
        how = f"exit code {code}"
        if code is not None and code < 0:
            with contextlib.suppress(ValueError):
                how = f"killed by {signal.Signals(-code).name}"
        return ComputeLimitExceeded(
            f"the {self.labels.process} computing {self.labels.noun(name)} ended unexpectedly "
            f"({how}); a task past its memory limit ({_mib(self.memory_bytes)}, "
            f"{self.labels.memory_setting}) ends this way",
            limit="memory",
            memory_bytes=self.memory_bytes,
        )
