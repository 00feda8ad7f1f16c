"""The desk's pages read through one read-only store per worker thread, kept between pages
(runbook.desk.readers), not one opened for each page: counted at the database drivers
(sqlite3.connect, psycopg.connect, the real ones, wrapped to count), on a real SQLite file and
a real PostgreSQL database (tests/pg). A proposal decided by another process between two pages
shows decided on the next: a kept store reads the queue as it is."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest

from runbook.remedies.approval import Desk
from tests.desk import inprocess
from tests.desk.queueing import enqueue

PAGES = 20


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_twenty_pages_open_the_store_once_per_worker_thread_and_see_each_decision(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = request.getfixturevalue("pg_url") if backend == "postgresql" else None
    cfg = inprocess.config(tmp_path, db=db)
    pids = [enqueue(str(cfg.db), node=f"gpu-node-{n}", n=n) for n in range(3)]
    app = inprocess.build(cfg)
    try:
        read_pages(app, cfg, pids, monkeypatch)
    finally:
        app.state.desk.readers.close()


def read_pages(app: Any, cfg: Any, pids: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    inprocess.get(app, "/queue")  # the schema is read, the templates compiled
    opened: list[Any] = []
    for module in (sqlite3, psycopg):
        real = module.connect

        def counted(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            opened.append(args[:1])
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, "connect", counted)
    pages = inprocess.get(app, *["/queue", f"/p/{pids[0]}"] * (PAGES // 2))
    assert [p.status_code for p in pages] == [200] * PAGES
    assert "3 pending proposals" in pages[0].text
    assert len(opened) <= 2, opened  # a thread that had none yet: at most one more
    with Desk(cfg) as other:  # another process's decision, through its own store
        other.deny(pids[0], reason="freeze")
    pending, decided, page = inprocess.get(app, "/queue", "/queue?tab=decided", f"/p/{pids[0]}")
    assert "2 pending proposals" in pending.text
    assert "1 decided proposal" in decided.text and pids[0] in decided.text
    assert "denied" in page.text and "freeze" in page.text
