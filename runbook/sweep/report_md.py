"""sweep.md: a summary table by root cause, then each host's findings, worst first, then the
hosts that were not swept. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runbook.sweep.results import (
    FAILING,
    NOT_SWEPT,
    SEVERITY,
    HostResult,
    Status,
    SweepResult,
    ordered_findings,
)

#: hosts named per table row before "… and N more"
ROW_NAMES = 12


def _cell(text: Any) -> str:
    """Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _names(hosts: list[HostResult]) -> str:
    names = [h.host for h in hosts]
    shown = ", ".join(names[:ROW_NAMES])
    return shown + (f", … and {len(names) - ROW_NAMES} more" if len(names) > ROW_NAMES else "")


def _anomaly(first: Mapping[str, Any] | None) -> str:
    if not first:
        return "none recorded"
    where = str(first.get("source") or "?")
    if first.get("line"):
        where += f":{first['line']}"
    when = f" at {first['time']}" if first.get("time") else ""
    text = " ".join(str(first.get("text") or "").split())[:240].replace("`", "'")
    return f"{where}{when}: `{text}`" if text else where + when


def render(sweep: SweepResult) -> str:
    counts = sweep.counts()
    total = len(sweep.hosts)
    lines = [
        f"# Sweep: {sweep.runbook} over {sweep.source}",
        "",
        f"{total} hosts, {sweep.duration_s:.1f} s"
        + (f", forks {sweep.forks}" if sweep.forks else "")
        + (f", shard {sweep.shard}" if sweep.shard else "")
        + (f", shards {', '.join(sweep.shards)}" if sweep.shards else "")
        + f"; started {sweep.started_at or '?'}, finished {sweep.finished_at or '?'}.",
        "",
        ", ".join(f"**{n}** {status}" for status, n in counts.items() if n) + ".",
    ]
    if sweep.missing_shards:
        lines += ["", f"**Missing shards: {', '.join(sweep.missing_shards)}** (not swept)."]
    reused = sweep.reused()
    if reused:
        lines += [
            "",
            f"Resumed: {len(reused)} hosts' results (marked *reused*) come from the interrupted "
            f"sweep started {sweep.resumed_from or '?'}: {_cell(_names(reused))}.",
        ]

    lines += ["", "## By root cause", "", "| root cause | hosts | which |", "|---|---:|---|"]
    by_cause: dict[str, list[HostResult]] = {}
    for host in sweep.hosts:
        key = host.root_cause if host.verdict is not None else host.status.value
        by_cause.setdefault(key or "inconclusive", []).append(host)
    order = [*SEVERITY, *(s.value for s in Status)]
    for cause in sorted(by_cause, key=lambda c: (order.index(c) if c in order else 0, c)):
        hosts = by_cause[cause]
        lines.append(f"| {_cell(cause)} | {len(hosts)} | {_cell(_names(hosts))} |")

    findings = ordered_findings(sweep.hosts)
    lines += ["", "## Findings, worst first", ""]
    if not findings:
        lines.append("None: every swept host is healthy.")
    for host in findings:
        verdict = host.verdict or {}
        mark = " *reused*" if host.reused else ""
        lines += [
            f"### {host.host}: {verdict.get('root_cause')} ({verdict.get('confidence')}){mark}",
            "",
        ]
        if verdict.get("surfaced_as"):
            lines.append(f"- surfaced as: `{_cell(verdict['surfaced_as'])}`")
        lines.append(f"- first anomaly: {_anomaly(verdict.get('first_anomaly'))}")
        for link in verdict.get("chain") or []:
            lines.append(f"- [{link.get('stage')}] {_cell(link.get('finding', ''))}")
        proposals = [p for p in verdict.get("proposals") or [] if p.get("kind")]
        if proposals:
            kinds = ", ".join(str(p["kind"]) for p in proposals)
            queued = f" (queued: {', '.join(host.queued)})" if host.queued else ""
            lines.append(f"- proposals: {kinds}{queued}")
        lines.append("")
    if findings:
        lines.pop()

    not_swept = [h for h in sweep.hosts if h.status in NOT_SWEPT]
    if not_swept:
        lines += ["", "## Not swept", "", "| host | status | why |", "|---|---|---|"]
        for host in sorted(not_swept, key=lambda h: (h.status.value, h.host)):
            why = (host.error or "") + (" (reused)" if host.reused else "")
            lines.append(f"| {_cell(host.host)} | {host.status.value} | {_cell(why)} |")
    healthy = [h for h in sweep.hosts if h.status not in FAILING | NOT_SWEPT]
    if healthy:
        lines += ["", f"Healthy: {_names(healthy)}."]
    return "\n".join(lines) + "\n"
