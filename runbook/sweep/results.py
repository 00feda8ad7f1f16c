"""What a sweep produces: one `HostResult` per host, and the `SweepResult` holding them all.

Results are data (STYLE §3): a host that could not be reached, refused us or hung is a result
with a status and a one-line error, exactly like a host that was diagnosed; nothing is raised.

Statuses, and how they count::

    healthy        the runbook found nothing (its verdict's root_cause is `healthy`)
    finding        the verdict names a root cause
    inconclusive   the verdict is `inconclusive`: the node could not be cleared (a finding too)
    unreachable    no connection (refused, no route, timed out connecting, no node agent)
    refused        the host answered but we would not or could not log in (host key, auth)
    timeout        the host did not finish within its per-host deadline (a hang)
    error          anything else: an inventory entry we cannot use, an internal failure

Exit code of a sweep: 1 if any host has a finding (or is inconclusive), else 3 if any was not
swept (unreachable, refused, timeout, error), else 0.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from runbook.verdict import Verdict

SWEEP_FORMAT = 1


class HostStatus(str, enum.Enum):
    HEALTHY = "healthy"
    FINDING = "finding"
    INCONCLUSIVE = "inconclusive"
    UNREACHABLE = "unreachable"
    REFUSED = "refused"
    TIMEOUT = "timeout"
    ERROR = "error"


#: hosts the runbook could not clear
FAILING = frozenset({HostStatus.FINDING, HostStatus.INCONCLUSIVE})
#: hosts the runbook never got to analyse
NOT_SWEPT = frozenset(
    {HostStatus.UNREACHABLE, HostStatus.REFUSED, HostStatus.TIMEOUT, HostStatus.ERROR}
)

#: root causes, worst first: what takes a node out of service before what a job can fix
SEVERITY = (
    "gpu-hardware",
    "pcie-error",
    "host-memory-oom",
    "gpu-memory-oom",
    "shm-exhausted",
    "rdma-misconfigured",
    "p2p-unavailable",
    "network-socket",
    "peer-rank-exited",
    "collective-hung",
    "collective-desync",
    "rank-stalled",
    "inconclusive",
    "healthy",
)
_CONFIDENCE = {"high": 0, "medium": 1, "low": 2}


def status_noun(status: str, n: int) -> str:
    """How a count of hosts in `status` is named: `finding` agrees in number (`2 findings`);
    the other statuses are adjectives (`2 healthy`, `1 unreachable`)."""
    return ("finding" if n == 1 else "findings") if status == HostStatus.FINDING.value else status


def status_of(verdict: Verdict) -> HostStatus:
    if verdict.root_cause == "healthy":
        return HostStatus.HEALTHY
    if verdict.root_cause == "inconclusive":
        return HostStatus.INCONCLUSIVE
    return HostStatus.FINDING


@dataclass(frozen=True)
class HostResult:
    """One host's outcome: its verdict (DESIGN §5) when it was swept, else its error."""

    host: str
    target: str
    status: HostStatus
    duration_s: float = 0.0
    groups: tuple[str, ...] = ()
    verdict: Verdict | None = None
    error: str | None = None
    #: ids of the proposals this host's verdict put in the approval queue
    queued: tuple[str, ...] = ()
    #: the host's run directory (events, bundle, verdict) with --keep-bundles
    run_dir: str | None = None
    #: its clock against the collector's (runbook.job.clock), when the sweep measured it
    clock: dict[str, Any] | None = None
    #: taken from an interrupted earlier sweep (`sweep --resume`), not swept this time
    reused: bool = False

    @property
    def root_cause(self) -> str | None:
        return None if self.verdict is None else self.verdict.root_cause

    def __repr__(self) -> str:
        what = self.root_cause or self.error or ""
        return f"<HostResult {self.host} {self.status.value} {what[:40]!r}>"

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "host": self.host,
            "target": self.target,
            "groups": list(self.groups),
            "status": self.status.value,
            "duration_s": round(self.duration_s, 3),
            "root_cause": self.root_cause,
        }
        if self.verdict is not None:
            data["verdict"] = self.verdict.to_json()
        if self.error is not None:
            data["error"] = self.error
        if self.queued:
            data["queued"] = list(self.queued)
        if self.run_dir:
            data["run_dir"] = self.run_dir
        if self.clock is not None:
            data["clock"] = self.clock
        if self.reused:
            data["reused"] = True
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HostResult:
        """A host's result as `as_dict` wrote it (VerdictError when its verdict does not fit)."""
        verdict = data.get("verdict")
        return cls(
            host=str(data["host"]),
            target=str(data.get("target") or ""),
            status=HostStatus(data["status"]),
            duration_s=float(data.get("duration_s") or 0.0),
            groups=tuple(str(g) for g in data.get("groups") or ()),
            verdict=Verdict.from_json(verdict) if verdict is not None else None,
            error=None if data.get("error") is None else str(data["error"]),
            queued=tuple(str(q) for q in data.get("queued") or ()),
            run_dir=data.get("run_dir"),
            clock=dict(data["clock"]) if isinstance(data.get("clock"), Mapping) else None,
            reused=bool(data.get("reused")),
        )


