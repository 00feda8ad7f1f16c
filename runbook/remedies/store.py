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

Two databases hold it, chosen by `--db` (runbook.dburl, in one place for every command): a
SQLite file on this machine (runbook.remedies.store_sqlite, the default), or a PostgreSQL
server several machines share (runbook.remedies.store_pg: sweep shards, the desk, on-call
laptops; the audit chain then lives in the database too). The statements here are the same for
both; the schema is migrated in place on opening (runbook.remedies.store_schema). Every
database error leaves the store as a StoreError (a DiskFullError when the disk is full, a
StoreUnreachable when a server cannot be reached or refuses the login): callers need not know
which database it is.

The two-person rule's data: `requested_by` is who ran the run that queued a proposal, and
`add_approval` records each distinct approver of it (runbook.remedies.two_person decides).
"""

from __future__ import annotations

import builtins
import json
import os
import secrets
import socket
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from runbook.dburl import Location, PostgresURL, location
from runbook.errors import RunbookError
from runbook.remedies.audit import Anchor, AuditLog, AuditTrail, StoreAuditLog
from runbook.remedies.store_errors import Conflict, NotFound, StoreError, StoreUnreachable

__all__ = [
    "FINAL", "STATES", "Conflict", "NotFound", "QueuedProposal", "Store", "StoreError",
    "StoreUnreachable", "runner_gone", "this_process",
]  # fmt: skip

STATES = ("pending", "running", "succeeded", "failed", "denied", "refused")
FINAL = ("succeeded", "failed", "denied", "refused")
#: `page` and `count` also take this: pending, past its TTL (`pending` there: within it)
EXPIRED = "expired"


class Backend(Protocol):
    """What the store needs of a database (store_sqlite.SqliteBackend, store_pg.PostgresBackend):
    statements in SQLite's style (`?`, `:name`), write transactions, errors as StoreErrors."""

    dialect: str
    where: str
    tables: set[str]

    def tx(self) -> AbstractContextManager[None]: ...
    def run(self, sql: str, args: Sequence[Any] | dict[str, Any] = ()) -> int: ...
    def rows(self, sql: str, args: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]: ...
    def lock(self, name: str) -> None: ...
    def close(self) -> None: ...
    def error(self, exc: BaseException) -> RunbookError: ...
    def integrity_check(self) -> str: ...
    def version(self) -> int: ...


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
    #: who ran the run that queued it (the OS user, `NAME as ALIAS`, the desk's user)
    requested_by: str | None = None
    #: the distinct approvers so far, first first (the two-person rule)
    approvals: list[str] = field(default_factory=list)

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


_COLUMNS = frozenset(QueuedProposal.__dataclass_fields__) - {"approvals"}


def _row(row: Mapping[str, Any], approvals: list[str] | None = None) -> QueuedProposal:
    data = {k: v for k, v in row.items() if k in _COLUMNS}
    for name in _JSON:
        if data.get(name) is not None:
            data[name] = json.loads(data[name])
    data["vars"] = data.get("vars") or {}
    return QueuedProposal(**data, approvals=list(approvals or []))


def _open(place: Location, *, timeout: float, readonly: bool) -> Backend:
    """The one place a store's location becomes a database."""
    if isinstance(place, PostgresURL):
        from runbook.remedies.store_pg import PostgresBackend

        return PostgresBackend(place, timeout=timeout, readonly=readonly)
    from runbook.remedies.store_sqlite import SqliteBackend

    return SqliteBackend(place, timeout=timeout, readonly=readonly)


