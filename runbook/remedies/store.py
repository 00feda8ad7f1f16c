"""The approval queue: proposals waiting for a human, in SQLite.

One row per queued proposal. Its life::

    pending ──approve──▶ running ──▶ succeeded | failed
       │ └────deny────▶ denied
       └──(TTL passed / evidence gone at approval)──▶ refused

`claim` moves pending → running inside one `BEGIN IMMEDIATE` transaction with
`UPDATE … WHERE state = 'pending'`: of two people approving at the same moment exactly one
gets the row, the other is told who did. A running or finished proposal is never claimed
again, so a proposal executes exactly once and a failure is never retried blindly (re-run the
runbook to queue a fresh proposal). The claim records the process that made it (host, pid,
start time): a proposal left `running` by a process that is gone (SIGKILLed mid-playbook, a
failed audit write after the claim) is seen as such and can be recovered — marked failed,
never re-run — by `recover`.

Notices of the queue (runbook.notify: a proposal queued, a proposal about to expire) are
recorded in `notices`, one row per proposal and notice: claimed before it is sent, so two
processes publishing at once send it once; marked sent after; released when the webhook
gave up, so the next command tries again. A store made before that table gets it on opening.

The database and its directory are created owner-only (0600/0700); WAL mode lets `list` read
while an execution writes. Every database error leaves the store as a StoreError (a
DiskFullError when the disk is full): callers need not know it is SQLite.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import sqlite3
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runbook.errors import NO_SPACE, DiskFullError, RunbookError
from runbook.remedies.audit import Anchor

STATES = ("pending", "running", "succeeded", "failed", "denied", "refused")
FINAL = ("succeeded", "failed", "denied", "refused")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS proposals (
    id          TEXT PRIMARY KEY,
    key         TEXT NOT NULL,          -- node + the verdict's proposal id: one pending per key
    kind        TEXT NOT NULL,
    remedy      TEXT NOT NULL,
    summary     TEXT NOT NULL,
    node        TEXT,
    root_cause  TEXT,
    playbook    TEXT,
    params      TEXT NOT NULL,          -- JSON: the proposal's params as rendered from facts
    plan        TEXT,                   -- JSON: playbook, inventory and extravars to run
    target      TEXT,                   -- JSON: how to reach the node again (re-check)
    runbook     TEXT,
    vars        TEXT,                   -- JSON: the runbook variables of the run
    evidence    TEXT NOT NULL,          -- JSON: the chain and first anomaly it rests on
    run_dir     TEXT,
    source      TEXT NOT NULL,          -- run | sweep
    state       TEXT NOT NULL CHECK (state IN
                  ('pending','running','succeeded','failed','denied','refused')),
    created_at  REAL NOT NULL,
    expires_at  REAL NOT NULL,
    decided_by  TEXT,
    decided_at  REAL,
    reason      TEXT,
    result      TEXT,                   -- JSON: the execution's outcome
    verification TEXT,                  -- JSON: the recovery check's outcome
    runner      TEXT,                   -- JSON: the process that claimed it (host, pid, start)
    updated_at  REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS proposals_state ON proposals(state);
CREATE UNIQUE INDEX IF NOT EXISTS proposals_one_pending ON proposals(key) WHERE state = 'pending';
CREATE TABLE IF NOT EXISTS notices (
    proposal    TEXT NOT NULL,
    notice      TEXT NOT NULL,          -- queued | expiring
    claimed_at  REAL NOT NULL,
    sent_at     REAL,                   -- NULL: claimed, being sent (or its sender died)
    PRIMARY KEY (proposal, notice)
);
CREATE TABLE IF NOT EXISTS audit_head (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    seq  INTEGER NOT NULL,
    hash TEXT NOT NULL
);
"""


#: free space under which an I/O error of the store is taken for a full disk
_ROOM = 1024 * 1024


class StoreError(RunbookError):
    exit_code = 2


class NotFound(StoreError):
    pass


class Conflict(StoreError):
    """The proposal is not pending any more (someone else decided, or it ran)."""

    exit_code = 1


