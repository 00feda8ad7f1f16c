"""The verdict of DESIGN §5 as types: frozen dataclasses and one `to_json`/`from_json` pair that
is the contract (format 1; fields are only ever added, and readers ignore what they do not know).

    Verdict ─┬─ first_anomaly: EvidenceRef | None
             ├─ chain, also_seen: Finding (stage, finding, cause, role, evidence: EvidenceRef…)
             ├─ ruled_out: RuledOut (cause, because)
             ├─ stages: StageSummary (id, title, status, facts, …)
             └─ proposals: Proposal (id, kind, requires_approval, summary, params, missing, …)

`from_json(to_json(v)) == v` for every verdict; `from_json` refuses a malformed object with a
VerdictError naming the field (a report or sweep fed a hand-edited file says what is wrong).
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from runbook.errors import RunbookError

FORMAT = 1
ROOT_CAUSES = (
    "host-memory-oom", "gpu-memory-oom", "gpu-hardware", "pcie-error", "shm-exhausted",
    "p2p-unavailable", "rdma-misconfigured", "network-socket", "peer-rank-exited",
    "collective-desync", "rank-stalled", "collective-hung", "healthy", "inconclusive",
)  # fmt: skip
#: the root causes of a hang (DESIGN §5): the job stopped making progress in a collective
HANG_CAUSES = ("collective-desync", "rank-stalled", "collective-hung")
CONFIDENCES = ("high", "medium", "low")
T = TypeVar("T")


class VerdictError(RunbookError):
    """A verdict object that does not fit DESIGN §5."""

    exit_code = 2


def _need(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = data.get(key)
    if not isinstance(value, kind):
        raise VerdictError(f"{where}.{key}: expected {_name(kind)}, got {type(value).__name__}")
    return value


def _name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


def _object(data: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise VerdictError(f"{where}: expected an object")
    return data


def _list(
    data: Mapping[str, Any], key: str, where: str, parse: Callable[[Any, str], T]
) -> tuple[T, ...]:
    """`data[key]` (absent: empty), a list each of whose items `parse` reads."""
    value = data.get(key) or []
    if not isinstance(value, list):
        raise VerdictError(f"{where}.{key}: expected a list")
    return tuple(parse(item, f"{where}.{key}[{i}]") for i, item in enumerate(value))


def _rest(data: Mapping[str, Any], known: set[str]) -> dict[str, Any]:
    """The fields this version does not model, kept as they are."""
    return {k: v for k, v in data.items() if k not in known}


def _strings(data: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    """`data[key]` (absent: empty), a list of text."""
    return _list(data, key, where, lambda item, _where: str(item))


def _opt(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if data.get(key) is None:
        return None
    return _need(data, key, kind, where)


@dataclass(frozen=True)
class EvidenceRef:
    """A line of a bundle file: `source` is a path inside the bundle."""

    source: str
    line: int | None = None
    time: str | None = None
    text: str | None = None

    @property
    def where(self) -> str:
        """`source:line`, or the source alone when the line is unknown."""
        return f"{self.source}:{self.line}" if self.line else self.source

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.source}
        for key in ("line", "time", "text"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out

    @classmethod
    def from_json(cls, data: Any, where: str = "evidence") -> EvidenceRef:
        data = _object(data, where)
        line = _opt(data, "line", int, where)
        if isinstance(line, bool):
            raise VerdictError(f"{where}.line: expected int")
        return cls(
            source=_need(data, "source", str, where),
            line=line,
            time=_opt(data, "time", str, where),
            text=_opt(data, "text", str, where),
        )


@dataclass(frozen=True)
class Finding:
    """One link of the causal chain (or one anomaly also seen)."""

    stage: str
    finding: str
    cause: str | None = None
    role: str | None = None
    evidence: tuple[EvidenceRef, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"stage": self.stage, "finding": self.finding}
        if self.cause is not None:
            out["cause"] = self.cause
        if self.role is not None:
            out["role"] = self.role
        out["evidence"] = [e.to_json() for e in self.evidence]
        return out

    @classmethod
    def from_json(cls, data: Any, where: str) -> Finding:
        data = _object(data, where)
        return cls(
            stage=_need(data, "stage", str, where),
            finding=_need(data, "finding", str, where),
            cause=_opt(data, "cause", str, where),
            role=_opt(data, "role", str, where),
            evidence=_list(data, "evidence", where, EvidenceRef.from_json),
        )


@dataclass(frozen=True)
class RuledOut:
    cause: str
    because: str

    def to_json(self) -> dict[str, Any]:
        return {"cause": self.cause, "because": self.because}

    @classmethod
    def from_json(cls, data: Any, where: str) -> RuledOut:
        data = _object(data, where)
        return cls(_need(data, "cause", str, where), _need(data, "because", str, where))


@dataclass(frozen=True)
class StageSummary:
    """A stage as walked: status and the facts its parsers read (kept as JSON)."""

    id: str
    status: str
    title: str | None = None
    facts: Mapping[str, Any] = field(default_factory=dict)
    #: what the stage's rules found, as text
    findings: tuple[str, ...] = ()
    #: a parser's or a rule's error (the stage's other evidence was still read)
    errors: tuple[str, ...] = ()
    #: probe name → why its file could not be collected
    not_collected: Mapping[str, str] = field(default_factory=dict)
    reason: str | None = None
    #: everything else a newer writer added, kept as it is
    extra: Mapping[str, Any] = field(default_factory=dict)

    def parser_facts(self, parser: str) -> Mapping[str, Any] | None:
        """The facts `parser` read in this stage, when it collected any."""
        facts = self.facts.get(parser)
        if isinstance(facts, Mapping) and facts.get("collected") is not False:
            return facts
        return None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id}
        if self.title is not None:
            out["title"] = self.title
        out["status"] = self.status
        out["facts"] = dict(self.facts)
        if self.findings:
            out["findings"] = list(self.findings)
        if self.errors:
            out["errors"] = list(self.errors)
        if self.not_collected:
            out["not_collected"] = dict(self.not_collected)
        if self.reason is not None:
            out["reason"] = self.reason
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls, data: Any, where: str) -> StageSummary:
        data = _object(data, where)
        facts = data.get("facts") or {}
        not_collected = data.get("not_collected") or {}
        if not isinstance(facts, Mapping) or not isinstance(not_collected, Mapping):
            raise VerdictError(f"{where}: facts and not_collected must be objects")
        known = {"id", "title", "status", "facts", "findings", "errors", "not_collected", "reason"}
        return cls(
            id=_need(data, "id", str, where),
            status=_need(data, "status", str, where),
            title=_opt(data, "title", str, where),
            facts=dict(facts),
            findings=_strings(data, "findings", where),
            errors=_strings(data, "errors", where),
            not_collected={str(k): str(v) for k, v in not_collected.items()},
            reason=_opt(data, "reason", str, where),
            extra=_rest(data, known),
        )


@dataclass(frozen=True)
class Proposal:
    id: str
    kind: str
    requires_approval: bool
    summary: str
    params: Mapping[str, Any] = field(default_factory=dict)
    #: what the plan lacks when it cannot be computed (then requires_approval is false)
    missing: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "kind": self.kind,
            "requires_approval": self.requires_approval,
            "summary": self.summary,
            "params": dict(self.params),
        }
        if self.missing:
            out["missing"] = list(self.missing)
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls, data: Any, where: str) -> Proposal:
        data = _object(data, where)
        params = data.get("params") or {}
        missing = data.get("missing") or []
        if not isinstance(params, Mapping) or not isinstance(missing, list):
            raise VerdictError(f"{where}: params must be an object and missing a list")
        known = {"id", "kind", "requires_approval", "summary", "params", "missing"}
        return cls(
            id=_need(data, "id", str, where),
            kind=_need(data, "kind", str, where),
            requires_approval=_need(data, "requires_approval", bool, where),
            summary=_need(data, "summary", str, where),
            params=dict(params),
            missing=tuple(str(m) for m in missing),
            extra=_rest(data, known),
        )


@dataclass(frozen=True)
class Verdict:
    node: str
    root_cause: str
    confidence: str
    surfaced_as: str | None = None
    first_anomaly: EvidenceRef | None = None
    chain: tuple[Finding, ...] = ()
    also_seen: tuple[Finding, ...] = ()
    ruled_out: tuple[RuledOut, ...] = ()
    stages: tuple[StageSummary, ...] = ()
    proposals: tuple[Proposal, ...] = ()
    runbook: str | None = None
    target: str | None = None
    format: int = FORMAT
    #: fields this version does not model (timeline, a newer writer's additions): kept as-is
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def timeline(self) -> list[dict[str, Any]]:
        """The node's merged timeline (DESIGN §5 leaves it to the writer: kept as JSON)."""
        value = self.extra.get("timeline")
        return [e for e in value if isinstance(e, dict)] if isinstance(value, list) else []

    @property
    def stalled_ranks(self) -> list[dict[str, Any]]:
        """A hang's ranks that never entered the collective (DESIGN §5, optional): rank, node,
        since, stack."""
        value = self.extra.get("stalled_ranks")
        return [r for r in value if isinstance(r, dict)] if isinstance(value, list) else []

    @property
    def is_finding(self) -> bool:
        """The verdict names a root cause (neither healthy nor inconclusive)."""
        return self.root_cause not in ("healthy", "inconclusive")

    def stage(self, stage_id: str) -> StageSummary | None:
        return next((s for s in self.stages if s.id == stage_id), None)

    def facts_of(self, parser: str) -> Mapping[str, Any]:
        """The first walked stage's facts of `parser` ({} when no stage collected them)."""
        for stage in self.stages:
            facts = stage.parser_facts(parser)
            if facts is not None:
                return facts
        return {}

    def annotated(self, **fields: Any) -> Verdict:
        """This verdict with writer fields added beside the contract's (duration_s, …)."""
        return replace(self, extra={**self.extra, **fields})

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"format": self.format, "node": self.node}
        if self.runbook is not None:
            out["runbook"] = self.runbook
        if self.target is not None:
            out["target"] = self.target
        out.update(
            {
                "root_cause": self.root_cause,
                "confidence": self.confidence,
                "surfaced_as": self.surfaced_as,
                "first_anomaly": self.first_anomaly.to_json() if self.first_anomaly else None,
                "chain": [f.to_json() for f in self.chain],
                "also_seen": [f.to_json() for f in self.also_seen],
                "ruled_out": [r.to_json() for r in self.ruled_out],
                "stages": [s.to_json() for s in self.stages],
                "proposals": [p.to_json() for p in self.proposals],
            }
        )
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls, data: Any) -> Verdict:
        """The verdict a JSON object describes; VerdictError naming the first field that
        does not fit."""
        w = "verdict"
        data = _object(data, w)
        if data.get("format") != FORMAT:
            raise VerdictError(f"verdict.format: expected {FORMAT}, got {data.get('format')!r}")
        root = _need(data, "root_cause", str, w)
        if root not in ROOT_CAUSES:
            raise VerdictError(f"verdict.root_cause: {root!r} is not a root cause")
        confidence = _need(data, "confidence", str, w)
        if confidence not in CONFIDENCES:
            raise VerdictError(f"verdict.confidence: {confidence!r} is not one of {CONFIDENCES}")

        first = data.get("first_anomaly")
        known = {
            "format", "node", "runbook", "target", "root_cause", "confidence", "surfaced_as",
            "first_anomaly", "chain", "also_seen", "ruled_out", "stages", "proposals",
        }  # fmt: skip
        return cls(
            node=_need(data, "node", str, w),
            root_cause=root,
            confidence=confidence,
            surfaced_as=_opt(data, "surfaced_as", str, w),
            first_anomaly=EvidenceRef.from_json(first, "verdict.first_anomaly") if first else None,
            chain=_list(data, "chain", w, Finding.from_json),
            also_seen=_list(data, "also_seen", w, Finding.from_json),
            ruled_out=_list(data, "ruled_out", w, RuledOut.from_json),
            stages=_list(data, "stages", w, StageSummary.from_json),
            proposals=_list(data, "proposals", w, Proposal.from_json),
            runbook=_opt(data, "runbook", str, w),
            target=_opt(data, "target", str, w),
            extra=_rest(data, known),
        )


def facts_of(verdict: Verdict | None, parser: str) -> Mapping[str, Any]:
    """`verdict.facts_of(parser)`, and {} for a host that has no verdict."""
    return verdict.facts_of(parser) if verdict is not None else {}


def to_json(verdict: Verdict) -> dict[str, Any]:
    return verdict.to_json()


def from_json(data: Any) -> Verdict:
    return Verdict.from_json(data)