class Store:
    def __init__(
        self, path: Location | str, *, timeout: float = 30.0, readonly: bool = False
    ) -> None:
        """`path`: a SQLite file, or a PostgreSQL URL (runbook.dburl). `readonly`: for commands
        that only read (`approvals list`, `show`, `audit verify`): nothing is created or
        written in a SQLite store, so they work on a full disk; an absent one reads as empty."""
        self.path: Location = location(path) if isinstance(path, str) else path
        self.backend = _open(self.path, timeout=timeout, readonly=readonly)
        self.where = self.backend.where

    @property
    def shared(self) -> bool:
        """A server several machines share (its audit chain lives in it)."""
        return self.backend.dialect == "postgresql"

    def audit_log(self, path: Path) -> AuditTrail:
        """The audit chain of this store: the file `path` beside a SQLite store; the
        database itself for a shared one (one chain, whichever machine appends)."""
        if self.shared:
            return StoreAuditLog(self.backend)  # type: ignore[arg-type]
        return AuditLog(path)

    def schema_version(self) -> int:
        return self.backend.version()

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _tx(self) -> AbstractContextManager[None]:
        return self.backend.tx()

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
        requested_by: str | None = None,
    ) -> tuple[QueuedProposal, bool]:
        """Queue a proposal; `(proposal, True)` when new. The same proposal for the same node
        already pending is refreshed (new evidence, run and TTL), not queued twice; it keeps
        who queued it first (`requested_by`)."""
        now = time.time()
        values = {
            "key": key, "kind": kind, "remedy": remedy, "summary": summary, "node": node,
            "root_cause": root_cause, "playbook": playbook, "runbook": runbook,
            "run_dir": run_dir, "source": source, "requested_by": requested_by,
            "params": json.dumps(dict(params), default=str),
            "plan": json.dumps(dict(plan), default=str) if plan is not None else None,
            "target": json.dumps(dict(target), default=str) if target is not None else None,
            "vars": json.dumps(dict(variables or {}), default=str),
            "evidence": json.dumps(dict(evidence), default=str),
            "now": now, "expires_at": now + ttl,
        }  # fmt: skip
        db = self.backend
        with db.tx():
            db.lock(f"enqueue:{key}")  # two machines queueing one finding: one row
            rows = db.rows("SELECT id FROM proposals WHERE key = ? AND state = 'pending'", (key,))
            if rows:
                pid, new = str(rows[0]["id"]), False
                db.run(
                    "UPDATE proposals SET summary=:summary, params=:params, plan=:plan, "
                    "target=:target, vars=:vars, evidence=:evidence, run_dir=:run_dir, "
                    "expires_at=:expires_at, updated_at=:now, root_cause=:root_cause "
                    "WHERE id=:id",
                    {**values, "id": pid},
                )
            else:
                pid, new = "p" + secrets.token_hex(4), True
                db.run(
                    "INSERT INTO proposals (id, key, kind, remedy, summary, node, root_cause, "
                    "playbook, params, plan, target, runbook, vars, evidence, run_dir, source, "
                    "state, created_at, expires_at, updated_at, requested_by) VALUES (:id, :key, "
                    ":kind, :remedy, :summary, :node, :root_cause, :playbook, :params, :plan, "
                    ":target, :runbook, :vars, :evidence, :run_dir, :source, 'pending', :now, "
                    ":expires_at, :now, :requested_by)",
                    {**values, "id": pid},
                )
        return self.get(pid), new

    def claim(self, pid: str, *, actor: str) -> QueuedProposal:
        """pending → running for `actor`, atomically (one conditional UPDATE: of several
        processes or machines at once, exactly one changes the row); Conflict for the rest."""
        now = time.time()
        with self.backend.tx():
            won = (
                self.backend.run(
                    "UPDATE proposals SET state='running', decided_by=?, decided_at=?, "
                    "updated_at=?, runner=? WHERE id=? AND state='pending'",
                    (actor, now, now, json.dumps(this_process()), pid),
                )
                == 1
            )
        proposal = self.get(pid)
        if not won:
            raise Conflict(self._not_pending(proposal))
        return proposal

    def add_approval(self, pid: str, who: str) -> list[str]:
        """Record `who` approving the pending proposal `pid` (once per person) and return the
        distinct approvers so far, first first; atomic, so two approving at once both count.
        Conflict when it is not pending any more."""
        db = self.backend
        with db.tx():
            db.lock(f"approve:{pid}")
            rows = db.rows("SELECT state FROM proposals WHERE id = ?", (pid,))
            if not rows:
                raise NotFound(f"no proposal {pid!r} in {self.where}")
            if rows[0]["state"] != "pending":
                raise Conflict(self._not_pending(self.get(pid)))
            db.run(
                "INSERT INTO approvals (proposal, approver, at) VALUES (?, ?, ?) "
                "ON CONFLICT (proposal, approver) DO NOTHING",
                (pid, who, time.time()),
            )
            names = db.rows(
                "SELECT approver FROM approvals WHERE proposal = ? ORDER BY at, approver", (pid,)
            )
        return [str(r["approver"]) for r in names]

    def approvals_of(self, pid: str) -> list[str]:
        """The distinct approvers of `pid` so far, first first."""
        return self._approvals([pid]).get(pid, [])

    def decide(
        self, pid: str, state: str, *, actor: str | None, reason: str | None = None
    ) -> QueuedProposal:
        """pending → denied | refused."""
        if state not in ("denied", "refused"):
            raise ValueError(state)
        now = time.time()
        with self.backend.tx():
            won = (
                self.backend.run(
                    "UPDATE proposals SET state=?, decided_by=?, decided_at=?, reason=?, "
                    "updated_at=? WHERE id=? AND state='pending'",
                    (state, actor, now, reason, now, pid),
                )
                == 1
            )
        proposal = self.get(pid)
        if not won:
            raise Conflict(self._not_pending(proposal))
        return proposal

    def recover(self, pid: str, *, result: Mapping[str, Any]) -> QueuedProposal:
        """running → failed for a proposal whose process is gone (never re-run)."""
        now = time.time()
        with self.backend.tx():
            won = (
                self.backend.run(
                    "UPDATE proposals SET state='failed', result=?, updated_at=? "
                    "WHERE id=? AND state='running'",
                    (json.dumps(dict(result), default=str), now, pid),
                )
                == 1
            )
        proposal = self.get(pid)
        if not won:
            raise Conflict(f"proposal {pid} is {proposal.state}, not running: nothing to recover")
        return proposal

    def finish(self, pid: str, *, ok: bool, result: Mapping[str, Any]) -> QueuedProposal:
        """running → succeeded | failed, with the execution's outcome."""
        now = time.time()
        with self.backend.tx():
            changed = self.backend.run(
                "UPDATE proposals SET state=?, result=?, updated_at=? "
                "WHERE id=? AND state='running'",
                ("succeeded" if ok else "failed", json.dumps(dict(result), default=str), now, pid),
            )
            if changed != 1:
                raise Conflict(f"proposal {pid} is not running")
        return self.get(pid)

    def set_plan(self, pid: str, plan: Mapping[str, Any]) -> QueuedProposal:
        """A pending proposal's plan, replaced (re-planned against changed files)."""
        with self.backend.tx():
            changed = self.backend.run(
                "UPDATE proposals SET plan=?, updated_at=? WHERE id=? AND state='pending'",
                (json.dumps(dict(plan), default=str), time.time(), pid),
            )
            if changed != 1:
                raise Conflict(f"proposal {pid} is not pending")
        return self.get(pid)

    def set_verification(self, pid: str, verification: Mapping[str, Any]) -> QueuedProposal:
        with self.backend.tx():
            self.backend.run(
                "UPDATE proposals SET verification=?, updated_at=? WHERE id=?",
                (json.dumps(dict(verification), default=str), time.time(), pid),
            )
        return self.get(pid)

    def record_audit_head(self, seq: int, digest: str) -> None:
        with self.backend.tx():
            self.backend.run(
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
        with self.backend.tx():
            return (
                self.backend.run(
                    "INSERT INTO notices (proposal, notice, claimed_at) VALUES (?, ?, ?) "
                    "ON CONFLICT(proposal, notice) DO UPDATE SET claimed_at=excluded.claimed_at "
                    "WHERE notices.sent_at IS NULL AND notices.claimed_at < ?",
                    (pid, notice, now, now - stale_after),
                )
                == 1
            )

    def notice_sent(self, pid: str, notice: str) -> None:
        with self.backend.tx():
            self.backend.run(
                "UPDATE notices SET sent_at=? WHERE proposal=? AND notice=?",
                (time.time(), pid, notice),
            )

    def release_notice(self, pid: str, notice: str) -> None:
        """A claimed notice that could not be delivered: due again at the next command."""
        with self.backend.tx():
            self.backend.run(
                "DELETE FROM notices WHERE proposal=? AND notice=? AND sent_at IS NULL",
                (pid, notice),
            )

    # ----------------------------------------------------------------------------- reading
    def _read(self, sql: str, args: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        """The rows of one query; a database error is a StoreError (DiskFullError)."""
        return self.backend.rows(sql, args)

    def sent_notices(self) -> set[tuple[str, str]]:
        """(proposal, notice) of every notice already sent."""
        if "notices" not in self.backend.tables:  # a store of version 2, read as it is
            return set()
        rows = self._read("SELECT proposal, notice FROM notices WHERE sent_at IS NOT NULL")
        return {(str(r["proposal"]), str(r["notice"])) for r in rows}

    def audit_head(self) -> Anchor | None:
        rows = self._read("SELECT seq, hash FROM audit_head WHERE id = 1")
        return Anchor(int(rows[0]["seq"]), str(rows[0]["hash"])) if rows else None

    def get(self, pid: str) -> QueuedProposal:
        rows = self._read("SELECT * FROM proposals WHERE id = ?", (pid,))
        if not rows:
            raise NotFound(f"no proposal {pid!r} in {self.where} (see `runbook approvals list`)")
        return _row(rows[0], self.approvals_of(pid))

    def list(self, *, states: tuple[str, ...] | None = None) -> list[QueuedProposal]:
        if states:
            marks = ",".join("?" * len(states))
            rows = self._read(
                f"SELECT * FROM proposals WHERE state IN ({marks}) ORDER BY created_at",  # noqa: S608
                states,
            )
        else:
            rows = self._read("SELECT * FROM proposals ORDER BY created_at")
        approvals = self._approvals(None)
        return [_row(r, approvals.get(str(r["id"]))) for r in rows]

    def page(
        self,
        states: Sequence[str] | None,
        node: str | None = None,
        kind: str | None = None,
        severity: str | None = None,
        offset: int = 0,
        limit: int = 50,
        *,
        oldest_first: bool = False,
    ) -> builtins.list[QueuedProposal]:
        """One page of the queue, newest first (`oldest_first`: the longest waiting first),
        filtered in SQL on the indexes: `states` among STATES and `expired` (in a page,
        `pending` is a pending proposal within its TTL, `expired` one past it), a node, a kind,
        a severity (runbook.metrics.severity: critical, warning, info)."""
        where, args = self._filters(states, node, kind, severity)
        order = "ASC" if oldest_first else "DESC"
        rows = self._read(
            f"SELECT * FROM proposals{where} ORDER BY created_at {order}, id {order} "  # noqa: S608
            "LIMIT ? OFFSET ?",
            (*args, max(0, int(limit)), max(0, int(offset))),
        )
        approvals = self._approvals([str(r["id"]) for r in rows]) if rows else {}
        return [_row(r, approvals.get(str(r["id"]))) for r in rows]

    def count(
        self,
        states: Sequence[str] | None,
        node: str | None = None,
        kind: str | None = None,
        severity: str | None = None,
    ) -> int:
        """How many proposals `page` would page through with the same filters."""
        where, args = self._filters(states, node, kind, severity)
        rows = self._read(f"SELECT COUNT(*) AS n FROM proposals{where}", args)  # noqa: S608
        return int(rows[0]["n"])

    @staticmethod
    def _filters(
        states: Sequence[str] | None, node: str | None, kind: str | None, severity: str | None
    ) -> tuple[str, tuple[Any, ...]]:
        from runbook import metrics

        clauses: list[str] = []
        args: list[Any] = []
        if states:
            unknown = [s for s in states if s not in (*STATES, EXPIRED)]
            if unknown:
                raise StoreError(
                    f"unknown state {unknown[0]!r}: expected one of {', '.join((*STATES, EXPIRED))}"
                )
            now = time.time()
            either: list[str] = []
            plain = [s for s in states if s not in ("pending", EXPIRED)]
            if plain:
                either.append(f"state IN ({','.join('?' * len(plain))})")
                args.extend(plain)
            if "pending" in states and EXPIRED in states:
                either.append("state = 'pending'")
            elif "pending" in states:
                either.append("(state = 'pending' AND expires_at >= ?)")
                args.append(now)
            elif EXPIRED in states:
                either.append("(state = 'pending' AND expires_at < ?)")
                args.append(now)
            clauses.append("(" + " OR ".join(either) + ")")
        if node:
            clauses.append("node = ?")
            args.append(node)
        if kind:
            clauses.append("kind = ?")
            args.append(kind)
        if severity:
            critical = sorted(metrics.CRITICAL_CAUSES)
            marks = ",".join("?" * len(critical)) or "NULL"
            quiet = "(root_cause IS NULL OR root_cause IN ('', 'inconclusive', 'healthy'))"
            if severity == "critical":
                clauses.append(f"root_cause IN ({marks})")
                args.extend(critical)
            elif severity == "info":
                clauses.append(quiet)
            elif severity == "warning":
                clauses.append(f"NOT {quiet} AND root_cause NOT IN ({marks})")
                args.extend(critical)
            else:
                raise StoreError(
                    f"unknown severity {severity!r}: expected one of "
                    f"{', '.join(metrics.SEVERITIES)}"
                )
        return (" WHERE " + " AND ".join(clauses) if clauses else ""), tuple(args)

    def _approvals(self, pids: Sequence[str] | None) -> dict[str, builtins.list[str]]:
        """pid → its approvers, first first (every proposal's with `pids` None)."""
        if "approvals" not in self.backend.tables:  # an earlier schema, read as it is
            return {}
        if pids is None:
            rows = self._read("SELECT proposal, approver FROM approvals ORDER BY at, approver")
        else:
            marks = ",".join("?" * len(pids))
            rows = self._read(
                "SELECT proposal, approver FROM approvals "  # noqa: S608
                f"WHERE proposal IN ({marks}) ORDER BY at, approver",
                tuple(pids),
            )
        out: dict[str, list[str]] = {}
        for row in rows:
            out.setdefault(str(row["proposal"]), []).append(str(row["approver"]))
        return out

    def integrity_check(self) -> str:
        return self.backend.integrity_check()

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
