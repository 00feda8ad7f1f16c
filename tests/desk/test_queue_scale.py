"""The queue page over a big queue (real SQLite, filled through the store's own writes by
benchmarks/desk_queue.py's filler): a tab of several states is read in the order of the
created-at index and stops at the page, instead of sorting every row it matches — the store
leaves the query planner its statistics when a writer closes (`PRAGMA optimize`). The
timing itself is the benchmark's (`python -m benchmarks.desk_queue`), not a test's."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from benchmarks.desk_queue import fill
from runbook.remedies.store import Store

DECIDED = ("running", "succeeded", "failed", "denied", "refused")


def test_a_page_of_the_decided_tab_reads_in_index_order_instead_of_sorting_every_row(
    tmp_path: Path,
) -> None:
    db = tmp_path / "approvals.db"
    counts = fill(str(db), 600)
    assert counts["ran"] + counts["denied"] > 400
    with Store(str(db), readonly=True) as store:
        page = store.page(DECIDED, limit=50)
        assert len(page) == 50
        assert [p.created_at for p in page] == sorted((p.created_at for p in page), reverse=True)
    # the statement the page runs, planned on a connection of its own
    marks = ",".join("?" * len(DECIDED))
    sql = (f"SELECT * FROM proposals WHERE state IN ({marks}) "
           "ORDER BY created_at DESC, id DESC LIMIT 50 OFFSET 0")  # fmt: skip
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, DECIDED)]
    assert any("proposals_created" in step for step in plan), plan
    # a sort of the page's ties only, never of every decided row
    assert "USE TEMP B-TREE FOR ORDER BY" not in plan, plan
