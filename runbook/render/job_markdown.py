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
    ex = row.get("exit")
    if not ex:
        return "–"
    parts = []
    if ex.get("code") is not None:
        parts.append(f"code {ex['code']}")
    if ex.get("signal"):
        parts.append(f"signal {ex['signal']}")
    if ex.get("oom_killed"):
        parts.append("OOMKilled")
    if ex.get("inferred"):
        parts.append("(inferred)")
    return ", ".join(parts) or _cell(ex.get("reason"))


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


def job_markdown(verdict: Mapping[str, Any]) -> str:
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
    shared = verdict.get("shared_cause")
    if shared:
        out += [
            "## Shared cause",
            "",
            _cell(shared.get("summary"), 400),
            "",
            "Nodes: " + ", ".join(shared.get("nodes") or []),
            "",
        ]
    chain: Sequence[Mapping[str, Any]] = verdict.get("chain") or []
    if chain:
        out += ["## Evidence chain (earliest first, corrected clocks)", ""]
        out += [
            f"{i}. {c.get('time')} {c.get('node')} [{c.get('cause')}] "
            f"{_cell(c.get('finding'), 200)}"
            for i, c in enumerate(chain, 1)
        ]
        out.append("")
    out += [
        "## Nodes",
        "",
        "| node | status | root cause | GPUs | clock offset | first anomaly |",
        "|---|---|---|---|---|---|",
    ]
    for node in verdict.get("nodes") or []:
        fa = node.get("first_anomaly") or {}
        out.append(
            f"| {_cell(node.get('node'))} | {node.get('status')} | "
            f"{node.get('root_cause') or _cell(node.get('error'), 60)} | "
            f"{','.join(node.get('gpus') or []) or '–'} | {_offset(node.get('clock'))} | "
            f"{fa.get('time', '–')} {fa.get('source', '')}:{fa.get('line', '')} |"
        )
    out.append("")
    out += [
        "## Ranks",
        "",
        "| rank | node | GPUs | pod | start | first error | exit |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in verdict.get("ranks") or []:
        err = row.get("first_error") or {}
        out.append(
            f"| {row.get('rank')} | {_cell(row.get('node'))} | "
            f"{','.join(row.get('gpus') or []) or '–'} | {_cell(row.get('pod')) or '–'} | "
            f"{row.get('start') or '–'} | "
            f"{(err.get('time') or '') + ' ' + _cell(err.get('text'), 80) if err else '–'}"
            f" | {_exit(row)} |"
        )
    out.append("")
    if verdict.get("outliers"):
        out += (
            ["## Outliers", ""]
            + [f"- {_cell(o.get('summary'), 200)}" for o in verdict["outliers"]]
            + [""]
        )
    memory = verdict.get("memory") or {}
    if memory.get("nodes"):
        out += [
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
    if verdict.get("ruled_out"):
        out += (
            ["## Ruled out", ""]
            + [f"- {o.get('cause')}: {_cell(o.get('because'), 200)}" for o in verdict["ruled_out"]]
            + [""]
        )
    if verdict.get("proposals"):
        out += (
            ["## Fixes, in order", ""]
            + [
                f"- {p.get('node')}: {p.get('kind')}: {_cell(p.get('summary'), 200)}"
                for p in verdict["proposals"]
            ]
            + [""]
        )
    timeline = verdict.get("timeline") or []
    if timeline:
        shown = [e for e in timeline if e.get("anomaly")] or timeline
        shown = shown[:TIMELINE_ROWS]
        out += [
            "## Cross-node timeline (collector's clock; anomalies)",
            "",
            "| time | node | node's clock | source | text |",
            "|---|---|---|---|---|",
        ]
        for e in shown:
            out.append(
                f"| {e.get('time')} | {_cell(e.get('node'))} | {e.get('node_time')} | "
                f"{e.get('source')}:{e.get('line')} | {_cell(e.get('text'), 100)} |"
            )
        out.append("")
    return "\n".join(out)
