"""A finished sweep as the lines `runbook sweep`, `sweep-merge` and `analyze-dir` print: the
counts and rate, reused and missing parts, findings worst first, inconclusive hosts, hosts not
swept, and where the reports are."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from runbook.output import count
from runbook.printable import shortened
from runbook.sweep.results import (
    NOT_SWEPT,
    HostResult,
    HostStatus,
    SweepResult,
    ordered_findings,
    status_noun,
)


def names(hosts: list[str], limit: int = 20) -> str:
    """At most `limit` host names, then how many more."""
    shown = ", ".join(hosts[:limit])
    return shown + (f", … and {len(hosts) - limit} more" if len(hosts) > limit else "")


def summary_lines(sweep: SweepResult, reports: Iterable[Path]) -> list[str]:
    counts = (
        ", ".join(f"{n} {status_noun(s, n)}" for s, n in sweep.counts().items() if n)
        or "no hosts"
    )
    swept = len(sweep.hosts) - len(sweep.reused())
    rate = swept / sweep.duration_s if sweep.duration_s > 0 else 0.0
    lines = [
        f"{sweep.mode} of {count(len(sweep.hosts), 'host')} in {sweep.duration_s:.1f}s "
        f"({rate:.1f} hosts/s): {counts}"
    ]
    reused = sweep.reused()
    if reused:
        lines.append(
            f"results of {count(len(reused), 'host')} reused from the interrupted sweep "
            f"started {sweep.resumed_from}: {names([h.host for h in reused])}"
        )
    if sweep.missing_shards:
        lines.append(f"missing shards: {', '.join(sweep.missing_shards)}")
    failing = ordered_findings(sweep.hosts)
    for heading, status in (
        ("findings, worst first:", HostStatus.FINDING),
        ("inconclusive (not cleared: look at these nodes):", HostStatus.INCONCLUSIVE),
    ):
        hosts = [h for h in failing if h.status is status]
        if hosts:
            lines.append(heading)
        lines.extend(_finding_line(host) for host in hosts if host.verdict is not None)
    lines.extend(
        f"  {host.host:<24} {host.status.value}: {host.error}"
        for host in sweep.hosts
        if host.status in NOT_SWEPT
    )
    lines.append("reports: " + " ".join(str(p) for p in reports))
    return lines


def _finding_line(host: HostResult) -> str:
    assert host.verdict is not None
    first = host.verdict.first_anomaly
    where = first.where if first and first.line else ""
    text = shortened(" ".join(((first.text if first else None) or "").split()), 100)
    return f"  {host.host:<24} {host.verdict.root_cause} ({host.verdict.confidence})" + (
        f"  {where} {text}" if where or text else ""
    )
