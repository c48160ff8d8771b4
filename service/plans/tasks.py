"""The pure part of a plan, as tasks a plan process runs (``service.plans.pool``).

A task is a pure function of candidates (with their privacy profiles) and plain
arguments: ``plan`` (``make_plan``), ``guarantee``, and the dashboard's ``explorer``
(RS and LC at one target) and ``frontier`` (``service.plans.frontier``). The API
process keeps the database work (rows, profiles, the ledger) and hands a task to a
plan process.

What travels: the candidates without their profiles (``strip``), a reference per
profile, and the profiles as the pool's attachments: a plan process keeps the
profiles it was sent (``service.jobs.process_child``), so a plan over models it has
seen sends only their ids and mechanisms. A profile's reference is its mechanism
hash, the versions that made it and the shape of its PLD, which together fix its
content (the profile is a deterministic function of the mechanism and the code).
``handle`` is what a plan process runs: it puts the profiles back on the candidates
and calls the task.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, cast

from service.accounting.planning import Candidate, make_plan
from service.accounting.planning.guarantees import guarantee
from service.accounting.profiles.profile import PrivacyProfile
from service.plans.frontier import compute_frontier, explorer_plans

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


def handle(name: str, payload: Any, profiles: dict[str, Any]) -> Any:
    """Task ``name`` on ``payload`` (the stripped candidates, their references and the
    task's arguments) with the ``profiles`` it references: what a plan process runs."""
    bare, refs, args = payload
    candidates = [
        dataclasses.replace(
            c,
            profile=profiles[ref],
            released_profile=profiles[released] if released is not None else None,
        )
        for c, (ref, released) in zip(bare, refs, strict=True)
    ]
    return TASKS[name](candidates, *args)
