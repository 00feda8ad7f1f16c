"""A job verdict as the lines `runbook run --job` prints: the root cause and its scope, the
statement, each node with its clock offset, the outliers, and where the report is."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


def summary_lines(verdict: Mapping[str, Any], run_dir: Path) -> list[str]:
    job = verdict.get("job") or {}
    shared = ", shared cause" if verdict.get("scope") == "shared" else ""
    lines = [
        f"job {job.get('ref')}: {verdict['root_cause']} ({verdict['confidence']}{shared})",
        f"  {verdict.get('statement')}",
    ]
    for node in verdict.get("nodes") or []:
        clock = node.get("clock")
        offset = (
            f"clock {clock['offset_s']:+.3f}s ±{clock['uncertainty_s'] * 1000:.0f}ms"
            if clock
            else "clock not measured"
        )
        what = node.get("root_cause") or f"{node.get('status')}: {node.get('error')}"
        lines.append(f"  {node['node']:<24} {what:<22} {offset}")
    lines.extend(f"  outlier: {outlier['summary']}" for outlier in verdict.get("outliers") or [])
    lines.append(f"job report: {run_dir / 'job.md'}")
    lines.append(f"run directory: {run_dir}")
    return lines