@dataclass
class QueuedProposal:
    id: str
    key: str
    kind: str
    remedy: str
    summary: str
    state: str
    created_at: float
    expires_at: float
    params: dict[str, Any]
    evidence: dict[str, Any]
    source: str
    node: str | None = None
    root_cause: str | None = None
    playbook: str | None = None
    plan: dict[str, Any] | None = None
    target: dict[str, Any] | None = None
    runbook: str | None = None
    vars: dict[str, Any] = field(default_factory=dict)
    run_dir: str | None = None
    decided_by: str | None = None
    decided_at: float | None = None
    reason: str | None = None
    result: dict[str, Any] | None = None
    verification: dict[str, Any] | None = None
    runner: dict[str, Any] | None = None
    updated_at: float = 0.0

    @property
    def expired(self) -> bool:
        return time.time() > self.expires_at

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    def to_json(self) -> dict[str, Any]:
        """as_dict for JSON output: every time ISO 8601 UTC (`…Z`), as the webhooks write
        them, never the store's epoch seconds."""
        from runbook.timestamps import iso_z

        data = self.as_dict()
        for name in _TIMES:
            data[name] = iso_z(data.get(name))
        if isinstance(data.get("verification"), dict):
            verification = dict(data["verification"])
            if isinstance(verification.get("at"), (int, float)):
                verification["at"] = iso_z(verification["at"])
            verification["previous"] = [
                {**e, "at": iso_z(e["at"])} if isinstance(e.get("at"), (int, float)) else e
                for e in verification.get("previous") or []
                if isinstance(e, dict)
            ]
            data["verification"] = verification
        return data


#: QueuedProposal's times (epoch seconds in the store)
_TIMES = ("created_at", "expires_at", "decided_at", "updated_at")


_JSON = ("params", "plan", "target", "vars", "evidence", "result", "verification", "runner")


