"""The approval store (real SQLite files, and where cheap the same tests on the private
PostgreSQL server of tests/pg: the `store_place` fixture) and the hash-chained audit log (real
files, real concurrent processes)."""

from __future__ import annotations

import json
import multiprocessing
import os
import stat
import time
from pathlib import Path

import pytest

from runbook.config import load, parse_duration
from runbook.errors import UsageError
from runbook.remedies.audit import Anchor, AuditLog, verify
from runbook.remedies.store import Conflict, NotFound, Store, StoreError


def _enqueue(store: Store, key: str = "node-1:memory-limit-abc", ttl: float = 3600.0):
    return store.enqueue(
        key=key,
        kind="memory-limit",
        remedy="memory-limit",
        summary="size the limit",
        params={"peak_bytes": "1073741824"},
        evidence={"root_cause": "host-memory-oom"},
        source="run",
        ttl=ttl,
        node="node-1",
        plan={"playbook": "memory-limit.yml", "extravars": {"x": 1}, "inventory": {}},
    )


def test_enqueue_refreshes_the_pending_proposal_instead_of_queueing_it_twice(store_place):
    with Store(store_place) as store:
        first, new = _enqueue(store)
        again, new_again = _enqueue(store)
        other, other_new = _enqueue(store, key="node-2:memory-limit-abc")
        assert new and not new_again and other_new
        assert again.id == first.id and other.id != first.id
        assert [p.id for p in store.list(states=("pending",))] == [first.id, other.id]
        # once decided, the same finding queues a fresh proposal
        store.decide(first.id, "denied", actor="alice", reason="not now")
        fresh, fresh_new = _enqueue(store)
        assert fresh_new and fresh.id != first.id


def test_store_is_owner_only(tmp_path):
    path = tmp_path / "state" / "approvals.db"
    Store(path).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_claim_then_finish_and_never_again(store_place):
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
        with pytest.raises(Conflict):
            store.decide(p.id, "denied", actor="bob", reason="x")
        with pytest.raises(NotFound, match="no proposal 'pnope'"):
            store.get("pnope")


def _race(db, pid: str, name: str, barrier, results, release) -> None:
    with Store(db) as store:
        barrier.wait()
        try:
            store.claim(pid, actor=name)
            results.put((name, "won"))
            # the winner lives on, as an approver does while its playbook runs: a loser that
            # looked after it had exited would rightly be told its process is gone instead
            release.wait(30)
        except Conflict as exc:
            results.put((name, str(exc)))


def test_two_processes_claiming_at_once_one_wins(store_place):
    db = store_place
    with Store(db) as store:
        p, _ = _enqueue(store)
    ctx = multiprocessing.get_context("fork")
    barrier, results, release = ctx.Barrier(6), ctx.Queue(), ctx.Event()
    procs = [
        ctx.Process(target=_race, args=(db, p.id, f"user{i}", barrier, results, release))
        for i in range(6)
    ]
    for proc in procs:
        proc.start()
    try:
        outcomes = [results.get(timeout=30) for _ in procs]
    finally:
        release.set()
        for proc in procs:
            proc.join(30)
    winners = [name for name, what in outcomes if what == "won"]
    assert len(winners) == 1
    losers = [what for name, what in outcomes if what != "won"]
    assert all(f"approved by {winners[0]}" in what for what in losers)
    with Store(db) as store:
        assert store.get(p.id).decided_by == winners[0]


