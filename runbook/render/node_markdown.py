"""The verdict as a Markdown incident note, in the shape of a good postmortem: the conclusion
first, then the evidence chain as arrows, the arithmetic behind the figures, the timeline, what
was ruled out and why, the fixes in the order to apply them, and every stage.

Whatever came from evidence (a node's name, a log line, a finding quoting one) goes through
runbook.render.markdown_text: in a code span or a fence nothing in it can close, or escaped as
prose; the report renders it as text, never as a tag, a link or an image."""

from __future__ import annotations

from collections.abc import Iterator

from runbook.printable import printable, shortened
from runbook.render import markdown_text as md
from runbook.timestamps import z_spelled
from runbook.verdict import Verdict

#: rows of the timeline shown (the JSON verdict keeps them all)
TIMELINE_ROWS = 40


def _gib(value: float) -> str:
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return text


def arithmetic(verdict: Verdict) -> Iterator[str]:
    """The conversions behind the figures, written out so a reader can check them."""
    dmesg = verdict.facts_of("dmesg")
    seen: set[tuple[int, int]] = set()
    for oom in dmesg.get("memcg_ooms", []) or []:
        usage, limit = oom.get("usage_bytes"), oom.get("limit_bytes")
        if not isinstance(usage, int) or not isinstance(limit, int) or (usage, limit) in seen:
            continue
        seen.add((usage, limit))
        kib_u, kib_l = usage // 1024, limit // 1024
        relation = "=" if usage >= limit else "<"
        yield (
            f"`memory: usage {kib_u}kB, limit {kib_l}kB` (dmesg.txt:{oom.get('line')}): "
            f"{kib_u} KiB ÷ 1024 ÷ 1024 = {_gib(kib_u / 1024**2)} GiB {relation} "
            f"limit {_gib(kib_l / 1024**2)} GiB"
            + (
                " — usage equals the limit: a cgroup OOM, not a node-wide one"
                if relation == "="
                else ""
            )
        )
    page_size = 4096
    shown: set[int] = set()
    for pin in dmesg.get("pin_failures", []) or []:
        pages, size = pin.get("pages"), pin.get("bytes")
        if not isinstance(pages, int) or not isinstance(size, int) or pages in shown:
            continue
        shown.add(pages)
        page_size = size // pages if pages else page_size
        yield (
            f"`size of {pages:#x} pages` (dmesg.txt:{pin.get('line')}): {pages:#x} pages × "
            f"{page_size // 1024} KiB = {_gib(size / 1024**3)} GiB the driver could not pin"
        )
    cgroup = verdict.facts_of("cgroup")
    if isinstance(cgroup.get("limit_bytes"), int) and isinstance(cgroup.get("peak_bytes"), int):
        yield (
            f"cgroup v{cgroup.get('version')}: peak {_gib(cgroup['peak_bytes'] / 1024**3)} GiB of "
            f"limit {_gib(cgroup['limit_bytes'] / 1024**3)} GiB, {cgroup.get('oom_kills')} OOM "
            f"kill(s); anon {_gib((cgroup.get('anon_bytes') or 0) / 1024**3)} GiB, shmem "
            f"{_gib((cgroup.get('shmem_bytes') or 0) / 1024**3)} GiB"
        )


def render(verdict: Verdict) -> str:
    cause = verdict.root_cause
    lines = [f"# {md.text(verdict.node)}: {md.text(cause)}", ""]
    lines.append(f"**Conclusion:** {md.code(cause)} (confidence {md.text(verdict.confidence)}).")
    if verdict.surfaced_as:
        lines.append(
            f"The job surfaced it as {md.code(verdict.surfaced_as)}: that is where the failure "
            "showed, not where it started."
        )
    first = verdict.first_anomaly
    if first:
        when = f" at {md.text(first.time)}" if first.time else ""
        lines += [
            "",
            f"**Earliest anomaly:** {md.code(first.where)}{when}: {md.code(first.text or '')}",
        ]
    if verdict.chain:
        chain: list[str] = []
        for index, link in enumerate(verdict.chain):
            if index:
                chain.append("        ↓")
            cites = ", ".join(e.where for e in link.evidence[:3] if e.line)
            chain.append(" ".join(link.finding.split()) + (f"   [{cites}]" if cites else ""))
        if verdict.surfaced_as:
            chain += ["        ↓", "surfaced as: " + " ".join(verdict.surfaced_as.split())]
        lines += ["", "## Evidence chain", "", *md.fence(chain)]
    numbers = list(arithmetic(verdict))
    if numbers:
        lines += ["", "## The numbers", ""]
        lines += [f"- {printable(n)}" for n in numbers]
    timeline = verdict.timeline
    if timeline:
        anomalies = [e for e in timeline if e.get("anomaly")]
        shown = (anomalies + [e for e in timeline if not e.get("anomaly")])[:TIMELINE_ROWS]
        shown.sort(key=lambda e: e["time"])
        lines += ["", "## Timeline (UTC)", "", "| time | source | event |", "|---|---|---|"]
        for entry in shown:
            where = str(entry["source"]) + (f":{entry['line']}" if entry.get("line") else "")
            mark = "**!** " if entry.get("anomaly") else ""
            event = shortened(" ".join(str(entry["text"]).split()), 160)
            lines.append(
                f"| {md.cell(z_spelled(str(entry['time'])))} | {md.cell(where)} | "
                f"{mark}{md.code(event, table=True)} |"
            )
        if len(timeline) > len(shown):
            lines.append(f"\n({len(timeline) - len(shown)} more entries in the JSON verdict.)")
    if verdict.also_seen:
        lines += ["", "## Also seen (not part of the chain)", ""]
        lines += [f"- {md.text(link.finding)}" for link in verdict.also_seen]
    if verdict.ruled_out:
        lines += ["", "## Ruled out", ""]
        lines += [f"- **{md.text(o.cause)}**: {md.text(o.because)}" for o in verdict.ruled_out]
    if verdict.proposals:
        lines += ["", "## Fixes, in order", ""]
        for index, proposal in enumerate(verdict.proposals, start=1):
            gate = " (needs approval)" if proposal.requires_approval else ""
            lines.append(f"{index}. {md.code(proposal.kind)}{gate}: {md.text(proposal.summary)}")
    lines += ["", "## Stages", "", "| stage | status | notes |", "|---|---|---|"]
    for stage in verdict.stages:
        notes = "; ".join(stage.findings + stage.errors)
        if not notes and stage.not_collected:
            notes = "not collected: " + ", ".join(stage.not_collected)
        lines.append(f"| {md.cell(stage.id)} | {md.cell(stage.status)} | {md.cell(notes)} |")
    return printable("\n".join(lines) + "\n")
