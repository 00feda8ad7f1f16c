"""How the recovery check reads on a terminal: the collective test's criteria, each replayed
stage (pod peak, anon/shmem/file, each container, the per-rank peak, the first collective),
and the verification recorded against a proposal."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.markup import escape

from runbook.units import human


def _size(value: Any) -> str:
    return human(value) if isinstance(value, int | float) else "?"


def criteria_lines(collective: Mapping[str, Any]) -> list[str]:
    lines = []
    for name, criterion in (collective.get("criteria") or {}).items():
        passed = criterion.get("passed")
        mark = "pass" if passed else ("not judged" if passed is None else "FAIL")
        lines.append(f"{mark:>10}  {name}: {criterion.get('detail')}")
    return lines


def stage_lines(stage: Mapping[str, Any]) -> list[str]:
    """One replayed stage as lines (a StageResult.as_dict())."""
    knobs = ", ".join(f"{k}={v}" for k, v in (stage.get("knobs") or {}).items())
    lines = [f"stage {stage.get('index')} ({knobs}): {stage.get('outcome')} — "
             f"{stage.get('reason')}"]
    if stage.get("limit_bytes") is None:
        return lines
    since = "" if stage.get("peak_since_stage_start") else " (since the cgroup was made)"
    lines.append(
        f"  pod peak {_size(stage.get('peak_bytes'))}{since}, working set "
        f"{_size(stage.get('peak_working_set_bytes'))} of limit {_size(stage.get('limit_bytes'))}"
        f" (stop line {_size(stage.get('stop_at_bytes'))}); at the peak anon "
        f"{_size(stage.get('anon_bytes'))}, shmem {_size(stage.get('shmem_bytes'))}, file "
        f"{_size(stage.get('file_bytes'))}"
    )
    for c in stage.get("containers") or []:
        who = " (the replayed job)" if c.get("replayed") else ""
        procs = (f"; {c['ranks']} rank(s), {c['workers']} worker(s)" if c.get("ranks") else
                 (f"; {c['processes']} process(es)" if c.get("processes") else ""))
        lines.append(
            f"  container {c.get('name')}{who}: peak {_size(c.get('peak_bytes'))}, at the pod "
            f"peak {_size(c.get('usage_at_pod_peak_bytes'))} (anon {_size(c.get('anon_bytes'))}, "
            f"shmem {_size(c.get('shmem_bytes'))}){procs}"
        )
    if stage.get("ranks"):
        lines.append(
            f"  per rank: peak RSS {_size(stage.get('per_rank_peak_rss_bytes'))}, anon at the "
            f"pod peak {_size(stage.get('per_rank_anon_bytes'))}"
        )
    first = stage.get("first_collective_s")
    when = f"{first:.2f} s after the stage started" if first is not None else "not reached"
    lines.append(f"  first collective: {when}")
    lines.append(f"  kernel: {stage.get('oom_kills', 0)} OOM kill(s), failcnt "
                 f"+{stage.get('failcnt', 0)} during the stage")
    return lines


def replay_lines(replay: Mapping[str, Any]) -> list[str]:
    if "skipped" in replay:
        return [f"staged replay: {replay['skipped']}"]
    lines = [f"staged replay of {replay.get('command')} in {replay.get('pod_cgroup')} "
             f"(headroom {replay.get('headroom')}): "
             f"{'every stage fits' if replay.get('passed') else 'FAILED'}"]
    for stage in replay.get("stages") or []:
        lines.extend(f"  {line}" for line in stage_lines(stage))
    if not replay.get("passed"):
        lines.append(f"  {replay.get('reason')}")
    return lines


def verification_lines(verification: Mapping[str, Any]) -> list[str]:
    """What `approvals show` and the guided run print of a recorded verification."""
    status = verification.get("status")
    lines = [f"verification: {status} — {verification.get('reason')}"]
    layers = verification.get("layers") or {}
    collective = layers.get("collective") or {}
    if collective:
        where = verification.get("node") or verification.get("target")
        lines.append(f"  collective test on {where}: {collective.get('root_cause')}")
        lines.extend(f"  {line}" for line in criteria_lines(collective))
    if layers.get("replay"):
        lines.extend(f"  {line}" for line in replay_lines(layers["replay"]))
    for earlier in verification.get("previous") or []:
        lines.append(f"  earlier: {earlier.get('status')} — {earlier.get('reason')}")
    return lines


def print_lines(console: Console, lines: list[str], style: str = "") -> None:
    for line in lines:
        console.print(f"[{style}]{escape(line)}[/]" if style else escape(line), highlight=False)


def print_verification(console: Console, verification: Mapping[str, Any]) -> None:
    lines = verification_lines(verification)
    style = "bold green" if verification.get("verified") else "bold red"
    console.print(f"[{style}]{escape(lines[0])}[/]", highlight=False)
    print_lines(console, lines[1:])
