"""The approval store's PostgreSQL backend: one queue for several machines.

Sweep shards, the desk and on-call laptops open the same `postgresql://USER@HOST:PORT/DBNAME`.
What holds across machines, and how:

- a claim is one conditional `UPDATE … WHERE state = 'pending'`: under READ COMMITTED a second
  claimer waits on the first one's row lock, then finds the row no longer pending (0 rows);
- queueing the same finding twice at once takes a transaction-scoped advisory lock on its key
  (the partial unique index on pending keys stays the last word);
- the audit chain lives in the database (`audit_entries`): an append locks that table against
  other appenders (SHARE ROW EXCLUSIVE conflicts with itself, not with readers), reads the last
  entry, inserts the next and moves the anchor, in one transaction, so two writers on two
  machines never fork it;
- migrations run one process at a time (a session advisory lock), in one transaction
  (PostgreSQL's DDL is transactional).

The password is never shown: errors name the URL with `<REDACTED>` and have the password scrubbed
from libpq's text. A server that is down, unreachable or refuses the login is a
StoreUnreachable (exit 3, as an unreachable node); a full disk on the server a DiskFullError.
"""

from __future__ import annotations

import re
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

import psycopg
from psycopg.rows import dict_row

from runbook.dburl import PostgresURL
from runbook.errors import DiskFullError, RunbookError
from runbook.remedies import store_schema
from runbook.remedies.store_errors import StoreError, StoreUnreachable

#: the advisory lock migrations take (any constant of our own)
_MIGRATION_LOCK = 0x72756E62  # "runb"
_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


@lru_cache(maxsize=256)
def to_pyformat(sql: str) -> str:
    """The store's statements are written for SQLite (`?`, `:name`); psycopg's are `%s`,
    `%(name)s`. None of ours holds a `?`, `%` or `:` in a literal."""
    sql = sql.replace("%", "%%").replace("?", "%s")
    return _NAMED.sub(r"%(\1)s", sql)


