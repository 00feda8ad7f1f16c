"""The approval store behaves the same on SQLite and on PostgreSQL: real databases, real
concurrent processes (the PostgreSQL ones each with a connection of their own, as machines
sharing one queue have)."""

from __future__ import annotations

import multiprocessing
import time
from typing import Any

import pytest

from runbook.dburl import Location
from runbook.remedies.store import Conflict, NotFound, Store


def _enqueue(store: Store, key: str = "node-1:memory-limit-abc", **kw: Any):  # type: ignore[no-untyped-def]
    values: dict[str, Any] = {
        "kind": "memory-limit", "remedy": "memory-limit", "summary": "size the limit",
        "params": {"peak_bytes": "1073741824"}, "evidence": {"root_cause": "host-memory-oom"},
        "source": "run", "ttl": 3600.0, "node": "node-1", "root_cause": "host-memory-oom",
        "plan": {"playbook": "memory-limit.yml", "extravars": {"x": 1}, "inventory": {}},
    }  # fmt: skip
    values.update(kw)
    return store.enqueue(key=key, **values)


def test_a_proposal_queued_twice_is_refreshed_not_duplicated_on_either_database(
    store_place: Location,
) -> None:
    with Store(store_place) as store:
        first, new = _enqueue(store, requested_by="alice")
        again, new_again = _enqueue(store, requested_by="bob")
        other, other_new = _enqueue(store, key="node-2:memory-limit-abc")
        assert new and not new_again and other_new
        assert again.id == first.id and other.id != first.id
        assert again.requested_by == "alice"  # who queued it first stays its requester
        assert [p.id for p in store.list(states=("pending",))] == [first.id, other.id]
        store.decide(first.id, "denied", actor="alice", reason="not now")
        fresh, fresh_new = _enqueue(store)
        assert fresh_new and fresh.id != first.id


def test_a_claim_wins_once_and_a_finished_proposal_is_never_claimed_again(
    store_place: Location,
) -> None:
    with Store(store_place) as store:
        p, _ = _enqueue(store)
        claimed = store.claim(p.id, actor="alice")
        assert claimed.state == "running" and claimed.decided_by == "alice"
        with pytest.raises(Conflict, match=r"already being executed .*alice"):
            store.claim(p.id, actor="bob")
        done = store.finish(p.id, ok=False, result={"rc": 2})
        assert done.state == "failed" and done.result == {"rc": 2}
        with pytest.raises(Conflict, match="never run twice"):
            store.claim(p.id, actor="bob")
        with pytest.raises(NotFound, match="no proposal 'pnope'"):
            store.get("pnope")


def _claimer(
    store_place: Location, pid: str, name: str, barrier: Any, results: Any, release: Any
) -> None:
    with Store(store_place) as store:
        barrier.wait(60)
        try:
            store.claim(pid, actor=name)
            results.put((name, "won"))
            release.wait(30)  # the winner lives on, as an approver does while its playbook runs
        except Conflict as exc:
            results.put((name, str(exc)))


def test_eight_processes_claiming_at_once_exactly_one_wins_on_either_database(
    store_place: Location,
) -> None:
    with Store(store_place) as store:
        p, _ = _enqueue(store)
    ctx = multiprocessing.get_context("fork")
    barrier, results, release = ctx.Barrier(8), ctx.Queue(), ctx.Event()
    procs = [
        ctx.Process(
            target=_claimer, args=(store_place, p.id, f"user{i}", barrier, results, release)
        )
        for i in range(8)
    ]
    for proc in procs:
        proc.start()
    try:
        outcomes = [results.get(timeout=60) for _ in procs]
    finally:
        release.set()
        for proc in procs:
            proc.join(30)
    winners = [name for name, what in outcomes if what == "won"]
    assert len(winners) == 1, outcomes
    assert all(f"approved by {winners[0]}" in what for name, what in outcomes if what != "won")
    with Store(store_place) as store:
        assert store.get(p.id).decided_by == winners[0]


def _approver(store_place: Location, pid: str, name: str, barrier: Any, results: Any) -> None:
    with Store(store_place) as store:
        barrier.wait(60)
        results.put((name, store.add_approval(pid, name)))


