"""The approval store's SQLite backend: one file on this machine (the default).

The database and its directory are created owner-only (0600/0700); WAL mode lets `list` read
while an execution writes; writes take the lock at once (`BEGIN IMMEDIATE`) so two writers
serialise instead of deadlocking on a read lock upgraded later. Every database error leaves as
a StoreError (a DiskFullError when the disk is full). A read-only open (`approvals list`,
`show`, `audit verify`) creates and writes nothing, so it works on a full disk, and reads a
store of an earlier schema as it is.
"""

from __future__ import annotations

import os
import sqlite3
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from runbook.errors import NO_SPACE, DiskFullError, RunbookError
from runbook.remedies import store_schema
from runbook.remedies.store_errors import StoreError

#: free space under which an I/O error of the store is taken for a full disk
_ROOM = 1024 * 1024


class SqliteBackend:
    dialect = "sqlite"

    def __init__(self, path: Path, *, timeout: float = 30.0, readonly: bool = False) -> None:
        from runbook.remedies.owned import check_store

        self.path = path
        self.where = str(path)
        self.readonly = readonly
        if readonly:
            check_store(path)  # a plan in it is shown as what would run
            self._open_readonly(path, timeout)
            self.tables = self._tables()
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
            self.migrate()
        except sqlite3.Error as exc:
            raise self.error(exc) from exc
        except OSError as exc:
            if exc.errno in NO_SPACE:
                raise DiskFullError(f"no space left on {path.parent} ({exc.strerror})") from exc
            raise StoreError(f"approval store {path}: {exc.strerror or exc}") from exc
        self.tables = self._tables()

    # ------------------------------------------------------------------------- schema
    def version(self) -> int:
        tables = self._tables()
        if "schema_migrations" in tables:
            row = self._db.execute("SELECT MAX(version) FROM schema_migrations").fetchone()
            return int(row[0] or 0)
        columns = {r["name"] for r in self._db.execute("PRAGMA table_info(proposals)")}
        return store_schema.inferred_version(tables, columns)

    def migrate(self, *, to: int = store_schema.LATEST) -> None:
        """Every migration this store lacks, in one transaction (taken at once: another process
        opening it meanwhile waits, then finds it done)."""
        if self.version() >= to:  # the usual case costs a read, no write lock
            return
        with self.tx():
            current = self.version()
            if current >= to:
                return
            self._db.execute(store_schema.versions_table("sqlite"))
            now = time.time()
            for old in range(1, current + 1):  # recorded as found in a store made before
                self._db.execute(
                    "INSERT OR IGNORE INTO schema_migrations VALUES (?, ?, ?)",
                    (old, store_schema.MIGRATIONS[old - 1].name + " (found)", now),
                )
            for migration in store_schema.pending(current):
                if migration.version > to:
                    break
                for statement in migration.statements("sqlite"):
                    self._db.execute(statement)
                self._db.execute(
                    "INSERT INTO schema_migrations VALUES (?, ?, ?)",
                    (migration.version, migration.name, now),
                )

    def _tables(self) -> set[str]:
        try:
            rows = self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            return {str(r[0]) for r in rows}
        except sqlite3.Error as exc:
            raise self.error(exc) from exc

    def _open_readonly(self, path: Path, timeout: float) -> None:
        try:
            if not path.exists():
                self._db = sqlite3.connect(":memory:", isolation_level=None)
                self._db.row_factory = sqlite3.Row
                self.migrate()
                return
            uri = "file:" + urllib.parse.quote(str(path)) + "?mode=ro"
            try:
                self._db = self._readable(uri, timeout)
            except sqlite3.DatabaseError:
                # a WAL database whose shared-memory file is gone needs one made to be read; on
                # a full disk it cannot be: read the file as it is (a snapshot, no locks)
                self._db = self._readable(uri + "&immutable=1", timeout)
        except sqlite3.Error as exc:
            raise self.error(exc) from exc

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

    # ------------------------------------------------------------------------- statements
    def close(self) -> None:
        if not self.readonly:
            try:
                # the query planner's statistics, (re)made when the queue has grown: without
                # them a page of several states sorts every row it matches (a decided tab of
                # 8,500 rows: 140 ms; with them 1 ms; benchmarks/desk_queue.py)
                self._db.execute("PRAGMA optimize")
            except sqlite3.Error:
                pass
        self._db.close()

    def error(self, exc: BaseException) -> RunbookError:
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
    def tx(self) -> Iterator[None]:
        """One write transaction, taken at once (`BEGIN IMMEDIATE`). A statement that fails
        for want of space rolls the whole transaction back and is a DiskFullError; any other
        database error, a StoreError."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise self.error(exc) from exc
        try:
            yield
        except BaseException as exc:
            # SQLite may already have rolled back (SQLITE_FULL can): a second ROLLBACK would
            # raise and hide the error that matters
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise self.error(exc) from exc
            raise
        else:
            try:
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise self.error(exc) from exc

    def run(self, sql: str, args: Sequence[Any] | dict[str, Any] = ()) -> int:
        """One statement inside `tx`; its row count."""
        return int(self._db.execute(sql, args).rowcount)

    def rows(self, sql: str, args: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        try:
            return [dict(r) for r in self._db.execute(sql, args).fetchall()]
        except sqlite3.Error as exc:
            raise self.error(exc) from exc

    def lock(self, name: str) -> None:
        """Inside `tx`: writers are already one at a time (BEGIN IMMEDIATE)."""

    def integrity_check(self) -> str:
        return str(self.rows("PRAGMA integrity_check")[0]["integrity_check"])
