"""The audit trail: an append-only, hash-chained JSON-lines file.

Every proposal, decision and execution result is one line::

    {"seq": 7, "time": "2026-12-02T13:40:00.123456+00:00", "event": "approved",
     "proposal": "p3f9c0a1d", "actor": "alice", "data": {...}, "prev": "<hash of line 6>",
     "hash": "<sha256 of this entry without its hash>"}

Editing, removing or reordering any line breaks the chain at that line, which `verify` names.
Cutting lines off the *end* leaves a valid shorter chain; to catch that, the approval store keeps
the last (seq, hash) it saw as an anchor and `verify(path, anchor=...)` checks the file still
reaches it. Appends hold an exclusive `flock` (two processes never interleave or fork the chain),
write one line whole or not at all (a full disk is a DiskFullError, the file as it was), and
fsync before returning.

With a PostgreSQL store (several machines, one queue) the same entries live in the database
instead (`StoreAuditLog`): the store serialises appends across machines and moves the anchor
in the same transaction, and `verify` runs the same checks over them (`entry N` for `line N`).
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import hashlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from runbook.errors import RunbookError, disk_full_as_error
from runbook.redact import redact_data

GENESIS = "0" * 64


class AuditError(RunbookError):
    exit_code = 1


def _digest(entry: Mapping[str, Any]) -> str:
    body = {k: v for k, v in entry.items() if k != "hash"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _last_line(handle: Any) -> bytes | None:
    """The last complete line of an open binary file, read backwards from the end."""
    end = handle.seek(0, os.SEEK_END)
    if end == 0:
        return None
    block, data, pos = 4096, b"", end
    while pos > 0:
        step = min(block, pos)
        pos -= step
        handle.seek(pos)
        data = handle.read(step) + data
        lines = data.rstrip(b"\n").split(b"\n")
        if len(lines) > 1 or pos == 0:
            last: bytes = lines[-1]
            return last
    return None


def _append_whole(fd: int, data: bytes) -> None:
    """Append one entry whole, or leave the file as it was: a write cut short (a full disk
    writes what fits) is truncated away, so the chain never ends in half an entry."""
    size = os.fstat(fd).st_size
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.ftruncate(fd, size)
        raise


@dataclass(frozen=True)
class Anchor:
    seq: int
    hash: str


def new_entry(
    seq: int,
    prev: str | None,
    event: str,
    proposal: str | None,
    actor: str | None,
    data: Mapping[str, Any] | None,
) -> tuple[dict[str, Any], str]:
    """The entry that follows (seq - 1, prev), and its line as written (no newline)."""
    entry: dict[str, Any] = {
        "seq": seq,
        "time": dt.datetime.now(dt.timezone.utc).isoformat().replace("+00:00", "Z"),
        "event": event,
        "proposal": proposal,
        "actor": actor,
        "data": redact_data(dict(data or {})),  # credentials never written
        "prev": prev or GENESIS,
    }
    entry["hash"] = _digest(entry)
    return entry, json.dumps(entry, ensure_ascii=False, default=str)


#: builds the entry that follows (seq, prev): the entry and its line
_Build = Callable[[int, str | None], tuple[dict[str, Any], str]]


class _Chain:
    """What both keepers of the chain append: an entry built by `new_entry` on the last."""

    def append(
        self,
        event: str,
        *,
        proposal: str | None = None,
        actor: str | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Append one entry and return it (with its seq and hash)."""
        return self._append(lambda seq, prev: new_entry(seq, prev, event, proposal, actor, data))

    def _append(self, build: _Build) -> dict[str, Any]:
        raise NotImplementedError


