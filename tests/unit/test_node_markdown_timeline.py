"""The report's timeline table (runbook/render/node_markdown.py): times under "Timeline (UTC)"
spelled with Z as the rest of the report spells UTC, and a long event cut with "…"."""

from __future__ import annotations

from runbook.render.node_markdown import render
from runbook.verdict import Verdict


def test_the_timeline_spells_utc_with_z_and_says_where_an_event_was_cut() -> None:
    long = "NCCL WARN " + "x" * 300
    verdict = Verdict.from_json({
        "format": 1, "node": "gpu-node-01", "root_cause": "inconclusive", "confidence": "low",
        "chain": [], "ruled_out": [], "proposals": [], "stages": [],
        "timeline": [
            {"time": "2026-12-06T08:11:39.900000+00:00", "source": "app/rank-0.log", "line": 2,
             "text": "ncclCommInitRank failed", "anomaly": True},
            {"time": "2026-12-06T08:11:40+00:00", "source": "nccl/n.log", "line": 6,
             "text": long, "anomaly": False},
        ],
    })  # fmt: skip
    text = render(verdict)
    table = text.split("## Timeline (UTC)", 1)[1]
    rows = [line for line in table.splitlines() if line.startswith("| 2026")]
    assert rows[0].startswith("| 2026-12-06T08:11:39.900000Z | app/rank-0.log:2 |"), rows
    assert rows[1].startswith("| 2026-12-06T08:11:40Z | nccl/n.log:6 |"), rows
    assert "+00:00" not in table
    assert f"`{long[:159]}…`" in rows[1], rows[1]  # 160 characters, the last one "…"
