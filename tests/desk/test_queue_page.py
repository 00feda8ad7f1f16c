"""The queue's pages come from the database (real SQLite): filtered by state, node, kind and
expiry, ordered newest first, and counted with the same filters."""

from __future__ import annotations

import time
from pathlib import Path

from runbook.remedies.store import Store


def _fill(store: Store, n: int, *, node: str, kind: str, ttl: float = 3600.0) -> list[str]:
    ids = []
    for i in range(n):
        stored, _ = store.enqueue(
            key=f"{node}:{kind}:{i}", kind=kind, remedy=kind, summary=f"{kind} {i}",
            params={}, evidence={}, source="sweep", ttl=ttl, node=node,
        )  # fmt: skip
        ids.append(stored.id)
    return ids


def test_a_page_is_a_slice_of_the_filtered_queue_newest_first_and_count_agrees(
    tmp_path: Path,
) -> None:
    with Store(tmp_path / "q.db") as store:
        a = _fill(store, 7, node="gpu-a", kind="shm-size-limit")
        _fill(store, 3, node="gpu-b", kind="node-drain")
        stale = _fill(store, 2, node="gpu-a", kind="memory-limit", ttl=0.001)
        time.sleep(0.01)
        store.decide(a[0], "denied", actor="bob", reason="no")
        pending = ("pending",)
        assert store.count(states=pending, expired=False) == 9
        assert store.count(states=pending, expired=True) == 2
        assert {p.id for p in store.page(states=pending, expired=True)} == set(stale)
        first = store.page(states=pending, node="gpu-a", expired=False, limit=4)
        second = store.page(states=pending, node="gpu-a", expired=False, limit=4, offset=4)
        assert [p.id for p in first + second] == list(reversed(a[1:]))
        assert store.count(states=pending, node="gpu-a", expired=False) == 6
        assert store.count(kinds=("node-drain",)) == 3
        assert store.page(kinds=()) == [] and store.count(kinds=()) == 0
        assert [p.id for p in store.page(states=("denied",))] == [a[0]]
