"""Plan processes: the job machinery's process pool, running the plans' tasks.

The accounting of every plan, guarantee, release and deployment plan runs here, in
one of a few persistent processes, each within a wall-clock deadline and a memory
limit (``service.jobs.process_pool``); the fork server imports the accounting once
(one BLAS thread per process first, then ``service.plans.tasks``).
"""

from __future__ import annotations

from typing import Any

from service.accounting.planning import Candidate
from service.jobs.process_pool import Labels, ProcessPool
from service.plans.tasks import NOUNS, strip

#: what the fork server imports before it forks plan processes: the thread settings
#: first (they must precede numpy), then the tasks and the accounting they use
PRELOAD = ["service.jobs.single_thread", "service.plans.tasks"]

LABELS = Labels(
    nouns=NOUNS,
    process="plan process",
    budget_setting="RETARGET_PLAN_JOB_BUDGET_S",
    memory_setting="RETARGET_PLAN_JOB_MEMORY_BYTES",
)


class PlanPool(ProcessPool):
    """At most ``size`` plan processes, each limited to ``memory_bytes`` beyond its start."""

    def __init__(self, size: int, memory_bytes: int) -> None:
        super().__init__(
            size,
            memory_bytes,
            handler="service.plans.tasks:handle",
            preload=PRELOAD,
            labels=LABELS,
            name="retarget-plan",
        )

    def run(
        self,
        name: str,
        candidates: list[Candidate],
        args: tuple[Any, ...],
        *,
        deadline: float,
        budget_s: float,
        wait_s: float | None = None,
    ) -> Any:
        """Task ``name`` of ``service.plans.tasks.TASKS`` in a plan process, done by
        ``deadline``; the candidates' profiles travel to a process that lacks them."""
        bare, refs, profiles = strip(candidates)
        return self.call(
            name, (bare, refs, args), profiles, deadline=deadline, budget_s=budget_s, wait_s=wait_s
        )
