"""The store's tests run against both databases: a SQLite file and the private PostgreSQL
server (tests/pg). `place` is where one test's store lives, in each."""

from __future__ import annotations

from pathlib import Path

import pytest

from runbook.dburl import Location, location


@pytest.fixture(params=["sqlite", "postgresql"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Location:
    if request.param == "sqlite":
        return tmp_path / "approvals.db"
    return location(request.getfixturevalue("pg_url"))
