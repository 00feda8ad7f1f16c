"""The verdict as a Markdown incident note: conclusion first, the evidence chain, what was ruled
out, what to do, then every stage."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _cell(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def render(verdict: Mapping[str, Any]) -> str:
    lines = [f"# {verdict['node']}: {verdict['root_cause']}", ""]
    lines.append(f"**Conclusion:** `{verdict['root_cause']}` (confidence {verdict['confidence']}).")
    if verdict.get("surfaced_as"):
        lines.append(
            f"The job surfaced it as `{_cell(verdict['surfaced_as'])}`; that is where the "
            "failure showed, not where it started."
        )
    first = verdict.get("first_anomaly")
    if first:
        where = first.get("source", "")
        if first.get("line"):
            where += f":{first['line']}"
        when = f" at {first['time']}" if first.get("time") else ""
        lines += ["", f"**Earliest anomaly:** `{where}`{when}: `{_cell(first.get('text', ''))}`"]
    if verdict.get("chain"):
        lines += ["", "## Evidence chain", "", "```"]
        for index, link in enumerate(verdict["chain"]):
            if index:
                lines.append("        ↓")
            cites = ", ".join(
                f"{e.get('source')}:{e.get('line')}"
                for e in link.get("evidence", [])
                if e.get("line")
            )
            lines.append(f"{link['finding']}" + (f"   [{cites}]" if cites else ""))
        lines.append("```")
    if verdict.get("ruled_out"):
        lines += ["", "## Ruled out", ""]
        lines += [f"- **{o['cause']}**: {o['because']}" for o in verdict["ruled_out"]]
    if verdict.get("proposals"):
        lines += ["", "## Proposed fixes", ""]
        for index, proposal in enumerate(verdict["proposals"], start=1):
            gate = " (needs approval)" if proposal.get("requires_approval") else ""
            lines.append(f"{index}. `{proposal['kind']}`{gate}: {proposal['summary']}")
    lines += ["", "## Stages", "", "| stage | status | notes |", "|---|---|---|"]
    for stage in verdict.get("stages", []):
        notes = "; ".join(stage.get("findings", []) + stage.get("errors", []))
        if not notes and stage.get("not_collected"):
            notes = "not collected: " + ", ".join(stage["not_collected"])
        lines.append(f"| {stage['id']} | {stage['status']} | {_cell(notes)} |")
    return "\n".join(lines) + "\n"