class AuditLog(_Chain):
    """The chain in a JSON-lines file (with a SQLite store, or `--log FILE`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.where = str(path)

    def _append(self, build: _Build) -> dict[str, Any]:
        from runbook.remedies.owned import NotOwnedError, check_dir, check_fd

        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        check_dir(self.path.parent, f"audit log {self.path}")
        try:
            # never appended through a link another user placed
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise NotOwnedError(f"audit log {self.path} is a symbolic link; refusing") from None
            raise
        try:
            check_fd(fd, self.path, "audit log")
        except BaseException:
            os.close(fd)
            raise
        with os.fdopen(fd, "r+b", buffering=0) as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                last = _last_line(handle)
                if last is None:
                    seq, prev = 1, GENESIS
                else:
                    try:
                        previous = json.loads(last)
                        seq, prev = int(previous["seq"]) + 1, str(previous["hash"])
                    except (ValueError, KeyError, TypeError) as exc:
                        raise AuditError(
                            f"{self.path}: the last entry is unreadable ({exc}); "
                            "run `runbook audit verify` before appending"
                        ) from exc
                entry, line = build(seq, prev)
                with disk_full_as_error(self.path.parent):
                    _append_whole(handle.fileno(), (line + "\n").encode())
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        return entry

    def entries(self) -> Iterator[dict[str, Any]]:
        if not self.path.exists():
            return
        from runbook.remedies.owned import check_dir, check_file

        check_dir(self.path.parent, f"audit log {self.path}")
        check_file(self.path, "audit log")
        with self.path.open(encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    yield json.loads(line)

    def verify(self, *, anchor: Anchor | None = None) -> Verification:
        return verify(self.path, anchor=anchor)


class ChainBackend(Protocol):
    where: str

    def append_audit(self, build: _Build) -> dict[str, Any]: ...
    def audit_lines(self) -> Iterator[str]: ...


class StoreAuditLog(_Chain):
    """The chain kept in the approval store's database (PostgreSQL: several machines append
    to one chain; the backend serialises appends and moves the anchor in the same
    transaction). Same entries, same hashes, same checks as the file."""

    def __init__(self, backend: ChainBackend) -> None:
        self.backend = backend
        self.where = f"{backend.where} (audit_entries)"

    def _append(self, build: _Build) -> dict[str, Any]:
        return self.backend.append_audit(build)

    def entries(self) -> Iterator[dict[str, Any]]:
        for line in self.backend.audit_lines():
            yield json.loads(line)

    def verify(self, *, anchor: Anchor | None = None) -> Verification:
        lines = [line.encode() for line in self.backend.audit_lines()]
        return verify_lines(lines, anchor=anchor, label="entry", missing=None)


#: where the chain is: a file, or the store's database
AuditTrail = AuditLog | StoreAuditLog


@dataclass(frozen=True)
class Verification:
    ok: bool
    entries: int
    problems: tuple[str, ...]
    head: Anchor | None


def verify(path: Path, *, anchor: Anchor | None = None) -> Verification:
    """Recompute the chain; every problem is `line N: what is wrong`."""
    if not path.exists():
        problems = []
        if anchor is not None:
            problems.append(f"{path} is missing but the store has seen {anchor.seq} entries")
        return Verification(not problems, 0, tuple(problems), None)
    with path.open("rb") as handle:
        raw = handle.read()
    lines = raw.split(b"\n")
    cut_short = None
    if lines and lines[-1] == b"":
        lines.pop()
    elif lines:
        cut_short = f"line {len(lines)}: incomplete (no newline: a write cut short)"
    return verify_lines(lines, anchor=anchor, label="line", missing=cut_short)


def verify_lines(
    lines: list[bytes], *, anchor: Anchor | None, label: str, missing: str | None
) -> Verification:
    """The chain's checks over its entries as written; `label` names one in a problem
    (`line 3`, `entry 3`), `missing` is a problem already found (a last line cut short)."""
    problems: list[str] = [missing] if missing else []
    prev, expected_seq, count = GENESIS, 1, 0
    head: Anchor | None = None
    for number, line in enumerate(lines, 1):
        try:
            entry = json.loads(line)
            if not isinstance(entry, dict):
                raise ValueError("not an object")
        except ValueError as exc:
            problems.append(f"{label} {number}: not a JSON object ({exc})")
            break
        count += 1
        if entry.get("prev") != prev:
            problems.append(
                f"{label} {number}: its prev hash does not match {label} {number - 1} "
                "(an entry was removed, inserted or reordered)"
            )
        if entry.get("hash") != _digest(entry):
            problems.append(f"{label} {number}: content does not match its hash (entry edited)")
        if entry.get("seq") != expected_seq:
            problems.append(
                f"{label} {number}: seq {entry.get('seq')} where {expected_seq} belongs"
            )
        prev = str(entry.get("hash"))
        seq = entry.get("seq")
        expected_seq = (seq if isinstance(seq, int) else expected_seq) + 1
        head = Anchor(seq if isinstance(seq, int) else 0, prev)
    if anchor is not None and not problems:
        if head is None or head.seq < anchor.seq:
            problems.append(
                f"the log ends at entry {head.seq if head else 0} but the store recorded "
                f"entry {anchor.seq}: entries were cut off the end"
            )
        elif head.seq >= anchor.seq:
            at = [e for e in _parse_all(lines) if e.get("seq") == anchor.seq]
            if not at or at[0].get("hash") != anchor.hash:
                problems.append(f"entry {anchor.seq} differs from the one the store recorded")
    return Verification(not problems, count, tuple(problems), head)


def _parse_all(lines: list[bytes]) -> list[dict[str, Any]]:
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            break
    return out
