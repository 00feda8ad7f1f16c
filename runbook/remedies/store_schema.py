"""The approval store's schema, as numbered migrations applied in place (SQLite and PostgreSQL).

Each migration is a version, a name and its statements for each dialect; a store records the
versions applied in `schema_migrations`, and opening one applies those it lacks, in order, in
one transaction (under the database's write lock: two processes opening an old store at once
migrate it once). The versions::

    1  proposals, one pending per key, the audit anchor        (the first store, 2026-12-02)
    2  proposals.runner: the process that claimed it          (6f03041)
    3  notices: webhook notices claimed, sent, released       (2fd1a22)
    4  proposals.requested_by, approvals (two-person rule),
       indexes for the queue's pages (state, node, kind by created_at)

SQLite stores made before versions were recorded (1 to 3) carry no `schema_migrations`: their
version is read from what they hold (`runner` column: 2; `notices` table: 3). PostgreSQL keeps
the audit chain itself in `audit_entries` (version 1), since several machines append to it.

Nothing here does I/O: the store runs the statements (runbook.remedies.store).
"""

from __future__ import annotations

from dataclasses import dataclass

#: SQLite's REAL is a double; PostgreSQL's is a float4 (seconds since 1970 would lose minutes)
_TIME = {"sqlite": "REAL", "postgresql": "DOUBLE PRECISION"}


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sqlite: tuple[str, ...]
    postgresql: tuple[str, ...]

    def statements(self, dialect: str) -> tuple[str, ...]:
        return self.sqlite if dialect == "sqlite" else self.postgresql


def _proposals(dialect: str) -> str:
    t = _TIME[dialect]
    return f"""CREATE TABLE IF NOT EXISTS proposals (
    id          TEXT PRIMARY KEY,
    key         TEXT NOT NULL,
    kind        TEXT NOT NULL,
    remedy      TEXT NOT NULL,
    summary     TEXT NOT NULL,
    node        TEXT,
    root_cause  TEXT,
    playbook    TEXT,
    params      TEXT NOT NULL,
    plan        TEXT,
    target      TEXT,
    runbook     TEXT,
    vars        TEXT,
    evidence    TEXT NOT NULL,
    run_dir     TEXT,
    source      TEXT NOT NULL,
    state       TEXT NOT NULL CHECK (state IN
                  ('pending','running','succeeded','failed','denied','refused')),
    created_at  {t} NOT NULL,
    expires_at  {t} NOT NULL,
    decided_by  TEXT,
    decided_at  {t},
    reason      TEXT,
    result      TEXT,
    verification TEXT,
    updated_at  {t} NOT NULL
)"""


def _base(dialect: str) -> tuple[str, ...]:
    statements = [
        _proposals(dialect),
        "CREATE INDEX IF NOT EXISTS proposals_state ON proposals(state)",
        "CREATE UNIQUE INDEX IF NOT EXISTS proposals_one_pending ON proposals(key) "
        "WHERE state = 'pending'",
        "CREATE TABLE IF NOT EXISTS audit_head (id INTEGER PRIMARY KEY CHECK (id = 1), "
        "seq INTEGER NOT NULL, hash TEXT NOT NULL)",
    ]
    if dialect == "postgresql":
        # the chain itself: one row per entry, its JSON line exactly as hashed
        statements.append(
            "CREATE TABLE IF NOT EXISTS audit_entries (seq BIGINT PRIMARY KEY, "
            "hash TEXT NOT NULL, entry TEXT NOT NULL)"
        )
    return tuple(statements)


def _notices(dialect: str) -> tuple[str, ...]:
    t = _TIME[dialect]
    return (
        f"CREATE TABLE IF NOT EXISTS notices (proposal TEXT NOT NULL, notice TEXT NOT NULL, "
        f"claimed_at {t} NOT NULL, sent_at {t}, PRIMARY KEY (proposal, notice))",
    )


def _two_person(dialect: str) -> tuple[str, ...]:
    t = _TIME[dialect]
    return (
        "ALTER TABLE proposals ADD COLUMN requested_by TEXT",
        f"CREATE TABLE IF NOT EXISTS approvals (proposal TEXT NOT NULL, approver TEXT NOT NULL, "
        f"at {t} NOT NULL, PRIMARY KEY (proposal, approver))",
        # the queue's pages: a state (or all) newest first, by node or kind within it
        "DROP INDEX IF EXISTS proposals_state",
        "CREATE INDEX IF NOT EXISTS proposals_state_created ON proposals(state, created_at)",
        "CREATE INDEX IF NOT EXISTS proposals_created ON proposals(created_at)",
        "CREATE INDEX IF NOT EXISTS proposals_node ON proposals(node, created_at)",
        "CREATE INDEX IF NOT EXISTS proposals_kind ON proposals(kind, created_at)",
    )


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "proposals and the audit anchor", _base("sqlite"), _base("postgresql")),
    Migration(
        2,
        "the claiming process",
        ("ALTER TABLE proposals ADD COLUMN runner TEXT",),
        ("ALTER TABLE proposals ADD COLUMN runner TEXT",),
    ),
    Migration(3, "notices", _notices("sqlite"), _notices("postgresql")),
    Migration(
        4,
        "requester, approvals and the queue's indexes",
        _two_person("sqlite"),
        _two_person("postgresql"),
    ),
)

LATEST = MIGRATIONS[-1].version

VERSIONS_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
    "name TEXT NOT NULL, applied_at {t} NOT NULL)"
)


def versions_table(dialect: str) -> str:
    return VERSIONS_TABLE.format(t=_TIME[dialect])


def inferred_version(tables: set[str], proposal_columns: set[str]) -> int:
    """The version of a SQLite store made before versions were recorded, from what it holds."""
    if "proposals" not in tables:
        return 0
    if "notices" in tables:
        return 3
    if "runner" in proposal_columns:
        return 2
    return 1


def pending(current: int) -> tuple[Migration, ...]:
    """The migrations a store at version `current` lacks, in order."""
    return tuple(m for m in MIGRATIONS if m.version > current)