def test_audit_chain_verifies_and_names_an_edited_line(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl")
    for i in range(5):
        log.append("proposed", proposal=f"p{i}", actor="alice", data={"n": i})
    good = verify(log.path)
    assert good.ok and good.entries == 5 and good.head is not None and good.head.seq == 5
    lines = log.path.read_text().splitlines()
    entry = json.loads(lines[2])
    entry["actor"] = "mallory"
    lines[2] = json.dumps(entry)
    log.path.write_text("\n".join(lines) + "\n")
    bad = verify(log.path)
    assert not bad.ok
    assert any(p.startswith("line 3: content does not match its hash") for p in bad.problems)


def test_audit_detects_a_removed_line_and_a_cut_tail(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl")
    entries = [log.append("proposed", proposal=f"p{i}") for i in range(4)]
    original = log.path.read_text()
    lines = original.splitlines()
    log.path.write_text("\n".join([lines[0], lines[2], lines[3]]) + "\n")
    removed = verify(log.path)
    assert any("line 2: its prev hash does not match" in p for p in removed.problems)
    # the tail cut off leaves a valid chain; only the store's anchor notices
    log.path.write_text("\n".join(lines[:2]) + "\n")
    assert verify(log.path).ok
    anchor = Anchor(entries[-1]["seq"], entries[-1]["hash"])
    cut = verify(log.path, anchor=anchor)
    assert not cut.ok and "cut off the end" in cut.problems[0]
    log.path.write_text(original)
    assert verify(log.path, anchor=anchor).ok


def test_audit_reports_a_half_written_last_line(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl")
    log.append("proposed", proposal="p1")
    with log.path.open("a") as handle:
        handle.write('{"seq": 2, "event": "appr')
    result = verify(log.path)
    assert not result.ok and "incomplete" in result.problems[0]


def _append_many(path: str, who: str, n: int) -> None:
    log = AuditLog(Path(path))
    for i in range(n):
        log.append("check", proposal=who, data={"i": i})


def test_concurrent_appenders_never_fork_the_chain(tmp_path):
    path = tmp_path / "audit.jsonl"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_append_many, args=(str(path), f"w{k}", 40)) for k in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
    result = verify(path)
    assert result.ok, result.problems
    assert result.entries == 160
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_config_defaults_and_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNBOOK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("RUNBOOK_CONFIG", raising=False)
    cfg = load(None)
    assert cfg.db == tmp_path / "state" / "approvals.db"
    assert cfg.audit_log == tmp_path / "state" / "audit.jsonl"
    assert cfg.ttl == 86400.0 and cfg.approvers == ()
    path = tmp_path / "config.yaml"
    path.write_text(
        "approvals: {ttl: 15m, db: /x/a.db}\napprovers: [alice]\n"
        "drain: {max_cordoned: 2, max_fraction: 0.25}\n"
    )
    cfg = load(path)
    assert (cfg.ttl, str(cfg.db), cfg.approvers) == (900.0, "/x/a.db", ("alice",))
    assert cfg.drain.max_cordoned == 2 and cfg.drain.max_fraction == 0.25
    path.write_text("drain: {max_fraction: 3}\n")
    with pytest.raises(UsageError, match="max_fraction"):
        load(path)
    with pytest.raises(UsageError, match="no such file"):
        load(tmp_path / "missing.yaml")
    assert parse_duration("2h") == 7200.0
    with pytest.raises(UsageError, match="positive number"):
        parse_duration("soon")


def test_a_database_error_reading_or_writing_is_a_store_error(tmp_path):
    """Callers (a sweep queueing proposals, the CLI) catch the project's errors only: SQLite's
    own never leave the store."""
    import sqlite3

    with Store(tmp_path / "a.db") as store:
        p, _ = _enqueue(store)
        store.backend._db.execute("DROP TABLE proposals")  # the schema gone behind the store's back
        with pytest.raises(StoreError, match="no such table: proposals") as read:
            store.get(p.id)
        with pytest.raises(StoreError, match="no such table: proposals") as written:
            _enqueue(store, key="node-2:memory-limit-abc")
        assert isinstance(read.value.__cause__, sqlite3.Error)
        assert isinstance(written.value.__cause__, sqlite3.Error)
        assert not store.backend._db.in_transaction  # the failed write was rolled back


def test_expiry_is_visible(store_place):
    with Store(store_place) as store:
        p, _ = _enqueue(store, ttl=0.05)
        time.sleep(0.1)
        assert store.get(p.id).expired


def test_audit_verify_warns_when_the_store_holds_no_anchor(tmp_path, capsys):
    """A cut tail is a valid chain: without the store's anchor `audit verify` cannot tell,
    and says so instead of a bare "chain intact"."""
    from runbook.cli.app import main

    log = AuditLog(tmp_path / "audit.jsonl")
    entries = [log.append("proposed", proposal=f"p{i}") for i in range(3)]
    db = tmp_path / "approvals.db"
    assert main(["audit", "verify", "--log", str(log.path), "--db", str(db)]) == 0
    captured = capsys.readouterr()
    assert "chain intact" in captured.out
    assert "no anchor" in captured.err and "cannot be detected" in captured.err
    with Store(db) as store:
        store.record_audit_head(int(entries[-1]["seq"]), str(entries[-1]["hash"]))
    assert main(["audit", "verify", "--log", str(log.path), "--db", str(db)]) == 0
    assert "no anchor" not in capsys.readouterr().err
    log.path.write_text("\n".join(log.path.read_text().splitlines()[:2]) + "\n")
    assert main(["audit", "verify", "--log", str(log.path), "--db", str(db)]) == 1
    assert "cut off the end" in capsys.readouterr().err
