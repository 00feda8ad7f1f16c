"""The bounded pool: never more than `forks` hosts in flight, a host past its deadline recorded
as overdue (and its cancel actions run) while the others go on, results in the items' order,
and a crash of one host's work a result like any other."""

from __future__ import annotations

import threading
import time

import pytest

from runbook.sweep.pool import Slot, run_pool


def test_never_more_than_forks_in_flight_and_results_in_order() -> None:
    lock = threading.Lock()
    in_flight = peak = 0

    def work(item: int, slot: Slot) -> str:
        nonlocal in_flight, peak
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
        time.sleep(0.02 * (item % 3))
        with lock:
            in_flight -= 1
        return f"r{item}"

    seen: list[str] = []
    results = run_pool(
        list(range(40)),
        work,
        overdue=lambda i, j: "late",
        crashed=lambda i, j, e: "boom",
        forks=5,
        deadline_s=10,
        on_result=seen.append,
    )
    assert results == [f"r{i}" for i in range(40)]
    assert sorted(seen) == sorted(results)
    assert peak == 5


def test_a_host_that_never_returns_is_overdue_at_its_deadline_and_cancelled() -> None:
    never = threading.Event()
    cancelled: list[int] = []

    def work(item: int, slot: Slot) -> str:
        if item == 0:
            slot.on_cancel(lambda: cancelled.append(item))
            slot.phase = "stage kernel-logs"
            never.wait(30)
            return "woke"
        time.sleep(0.05)
        return f"ok{item}"

    started = time.monotonic()
    phases: list[str] = []
    try:
        results = run_pool(
            list(range(6)),
            work,
            overdue=lambda i, slot: phases.append(slot.phase) or f"overdue{i}",  # type: ignore[func-returns-value]
            crashed=lambda i, j, e: "boom",
            forks=2,
            deadline_s=0.5,
            grace_s=0.2,
        )
    finally:
        never.set()
    elapsed = time.monotonic() - started
    assert results == ["overdue0", "ok1", "ok2", "ok3", "ok4", "ok5"]
    assert cancelled == [0] and phases == ["stage kernel-logs"]
    # the others used the other slot meanwhile, then the freed one: 0.7 s, not 30
    assert 0.6 < elapsed < 2.0, elapsed


def test_a_crash_in_one_hosts_work_is_that_hosts_result() -> None:
    def work(item: int, slot: Slot) -> str:
        if item == 1:
            raise RuntimeError("parser exploded")
        return "fine"

    results = run_pool(
        [0, 1, 2],
        work,
        overdue=lambda i, j: "late",
        crashed=lambda i, j, exc: f"crashed: {exc}",
        forks=3,
        deadline_s=5,
    )
    assert results == ["fine", "crashed: parser exploded", "fine"]


def test_a_cancel_action_registered_late_runs_at_once() -> None:
    slot = Slot(0, time.monotonic() + 1, time.monotonic)
    slot.cancel()
    ran: list[str] = []
    slot.on_cancel(lambda: ran.append("closed"))
    assert ran == ["closed"] and slot.cancelled
    with pytest.raises(ValueError):
        run_pool(
            [1],
            lambda i, j: i,
            overdue=lambda i, j: 0,
            crashed=lambda i, j, e: 0,
            forks=0,
            deadline_s=1,
        )
