"""The rank lifecycle table of a job (pure): per rank its node, GPUs and pod, when it
started, its first error, and how it exited — the scheduler's record where there is one,
else what the node's evidence shows (a rank that logged no error on a node whose own cgroup
OOM-killed a process; matched exactly when the rank logged its pid and dmesg names it)."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from runbook.job.models import JobSpec, RankSpec
from runbook.sweep.results import HostResult
from runbook.verdict import facts_of

if TYPE_CHECKING:
    from runbook.job.merge import NodeClock


#: a log line's own timestamp and level, left out when the line is quoted in a sentence
_LOG_PREFIX = re.compile(
    r"^\[?\d{4}-\d{2}-\d{2}[ T][\d:.,]+(?:Z|[+-]\d{2}:?\d{2})?\]?\s*"
    r"(?:(?:ERROR|WARNING|WARN|CRITICAL|FATAL|INFO)\b:?\s*)?"
)


def strip_log_prefix(text: str) -> str:
    """`2026-… 10:12:31,410 ERROR RuntimeError: …` → `RuntimeError: …` (one line)."""
    return _LOG_PREFIX.sub("", " ".join(str(text).split()))


def _iso(moment: dt.datetime | None) -> str | None:
    return (
        None
        if moment is None
        else moment.astimezone(dt.timezone.utc).isoformat(timespec="milliseconds")
    )


def _own_oom_kills(result: HostResult) -> list[dict[str, Any]]:
    """The OOM kills the node's verdict blamed (its host-memory-oom chain evidence that is a
    dmesg memcg record), with the killed pid where dmesg gave it."""
    blamed = {
        (e.source, e.line)
        for link in (result.verdict.chain if result.verdict else ())
        if link.cause == "host-memory-oom"
        for e in link.evidence
    }
    kills = []
    for oom in facts_of(result.verdict, "dmesg").get("memcg_ooms") or []:
        if (oom.get("source"), oom.get("line")) in blamed or (
            oom.get("source"),
            oom.get("kill_line"),
        ) in blamed:
            kills.append(oom)
    if not kills and blamed:
        cgroup = facts_of(result.verdict, "cgroup")
        if cgroup.get("oom_kills"):
            kills.append(
                {
                    "source": "cgroup/memory",
                    "line": None,
                    "time": None,
                    "killed_pid": None,
                    "text": f"oom_kill {cgroup['oom_kills']}",
                }
            )
    return kills


def _scheduler_exit(spec: RankSpec | None) -> dict[str, Any] | None:
    if spec is None or (spec.exit_code is None and spec.reason is None and spec.signal is None):
        return None
    return {
        "code": spec.exit_code,
        "signal": spec.signal,
        "oom_killed": spec.reason == "OOMKilled",
        "reason": spec.reason,
        "source": "scheduler",
    }


def _oom_exit(kill: Mapping[str, Any], clock: NodeClock, exact: bool) -> dict[str, Any]:
    when = clock.corrected(kill) if kill.get("time") else None
    return {
        "code": 137,
        "signal": 9,
        "oom_killed": True,
        "reason": (
            "OOM-killed (dmesg names the pid the rank logged)"
            if exact
            else "OOM kill in its node's cgroup; the rank logged no error (inferred)"
        ),
        "source": "dmesg",
        "time": _iso(when),
        "inferred": not exact,
    }


def _oom_exits(
    candidates: list[tuple[dict[str, Any], Mapping[str, Any]]],
    kills: list[dict[str, Any]],
    silent: set[int],
    clock: NodeClock,
) -> None:
    """Ties a node's OOM kills to its ranks: by the pid a rank logged when dmesg names it;
    else, when the node's silent ranks are no more than its unmatched kills, each silent rank
    is marked as (inferred) OOM-killed; with more silent ranks than kills, which one died is
    not known, and none is named."""
    unmatched = list(kills)
    for row, log in candidates:
        kill = next(
            (k for k in unmatched if log.get("pid") and k.get("killed_pid") == log["pid"]), None
        )
        if kill is not None:
            unmatched.remove(kill)
            row["exit"] = _oom_exit(kill, clock, exact=True)
            row["killed_by"] = {
                "source": kill.get("source"),
                "line": kill.get("line"),
                "time": kill.get("time"),
            }
    rest = [row for row, _ in candidates if row["exit"] is None and row["rank"] in silent]
    if unmatched and len(rest) <= len(unmatched):
        for row, kill in zip(rest, unmatched, strict=False):
            row["exit"] = _oom_exit(kill, clock, exact=False)
            row["killed_by"] = {
                "source": kill.get("source"),
                "line": kill.get("line"),
                "time": kill.get("time"),
            }
    elif unmatched:
        for row in rest:
            row["exit"] = {
                "code": None,
                "signal": None,
                "oom_killed": None,
                "source": "dmesg",
                "inferred": True,
                "reason": f"logged no error: one of {len(rest)} silent ranks on a "
                f"node whose cgroup OOM-killed {len(unmatched)} process(es)",
            }


def rank_table(
    spec: JobSpec, results: Sequence[HostResult], clocks: Mapping[str, NodeClock]
) -> list[dict[str, Any]]:
    by_rank: dict[tuple[str, int | None, str], dict[str, Any]] = {}
    specs = {(r.node, r.rank): r for r in spec.ranks}
    for rank_spec in spec.ranks:
        key = (rank_spec.node, rank_spec.rank, rank_spec.pod or "")
        by_rank[key] = {
            "rank": rank_spec.rank,
            "node": rank_spec.node,
            "pod": rank_spec.pod,
            "gpus": list(rank_spec.gpus),
            "role": rank_spec.role,
            "start": rank_spec.started_at,
            "first_error": None,
            "exit": _scheduler_exit(rank_spec),
        }
    for result in results:
        clock = clocks[result.host]
        applog = facts_of(result.verdict, "applog")
        kills = _own_oom_kills(result)
        silent = set(applog.get("silent_ranks") or [])
        exits: list[tuple[dict[str, Any], Mapping[str, Any]]] = []
        for log in applog.get("ranks") or []:
            rank = log.get("rank")
            if rank is None:
                continue
            key = next(
                (k for k in by_rank if k[0] == result.host and k[1] == rank),
                (result.host, rank, ""),
            )
            row = by_rank.setdefault(
                key,
                {
                    "rank": rank,
                    "node": result.host,
                    "pod": None,
                    "gpus": [],
                    "role": None,
                    "start": None,
                    "first_error": None,
                    "exit": None,
                },
            )
            start = (
                clock.corrected({"time": log.get("first_time")}) if log.get("first_time") else None
            )
            row["start"] = row["start"] or _iso(start)
            first = log.get("first_error")
            if isinstance(first, Mapping):
                when = clock.corrected(first)
                row["first_error"] = {
                    "time": _iso(when),
                    "text": strip_log_prefix(first.get("text") or ""),
                    "category": first.get("category"),
                    "source": first.get("source"),
                    "line": first.get("line"),
                }
            if row["exit"] is None and kills:
                exits.append((row, log))
            if log.get("pid"):
                row["pid"] = log["pid"]
        _oom_exits(exits, kills, silent, clock)
    ranked_nodes = {row["node"] for row in by_rank.values() if row["rank"] is not None}
    # a scheduler that knows nodes but not ranks (Slurm) leaves a rank-less row per node; once
    # the node's logs name its ranks, those rows stand for it
    rows = [
        row
        for row in by_rank.values()
        if row["rank"] is not None or row["node"] not in ranked_nodes
    ]
    for row in rows:
        row.setdefault("pid", None)
        row.setdefault("killed_by", None)
        row["scheduled"] = (row["node"], row["rank"]) in specs
    rows.sort(
        key=lambda r: (r["rank"] is None, r["rank"] if r["rank"] is not None else 0, r["node"])
    )
    return rows
