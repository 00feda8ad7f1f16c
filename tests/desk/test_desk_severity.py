"""A proposal's severity on the desk is its root cause's (runbook.metrics.severity): the
queue's severity filter picks the proposals of that severity, and each row names the severity
it was picked for. The desk in process (tests/desk/inprocess.py), real SQLite."""

from __future__ import annotations

import re
from pathlib import Path

from tests.desk import inprocess
from tests.desk.queueing import enqueue

ROW = re.compile(r'<li class="item sev-(\w+)">\s*<a class="id" href="/p/(\w+)">.*?'
                 r'<span class="sev">(\w+)</span>', re.S)  # fmt: skip


def rows(html: str) -> dict[str, tuple[str, str]]:
    """proposal id → (the row's severity class, the severity it shows)."""
    return {pid: (css, shown) for css, pid, shown in ROW.findall(html)}


def test_filtering_the_queue_by_severity_returns_the_proposals_of_that_root_cause_severity(
    tmp_path: Path,
) -> None:
    cfg = inprocess.config(tmp_path)
    db = str(cfg.db)
    critical = [enqueue(db, kind="node-drain", node=f"gpu-node-{n}", n=n,
                        root_cause="gpu-hardware") for n in range(2)]  # fmt: skip
    warning = [enqueue(db, node=f"gpu-node-{n}", n=10 + n) for n in range(3)]  # shm-exhausted
    info = [enqueue(db, node="gpu-node-9", n=20, root_cause="inconclusive")]
    app = inprocess.build(cfg)
    every, *by = inprocess.get(
        app, "/queue", "/queue?severity=critical", "/queue?severity=warning",
        "/queue?severity=info",
    )  # fmt: skip
    assert len(rows(every.text)) == 6
    for page, wanted, severity in zip(by, (critical, warning, info),
                                      ("critical", "warning", "info"), strict=True):  # fmt: skip
        assert page.status_code == 200
        found = rows(page.text)
        assert sorted(found) == sorted(wanted), (severity, found)
        assert set(found.values()) == {(severity, severity)}, (severity, found)
