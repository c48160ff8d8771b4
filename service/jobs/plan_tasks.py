"""The pure part of a plan, as tasks a plan process runs (``plan_pool``), and that process.

A task is a pure function of candidates (with their privacy profiles) and plain
arguments: ``plan`` (``make_plan``), ``guarantee``, and the dashboard's ``explorer``
(RS and LC at one target) and ``frontier`` (``service.jobs.frontier``). The API process keeps the
database work (rows, profiles, the ledger) and hands a task to a plan process.

What travels: the candidates without their profiles, a reference per profile, and
the profiles the process does not hold yet, each pickled on its own. A plan
process keeps the profiles it was sent (least recently used first out, their
pickled size kept under a quarter of its memory limit), so a plan over models it
has seen sends only their ids and mechanisms. Each reply says which profiles the
process now holds; a reference it does not hold is asked for again ("missing").
A profile's reference is its mechanism hash, the versions that made it and the
shape of its PLD, which together fix its content (the profile is a deterministic
function of the mechanism and the code).

The process (``serve``): its memory limit is set on itself (``RLIMIT_DATA``: the
heap and private mappings, where numpy's arrays live, on top of what it holds at
start), it asks the kernel to kill it when its parent dies and to kill it first
when memory runs out, and it answers one task at a time. A ``MemoryError`` empties
its caches, answers "memory" and ends the process (the pool starts another).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import gc
import pickle
import resource
import signal
import sys
import traceback
from collections import OrderedDict
from multiprocessing.connection import Connection
from typing import Any, Protocol, cast

from service.accounting.guarantees import guarantee
from service.accounting.planning import Candidate, make_plan
from service.accounting.profiles import PrivacyProfile
from service.jobs.frontier import compute_frontier, explorer_plans

#: task name -> the pure function; each takes the candidates first
TASKS: dict[str, Any] = {
    "plan": make_plan,
    "guarantee": guarantee,
    "explorer": explorer_plans,
    "frontier": compute_frontier,
}

#: what a task computes, in error messages
NOUNS = {
    "plan": "the plan",
    "guarantee": "the guarantee",
    "explorer": "the explorer's set of plans",
    "frontier": "the frontier",
}

PROTOCOL = pickle.HIGHEST_PROTOCOL


class Compute(Protocol):
    """Runs task ``name`` of ``TASKS`` on ``candidates`` and ``args`` (somewhere)."""

    def __call__(self, name: str, candidates: list[Candidate], *args: Any) -> Any: ...


def in_thread(name: str, candidates: list[Candidate], *args: Any) -> Any:
    """The task in the calling thread, unbounded (the accounting's own tests, tools)."""
    return TASKS[name](candidates, *args)


def profile_ref(profile: PrivacyProfile) -> str:
    """What fixes a profile's content: its mechanism, the code that made it, its PLD's shape."""
    pld = profile.pld
    shape = "rdp-only"
    if pld is not None:
        remove, add = pld.remove, pld.add
        shape = (
            f"{pld.discretization!r}:{remove._lower_loss}:{len(remove._probs)}"
            f":{add._lower_loss}:{len(add._probs)}"
        )
    versions = ",".join(f"{k}={v}" for k, v in sorted(profile.versions.items()))
    flags = f"{int(profile.non_private)}{int(profile.heuristic)}{int(profile.rdp is None)}"
    return f"{profile.mechanism_hash}|{profile.mechanism_type}|{shape}|{flags}|{versions}"


Refs = list[tuple[str, str | None]]


def strip(candidates: list[Candidate]) -> tuple[list[Candidate], Refs, dict[str, PrivacyProfile]]:
    """The candidates without profiles, each one's (profile, released profile) references,
    and the profiles by reference."""
    refs: Refs = []
    profiles: dict[str, PrivacyProfile] = {}
    bare = []
    for c in candidates:
        ref = profile_ref(c.profile)
        profiles[ref] = c.profile
        released = None
        if c.released_profile is not None:
            released = profile_ref(c.released_profile)
            profiles[released] = c.released_profile
        refs.append((ref, released))
        bare.append(dataclasses.replace(c, profile=cast(Any, None), released_profile=None))
    return bare, refs, profiles


class ProfileCache:
    """The profiles a plan process holds, least recently used first out."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.items: OrderedDict[str, tuple[PrivacyProfile, int]] = OrderedDict()
        self.size = 0

    def add(self, sent: dict[str, bytes]) -> None:
        for ref, data in sent.items():
            if ref in self.items:
                self.size -= self.items.pop(ref)[1]
            self.items[ref] = (pickle.loads(data), len(data))
            self.size += len(data)

    def dress(self, bare: list[Candidate], refs: Refs) -> list[Candidate]:
        """The candidates with their profiles; keeps the size under ``max_bytes`` by
        dropping the least recently used profiles this task does not use."""
        used = {r for pair in refs for r in pair if r is not None}
        for ref in used:
            self.items.move_to_end(ref)
        for ref in list(self.items):
            if self.size <= self.max_bytes:
                break
            if ref not in used:
                self.size -= self.items.pop(ref)[1]
        return [
            dataclasses.replace(
                c,
                profile=self.items[ref][0],
                released_profile=self.items[released][0] if released is not None else None,
            )
            for c, (ref, released) in zip(bare, refs, strict=True)
        ]

    def clear(self) -> None:
        self.items.clear()
        self.size = 0


def answer(cache: ProfileCache, message: bytes) -> tuple[Any, ...]:
    """The reply to one task message: ("ok", value, held), ("error", exc, held) or
    ("missing", refs)."""
    name, bare, refs, sent, args = pickle.loads(message)
    del message
    cache.add(sent)
    del sent
    missing = sorted({r for pair in refs for r in pair if r is not None} - set(cache.items))
    if missing:
        return ("missing", missing)
    candidates = cache.dress(bare, refs)
    try:
        value = TASKS[name](candidates, *args)
    except MemoryError:
        raise
    except Exception as exc:
        return ("error", _portable(exc), list(cache.items))
    return ("ok", value, list(cache.items))


def _portable(exc: Exception) -> Exception:
    """``exc`` if it survives a pickle round trip, else a RuntimeError naming it; an
    unexpected error carries the plan process's traceback as a note."""
    from service.errors import RetargetError

    if not isinstance(exc, RetargetError):
        exc.add_note("in the plan process:\n" + traceback.format_exc())
    try:
        pickle.loads(pickle.dumps(exc, PROTOCOL))
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


def serve(conn: Connection, memory_bytes: int) -> None:
    """A plan process: set its limits, then answer tasks until its parent goes away."""
    _set_up(memory_bytes)
    cache = ProfileCache(memory_bytes // 4)
    while True:
        try:
            # the message is referenced by ``answer`` alone, which drops it once read
            data = pickle.dumps(answer(cache, conn.recv_bytes()), PROTOCOL)
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


def _out_of_memory(conn: Connection, cache: ProfileCache) -> None:
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
            f.write("1000")  # under memory pressure, a plan process goes before the API
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