def severity_key(result: HostResult) -> tuple[int, int, str]:
    """Worst first: by root cause (SEVERITY), then confidence, then name."""
    cause = result.root_cause or ""
    rank = SEVERITY.index(cause) if cause in SEVERITY else len(SEVERITY) - 2
    confidence = _CONFIDENCE.get(result.verdict.confidence, 3) if result.verdict else 3
    return (rank, confidence, result.host)


@dataclass
class SweepResult:
    """Every host's outcome and how the sweep ran. `mode` is `sweep`, `analyze-dir` or
    `merge`; `shards` lists the `K/N` shards a merge joined (`missing_shards` those absent)."""

    runbook: str
    source: str
    hosts: list[HostResult]
    started_at: str
    finished_at: str
    duration_s: float
    mode: str = "sweep"
    shard: str | None = None
    forks: int = 0
    timeout_per_host_s: float = 0.0
    shards: list[str] = field(default_factory=list)
    missing_shards: list[str] = field(default_factory=list)
    #: unix time the sweep finished (a merge: the oldest shard's), for runbook.prom
    finished_ts: float = 0.0
    #: `sweep --resume`: when the interrupted sweep whose finished hosts were reused started
    resumed_from: str | None = None

    def counts(self) -> dict[str, int]:
        counts = {status.value: 0 for status in HostStatus}
        for result in self.hosts:
            counts[result.status.value] += 1
        return counts

    def by_status(self, statuses: Iterable[HostStatus]) -> list[HostResult]:
        wanted = set(statuses)
        return [r for r in self.hosts if r.status in wanted]

    def exit_code(self) -> int:
        if self.by_status(FAILING):
            return 1
        if self.by_status(NOT_SWEPT) or self.missing_shards:
            return 3
        return 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": SWEEP_FORMAT,
            "kind": "runbook-sweep",
            "mode": self.mode,
            "runbook": self.runbook,
            "source": self.source,
            "shard": self.shard,
            "shards": list(self.shards),
            "missing_shards": list(self.missing_shards),
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "finished_ts": round(self.finished_ts, 3),
            "duration_s": round(self.duration_s, 3),
            "forks": self.forks,
            "timeout_per_host_s": self.timeout_per_host_s,
            "counts": self.counts(),
            "exit_code": self.exit_code(),
            **({"resumed_from": self.resumed_from} if self.resumed_from else {}),
            "hosts": [r.as_dict() for r in self.hosts],
        }

    def reused(self) -> list[HostResult]:
        return [r for r in self.hosts if r.reused]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepResult:
        return cls(
            runbook=str(data.get("runbook") or ""),
            source=str(data.get("source") or ""),
            hosts=[HostResult.from_dict(h) for h in data.get("hosts") or ()],
            started_at=str(data.get("started_at") or ""),
            finished_at=str(data.get("finished_at") or ""),
            duration_s=float(data.get("duration_s") or 0.0),
            mode=str(data.get("mode") or "sweep"),
            shard=data.get("shard"),
            forks=int(data.get("forks") or 0),
            timeout_per_host_s=float(data.get("timeout_per_host_s") or 0.0),
            shards=[str(s) for s in data.get("shards") or ()],
            missing_shards=[str(s) for s in data.get("missing_shards") or ()],
            finished_ts=float(data.get("finished_ts") or 0.0),
            resumed_from=data.get("resumed_from"),
        )


def ordered_findings(hosts: Sequence[HostResult]) -> list[HostResult]:
    """The hosts the runbook could not clear, worst first."""
    return sorted((r for r in hosts if r.status in FAILING), key=severity_key)


class SweepObserver(Protocol):
    def started(self, total: int) -> None: ...
    def host_done(self, result: HostResult) -> None: ...
    def finished(self, result: SweepResult) -> None: ...
    def aborted(self) -> None:
        """The sweep was interrupted: leave the terminal clean for the one-line message."""


class NullSweepObserver:
    def started(self, total: int) -> None:
        pass

    def host_done(self, result: HostResult) -> None:
        pass

    def finished(self, result: SweepResult) -> None:
        pass

    def aborted(self) -> None:
        pass
