"""What computing plans in plan processes costs against computing them in the thread.

    .venv/bin/python benchmarks/bench_plan_processes.py [--models 8] [--repeat 7]

In one process, no HTTP: ``--models`` DP-SGD models of distinct noise (profiles and
their LC prefixes computed first), then for RS (accountants best and pld) and LC:
the plan in the calling thread (``service.plans.tasks.in_thread``, what the service did
before) and in a plan process (``PlanPool.run``), first cold (the thread: curves not
yet tabulated; the process: profiles sent and tabulated there) and then
``--repeat`` warm runs with the target moved by 1e-9 each (the process holds the
profiles: only references travel). Also: the pickled size of the candidates, the
start of the pool (the fork server's imports included) and the replacement of a
killed process. Figures are medians with (min-max); ratios are process / thread.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import pickle
import statistics
import time
from collections.abc import Callable

from service.accounting.mechanisms import parse_mechanism
from service.accounting.planning import Candidate, PlanRequestSpec
from service.errors import ComputeLimitExceeded
from service.plans.planner import lc_released
from service.plans.pool import PlanPool
from service.plans.tasks import in_thread
from service.profiles.cache import MemoryProfileStore, Profiles
from tests.helpers import sgd


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.4f} ({min(values):.4f}-{max(values):.4f})"


def timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def candidates(n: int, profiles: Profiles) -> list[Candidate]:
    out = []
    for i in range(n):
        mechanism = parse_mechanism(sgd(1.5 + 0.25 * i, steps=100))
        released = lc_released(mechanism)
        out.append(
            Candidate(
                id=f"m{i}",
                mechanism=mechanism,
                profile=profiles.get(mechanism),
                released_profile=profiles.get(released) if released is not None else None,
                run_id=f"run-{i}",
            )
        )
    return out


def measure(
    where: str, cands: list[Candidate], case: tuple[str, str, float], repeat: int
) -> tuple[float, list[float]]:
    """(cold, warm times) of a plan in the thread or in a new plan process."""
    method, accountant, eps = case
    pool = PlanPool(1, 2 * 1024**3)
    pool.start()  # not timed: the fork server runs already, a process forks in ms

    def call(moved: float) -> object:
        spec = PlanRequestSpec(
            epsilon=eps + moved,
            delta=1e-5,
            method=method,  # type: ignore[arg-type]
            accountant=accountant,  # type: ignore[arg-type]
        )
        if where == "thread":
            return in_thread("plan", cands, spec)
        return pool.run("plan", cands, (spec,), deadline=time.monotonic() + 3600, budget_s=3600)

    cold = timed(lambda: call(0.0))
    warm = [timed(lambda i=i: call(i * 1e-9)) for i in range(1, repeat + 1)]
    pool.close()
    return cold, warm


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    start = time.perf_counter()
    fresh = candidates(args.models, Profiles(MemoryProfileStore()))
    cands = copy.deepcopy(fresh)
    print(f"{args.models} models, profiles computed in {time.perf_counter() - start:.1f} s")
    print(f"candidates pickled: {len(pickle.dumps(cands, 5)) / 2**20:.1f} MiB (no curves yet)")
    pool = PlanPool(1, 2 * 1024**3)
    print(f"pool start (fork server and one process): {timed(pool.start):.2f} s")

    print("\n| plan | where | cold s | warm s | warm ratio |")
    print("| --- | --- | --- | --- | --- |")
    cases = [("rs", "best", 6.0), ("rs", "pld", 6.0), ("lc", "best", 6.0)]
    for method, accountant, eps in cases:
        rows = {}
        for where in ("thread", "process"):
            # each its own copy: what one computes and caches on a profile (its curves)
            # the other must compute too
            rows[where] = measure(
                where, copy.deepcopy(fresh), (method, accountant, eps), args.repeat
            )
        base = statistics.median(rows["thread"][1])
        for where, (cold, warm) in rows.items():
            ratio = statistics.median(warm) / base
            print(
                f"| {method} {accountant} | {where} | {cold:.3f} | {spread(warm)} | {ratio:.2f} |"
            )

    replace = []
    for _ in range(3):
        (pid,) = pool.pids()
        # an LC plan with a 0.2 s budget: its process is killed at the deadline
        with contextlib.suppress(ComputeLimitExceeded):
            pool.run(
                "plan",
                cands,
                (PlanRequestSpec(epsilon=6.0, delta=1e-5, method="lc"),),
                deadline=time.monotonic() + 0.2,
                budget_s=0.2,
            )
        replace.append(timed(pool.start))  # from the kill to a new process running
        assert pool.pids() and pool.pids() != [pid]
    print(f"\nkill and replace a process: {spread(replace)} s")
    pool.close()


if __name__ == "__main__":
    main()
