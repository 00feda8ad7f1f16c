"""pytest fixtures of the private PostgreSQL server (tests/pg/server.py), registered for the
whole suite in tests/conftest.py: `pg_server` (one per session, stopped and removed at its end,
failed or not), `pg_url` (a fresh database of it for one test) and `store_place` (a test's
approval store on each database in turn: a SQLite file, then a PostgreSQL database)."""

from __future__ import annotations

import atexit
from collections.abc import Iterator
from pathlib import Path

import pytest

from runbook.dburl import Location, location
from tests.pg.server import PgServer, ServerMissing, start


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    try:
        server = start()
    except ServerMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    atexit.register(server.stop)  # a session killed past pytest's teardown still cleans up
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server: PgServer) -> str:
    """`postgresql://postgres@127.0.0.1:PORT/t_…`: an empty database of its own."""
    return pg_server.url(pg_server.new_database())


@pytest.fixture(params=["sqlite", "postgresql"])
def store_place(request: pytest.FixtureRequest, tmp_path: Path) -> Location:
    """Where a test's approval store lives: a SQLite file, then a PostgreSQL database."""
    if request.param == "sqlite":
        return tmp_path / "approvals.db"
    return location(request.getfixturevalue("pg_url"))
