"""The job report in Markdown (pure), in the single-node report's shape — conclusion first,
the evidence chain, then what only a job has: the nodes and their clocks, the rank table, the
outliers, the job's host memory, and the cross-node timeline."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

TIMELINE_ROWS = 60


def _cell(value: Any, width: int = 90) -> str:
    text = " ".join(str("" if value is None else value).split())
    text = text if len(text) <= width else text[: width - 1] + "…"
    return text.replace("|", "\\|")


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
    return ", ".join(parts) or _cell(exit_info.get("reason"))


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
    out = [f"# Job {job.get('ref')}: {verdict.get('root_cause')} ({verdict.get('confidence')})", ""]
    out += [f"**{_cell(verdict.get('statement'), 400)}**", ""]
    if verdict.get("surfaced_as"):
        out += [f"The job surfaced as: `{_cell(verdict['surfaced_as'], 200)}`", ""]
    first = verdict.get("first_anomaly")
    if first:
        out += [
            f"First anomaly across the job: {first.get('node')} "
            f"`{first.get('source')}:{first.get('line')}` at {first.get('time')} "
            f"(node clock {first.get('node_time')}, offset {first.get('offset_s'):+.3f} s): "
            f"{_cell(first.get('text'), 200)}",
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
        _cell(shared.get("summary"), 400),
        "",
        "Nodes: " + ", ".join(shared.get("nodes") or []),
        "",
    ]


def _chain(verdict: Mapping[str, Any]) -> list[str]:
    chain: Sequence[Mapping[str, Any]] = verdict.get("chain") or []
    if not chain:
        return []
    out = ["## Evidence chain (earliest first, corrected clocks)", ""]
    out += [
        f"{i}. {link.get('time')} {link.get('node')} [{link.get('cause')}] "
        f"{_cell(link.get('finding'), 200)}"
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
            f"| {_cell(node.get('node'))} | {node.get('status')} | "
            f"{node.get('root_cause') or _cell(node.get('error'), 60)} | "
            f"{','.join(node.get('gpus') or []) or '–'} | {_offset(node.get('clock'))} | "
            f"{first.get('time', '–')} {first.get('source', '')}:{first.get('line', '')} |"
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
        out.append(
            f"| {row.get('rank')} | {_cell(row.get('node'))} | "
            f"{','.join(row.get('gpus') or []) or '–'} | {_cell(row.get('pod')) or '–'} | "
            f"{row.get('start') or '–'} | "
            f"{(error.get('time') or '') + ' ' + _cell(error.get('text'), 80) if error else '–'}"
            f" | {_exit(row)} |"
        )
    out.append("")
    return out


def _outliers(verdict: Mapping[str, Any]) -> list[str]:
    if not verdict.get("outliers"):
        return []
    return (
        ["## Outliers", ""]
        + [f"- {_cell(outlier.get('summary'), 200)}" for outlier in verdict["outliers"]]
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
            f"- {ruled.get('cause')}: {_cell(ruled.get('because'), 200)}"
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
            f"- {fix.get('node')}: {fix.get('kind')}: {_cell(fix.get('summary'), 200)}"
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
        out.append(
            f"| {entry.get('time')} | {_cell(entry.get('node'))} | {entry.get('node_time')} | "
            f"{entry.get('source')}:{entry.get('line')} | {_cell(entry.get('text'), 100)} |"
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
    return "\n".join(line for section in SECTIONS for line in section(verdict))
