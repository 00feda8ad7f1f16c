"""The store's schema migrates in place, from every earlier version, on both databases.

SQLite: a store is built from the schema each earlier release made (tests/store/schemas/vN.sql,
taken from the history of runbook/remedies/store.py; those releases recorded no version), holding
the rows that version could hold; opening it migrates it, every row kept. PostgreSQL: a database
is built at each earlier version of its own migrations, then opened the same way; several
processes opening an old one at once migrate it once.
"""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from runbook.dburl import location
from runbook.remedies import store_schema
from runbook.remedies.store import Store

SCHEMAS = Path(__file__).parent / "schemas"
EARLIER = [1, 2, 3]


def _rows(version: int) -> list[tuple[str, dict[str, Any]]]:
    """(table, row) an store at `version` holds: a pending and a running proposal, the audit
    anchor, and what that version added (the claim's process, a sent notice)."""
    now = time.time()
    base = {
        "key": "node-1:shm", "kind": "shm-size-limit", "remedy": "shm-size-limit",
        "summary": "raise /dev/shm", "node": "node-1", "root_cause": "shm-exhausted",
        "playbook": "shm-size-limit.yml", "params": json.dumps({"size": "80Gi"}),
        "plan": json.dumps({"playbook": "shm-size-limit.yml", "extravars": {}, "inventory": {}}),
        "target": None, "runbook": "nccl-init-failure", "vars": json.dumps({"a": 1}),
        "evidence": json.dumps({"root_cause": "shm-exhausted"}), "run_dir": "/runs/1",
        "source": "run", "created_at": now, "expires_at": now + 3600, "decided_by": None,
        "decided_at": None, "reason": None, "result": None, "verification": None,
        "updated_at": now,
    }  # fmt: skip
    pending = {**base, "id": "pold0001", "state": "pending"}
    running = {**base, "id": "pold0002", "key": "node-2:shm", "node": "node-2",
               "state": "running", "decided_by": "alice", "decided_at": now}  # fmt: skip
    if version >= 2:
        running["runner"] = json.dumps({"host": "elsewhere", "pid": 1, "start": 1})
    rows = [("proposals", pending), ("proposals", running),
            ("audit_head", {"id": 1, "seq": 7, "hash": "ab" * 32})]  # fmt: skip
    if version >= 3:
        rows.append(("notices", {"proposal": "pold0001", "notice": "queued",
                                 "claimed_at": now, "sent_at": now}))  # fmt: skip
    return rows


def _insert(execute: Any, table: str, row: dict[str, Any], mark: str) -> None:
    names = ", ".join(row)
    marks = ", ".join(mark for _ in row)
    execute(f"INSERT INTO {table} ({names}) VALUES ({marks})", tuple(row.values()))


def _old_sqlite(path: Path, version: int) -> None:
    db = sqlite3.connect(path)
    db.executescript((SCHEMAS / f"v{version}.sql").read_text())
    for table, row in _rows(version):
        _insert(db.execute, table, row, "?")
    db.commit()
    db.close()
    path.chmod(0o600)


def _old_postgres(url: str, version: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        conn.execute(store_schema.versions_table("postgresql"))
        for migration in store_schema.MIGRATIONS[:version]:
            for statement in migration.statements("postgresql"):
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_migrations VALUES (%s, %s, %s)",
                (migration.version, migration.name, time.time()),
            )
        for table, row in _rows(version):
            _insert(conn.execute, table, row, "%s")


