"""The plan processes on their own (real processes): answers and errors as in the
thread, profiles sent once, a caller outside a job waits a bounded time, close ends
the processes and fails the task in flight."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import pytest

from service.accounting.mechanisms import parse_mechanism
from service.accounting.planning import Candidate, PlanRequestSpec
from service.errors import Busy, InfeasibleTarget
from service.plans.planner import lc_released
from service.plans.pool import PlanPool
from service.plans.tasks import in_thread, profile_ref
from service.profiles.cache import MemoryProfileStore, Profiles
from tests.helpers import sgd

PROFILES = Profiles(MemoryProfileStore())


def candidates(mechanisms: list[dict]) -> list[Candidate]:
    out = []
    for i, raw in enumerate(mechanisms):
        mechanism = parse_mechanism(raw)
        released = lc_released(mechanism)
        out.append(
            Candidate(
                id=f"m{i}",
                mechanism=mechanism,
                profile=PROFILES.get(mechanism),
                released_profile=PROFILES.get(released) if released is not None else None,
                metrics={"acc": 0.5 + i / 100},
                run_id=f"run-{i}",
            )
        )
    return out


@pytest.fixture
def pool() -> Iterator[PlanPool]:
    pool = PlanPool(1, 2 * 1024**3)
    try:
        yield pool
    finally:
        pool.close()


def run(pool: PlanPool, name: str, cands: list[Candidate], *args, wait_s=None):  # type: ignore[no-untyped-def]
    return pool.run(name, cands, args, deadline=time.monotonic() + 300, budget_s=300, wait_s=wait_s)


def test_plans_and_guarantees_match_the_thread_and_profiles_travel_once(pool: PlanPool) -> None:
    cands = candidates([sgd(2.0, steps=20), sgd(3.0, steps=20), sgd(4.0, steps=20)])
    for method in ("rs", "lc"):
        spec = PlanRequestSpec(epsilon=8.0, delta=1e-5, method=method)  # type: ignore[arg-type]
        there, here = run(pool, "plan", cands, spec), in_thread("plan", cands, spec)
        # the same code on the same inputs; BLAS may sum in another order (one thread there)
        assert there.weights.keys() == here.weights.keys()
        for model_id, weight in here.weights.items():
            assert there.weights[model_id] == pytest.approx(weight, rel=1e-9, abs=1e-12)
        assert there.epsilon == pytest.approx(here.epsilon, rel=1e-9)
        assert there.bound == here.bound and there.method == here.method
        weights = [there.weights.get(c.id, 0.0) for c in cands]
        args = ("lc" if method == "lc" else "rs", 1e-5, ("rdp", "pld"))
        g_there = run(pool, "guarantee", cands, weights, *args)
        g_here = in_thread("guarantee", cands, weights, *args)
        assert g_there.by_accountant == pytest.approx(g_here.by_accountant, rel=1e-9)
    (child,) = pool._children
    refs = {profile_ref(c.profile) for c in cands} | {
        profile_ref(c.released_profile) for c in cands if c.released_profile is not None
    }
    assert refs <= child.held  # kept there: the next task sends references only
    assert len(refs) == 6


def test_errors_in_the_plan_process_keep_their_type_and_fields(pool: PlanPool) -> None:
    cands = candidates([sgd(3.0, steps=20)])
    spec = PlanRequestSpec(epsilon=0.01, delta=1e-5, method="rs")
    with pytest.raises(InfeasibleTarget) as there:
        run(pool, "plan", cands, spec)
    with pytest.raises(InfeasibleTarget) as here:
        in_thread("plan", cands, spec)
    assert there.value.detail == here.value.detail
    assert there.value.extra == here.value.extra and there.value.extra["min_epsilon"] > 0.01
    assert len(pool.pids()) == 1  # a domain error leaves the process in service


def test_a_caller_outside_a_job_waits_a_bounded_time_and_close_fails_the_task(
    pool: PlanPool,
) -> None:
    cands = candidates([sgd(2.0, steps=20), sgd(3.0, steps=20)] * 6)
    spec = PlanRequestSpec(epsilon=8.0, delta=1e-5, method="lc")
    pool.start()
    (pid,) = pool.pids()
    outcome: list[BaseException] = []

    def long_plan() -> None:
        try:
            run(pool, "plan", cands, spec)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=long_plan)
    thread.start()
    while pool._idle:  # until the long plan has taken the one process
        time.sleep(0.01)
    with pytest.raises(Busy, match="every plan process is busy"):
        run(pool, "plan", cands[:1], PlanRequestSpec(epsilon=8.0, delta=1e-5), wait_s=0.1)
    pool.close()
    thread.join(30)
    assert not thread.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], Busy)
    assert "stopping" in str(outcome[0])
    assert pool.pids() == []
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
