"""sweep.md: a summary table by root cause, then each host's findings, worst first, then the
hosts that were not swept. Pure."""

from __future__ import annotations

from typing import Any

from runbook.output import count
from runbook.render.sweep_summary import names
from runbook.sweep.results import (
    FAILING,
    NOT_SWEPT,
    SEVERITY,
    HostResult,
    HostStatus,
    SweepResult,
    ordered_findings,
    status_noun,
)
from runbook.verdict import EvidenceRef

#: hosts named per table row before "… and N more"
ROW_NAMES = 12



def _cell(text: Any) -> str:
    """Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _names(hosts: list[HostResult]) -> str:
    return names([h.host for h in hosts], ROW_NAMES)


def _anomaly(first: EvidenceRef | None) -> str:
    if not first:
        return "none recorded"
    when = f" at {first.time}" if first.time else ""
    text = " ".join((first.text or "").split())[:240].replace("`", "'")
    return f"{first.where}{when}: `{text}`" if text else first.where + when


def render(sweep: SweepResult) -> str:
    counts = sweep.counts()
    total = len(sweep.hosts)
    lines = [
        f"# Sweep: {sweep.runbook} over {sweep.source}",
        "",
        f"{count(total, 'host')}, {sweep.duration_s:.1f} s"
        + (f", forks {sweep.forks}" if sweep.forks else "")
        + (f", shard {sweep.shard}" if sweep.shard else "")
        + (f", shards {', '.join(sweep.shards)}" if sweep.shards else "")
        + f"; started {sweep.started_at or '?'}, finished {sweep.finished_at or '?'}.",
        "",
        ", ".join(f"**{n}** {status_noun(status, n)}" for status, n in counts.items() if n) + ".",
    ]
    if sweep.missing_shards:
        lines += ["", f"**Missing shards: {', '.join(sweep.missing_shards)}** (not swept)."]
    reused = sweep.reused()
    if reused:
        lines += [
            "",
            f"Resumed: the results of {count(len(reused), 'host')} (marked *reused*) come from the "
            "interrupted "
            f"sweep started {sweep.resumed_from or '?'}: {_cell(_names(reused))}.",
        ]

    lines += ["", "## By root cause", "", "| root cause | hosts | which |", "|---|---:|---|"]
    by_cause: dict[str, list[HostResult]] = {}
    for host in sweep.hosts:
        key = host.root_cause if host.verdict is not None else host.status.value
        by_cause.setdefault(key or "inconclusive", []).append(host)
    order = [*SEVERITY, *(s.value for s in HostStatus)]
    for cause in sorted(by_cause, key=lambda c: (order.index(c) if c in order else 0, c)):
        hosts = by_cause[cause]
        lines.append(f"| {_cell(cause)} | {len(hosts)} | {_cell(_names(hosts))} |")

    findings = ordered_findings(sweep.hosts)
    lines += ["", "## Findings, worst first", ""]
    if not findings:
        lines.append("None: every swept host is healthy.")
    for host in findings:
        verdict = host.verdict
        if verdict is None:
            continue
        mark = " *reused*" if host.reused else ""
        lines += [f"### {host.host}: {verdict.root_cause} ({verdict.confidence}){mark}", ""]
        if verdict.surfaced_as:
            lines.append(f"- surfaced as: `{_cell(verdict.surfaced_as)}`")
        lines.append(f"- first anomaly: {_anomaly(verdict.first_anomaly)}")
        for link in verdict.chain:
            lines.append(f"- [{link.stage}] {_cell(link.finding)}")
        if verdict.proposals:
            kinds = ", ".join(p.kind for p in verdict.proposals)
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
