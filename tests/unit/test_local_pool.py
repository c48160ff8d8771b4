"""The in-process background pool: bounded threads, delays held in a heap."""

from __future__ import annotations

import threading

from service.jobs.local_pool import DelayedPool


def test_hundreds_of_waiting_retries_hold_one_thread_and_work_is_bounded() -> None:
    pool = DelayedPool(workers=3, name="bounded-pool")
    for _ in range(300):  # 300 callbacks waiting for their retry
        pool.submit(lambda: None, delay_s=3600)
    gate = threading.Event()
    for _ in range(50):  # 50 slow receivers at once
        pool.submit(gate.wait)
    mine = [t for t in threading.enumerate() if t.name.startswith("bounded-pool")]
    assert pool.pending() == 300
    assert len(mine) <= 3 + 1  # the workers and the one timer
    gate.set()
    pool.executor.shutdown(wait=True)


def test_delayed_work_runs_when_due_and_a_failure_does_not_stop_the_pool() -> None:
    pool = DelayedPool(workers=1, name="due-pool")
    done = threading.Event()

    def boom() -> None:
        raise RuntimeError("a receiver's failure")

    pool.submit(boom, delay_s=0.01)
    pool.submit(done.set, delay_s=0.02)
    assert done.wait(30)
    assert pool.pending() == 0
