"""The job report in Markdown (pure), in the single-node report's shape — conclusion first,
the evidence chain, then what only a job has: the nodes and their clocks, the rank table, the
outliers, the job's host memory, and the cross-node timeline.

What came from evidence (node and pod names, log lines, findings quoting them) goes through
runbook.render.markdown_text: rendered as text, never as a tag, a link or an image."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from runbook.printable import printable
from runbook.render import markdown_text as md

TIMELINE_ROWS = 60


def _cell(value: Any, width: int = 90) -> str:
    """Prose in a table cell (escaped), cut to `width` characters."""
    return md.cell(value, width)


def _prose(value: Any, width: int) -> str:
    """Prose outside a table (escaped), cut to `width` characters."""
    line = " ".join(str("" if value is None else value).split())
    return md.text(line if len(line) <= width else line[: width - 1] + "…")


def _quote(value: Any, width: int, *, table: bool = False) -> str:
    """A line of evidence as a code span, cut to `width` characters."""
    line = " ".join(str("" if value is None else value).split())
    return md.code(line if len(line) <= width else line[: width - 1] + "…", table=table)


def _gib(value: Any) -> str:
    return f"{value / 2**30:.2f} GiB" if isinstance(value, int | float) else "–"


def _exit(row: Mapping[str, Any]) -> str:
    exit_info = row.get("exit")
    if not exit_info:
        return "–"
    parts = []
    if exit_info.get("code") is not None:
        parts.append(f"code {exit_info['code']}")
    if exit_info.get("signal"):
        parts.append(f"signal {exit_info['signal']}")
    if exit_info.get("oom_killed"):
        parts.append("OOMKilled")
    if exit_info.get("inferred"):
        parts.append("(inferred)")
    return ", ".join(parts) or " ".join(str(exit_info.get("reason")).split())


def _offset(clock: Mapping[str, Any] | None) -> str:
    if not clock:
        return "not measured"
    return f"{clock['offset_s']:+.3f} s ± {clock['uncertainty_s'] * 1000:.1f} ms"


def _how(row: Mapping[str, Any]) -> str:
    if row.get("workers_per_rank") is not None:
        return (
            f"rank {_gib(row.get('rank_bytes'))} + {row['workers_per_rank']} workers × "
            f"{_gib(row.get('worker_bytes'))}"
        )
    return _cell(row.get("method"))


def _conclusion(verdict: Mapping[str, Any]) -> list[str]:
    """The title, the statement, how the job surfaced, and its first anomaly."""
    job = verdict.get("job") or {}
    out = [
        f"# Job {md.text(job.get('ref'))}: {md.text(verdict.get('root_cause'))} "
        f"({md.text(verdict.get('confidence'))})",
        "",
    ]
    out += [f"**{_prose(verdict.get('statement'), 400)}**", ""]
    if verdict.get("surfaced_as"):
        out += [f"The job surfaced as: {_quote(verdict['surfaced_as'], 200)}", ""]
    first = verdict.get("first_anomaly")
    if first:
        where = f"{first.get('source')}:{first.get('line')}"
        out += [
            f"First anomaly across the job: {md.text(first.get('node'))} "
            f"{md.code(where)} at "
            f"{md.text(first.get('time'))} "
            f"(node clock {md.text(first.get('node_time'))}, "
            f"offset {first.get('offset_s'):+.3f} s): "
            f"{_quote(first.get('text'), 200)}",
            "",
        ]
    return out


def _shared_cause(verdict: Mapping[str, Any]) -> list[str]:
    shared = verdict.get("shared_cause")
    if not shared:
        return []
    return [
        "## Shared cause",
        "",
        _prose(shared.get("summary"), 400),
        "",
        "Nodes: " + ", ".join(md.text(node) for node in shared.get("nodes") or []),
        "",
    ]


def _chain(verdict: Mapping[str, Any]) -> list[str]:
    chain: Sequence[Mapping[str, Any]] = verdict.get("chain") or []
    if not chain:
        return []
    out = ["## Evidence chain (earliest first, corrected clocks)", ""]
    out += [
        f"{i}. {md.text(link.get('time'))} {md.text(link.get('node'))} "
        f"[{md.text(link.get('cause') or 'no cause')}] {_prose(link.get('finding'), 200)}"
        for i, link in enumerate(chain, 1)
    ]
    out.append("")
    return out


def _nodes(verdict: Mapping[str, Any]) -> list[str]:
    out = [
        "## Nodes",
        "",
        "| node | status | root cause | GPUs | clock offset | first anomaly |",
        "|---|---|---|---|---|---|",
    ]
    for node in verdict.get("nodes") or []:
        first = node.get("first_anomaly") or {}
        out.append(
            f"| {_cell(node.get('node'))} | {_cell(node.get('status'))} | "
            f"{_cell(node.get('root_cause') or node.get('error'), 60)} | "
            f"{_cell(','.join(node.get('gpus') or []) or '–')} | {_offset(node.get('clock'))} | "
            + _cell(f"{first.get('time', '–')} {first.get('source', '')}:{first.get('line', '')}")
            + " |"
        )
    out.append("")
    return out


def _ranks(verdict: Mapping[str, Any]) -> list[str]:
    out = [
        "## Ranks",
        "",
        "| rank | node | GPUs | pod | start | first error | exit |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in verdict.get("ranks") or []:
        error = row.get("first_error") or {}
        first_error = (
            f"{_cell(error.get('time') or '')} {_quote(error.get('text'), 80, table=True)}"
            if error
            else "–"
        )
        out.append(
            f"| {_cell(row.get('rank'))} | {_cell(row.get('node'))} | "
            f"{_cell(','.join(row.get('gpus') or []) or '–')} | {_cell(row.get('pod')) or '–'} | "
            f"{_cell(row.get('start') or '–')} | {first_error} | {_cell(_exit(row))} |"
        )
    out.append("")
    return out


def _outliers(verdict: Mapping[str, Any]) -> list[str]:
    if not verdict.get("outliers"):
        return []
    return (
        ["## Outliers", ""]
        + [f"- {_prose(outlier.get('summary'), 200)}" for outlier in verdict["outliers"]]
        + [""]
    )


def _host_memory(verdict: Mapping[str, Any]) -> list[str]:
    memory = verdict.get("memory") or {}
    if not memory.get("nodes"):
        return []
    out = [
        "## Host memory",
        "",
        "| node | ranks | peak | limit | per rank | at limit | per rank from |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in memory["nodes"]:
        out.append(
            f"| {_cell(row['node'])} | {row.get('ranks') or '–'} | "
            f"{_gib(row.get('peak_bytes'))} | {_gib(row.get('limit_bytes'))} | "
            f"{_gib(row.get('per_rank_bytes'))} | "
            f"{'yes' if row.get('at_limit') else 'no'} | {_how(row)} |"
        )
    if memory.get("estimate_bytes"):
        out += [
            "",
            f"Per-rank cost × ranks: {_gib(memory.get('per_rank_max_bytes'))} × "
            f"{memory.get('ranks')} = {_gib(memory.get('estimate_bytes'))} "
            f"(the job's measured peak, summed over nodes: "
            f"{_gib(memory.get('job_peak_bytes'))})",
        ]
    out.append("")
    return out


def _ruled_out(verdict: Mapping[str, Any]) -> list[str]:
    if not verdict.get("ruled_out"):
        return []
    return (
        ["## Ruled out", ""]
        + [
            f"- {md.text(ruled.get('cause'))}: {_prose(ruled.get('because'), 200)}"
            for ruled in verdict["ruled_out"]
        ]
        + [""]
    )


def _fixes(verdict: Mapping[str, Any]) -> list[str]:
    if not verdict.get("proposals"):
        return []
    return (
        ["## Fixes, in order", ""]
        + [
            f"- {md.text(fix.get('node'))}: {md.code(fix.get('kind'))}: "
            f"{_prose(fix.get('summary'), 200)}"
            for fix in verdict["proposals"]
        ]
        + [""]
    )


def _timeline(verdict: Mapping[str, Any]) -> list[str]:
    """The cross-node timeline's anomalies (every entry when none is one), the first
    TIMELINE_ROWS."""
    timeline = verdict.get("timeline") or []
    if not timeline:
        return []
    shown = [entry for entry in timeline if entry.get("anomaly")] or timeline
    shown = shown[:TIMELINE_ROWS]
    out = [
        "## Cross-node timeline (collector's clock; anomalies)",
        "",
        "| time | node | node's clock | source | text |",
        "|---|---|---|---|---|",
    ]
    for entry in shown:
        where = f"{entry.get('source')}:{entry.get('line')}"
        out.append(
            f"| {_cell(entry.get('time'))} | {_cell(entry.get('node'))} | "
            f"{_cell(entry.get('node_time'))} | {_cell(where)} | "
            f"{_quote(entry.get('text'), 100, table=True)} |"
        )
    out.append("")
    return out


#: the report's sections, in order
SECTIONS = (
    _conclusion,
    _shared_cause,
    _chain,
    _nodes,
    _ranks,
    _outliers,
    _host_memory,
    _ruled_out,
    _fixes,
    _timeline,
)


def job_markdown(verdict: Mapping[str, Any]) -> str:
    return printable("\n".join(line for section in SECTIONS for line in section(verdict)))
