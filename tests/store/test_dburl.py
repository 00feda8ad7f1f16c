"""`--db` in one place (runbook.dburl): a path or a PostgreSQL URL, its password never shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from runbook.config import load
from runbook.dburl import PostgresURL, for_record, location
from runbook.errors import UsageError


def test_a_url_is_a_postgresql_store_and_anything_else_a_sqlite_path(tmp_path: Path) -> None:
    assert location("postgresql://runbook@db.example.org:5432/queue") == PostgresURL(
        "postgresql://runbook@db.example.org:5432/queue"
    )
    assert isinstance(location("postgres://u@h/q"), PostgresURL)
    assert location(str(tmp_path / "a.db")) == tmp_path / "a.db"
    assert location("~/x.db") == Path.home() / "x.db"
    with pytest.raises(UsageError, match="not a store this tool opens"):
        location("mysql://u:pw@h/q")
    with pytest.raises(UsageError, match="port is not a number"):
        location("postgresql://u:pw@h:abc/q")


def test_the_password_never_shows_in_str_repr_or_an_error_text() -> None:
    url = PostgresURL("postgresql://runbook:p%40ss-w0rd@db:5432/queue?sslmode=require")
    shown = [str(url), repr(url), f"{url}", url.redacted()]
    for text in shown:
        assert "p%40ss-w0rd" not in text and "p@ss-w0rd" not in text, text
    assert str(url) == "postgresql://runbook:<REDACTED>@db:5432/queue?sslmode=require"
    assert url.without_password() == "postgresql://runbook@db:5432/queue?sslmode=require"
    assert "p@ss-w0rd" not in url.scrub('FATAL: password "p@ss-w0rd" for runbook')
    socket = location("postgresql:///queue?host=/run/postgresql&password=hunter2")
    assert str(socket) == "postgresql:///queue?host=/run/postgresql&password=<REDACTED>"
    query = PostgresURL("postgresql://db/queue?user=runbook&password=hunter2")
    assert "hunter2" not in str(query) and "hunter2" not in query.without_password()


def test_a_run_records_a_url_without_its_password_and_a_path_made_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert for_record("postgresql://runbook:hunter2@db/queue") == "postgresql://runbook@db/queue"
    assert for_record("a.db") == str(tmp_path / "a.db")
    assert for_record(None) is None


def test_the_config_takes_a_url_and_keeps_local_files_in_the_state_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUNBOOK_STATE_DIR", str(tmp_path / "state"))
    config = tmp_path / "c.yaml"
    config.write_text("approvals:\n  db: postgresql://runbook@db:5432/queue\n")
    cfg = load(config)
    assert isinstance(cfg.db, PostgresURL) and cfg.local_dir == tmp_path / "state"
    assert load(config, db=str(tmp_path / "x.db")).db == tmp_path / "x.db"


def test_a_url_without_a_host_reaches_the_server_on_its_local_socket(pg_server) -> None:  # type: ignore[no-untyped-def]
    from runbook.remedies.store import Store

    name = pg_server.new_database()
    url = f"postgresql://postgres@/{name}?host={pg_server.root}&port={pg_server.port}"
    with Store(location(url)) as store:
        assert store.count(None) == 0 and store.where == url
