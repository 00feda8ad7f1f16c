"""The audit chain stays one chain when several machines append to it: on PostgreSQL its
entries live in the database, and writers in separate processes (each its own connection)
appending at once leave one unbroken chain that `runbook audit verify` accepts; an edited or
removed entry is named. The same trail API on both stores."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path
from typing import Any

import psycopg

from runbook.cli.app import main
from runbook.dburl import Location, location
from runbook.remedies.store import Store

WRITERS, EACH = 6, 15


def _writer(store_place: Location, audit: Path, name: str, barrier: Any, done: Any) -> None:
    with Store(store_place) as store:
        trail = store.audit_log(audit)
        barrier.wait(60)
        for i in range(EACH):
            entry = trail.append("proposed", proposal=f"p-{name}-{i}", actor=name, data={"i": i})
            store.record_audit_head(int(entry["seq"]), str(entry["hash"]))
    done.put(name)


def _write_at_once(store_place: Location, audit: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    barrier, done = ctx.Barrier(WRITERS), ctx.Queue()
    procs = [
        ctx.Process(target=_writer, args=(store_place, audit, f"w{n}", barrier, done))
        for n in range(WRITERS)
    ]
    for proc in procs:
        proc.start()
    try:
        finished = [done.get(timeout=120) for _ in procs]
    finally:
        for proc in procs:
            proc.join(30)
            if proc.is_alive():  # a writer that failed left the others at the barrier
                proc.kill()
    assert sorted(finished) == sorted(f"w{n}" for n in range(WRITERS))


def test_writers_on_separate_connections_appending_at_once_leave_one_chain(
    store_place: Location, tmp_path: Path
) -> None:
    audit = tmp_path / "audit.jsonl"
    _write_at_once(store_place, audit)
    with Store(store_place, readonly=True) as store:
        trail = store.audit_log(audit)
        entries = list(trail.entries())
        head = store.audit_head()
        result = trail.verify(anchor=head)
    assert result.ok, result.problems
    assert result.entries == WRITERS * EACH
    assert [e["seq"] for e in entries] == list(range(1, WRITERS * EACH + 1))
    assert head is not None and head.seq == WRITERS * EACH and head.hash == entries[-1]["hash"]
    # each writer's own entries in its own order
    for n in range(WRITERS):
        mine = [e["data"]["i"] for e in entries if e["actor"] == f"w{n}"]
        assert mine == list(range(EACH))


def test_audit_verify_reads_the_chain_from_a_postgresql_store_and_names_an_edited_entry(
    pg_url: str, tmp_path: Path, capsys: Any, monkeypatch: Any
) -> None:
    monkeypatch.setenv("RUNBOOK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    _write_at_once(location(pg_url), tmp_path / "unused.jsonl")
    assert main(["audit", "verify", "--db", pg_url]) == 0
    out = capsys.readouterr().out
    assert f"{WRITERS * EACH} entries, chain intact" in out and "(audit_entries)" in out
    with psycopg.connect(pg_url, autocommit=True) as conn:
        line = conn.execute("SELECT entry FROM audit_entries WHERE seq = 3").fetchone()[0]
        entry = json.loads(line)
        entry["actor"] = "mallory"
        conn.execute("UPDATE audit_entries SET entry = %s WHERE seq = 3", (json.dumps(entry),))
    assert main(["audit", "verify", "--db", pg_url]) == 1
    err = capsys.readouterr().err
    assert "entry 3: content does not match its hash (entry edited)" in err
    # the tail cut off: a valid shorter chain, which the anchor catches
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE audit_entries SET entry = %s WHERE seq = 3", (line,))
        conn.execute("DELETE FROM audit_entries WHERE seq > 80")
    assert main(["audit", "verify", "--db", pg_url]) == 1
    assert "entries were cut off the end" in capsys.readouterr().err
