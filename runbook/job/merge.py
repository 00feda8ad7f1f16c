"""Many nodes' verdicts → one job verdict (pure).

Every node's timeline (DESIGN §5 `timeline`, UTC by the node's own clock) is shifted by that
node's measured clock offset (clock.py) onto the collector's clock, and merged. The job's root
cause is the cause of the earliest cause-naming anomaly on that corrected axis, whichever node
it is on — unless most nodes failed the same way within a few seconds of each other, which
points at something they share (fabric, switch, shared storage, a job-wide setting), and the
verdict says so instead of blaming each node (`scope: shared`).

The result keeps the single-node verdict's keys (format, root_cause, confidence, surfaced_as,
first_anomaly, chain, ruled_out, proposals, timeline), so tools reading a §5 verdict read this
one too, and adds `job`, `scope`, `statement`, `nodes`, `ranks`, `outliers`, `memory`.
"""

from __future__ import annotations

import datetime as dt
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from runbook.causal import causal_order, parse_time
from runbook.diagnosis import VERDICT_FORMAT
from runbook.job import hang
from runbook.job.models import JobSpec
from runbook.job.ranks import rank_table, strip_log_prefix
from runbook.printable import shortened
from runbook.remedies import kinds
from runbook.sweep.results import HostResult
from runbook.verdict import EvidenceRef, Verdict, facts_of

#: failures on this share of the reached nodes (and at least 3 of them, or every node of a
#: 2-node job) within SHARED_WINDOW_S of each other are one shared cause
SHARED_SHARE = 0.75
SHARED_WINDOW_S = 5.0
NOT_A_CAUSE = ("healthy", "inconclusive")


#: a line's place: a verdict's evidence, or a parser fact that has source, line and time
Located = EvidenceRef | Mapping[str, Any]


def _place(where: Located) -> tuple[Any, Any, Any]:
    if isinstance(where, EvidenceRef):
        return where.source, where.line, where.time
    return where.get("source"), where.get("line"), where.get("time")