def _start_ticks(pid: int) -> int | None:
    """A process's start time (clock ticks since boot, /proc/PID/stat field 22): with the pid,
    it names one process even after the pid is reused; None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: count from its last ')'
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def this_process() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(), "start": _start_ticks(os.getpid())}


def runner_gone(proposal: QueuedProposal) -> bool | None:
    """For a running proposal: True when the process that claimed it is gone, False when it
    still runs, None when that cannot be told here (another host, or no record of it)."""
    runner = proposal.runner or {}
    if proposal.state != "running" or runner.get("host") != socket.gethostname():
        return None
    pid = runner.get("pid")
    if not isinstance(pid, int):
        return None
    start = _start_ticks(pid)
    return start is None or (runner.get("start") is not None and start != runner.get("start"))


def _row(row: sqlite3.Row) -> QueuedProposal:
    data = dict(row)
    for name in _JSON:
        data[name] = json.loads(data[name]) if data[name] is not None else None
    data["vars"] = data["vars"] or {}
    return QueuedProposal(**data)


class Store:
    def __init__(self, path: Path, *, timeout: float = 30.0, readonly: bool = False) -> None:
        """`readonly`: for commands that only read (`approvals list`, `show`, `audit verify`):
        nothing is created or written, so they work on a full disk; an absent store reads as
        an empty one."""
        from runbook.remedies.owned import check_store

        self.path = path
        if readonly:
            check_store(path)  # a plan in it is shown as what would run
            self._open_readonly(path, timeout)
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            # another user's store (or one they can write) holds plans they could rewrite
            check_store(path)
            if not path.exists():
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
            self._db = sqlite3.connect(path, timeout=timeout, isolation_level=None)
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA foreign_keys=ON")
            with self._tx():
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        self._db.execute(statement)
                columns = {r["name"] for r in self._db.execute("PRAGMA table_info(proposals)")}
                if "runner" not in columns:  # a store made before the claim recorded it
                    self._db.execute("ALTER TABLE proposals ADD COLUMN runner TEXT")
        except sqlite3.Error as exc:
            raise self._error(exc) from exc
        except OSError as exc:
            if exc.errno in NO_SPACE:
                raise DiskFullError(f"no space left on {path.parent} ({exc.strerror})") from exc
            raise StoreError(f"approval store {path}: {exc.strerror or exc}") from exc

    def _open_readonly(self, path: Path, timeout: float) -> None:
        try:
            if not path.exists():
                self._db = sqlite3.connect(":memory:", isolation_level=None)
                self._db.executescript(_SCHEMA)
                self._db.row_factory = sqlite3.Row
                return
            uri = "file:" + urllib.parse.quote(str(path)) + "?mode=ro"
            try:
                self._db = self._readable(uri, timeout)
            except sqlite3.DatabaseError:
                # a WAL database whose shared-memory file is gone needs one made to be read; on
                # a full disk it cannot be: read the file as it is (a snapshot, no locks)
                self._db = self._readable(uri + "&immutable=1", timeout)
        except sqlite3.Error as exc:
            raise self._error(exc) from exc

    @staticmethod
    def _readable(uri: str, timeout: float) -> sqlite3.Connection:
        db = sqlite3.connect(uri, uri=True, timeout=timeout, isolation_level=None)
        db.row_factory = sqlite3.Row
        try:
            db.execute("SELECT 1 FROM proposals LIMIT 1").fetchall()
        except sqlite3.DatabaseError:
            db.close()
            raise
        return db

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _error(self, exc: sqlite3.Error) -> RunbookError:
        """One line for a database error; a full disk says so (SQLite reports it as
        SQLITE_FULL, or as an I/O error when growing its WAL index fails)."""
        name = getattr(exc, "sqlite_errorname", "")
        if name == "SQLITE_FULL" or name.startswith("SQLITE_IOERR"):
            try:
                stat = os.statvfs(self.path.parent)
                full = name == "SQLITE_FULL" or stat.f_bavail * stat.f_frsize < _ROOM
            except OSError:
                full = name == "SQLITE_FULL"
            if full:
                return DiskFullError(
                    f"no space left on {self.path.parent} (approval store {self.path}: {exc})"
                )
        return StoreError(f"approval store {self.path}: {exc}")

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken at once (`BEGIN IMMEDIATE`) so two writers serialise
        instead of deadlocking on a read lock upgraded later. A statement that fails for want
        of space rolls the whole transaction back and is a DiskFullError; any other database
        error, a StoreError."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise self._error(exc) from exc
        try:
            yield self._db
        except BaseException as exc:
            # SQLite may already have rolled back (SQLITE_FULL can): a second ROLLBACK would
            # raise and hide the error that matters
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise self._error(exc) from exc
            raise
        else:
            try:
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise self._error(exc) from exc

    # ----------------------------------------------------------------------------- writing
    def enqueue(
        self,
        *,
        key: str,
        kind: str,
        remedy: str,
        summary: str,
        params: Mapping[str, Any],
        evidence: Mapping[str, Any],
        source: str,
        ttl: float,
        node: str | None = None,
        root_cause: str | None = None,
        playbook: str | None = None,
        plan: Mapping[str, Any] | None = None,
        target: Mapping[str, Any] | None = None,
        runbook: str | None = None,
        variables: Mapping[str, Any] | None = None,
        run_dir: str | None = None,
    ) -> tuple[QueuedProposal, bool]:
        """Queue a proposal; `(proposal, True)` when new. The same proposal for the same node
        already pending is refreshed (new evidence, run and TTL), not queued twice."""
        now = time.time()
        values = {
            "key": key, "kind": kind, "remedy": remedy, "summary": summary, "node": node,
            "root_cause": root_cause, "playbook": playbook, "runbook": runbook,
            "run_dir": run_dir, "source": source,
            "params": json.dumps(dict(params), default=str),
            "plan": json.dumps(dict(plan), default=str) if plan is not None else None,
            "target": json.dumps(dict(target), default=str) if target is not None else None,
            "vars": json.dumps(dict(variables or {}), default=str),
            "evidence": json.dumps(dict(evidence), default=str),
            "now": now, "expires_at": now + ttl,
        }  # fmt: skip
        with self._tx() as db:
            row = db.execute(
                "SELECT id FROM proposals WHERE key = ? AND state = 'pending'", (key,)
            ).fetchone()
            if row:
                pid, new = row["id"], False
                db.execute(
                    "UPDATE proposals SET summary=:summary, params=:params, plan=:plan, "
                    "target=:target, vars=:vars, evidence=:evidence, run_dir=:run_dir, "
                    "expires_at=:expires_at, updated_at=:now, root_cause=:root_cause "
                    "WHERE id=:id",
                    {**values, "id": pid},
                )
            else:
                pid, new = "p" + secrets.token_hex(4), True
                db.execute(
                    "INSERT INTO proposals (id, key, kind, remedy, summary, node, root_cause, "
                    "playbook, params, plan, target, runbook, vars, evidence, run_dir, source, "
                    "state, created_at, expires_at, updated_at) VALUES (:id, :key, :kind, "
                    ":remedy, :summary, :node, :root_cause, :playbook, :params, :plan, :target, "
                    ":runbook, :vars, :evidence, :run_dir, :source, 'pending', :now, "
                    ":expires_at, :now)",
                    {**values, "id": pid},
                )
        return self.get(pid), new

    def claim(self, pid: str, *, actor: str) -> QueuedProposal:
        """pending → running for `actor`, atomically; Conflict for everyone else."""
        now = time.time()
        with self._tx() as db:
            cur = db.execute(
                "UPDATE proposals SET state='running', decided_by=?, decided_at=?, updated_at=?, "
                "runner=? WHERE id=? AND state='pending'",
                (actor, now, now, json.dumps(this_process()), pid),
            )
            won = cur.rowcount == 1
        proposal = self.get(pid)
        if not won:
            raise Conflict(self._not_pending(proposal))
        return proposal

    def decide(
        self, pid: str, state: str, *, actor: str | None, reason: str | None = None
    ) -> QueuedProposal:
        """pending → denied | refused."""
        if state not in ("denied", "refused"):
            raise ValueError(state)
        now = time.time()
        with self._tx() as db:
            cur = db.execute(
                "UPDATE proposals SET state=?, decided_by=?, decided_at=?, reason=?, updated_at=? "
                "WHERE id=? AND state='pending'",
                (state, actor, now, reason, now, pid),
            )
            won = cur.rowcount == 1
        proposal = self.get(pid)
        if not won:
            raise Conflict(self._not_pending(proposal))
        return proposal

    def recover(self, pid: str, *, result: Mapping[str, Any]) -> QueuedProposal:
        """running → failed for a proposal whose process is gone (never re-run)."""
        now = time.time()
        with self._tx() as db:
            cur = db.execute(
                "UPDATE proposals SET state='failed', result=?, updated_at=? "
                "WHERE id=? AND state='running'",
                (json.dumps(dict(result), default=str), now, pid),
            )
            won = cur.rowcount == 1
        proposal = self.get(pid)
        if not won:
            raise Conflict(f"proposal {pid} is {proposal.state}, not running: nothing to recover")
        return proposal

    def finish(self, pid: str, *, ok: bool, result: Mapping[str, Any]) -> QueuedProposal:
        """running → succeeded | failed, with the execution's outcome."""
        now = time.time()
        with self._tx() as db:
            cur = db.execute(
                "UPDATE proposals SET state=?, result=?, updated_at=? "
                "WHERE id=? AND state='running'",
                ("succeeded" if ok else "failed", json.dumps(dict(result), default=str), now, pid),
            )
            if cur.rowcount != 1:
                raise Conflict(f"proposal {pid} is not running")
        return self.get(pid)

    def set_plan(self, pid: str, plan: Mapping[str, Any]) -> QueuedProposal:
        """A pending proposal's plan, replaced (re-planned against changed files)."""
        with self._tx() as db:
            cur = db.execute(
                "UPDATE proposals SET plan=?, updated_at=? WHERE id=? AND state='pending'",
                (json.dumps(dict(plan), default=str), time.time(), pid),
            )
            if cur.rowcount != 1:
                raise Conflict(f"proposal {pid} is not pending")
        return self.get(pid)

    def set_verification(self, pid: str, verification: Mapping[str, Any]) -> QueuedProposal:
        with self._tx() as db:
            db.execute(
                "UPDATE proposals SET verification=?, updated_at=? WHERE id=?",
                (json.dumps(dict(verification), default=str), time.time(), pid),
            )
        return self.get(pid)

    def record_audit_head(self, seq: int, digest: str) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO audit_head (id, seq, hash) VALUES (1, ?, ?) "
                "ON CONFLICT(id) DO UPDATE SET seq=excluded.seq, hash=excluded.hash "
                "WHERE excluded.seq > audit_head.seq",
                (seq, digest),
            )

    def claim_notice(self, pid: str, notice: str, *, stale_after: float = 120.0) -> bool:
        """True when this process is to send `notice` of `pid`: never sent, and not being
        sent by another process (a claim older than `stale_after` seconds, whose sender
        died before marking it, is taken over)."""
        now = time.time()
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO notices (proposal, notice, claimed_at) VALUES (?, ?, ?) "
                "ON CONFLICT(proposal, notice) DO UPDATE SET claimed_at=excluded.claimed_at "
                "WHERE notices.sent_at IS NULL AND notices.claimed_at < ?",
                (pid, notice, now, now - stale_after),
            )
            return cur.rowcount == 1

    def notice_sent(self, pid: str, notice: str) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE notices SET sent_at=? WHERE proposal=? AND notice=?",
                (time.time(), pid, notice),
            )

    def release_notice(self, pid: str, notice: str) -> None:
        """A claimed notice that could not be delivered: due again at the next command."""
        with self._tx() as db:
            db.execute(
                "DELETE FROM notices WHERE proposal=? AND notice=? AND sent_at IS NULL",
                (pid, notice),
            )

    # ----------------------------------------------------------------------------- reading
    def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        """The rows of one query; a database error is a StoreError (DiskFullError)."""
        try:
            return self._db.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise self._error(exc) from exc

    def sent_notices(self) -> set[tuple[str, str]]:
        """(proposal, notice) of every notice already sent."""
        rows = self._read("SELECT proposal, notice FROM notices WHERE sent_at IS NOT NULL")
        return {(str(r["proposal"]), str(r["notice"])) for r in rows}

    def audit_head(self) -> Anchor | None:
        rows = self._read("SELECT seq, hash FROM audit_head WHERE id = 1")
        return Anchor(int(rows[0]["seq"]), str(rows[0]["hash"])) if rows else None

    def get(self, pid: str) -> QueuedProposal:
        rows = self._read("SELECT * FROM proposals WHERE id = ?", (pid,))
        if not rows:
            raise NotFound(f"no proposal {pid!r} in {self.path} (see `runbook approvals list`)")
        return _row(rows[0])

    def list(self, *, states: tuple[str, ...] | None = None) -> list[QueuedProposal]:
        if states:
            marks = ",".join("?" * len(states))
            rows = self._read(
                f"SELECT * FROM proposals WHERE state IN ({marks}) ORDER BY created_at",  # noqa: S608
                states,
            )
        else:
            rows = self._read("SELECT * FROM proposals ORDER BY created_at")
        return [_row(r) for r in rows]

    def _where(
        self,
        *,
        states: tuple[str, ...] | None,
        node: str | None,
        kinds: tuple[str, ...] | None,
        expired: bool | None,
        now: float | None,
    ) -> tuple[str, tuple[Any, ...]]:
        """The WHERE clause of a page of the queue (page, count), and its arguments."""
        clauses: list[str] = []
        args: list[Any] = []
        if states:
            clauses.append(f"state IN ({','.join('?' * len(states))})")
            args += states
        if node:
            clauses.append("node = ?")
            args.append(node)
        if kinds is not None:
            clauses.append(f"kind IN ({','.join('?' * len(kinds))})" if kinds else "0")
            args += kinds
        if expired is not None:
            clauses.append("expires_at <= ?" if expired else "expires_at > ?")
            args.append(time.time() if now is None else now)
        return (" WHERE " + " AND ".join(clauses)) if clauses else "", tuple(args)

    def page(
        self,
        *,
        states: tuple[str, ...] | None = None,
        node: str | None = None,
        kinds: tuple[str, ...] | None = None,
        expired: bool | None = None,
        now: float | None = None,
        offset: int = 0,
        limit: int = 50,
        newest_first: bool = True,
    ) -> list[QueuedProposal]:
        """One page of the queue, filtered and paged by the database (the desk's queue page):
        `kinds` () matches nothing; `expired` True: past their TTL, False: within it."""
        where, args = self._where(states=states, node=node, kinds=kinds, expired=expired, now=now)
        order = "DESC" if newest_first else "ASC"
        rows = self._read(
            f"SELECT * FROM proposals{where} ORDER BY created_at {order}, id LIMIT ? OFFSET ?",  # noqa: S608
            (*args, max(limit, 0), max(offset, 0)),
        )
        return [_row(r) for r in rows]

    def count(
        self,
        *,
        states: tuple[str, ...] | None = None,
        node: str | None = None,
        kinds: tuple[str, ...] | None = None,
        expired: bool | None = None,
        now: float | None = None,
    ) -> int:
        """How many proposals `page` pages through with the same filters."""
        where, args = self._where(states=states, node=node, kinds=kinds, expired=expired, now=now)
        return int(self._read(f"SELECT COUNT(*) FROM proposals{where}", args)[0][0])  # noqa: S608

    def integrity_check(self) -> str:
        return str(self._read("PRAGMA integrity_check")[0][0])

    @staticmethod
    def _not_pending(p: QueuedProposal) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(p.decided_at or p.updated_at))
        if p.state == "running":
            if runner_gone(p):
                return (
                    f"proposal {p.id} was claimed by {p.decided_by} at {when}, but that process "
                    f"is gone: `runbook approvals recover {p.id}` marks it failed (never re-run)"
                )
            return (
                f"proposal {p.id} is already being executed (approved by {p.decided_by} at {when})"
            )
        if p.state in ("succeeded", "failed"):
            return (
                f"proposal {p.id} already ran ({p.state}; approved by {p.decided_by} at "
                f"{when}); it is never run twice: re-run the runbook for a fresh proposal"
            )
        reason = f": {p.reason}" if p.reason else ""
        return f"proposal {p.id} was {p.state} by {p.decided_by or 'the tool'} at {when}{reason}"