def test_approvals_recorded_at_once_by_several_processes_are_each_counted_once(
    store_place: Location,
) -> None:
    with Store(store_place) as store:
        p, _ = _enqueue(store, requested_by="carol")
        assert store.add_approval(p.id, "carol") == ["carol"]
        assert store.add_approval(p.id, "carol") == ["carol"]  # one person counts once
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    names = ["alice", "bob", "alice", "dave"]
    procs = [
        ctx.Process(target=_approver, args=(store_place, p.id, n, barrier, results)) for n in names
    ]
    for proc in procs:
        proc.start()
    outcomes = [results.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(30)
    for name, seen in outcomes:
        assert name in seen and len(seen) == len(set(seen)), outcomes
    with Store(store_place) as store:
        final = store.get(p.id)
        assert final.approvals[0] == "carol"
        assert sorted(final.approvals) == ["alice", "bob", "carol", "dave"]
        store.claim(p.id, actor="bob")
        with pytest.raises(Conflict):
            store.add_approval(p.id, "erin")  # not pending any more


def test_a_page_of_the_queue_is_filtered_and_counted_in_sql_on_either_database(
    store_place: Location,
) -> None:
    with Store(store_place) as store:
        made = []
        for i in range(30):
            p, _ = _enqueue(
                store, key=f"node-{i % 3}:k{i}", node=f"node-{i % 3}",
                kind="node-drain" if i % 5 == 0 else "memory-limit",
                root_cause="gpu-hardware" if i % 5 == 0 else ("inconclusive" if i % 7 == 0
                                                              else "host-memory-oom"),
            )  # fmt: skip
            made.append(p)
            time.sleep(0.001)  # distinct created_at: the order is the queue's
        store.decide(made[1].id, "denied", actor="a", reason="r")
        first = store.page(("pending",), limit=10)
        assert [p.id for p in first] == [p.id for p in reversed(made) if p.id != made[1].id][:10]
        second = store.page(("pending",), offset=10, limit=10)
        assert not {p.id for p in first} & {p.id for p in second}
        assert store.count(("pending",)) == 29 and store.count(("denied",)) == 1
        assert store.count(None) == 30
        on_node = store.page(("pending",), node="node-2", limit=100)
        assert on_node and all(p.node == "node-2" for p in on_node)
        assert store.count(("pending",), node="node-2") == len(on_node)
        drains = store.page(("pending", "denied"), kind="node-drain", limit=100)
        assert len(drains) == 6 and store.count(("pending",), kind="node-drain") == 6
        critical = store.page(("pending",), severity="critical", limit=100)
        assert {p.root_cause for p in critical} == {"gpu-hardware"} and len(critical) == 6
        info = store.count(("pending", "denied"), severity="info")
        warning = store.count(("pending", "denied"), severity="warning")
        assert info == sum(p.root_cause == "inconclusive" for p in made)
        assert info + warning + 6 == 30
        oldest = store.page(("pending",), limit=1, oldest_first=True)
        assert oldest[0].id == made[0].id


def test_an_expired_proposal_pages_as_expired_not_pending(store_place: Location) -> None:
    with Store(store_place) as store:
        old, _ = _enqueue(store, key="n:old", ttl=0.05)
        live, _ = _enqueue(store, key="n:live")
        time.sleep(0.1)
        assert [p.id for p in store.page(("expired",))] == [old.id]
        assert [p.id for p in store.page(("pending",))] == [live.id]
        assert store.count(("pending", "expired")) == 2


def test_a_notice_is_claimed_once_and_released_when_undelivered(store_place: Location) -> None:
    with Store(store_place) as store:
        p, _ = _enqueue(store)
        assert store.claim_notice(p.id, "queued")
        assert not store.claim_notice(p.id, "queued")
        store.release_notice(p.id, "queued")
        assert store.claim_notice(p.id, "queued")
        store.notice_sent(p.id, "queued")
        assert store.sent_notices() == {(p.id, "queued")}
        assert not store.claim_notice(p.id, "queued", stale_after=0)


def test_a_store_opened_to_read_on_postgresql_cannot_write_but_brings_its_schema_up_to_date(
    pg_url: str,
) -> None:
    from runbook.dburl import location
    from runbook.remedies import store_schema
    from runbook.remedies.store import StoreError

    with Store(location(pg_url), readonly=True) as reader:  # an empty database: made current
        assert reader.schema_version() == store_schema.LATEST
        with pytest.raises(StoreError, match="read-only transaction"):
            _enqueue(reader)
        assert reader.count(None) == 0
