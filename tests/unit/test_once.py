"""@once (runbook/once.py): threads that call while the first is still computing wait for its
value instead of computing their own, as a sweep's first wave of hosts does with the parsers'
tables."""

from __future__ import annotations

import threading
import time

from runbook import signatures
from runbook.once import once


def test_concurrent_first_calls_compute_once_and_share_the_value() -> None:
    calls: list[int] = []

    @once
    def table() -> list[int]:
        calls.append(1)
        time.sleep(0.05)  # long enough for every thread to arrive while it runs
        return [len(calls)]

    start = threading.Barrier(8)
    seen: list[list[int]] = []

    def call() -> None:
        start.wait()
        seen.append(table())

    threads = [threading.Thread(target=call) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1
    assert len(seen) == 8 and all(value is seen[0] for value in seen)


def test_an_exception_is_not_remembered_and_cache_clear_forgets() -> None:
    outcomes = iter([RuntimeError("first try"), "second", "third"])

    @once
    def flaky() -> str:
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    try:
        flaky()
    except RuntimeError:
        pass
    assert flaky() == "second" and flaky() == "second"
    flaky.cache_clear()
    assert flaky() == "third"


def test_the_signature_catalog_is_one_object_for_every_thread() -> None:
    signatures.catalog.cache_clear()
    found: list[object] = []
    threads = [
        threading.Thread(target=lambda: found.append(signatures.catalog())) for _ in range(6)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(c) for c in found}) == 1
