"""sweep.md: a summary table by root cause, then each host's findings, worst first, then the
hosts that were not swept. Pure.

Host names, log lines and findings go through runbook.render.markdown_text: a line of a job's
log renders as text, never as a tag, a link or an image."""

from __future__ import annotations

from typing import Any

from runbook.output import count
from runbook.printable import printable
from runbook.render import markdown_text as md
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
    """Markdown table cell: one line, escaped (pipes too)."""
    return md.cell(text)


def _names(hosts: list[HostResult]) -> str:
    return names([h.host for h in hosts], ROW_NAMES)


def _anomaly(first: EvidenceRef | None) -> str:
    if not first:
        return "none recorded"
    where = md.code(first.where)
    when = f" at {md.text(first.time)}" if first.time else ""
    text = " ".join((first.text or "").split())[:240]
    return f"{where}{when}: {md.code(text)}" if text else where + when


def render(sweep: SweepResult) -> str:
    counts = sweep.counts()
    total = len(sweep.hosts)
    lines = [
        f"# Sweep: {md.text(sweep.runbook)} over {md.text(sweep.source)}",
        "",
        f"{count(total, 'host')}, {sweep.duration_s:.1f} s"
        + (f", forks {sweep.forks}" if sweep.forks else "")
        + (f", shard {md.text(sweep.shard)}" if sweep.shard else "")
        + (f", shards {md.text(', '.join(sweep.shards))}" if sweep.shards else "")
        + f"; started {md.text(sweep.started_at or '?')}, "
        f"finished {md.text(sweep.finished_at or '?')}.",
        "",
        ", ".join(f"**{n}** {status_noun(status, n)}" for status, n in counts.items() if n) + ".",
    ]
    if sweep.missing_shards:
        missing = md.text(", ".join(sweep.missing_shards))
        lines += ["", f"**Missing shards: {missing}** (not swept)."]
    reused = sweep.reused()
    if reused:
        lines += [
            "",
            f"Resumed: the results of {count(len(reused), 'host')} (marked *reused*) come from the "
            "interrupted "
            f"sweep started {md.text(sweep.resumed_from or '?')}: {md.text(_names(reused))}.",
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
        lines += [
            f"### {md.text(host.host)}: {md.text(verdict.root_cause)} "
            f"({md.text(verdict.confidence)}){mark}",
            "",
        ]
        if verdict.surfaced_as:
            lines.append(f"- surfaced as: {md.code(verdict.surfaced_as)}")
        lines.append(f"- first anomaly: {_anomaly(verdict.first_anomaly)}")
        for link in verdict.chain:
            lines.append(f"- [{md.text(link.stage)}] {md.text(link.finding)}")
        if verdict.proposals:
            kinds = md.text(", ".join(p.kind for p in verdict.proposals))
            queued = f" (queued: {md.text(', '.join(host.queued))})" if host.queued else ""
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
        lines += ["", f"Healthy: {md.text(_names(healthy))}."]
    return printable("\n".join(lines) + "\n")