def _iso(moment: dt.datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(dt.timezone.utc).isoformat(timespec="milliseconds")


class NodeClock:
    """One node's timestamps on the collector's clock: true = node − offset."""

    def __init__(self, result: HostResult) -> None:
        clock = result.clock or {}
        self.offset = float(clock.get("offset_s") or 0.0)
        self.uncertainty = float(clock.get("uncertainty_s") or 0.0)
        self.measured = result.clock is not None
        self._utc: dict[tuple[Any, Any], dt.datetime] = {}
        for entry in result.verdict.timeline if result.verdict else ():
            moment = parse_time(entry.get("time"))
            if moment is not None:
                self._utc[(entry.get("source"), entry.get("line"))] = moment

    def node_time(self, evidence: Located) -> dt.datetime | None:
        """The evidence's time by the node's clock, in UTC (from the node's own timeline,
        which placed naive times with the node's UTC offset)."""
        source, line, time = _place(evidence)
        return self._utc.get((source, line)) or parse_time(time)

    def corrected(self, evidence: Located) -> dt.datetime | None:
        raw = self.node_time(evidence)
        return None if raw is None else raw - dt.timedelta(seconds=self.offset)


#: chain links of these roles never start the job's chain (they blame nothing themselves)
_NOT_BLAMING = ("peer-consequence", "surfaced", "context", "benign")


def causal(anomalies: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Anomalies across nodes in causal order (runbook.causal.causal_order, the node verdict's
    own ranking): corrected times first by time, untimed ones by role, node, file and line."""
    return causal_order(
        anomalies,
        time_of=lambda a: a["when"],
        role_of=lambda a: a.get("role") or "cause",
        position_of=lambda a: (
            f"{a['node']}:{a['evidence'].source if a['evidence'] else ''}",
            a["evidence"].line if a["evidence"] and a["evidence"].line else 1 << 62,
        ),
    )


def _cause_anomalies(
    result: HostResult, clock: NodeClock, *, blaming: bool = True
) -> list[dict[str, Any]]:
    """The node's findings that blame a cause (with `blaming` False: every anomaly of its
    chain, consequences and lines no signature names too), each at its earliest corrected
    evidence time (None when its evidence has no time), in causal order."""
    out = []
    for link in result.verdict.chain if result.verdict else ():
        if link.role in ("context", "benign"):
            continue
        if blaming and (not link.cause or link.role in _NOT_BLAMING):
            continue
        timed = [(t, e) for e in link.evidence if (t := clock.corrected(e))]
        when: dt.datetime | None
        evidence: EvidenceRef | None
        if timed:
            when, evidence = min(timed, key=lambda x: x[0])
        else:
            when, evidence = None, (link.evidence[0] if link.evidence else None)
        out.append(
            {
                "node": result.host,
                "cause": link.cause,
                "finding": link.finding,
                "stage": link.stage,
                "role": link.role or "cause",
                "when": when,
                "evidence": evidence,
            }
        )
    return causal(out)


def _unrecognized_first(
    swept: Sequence[HostResult], clocks: Mapping[str, NodeClock]
) -> dict[str, Any] | None:
    """When no node blames a cause: the job's earliest anomaly on the corrected axis, if it is
    a line no signature names (a node verdict's `unrecognized` line, its chain's first link),
    else None: a new NCCL WARN on one node before the errors its peers then logged is the
    first anomaly of the job, as it is of its node."""
    every = [a for r in swept for a in _cause_anomalies(r, clocks[r.host], blaming=False)]
    if not every:
        return None
    first = causal(every)[0]
    result = next(r for r in swept if r.host == first["node"])
    line = result.verdict.extra.get("unrecognized") if result.verdict else None
    evidence = first["evidence"]
    if not isinstance(line, Mapping) or evidence is None:
        return None
    if (line.get("source"), line.get("line")) != (evidence.source, evidence.line):
        return None
    return {**first, "text": str(line.get("text") or "")}


def _text_of(result: HostResult, evidence: EvidenceRef | None) -> str:
    if result.verdict is None or evidence is None:
        return ""
    for entry in result.verdict.timeline:
        if (entry.get("source"), entry.get("line")) == (evidence.source, evidence.line):
            return str(entry.get("text") or "")
    first = result.verdict.first_anomaly
    if first and (first.source, first.line) == (evidence.source, evidence.line):
        return first.text or ""
    return ""


def _cite(evidence: EvidenceRef | None, keys: tuple[str, ...]) -> dict[str, Any]:
    """The fields `keys` of a piece of evidence, as the job verdict writes them."""
    data = evidence.to_json() if evidence else {}
    return {k: data[k] for k in keys if k in data}


def merged_timeline(results: Sequence[HostResult], limit: int = 600) -> list[dict[str, Any]]:
    """Every node's timed evidence on the collector's clock, oldest first; anomalies are kept
    first when the list is cut."""
    entries = []
    for result in results:
        clock = NodeClock(result)
        for entry in result.verdict.timeline if result.verdict else ():
            raw = parse_time(entry.get("time"))
            if raw is None:
                continue
            true = raw - dt.timedelta(seconds=clock.offset)
            entries.append(
                {
                    **entry,
                    "node": result.host,
                    "node_time": entry.get("time"),
                    "time": _iso(true),
                    "offset_s": round(clock.offset, 6),
                }
            )
    entries.sort(key=lambda e: (e["time"], e["node"], str(e.get("source")), e.get("line") or 0))
    if len(entries) > limit:
        keep = {id(e) for e in entries if e.get("anomaly")}
        rest = [e for e in entries if id(e) not in keep][: max(0, limit - len(keep))]
        keep |= {id(e) for e in rest}
        entries = [e for e in entries if id(e) in keep]
    return entries


def _surfaced(results: Sequence[HostResult], clocks: Mapping[str, NodeClock]) -> dict[str, Any]:
    """The error the job surfaced as: the rank that reported it and when (corrected)."""
    best: dict[str, Any] = {}
    for result in results:
        applog = facts_of(result.verdict, "applog")
        surfaced = applog.get("surfaced") if isinstance(applog.get("surfaced"), Mapping) else None
        if not surfaced:
            continue
        when = clocks[result.host].corrected(surfaced)
        candidate = {
            "node": result.host,
            "rank": surfaced.get("rank"),
            "text": str(surfaced.get("text") or ""),
            "when": when,
        }
        # the rank-0-style report: the latest surfaced error of the job, as operators see it
        if not best or (when and (best["when"] is None or when > best["when"])):
            best = candidate
    return best


def _span_s(moments: Iterable[dt.datetime | None]) -> float:
    ordered = sorted(m for m in moments if m is not None)
    return (ordered[-1] - ordered[0]).total_seconds() if ordered else 0.0


def shared_cause(
    firsts: Mapping[str, dict[str, Any]], reached: int, uncertainty: float
) -> dict[str, Any] | None:
    """Most nodes failing the same way at the same moment: one cause they share."""
    if reached < 2:
        return None
    by_cause: dict[str, list[dict[str, Any]]] = {}
    for anomaly in firsts.values():
        by_cause.setdefault(anomaly["cause"], []).append(anomaly)
    for cause, group in sorted(by_cause.items(), key=lambda kv: -len(kv[1])):
        need = max(2 if reached == 2 else 3, int(SHARED_SHARE * reached + 0.999))
        if len(group) < need:
            continue
        span = _span_s(a["when"] for a in group)
        if span > SHARED_WINDOW_S + 2 * uncertainty:
            continue
        nodes = sorted(a["node"] for a in group)
        return {
            "cause": cause,
            "nodes": nodes,
            "span_s": round(span, 3),
            "summary": (
                f"{len(nodes)} of {reached} nodes failed with {cause} within {span:.1f} s of "
                "each other: suspect a cause they share (fabric or switch, shared storage, a "
                "job-wide setting) rather than a fault on each node"
            ),
        }
    return None


def _value(metric: str, verdict: Verdict | None) -> Any:
    if metric == "xid":
        return len(facts_of(verdict, "dmesg").get("xids") or [])
    if metric == "aer":  # every report, corrected ones included (a flapping link)
        totals = facts_of(verdict, "dmesg").get("totals") or {}
        return int(totals.get("aer") or 0) + int(totals.get("aer_corrected") or 0)
    if metric == "driver":
        return facts_of(verdict, "nvidia_smi").get("driver_version")
    if metric == "transport":
        kinds = facts_of(verdict, "nccl_log").get("transport_kinds") or []
        return ",".join(sorted(kinds)) or None
    if metric == "busbw":
        runs = facts_of(verdict, "nccl_tests").get("runs") or {}
        # a run whose ranks did not share a communicator measured nothing (nccl_tests)
        values = [
            r.get("avg_busbw") for r in runs.values()
            if isinstance(r, Mapping) and not r.get("unmeasured")
        ]  # fmt: skip
        numbers = [float(v) for v in values if isinstance(v, int | float)]
        return min(numbers) if numbers else None
    raise KeyError(metric)


LABELS = {
    "xid": "Xid events in dmesg",
    "aer": "PCIe AER reports in dmesg",
    "driver": "NVIDIA driver version",
    "transport": "NCCL transport chosen",
    "busbw": "nccl-tests average bus bandwidth (GB/s)",
}


def outliers(results: Sequence[HostResult]) -> list[dict[str, Any]]:
    """Nodes that differ from their peers (at least 3 nodes read the same measure)."""
    found: list[dict[str, Any]] = []
    swept = [r for r in results if r.verdict is not None]
    for metric, label in LABELS.items():
        values = {r.host: _value(metric, r.verdict) for r in swept}
        values = {h: v for h, v in values.items() if v is not None}
        if len(values) < 3:
            continue
        if metric in ("driver", "transport"):
            counts = Counter(values.values())
            common, n = counts.most_common(1)[0]
            if n == len(values) or n < len(values) / 2:
                continue
            for host, value in sorted(values.items()):
                if value != common:
                    found.append(
                        {
                            "node": host,
                            "measure": metric,
                            "value": value,
                            "peers": common,
                            "summary": f"{host}: {label} {value}, its peers {common}",
                        }
                    )
        elif metric in ("xid", "aer"):
            for host, value in sorted(values.items()):
                others = [v for h, v in values.items() if h != host]
                base = statistics.median(others)
                if value > 0 and value >= 10 * max(base, 0.5) and value > max(others):
                    found.append(
                        {
                            "node": host,
                            "measure": metric,
                            "value": value,
                            "peers": base,
                            "summary": f"{host}: {value} {label}, its peers a median of {base:g}",
                        }
                    )
        else:  # bandwidth: low is the outlier
            for host, value in sorted(values.items()):
                base = statistics.median([v for h, v in values.items() if h != host])
                if value < 0.8 * base:
                    found.append(
                        {
                            "node": host,
                            "measure": metric,
                            "value": value,
                            "peers": base,
                            "summary": f"{host}: {label} {value:g}, its peers a median of {base:g}",
                        }
                    )
    return found


def _max(spread: Any) -> int | None:
    value = spread.get("max") if isinstance(spread, Mapping) else None
    return int(value) if isinstance(value, int | float) else None


def _node_memory(host: str, verdict: Verdict | None, ranks: int | None) -> dict[str, Any]:
    """One node's row: its cgroup's peak and limit, and what one rank costs there — from the
    live processes when the node still had them (the rank's own anon plus its workers' own
    anon, lesson 5's terms), else the cgroup's peak shared over the node's ranks."""
    cgroup = facts_of(verdict, "cgroup")
    procmem = facts_of(verdict, "procmem")
    peak = cgroup.get("peak_bytes") or cgroup.get("usage_bytes")
    per_rank = _max((procmem.get("per_rank") or {}).get("group_anon_bytes"))
    row: dict[str, Any] = {
        "node": host,
        "ranks": ranks,
        "peak_bytes": peak,
        "limit_bytes": cgroup.get("limit_bytes"),
        "at_limit": bool(cgroup.get("usage_at_limit")) or bool(cgroup.get("oom_kills")),
        "oom_kills": cgroup.get("oom_kills") or 0,
    }
    if procmem.get("ranks") and per_rank:
        row.update(
            per_rank_bytes=per_rank,
            rank_bytes=_max((procmem.get("per_rank") or {}).get("pss_anon_bytes")),
            workers_per_rank=_max((procmem.get("per_rank") or {}).get("workers")),
            worker_bytes=_max((procmem.get("per_worker") or {}).get("own_anon_bytes")),
            method="processes (rank + its workers, own anon)",
        )
    else:
        cost = int(peak / ranks) if isinstance(peak, int | float) and ranks else None
        row.update(per_rank_bytes=cost, method="cgroup peak ÷ ranks on the node")
    return row


def job_memory(spec: JobSpec, results: Sequence[HostResult]) -> dict[str, Any]:
    """The job's host memory (lesson 5: per-rank cost × ranks, a rank's cost counting its
    loader workers): per node its cgroup peak against its limit and the cost of one rank
    there; for the job, the largest per-rank cost × every rank."""
    ranks_on = {n.name: len([r for r in n.ranks if r is not None]) for n in spec.nodes}
    rows = []
    for result in results:
        if not facts_of(result.verdict, "cgroup"):
            continue
        applog = facts_of(result.verdict, "applog")
        ranks = (
            ranks_on.get(result.host)
            or len([r for r in applog.get("ranks") or [] if r.get("rank") is not None])
            or None
        )
        rows.append(_node_memory(result.host, result.verdict, ranks))
    costs: list[int] = [int(r["per_rank_bytes"]) for r in rows if r["per_rank_bytes"]]
    total_ranks = sum(int(r["ranks"] or 0) for r in rows)
    return {
        "nodes": rows,
        "per_rank_max_bytes": max(costs) if costs else None,
        "ranks": total_ranks or None,
        "job_peak_bytes": sum(r["peak_bytes"] or 0 for r in rows) or None,
        "estimate_bytes": (max(costs) * total_ranks) if costs and total_ranks else None,
        "at_limit": sorted(r["node"] for r in rows if r["at_limit"]),
    }


def _gib(value: Any) -> str:
    return f"{value / 2**30:.2f} GiB" if isinstance(value, int | float) else "?"


def _who(anomaly: Mapping[str, Any], table: Sequence[Mapping[str, Any]]) -> str:
    evidence: EvidenceRef | None = anomaly["evidence"]
    where = (
        anomaly["node"],
        evidence.source if evidence else None,
        evidence.line if evidence else None,
    )
    rank = next(
        (
            r["rank"]
            for r in table
            if r.get("killed_by")
            and (r["node"], r["killed_by"].get("source"), r["killed_by"].get("line")) == where
        ),
        None,
    )
    return f"rank {rank} on {anomaly['node']}" if rank is not None else anomaly["node"]


def statement(
    first: Mapping[str, Any] | None, surfaced: Mapping[str, Any], table: Sequence[Mapping[str, Any]]
) -> str:
    if not first:
        return "no node named a cause"
    what = {
        "host-memory-oom": "hit its memory cgroup limit (OOM)",
        "gpu-hardware": "had a GPU fault",
        "pcie-error": "had a PCIe error",
        "shm-exhausted": "ran out of /dev/shm",
        "network-socket": "failed on a socket connection",
        "peer-rank-exited": "had a rank exit on its own error",
        "rdma-misconfigured": "had no usable RDMA device",
        "p2p-unavailable": "could not use GPU peer-to-peer",
        "gpu-memory-oom": "ran out of GPU memory",
    }.get(first["cause"], f"showed {first['cause']}")
    who = _who(first, table)
    if who.startswith("rank "):
        what = "was OOM-killed" if first["cause"] == "host-memory-oom" else what
    line = f"{who} {what} at {_iso(first['when']) or 'an untimed moment'}"
    gap = _gap_s(first, surfaced)
    if gap is not None:
        text = shortened(strip_log_prefix(surfaced["text"]), 100)
        line += f", {gap:.0f} s before {_reporter(surfaced)} on {surfaced['node']} reported {text}"
    return line


def _gap_s(first: Mapping[str, Any], surfaced: Mapping[str, Any]) -> float | None:
    """Seconds from the first anomaly to the line the job surfaced as, when both have a time
    and the surfacing came no earlier; else None."""
    if surfaced.get("when") and first["when"] and surfaced["when"] >= first["when"]:
        return float((surfaced["when"] - first["when"]).total_seconds())
    return None


def _reporter(surfaced: Mapping[str, Any]) -> str:
    """Who reported the line the job surfaced as: its rank, else its node."""
    return f"rank {surfaced['rank']}" if surfaced.get("rank") is not None else str(surfaced["node"])


def _first_anomalies(
    swept: Sequence[HostResult], clocks: Mapping[str, NodeClock]
) -> dict[str, dict[str, Any]]:
    """Each swept node's earliest cause-naming anomaly on the corrected axis, by node."""
    firsts: dict[str, dict[str, Any]] = {}
    for result in swept:
        anomalies = _cause_anomalies(result, clocks[result.host])
        if anomalies:
            firsts[result.host] = anomalies[0]
    return firsts


def _uncorrelated_root_cause(
    swept: Sequence[HostResult], results: Sequence[HostResult]
) -> tuple[str, str]:
    """(root cause, scope) when no anomaly named a cause: the first cause a node's verdict
    names; else `healthy` when every node was reached and found healthy; else
    `inconclusive`."""
    causes = [r.verdict.root_cause for r in swept if r.verdict]
    named = [c for c in causes if c not in NOT_A_CAUSE]
    root_cause = (
        named[0]
        if named
        else (
            "healthy"
            if swept and all(c == "healthy" for c in causes) and len(swept) == len(results)
            else "inconclusive"
        )
    )
    return root_cause, "node" if named else "none"


def _confidence(
    ordered: Sequence[Mapping[str, Any]],
    root_cause: str,
    results: Sequence[HostResult],
    clocks: Mapping[str, NodeClock],
    uncertainty: float,
) -> str:
    """`high` for a first anomaly with every node reached and every clock measured, `medium`
    for one otherwise (or a healthy job), else `low`; `medium` at most when the two earliest
    anomalies, on two nodes, are closer than the clocks are known."""
    first = ordered[0] if ordered else None
    unreached = [r for r in results if r.verdict is None]
    confidence = (
        "high"
        if first and not unreached and all(c.measured for c in clocks.values())
        else ("medium" if first or root_cause == "healthy" else "low")
    )
    if first and len(ordered) > 1 and first["when"] and ordered[1]["when"]:
        margin = (ordered[1]["when"] - first["when"]).total_seconds()
        if margin < 2 * uncertainty and ordered[1]["node"] != first["node"]:
            confidence = "medium"  # the two earliest are closer than the clocks are known
    return confidence


def _first_anomaly(
    first: Mapping[str, Any] | None,
    swept: Sequence[HostResult],
    clocks: Mapping[str, NodeClock],
) -> dict[str, Any] | None:
    """The job's first anomaly: its line, on the collector's clock and on its node's."""
    if first is None:
        return None
    result = next(r for r in swept if r.host == first["node"])
    clock = clocks[first["node"]]
    raw = clock.node_time(first["evidence"]) if first["evidence"] else None
    return {
        **_cite(first["evidence"], ("source", "line")),
        "node": first["node"],
        "time": _iso(first["when"]),
        "node_time": _iso(raw) if raw else None,
        "offset_s": round(clock.offset, 6),
        "uncertainty_s": round(clock.uncertainty, 6),
        "cause": first["cause"],
        "finding": first["finding"],
        "text": _text_of(result, first["evidence"]),
    }


def _proposals(
    swept: Sequence[HostResult], shared: Mapping[str, Any] | None
) -> list[dict[str, Any]]:
    """Every node's proposals, named by node, in the order to apply them."""
    proposals = []
    for result in swept:
        for proposal in result.verdict.proposals if result.verdict else ():
            if shared and kinds.takes_node_out(proposal.kind):
                continue  # one shared cause is not N node faults: no drain of every node
            proposals.append({**proposal.to_json(), "node": result.host})
    proposals.sort(key=lambda p: kinds.fix_rank(p["kind"]))
    return proposals


def _ruled_out(swept: Sequence[HostResult], root_cause: str) -> list[dict[str, Any]]:
    """The causes every swept node ruled out (other than the root cause), with the nodes."""
    ruled: dict[str, dict[str, Any]] = {}
    for result in swept:
        for out in result.verdict.ruled_out if result.verdict else ():
            if out.cause != root_cause:
                ruled.setdefault(out.cause, {**out.to_json(), "nodes": []})["nodes"].append(
                    result.host
                )
    return [v for v in ruled.values() if len(v["nodes"]) == len(swept)]


def _chain(ordered: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The nodes' first anomalies in causal order, on the collector's clock."""
    return [
        {
            "node": a["node"],
            "stage": a["stage"],
            "finding": a["finding"],
            "cause": a["cause"],
            "time": _iso(a["when"]),
            "evidence": [_cite(a["evidence"], ("source", "line", "time"))],
        }
        for a in ordered
    ]


def merge_job(spec: JobSpec, results: Sequence[HostResult]) -> dict[str, Any]:
    """The job verdict (see the module docstring)."""
    clocks = {r.host: NodeClock(r) for r in results}
    swept = [r for r in results if r.verdict is not None]
    firsts = _first_anomalies(swept, clocks)
    ordered = causal(firsts.values())
    uncertainty = max((c.uncertainty for c in clocks.values()), default=0.0)
    shared = shared_cause(firsts, len(swept), uncertainty)
    table = rank_table(spec, results, clocks)
    surfaced = _surfaced(swept, clocks)

    first = ordered[0] if ordered else None
    if first is not None:
        root_cause, scope = first["cause"], "shared" if shared else "node"
    else:
        root_cause, scope = _uncorrelated_root_cause(swept, results)
    if shared:
        root_cause = shared["cause"]
    # nothing names a cause, and a line nothing names came first: it is the first anomaly
    unrecognized = _unrecognized_first(swept, clocks) if root_cause == "inconclusive" else None
    verdict = {
        "format": VERDICT_FORMAT,
        "kind": "job",
        "job": {
            "ref": spec.ref,
            "kind": spec.kind,
            "namespace": spec.namespace,
            "name": spec.name,
            "details": spec.details,
        },
        "node": first["node"] if first else None,
        "root_cause": root_cause,
        "scope": scope,
        "confidence": _confidence(ordered, root_cause, results, clocks, uncertainty),
        "surfaced_as": surfaced.get("text") or None,
        "statement": shared["summary"] if shared else statement(first, surfaced, table),
        "first_anomaly": _first_anomaly(first, swept, clocks),
        "shared_cause": shared,
        "chain": _chain(ordered),
        "nodes": [_node_row(r, clocks[r.host], firsts.get(r.host), spec) for r in results],
        "ranks": table,
        "outliers": outliers(results),
        "memory": job_memory(spec, results),
        "ruled_out": _ruled_out(swept, root_cause),
        "proposals": _proposals(swept, shared),
        "timeline": merged_timeline(results),
    }
    if unrecognized is not None:
        verdict.update(_unrecognized_fields(unrecognized, swept, clocks, surfaced, table))
    # a hang: every node's ranks lined up together (the rank behind, a mismatch, or none)
    return hang.apply(verdict, swept)


def _unrecognized_fields(
    line: Mapping[str, Any],
    swept: Sequence[HostResult],
    clocks: Mapping[str, NodeClock],
    surfaced: Mapping[str, Any],
    table: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """The job verdict's node, statement, first anomaly, chain and `unrecognized` (the
    optional field of a node verdict, with the node) for a first line no signature names."""
    text = line["text"]
    who = _who(line, table)
    said = (
        f"{who} logged a line no signature names, the job's first anomaly, at "
        f"{_iso(line['when']) or 'an untimed moment'}: {shortened(text, 160)}"
    )
    gap = _gap_s(line, surfaced)
    if gap is not None:
        said += (
            f"; {gap:.0f} s later {_reporter(surfaced)} on {surfaced['node']} reported the failure"
        )
    first = _first_anomaly(line, swept, clocks)
    assert first is not None
    return {
        "node": line["node"],
        "statement": said,
        "first_anomaly": {**first, "text": first["text"] or text},
        "chain": _chain([line]),
        "unrecognized": {
            "node": line["node"],
            **_cite(line["evidence"], ("source", "line")),
            "text": text,
        },
    }


def _node_row(
    result: HostResult, clock: NodeClock, first: Mapping[str, Any] | None, spec: JobSpec
) -> dict[str, Any]:
    verdict = result.verdict
    scheduled = [r for r in spec.ranks if r.node == result.host]
    return {
        "node": result.host,
        # what the scheduler gave the job on this node (Slurm knows GPUs per node, not per rank)
        "ranks": sorted({r.rank for r in scheduled if r.rank is not None}),
        "gpus": sorted({g for r in scheduled for g in r.gpus}),
        "target": result.target,
        "status": result.status.value,
        "root_cause": verdict.root_cause if verdict else None,
        "confidence": verdict.confidence if verdict else None,
        "error": result.error,
        "clock": (
            {"offset_s": round(clock.offset, 6), "uncertainty_s": round(clock.uncertainty, 6)}
            if clock.measured
            else None
        ),
        "first_anomaly": (
            {
                "time": _iso(first["when"]),
                "cause": first["cause"],
                **_cite(first["evidence"], ("source", "line")),
            }
            if first
            else None
        ),
    }