class PostgresBackend:
    dialect = "postgresql"

    def __init__(self, url: PostgresURL, *, timeout: float = 30.0, readonly: bool = False) -> None:
        self.url = url
        self.where = url.redacted()
        options: dict[str, Any] = {"autocommit": True, "row_factory": dict_row}
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url.url).query))
        if "connect_timeout" not in query:
            options["connect_timeout"] = max(1, int(min(timeout, 10)))
        if "application_name" not in query:
            options["application_name"] = "nccl-runbook"
        # settings given at the login cost no round trip: a statement stuck on a lock another
        # machine holds gives up, as SQLite's does; what only reads (list, show, audit verify)
        # cannot write by mistake
        settings = [query.get("options", ""), f"-c lock_timeout={int(timeout * 1000)}"]
        if readonly:
            settings.append("-c default_transaction_read_only=on")
        options["options"] = " ".join(filter(None, settings))
        self.readonly = readonly
        try:
            self._db: psycopg.Connection[dict[str, Any]] = psycopg.connect(url.url, **options)
        except psycopg.OperationalError as exc:
            raise StoreUnreachable(self._message(exc)) from None
        except psycopg.Error as exc:
            raise StoreError(self._message(exc)) from None
        try:
            self.tables = self._tables()
            if self._version(self.tables) < store_schema.LATEST:
                self.migrate()
                self.tables = self._tables()
        except psycopg.Error as exc:
            self._db.close()
            raise self.error(exc) from None

    def _message(self, exc: BaseException) -> str:
        text = self.url.scrub(" ".join(str(exc).split()))
        return f"approval store {self.where}: {text}"

    # ------------------------------------------------------------------------- schema
    def version(self) -> int:
        return self._version(self._tables())

    def _version(self, tables: set[str]) -> int:
        if "schema_migrations" not in tables:
            return 0
        got = self._db.execute("SELECT MAX(version) AS v FROM schema_migrations").fetchone()
        return int((got or {}).get("v") or 0)

    def migrate(self, *, to: int = store_schema.LATEST) -> None:
        """Every migration this database lacks, in one transaction, one process at a time:
        the lock is the session's and taken before the version is read, so the read is a
        transaction of its own that sees what a process migrating first committed (a lock
        taken inside the migrating transaction would leave that transaction's catalog view
        as it was before the wait)."""
        if self.version() >= to:
            return
        self._db.execute("SELECT pg_advisory_lock(%s)", (_MIGRATION_LOCK,))
        try:
            current = self.version()
            if current >= to:
                return
            if self.readonly:  # a schema brought up to date is no write of the queue's
                self._db.execute("SET default_transaction_read_only = off")
            with self._db.transaction():
                self._db.execute(store_schema.versions_table("postgresql"))
                for migration in store_schema.pending(current):
                    if migration.version > to:
                        break
                    for statement in migration.statements("postgresql"):
                        self._db.execute(statement)
                    self._db.execute(
                        "INSERT INTO schema_migrations VALUES (%s, %s, %s)",
                        (migration.version, migration.name, time.time()),
                    )
        finally:
            self._db.execute("SELECT pg_advisory_unlock(%s)", (_MIGRATION_LOCK,))
            if self.readonly:
                self._db.execute("SET default_transaction_read_only = on")

    def _tables(self) -> set[str]:
        rows = self._db.execute(
            "SELECT relname AS t FROM pg_catalog.pg_class "
            "WHERE relnamespace = current_schema()::regnamespace AND relkind IN ('r', 'p')"
        ).fetchall()
        return {str(r["t"]) for r in rows}

    # ------------------------------------------------------------------------- statements
    def close(self) -> None:
        self._db.close()

    def error(self, exc: BaseException) -> RunbookError:
        if isinstance(exc, RunbookError):
            return exc
        state = getattr(exc, "sqlstate", None) or ""
        message = self._message(exc)
        if state == "53100":  # disk_full
            return DiskFullError(f"no space left on the database server ({message})")
        if isinstance(exc, psycopg.OperationalError) and (
            not state or state.startswith(("08", "57P", "28"))
        ):
            return StoreUnreachable(message)
        return StoreError(message)

    @contextmanager
    def tx(self) -> Iterator[None]:
        try:
            with self._db.transaction():
                yield
        except psycopg.Error as exc:
            raise self.error(exc) from None

    def run(self, sql: str, args: Sequence[Any] | dict[str, Any] = ()) -> int:
        cursor = self._db.execute(to_pyformat(sql), args or None)
        return int(cursor.rowcount)

    def rows(self, sql: str, args: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        try:
            return list(self._db.execute(to_pyformat(sql), args or None).fetchall())
        except psycopg.Error as exc:
            raise self.error(exc) from None

    def lock(self, name: str) -> None:
        """Inside `tx`: one writer at a time for `name`, on every machine, until the
        transaction ends."""
        self._db.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (name,))

    def integrity_check(self) -> str:
        return "ok"  # the server keeps its own pages; there is no PRAGMA to ask

    # ------------------------------------------------------------------------- audit chain
    def append_audit(self, build: Any) -> dict[str, Any]:
        """`build(seq, prev)` makes the next entry; it is inserted after the last one, with
        the anchor moved, while no other appender can read the last entry."""
        with self.tx():
            self._db.execute("LOCK TABLE audit_entries IN SHARE ROW EXCLUSIVE MODE")
            last = self._db.execute(
                "SELECT seq, hash FROM audit_entries ORDER BY seq DESC LIMIT 1"
            ).fetchone()
            entry, line = build(int(last["seq"]) + 1 if last else 1, last["hash"] if last else None)
            self._db.execute(
                "INSERT INTO audit_entries (seq, hash, entry) VALUES (%s, %s, %s)",
                (entry["seq"], entry["hash"], line),
            )
            self._db.execute(
                "INSERT INTO audit_head (id, seq, hash) VALUES (1, %s, %s) "
                "ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash "
                "WHERE excluded.seq > audit_head.seq",
                (entry["seq"], entry["hash"]),
            )
        return dict(entry)

    def audit_lines(self) -> Iterator[str]:
        """The chain's entries as stored, in order (a server-side cursor: a long trail is not
        read into memory at once)."""
        try:
            with self._db.transaction(), self._db.cursor(name="audit_entries") as cursor:
                cursor.execute("SELECT entry FROM audit_entries ORDER BY seq")
                for row in cursor:
                    yield str(row["entry"])
        except psycopg.Error as exc:
            raise self.error(exc) from None