def _migrated_as_the_latest(store: Store, version: int) -> None:
    assert store.schema_version() == store_schema.LATEST
    pending, running = store.get("pold0001"), store.get("pold0002")
    assert pending.state == "pending" and pending.params == {"size": "80Gi"}
    assert pending.vars == {"a": 1} and pending.requested_by is None and pending.approvals == []
    assert running.decided_by == "alice"
    assert (running.runner or {}).get("host") == ("elsewhere" if version >= 2 else None)
    assert store.audit_head() is not None and store.audit_head().seq == 7  # type: ignore[union-attr]
    assert store.sent_notices() == ({("pold0001", "queued")} if version >= 3 else set())
    # what the latest version added works on the migrated rows
    assert store.add_approval("pold0001", "bob") == ["bob"]
    assert [p.id for p in store.page(("pending",))] == ["pold0001"]
    assert store.count(("running",), node="node-2") == 1
    fresh, new = store.enqueue(
        key="node-3:shm", kind="shm-size-limit", remedy="shm-size-limit", summary="s",
        params={}, evidence={}, source="run", ttl=60, requested_by="carol",
    )  # fmt: skip
    assert new and store.get(fresh.id).requested_by == "carol"
    # one pending per key still holds
    again, new_again = store.enqueue(
        key="node-1:shm", kind="shm-size-limit", remedy="shm-size-limit", summary="s",
        params={}, evidence={}, source="run", ttl=60,
    )  # fmt: skip
    assert again.id == "pold0001" and not new_again


@pytest.mark.parametrize("version", EARLIER)
def test_a_sqlite_store_of_every_earlier_version_migrates_in_place_keeping_its_rows(
    tmp_path: Path, version: int
) -> None:
    path = tmp_path / "approvals.db"
    _old_sqlite(path, version)
    # a reading command reads it as it is, and writes nothing
    before = path.read_bytes()
    with Store(path, readonly=True) as reader:
        assert reader.schema_version() == version
        assert reader.get("pold0001").approvals == [] and reader.count(("pending",)) == 1
    assert path.read_bytes() == before
    with Store(path) as store:
        _migrated_as_the_latest(store, version)
    db = sqlite3.connect(path)
    applied = db.execute("SELECT version, name FROM schema_migrations ORDER BY version").fetchall()
    indexes = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    db.close()
    assert [v for v, _ in applied] == list(range(1, store_schema.LATEST + 1))
    assert all(name.endswith("(found)") for v, name in applied if v <= version)
    assert {"proposals_state_created", "proposals_node", "proposals_kind"} <= indexes
    with Store(path) as again:  # opened again: nothing left to do
        assert again.schema_version() == store_schema.LATEST


@pytest.mark.parametrize("version", EARLIER)
def test_a_postgresql_store_of_every_earlier_version_migrates_in_place_keeping_its_rows(
    pg_url: str, version: int
) -> None:
    _old_postgres(pg_url, version)
    with Store(location(pg_url)) as store:
        _migrated_as_the_latest(store, version)
    with psycopg.connect(pg_url) as conn:
        applied = [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY 1")]
        indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes")}
    assert applied == list(range(1, store_schema.LATEST + 1))
    assert {"proposals_state_created", "proposals_node", "proposals_kind"} <= indexes


def _opener(url: str, barrier: Any, results: Any) -> None:
    barrier.wait(60)
    try:
        with Store(location(url)) as store:
            results.put(store.schema_version())
    except Exception as exc:  # the test reports it
        results.put(repr(exc))


@pytest.mark.parametrize("version", [0, 1])
def test_several_processes_opening_an_empty_or_old_postgresql_store_at_once_migrate_it_once(
    pg_url: str, version: int
) -> None:
    if version:
        _old_postgres(pg_url, version)
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(5), ctx.Queue()
    procs = [ctx.Process(target=_opener, args=(pg_url, barrier, results)) for _ in range(5)]
    for proc in procs:
        proc.start()
    try:
        outcomes = [results.get(timeout=60) for _ in procs]
    finally:
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
    assert outcomes == [store_schema.LATEST] * 5
    with psycopg.connect(pg_url) as conn:
        applied = [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY 1")]
    assert applied == list(range(1, store_schema.LATEST + 1))


def test_the_migrations_are_numbered_one_by_one_for_both_databases() -> None:
    assert [m.version for m in store_schema.MIGRATIONS] == list(range(1, store_schema.LATEST + 1))
    assert all(m.sqlite and m.postgresql for m in store_schema.MIGRATIONS)
