"""A hang across the job's nodes (pure): every node's ranks, as its `hang` facts carry them
(flight recorder entries, live stacks, watchdog lines), lined up together by (process group,
sequence number) with `runbook.hang.analyse`.

One node sees only its own ranks: the node whose ranks all wait says "waiting for ranks not
here", the node of the rank that never arrived says which one and where it is. The job sees
every rank at once, so its verdict names the rank behind (and its node and stack), the op or
size mismatch, or that every rank entered and nothing completed. Each node's times are moved
onto the collector's clock by the node's measured offset before they are compared.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from runbook.causal import parse_time
from runbook.hang import RankView, analyse, merge_views
from runbook.sweep.results import HostResult
from runbook.verdict import HANG_CAUSES, facts_of

#: the watchdog records the analysis reads, merged over the nodes
_WATCHDOG_KEYS = ("timeouts", "statuses", "lagging", "mismatches", "gloo_timeouts")


def _shift(value: Any, offset: float) -> Any:
    moment = parse_time(value)
    if moment is None or not offset:
        return value
    moved = moment - dt.timedelta(seconds=offset)
    return moved.astimezone(dt.timezone.utc).isoformat(timespec="milliseconds")


def _on_collector_clock(view: RankView, offset: float) -> RankView:
    """The view with its flight recorder times moved by the node's clock offset."""
    if not offset:
        return view
    for group in view.groups.values():
        group["entries"] = [
            {**e, "created": _shift(e.get("created"), offset)} for e in group.get("entries") or []
        ]
    return view


def node_views(result: HostResult) -> dict[int, RankView]:
    """One node's ranks as its verdict's `hang` facts carry them, named by the job's name for
    the node and on the collector's clock."""
    facts = facts_of(result.verdict, "hang")
    offset = float((result.clock or {}).get("offset_s") or 0.0)
    views: dict[int, RankView] = {}
    for data in facts.get("views") or []:
        if isinstance(data, Mapping) and isinstance(data.get("rank"), int):
            view = RankView.from_json({**data, "node": result.host})
            views[view.rank] = _on_collector_clock(view, offset)
    return views


def job_hang(results: Sequence[HostResult]) -> dict[str, Any] | None:
    """The job's hang analysis from every read node's ranks; None when no node read any."""
    groups = []
    watchdog: dict[str, list[Any]] = {k: [] for k in _WATCHDOG_KEYS}
    read_at: list[dt.datetime] = []
    for result in results:
        facts = facts_of(result.verdict, "hang")
        if not facts:
            continue
        views = node_views(result)
        if views:
            groups.append(views)
        for key in _WATCHDOG_KEYS:
            for record in (facts.get("watchdog") or {}).get(key) or []:
                watchdog[key].append({**record, "node": result.host})
        when = parse_time(facts.get("read_at"))
        if when is not None:
            read_at.append(when)
    if not groups and not any(watchdog.values()):
        return None
    views = merge_views(groups)
    watchdog["last_seen"] = [v.last_seen for v in views.values() if v.last_seen]
    now = max(read_at).isoformat() if read_at else None
    found = analyse(views, watchdog, now=now)
    for evidence in found.get("evidence") or []:
        rank = evidence.get("rank")
        if isinstance(rank, int) and rank in views and not evidence.get("node"):
            evidence["node"] = views[rank].node
    return found if found.get("cause") or found.get("statement") else None


def apply(verdict: dict[str, Any], results: Sequence[HostResult]) -> dict[str, Any]:
    """The job verdict with the hang analysis over all its ranks, when the job hung and no
    other cause (a GPU fault, an OOM) came first: its root cause, statement and node, the
    stalled ranks, and `hang` (what was lined up: group, sequence number, op, ranks waiting,
    behind and unseen)."""
    if verdict.get("root_cause") not in (*HANG_CAUSES, "inconclusive", "healthy"):
        return verdict
    hung = job_hang(results)
    if hung is None:
        return verdict
    out = dict(verdict)
    summary = {
        k: hung.get(k)
        for k in ("cause", "basis", "pg", "pg_desc", "seq", "op", "waiting", "behind", "unseen")
        if hung.get(k) is not None
    }
    out["hang"] = {**summary, "statement": hung.get("statement")}
    if not hung.get("cause"):
        return out
    out["root_cause"] = hung["cause"]
    out["statement"] = hung["statement"]
    first = next((e for e in hung.get("evidence") or [] if e.get("source")), None)
    if out.get("first_anomaly") is None and first is not None:
        # each node alone saw nothing wrong (a desync spans them): the job's first anomaly is
        # the earliest of the mismatching entries
        out["first_anomaly"] = {
            k: first.get(k) for k in ("source", "line", "node", "time", "text") if k in first
        }
        out["node"] = first.get("node")
    stalled = hung.get("stalled_ranks") or []
    if stalled:
        out["stalled_ranks"] = [
            {k: r.get(k) for k in ("rank", "node", "since", "stack")} for r in stalled
        ]
        out["scope"] = "node"
        out["node"] = stalled[0].get("node") or out.get("node")
    else:
        out["scope"] = "shared"
    if hung.get("confidence") == "medium" and out.get("confidence") == "high":
        out["confidence"] = "medium"
    return out
