"""From a finished walk to the verdict object of DESIGN §5 (a contract: add fields only).

Pure: takes the conductor, returns the typed `runbook.verdict.Verdict`. The named steps:

- `finding_role`: a finding's causal role (its rule's `role:`, else its evidence's, else
  `cause` when it names one, else `local-error`);
- `rank_findings`: the findings in causal order (`runbook.causal.causal_order`: timed
  evidence by time, untimed by role, then file and line);
- `root_cause_of`: the cause of the first finding that blames one — a `context` finding (an
  OOM in a cgroup nothing ties to the job) only when nothing else does, and then at low
  confidence; `healthy` only on evidence (something read and ruled out, no anomaly);
- `confidence_of`, `first_anomaly_of` (always a bundle file and line when one is known);
- `split_chain`: the causal chain (the root cause's findings and the consequences, in causal
  order) apart from what was merely also seen;
- `unrecognized_first`: an error line no signature names (a new NCCL WARN, a driver message
  nobody catalogued: `UNRECOGNIZED`) is an anomaly in time order like any other; when no
  finding names a cause and it came first, it is the first anomaly and the chain's first link
  (`unrecognized: <line>`), and the verdict's optional `unrecognized` field holds it (source,
  line, text), instead of naming a consequence.

An explicit `conclude:` wins.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from runbook import hang, templating
from runbook import verdict as typed
from runbook.causal import causal_order, parse_time
from runbook.conductor import Conductor, RuleFinding, StageStatus
from runbook.errors import TemplateError
from runbook.redact import redact_data
from runbook.remedies import kinds
from runbook.remedies.kinds import collect_more
from runbook.signatures import role_rank

if TYPE_CHECKING:
    from runbook.conductor import StageRecord
    from runbook.spec.models import Runbook

VERDICT_FORMAT = typed.FORMAT


def utc_offset(text: Any) -> dt.timezone | None:
    """`date +%z` output (`+0800`, `-0530`) as a timezone, or None."""
    if not isinstance(text, str):
        return None
    text = text.strip()
    if len(text) == 5 and text[0] in "+-" and text[1:].isdigit():
        minutes = int(text[1:3]) * 60 + int(text[3:])
        return dt.timezone(dt.timedelta(minutes=minutes if text[0] == "+" else -minutes))
    return None


#: the timeline keeps at most this many entries (anomalies first among those dropped last)
TIMELINE_MAX = 400


def _timed_evidence(value: Any, depth: int = 0) -> list[dict[str, Any]]:
    """Every evidence record (a mapping with source, line and time) anywhere in some facts."""
    if depth > 8:
        return []
    if isinstance(value, Mapping):
        if "source" in value and "line" in value and value.get("time"):
            return [dict(value)]
        return [e for v in value.values() for e in _timed_evidence(v, depth + 1)]
    if isinstance(value, list | tuple):
        return [e for v in value for e in _timed_evidence(v, depth + 1)]
    return []


def build_timeline(conductor: Conductor, local: dt.tzinfo | None = None) -> list[dict[str, Any]]:
    """Every timestamped piece of evidence the walk parsed — kernel, journals, application
    logs, pod terminations — on one axis, the findings' evidence marked as anomalies."""
    anomalies = {
        (e.get("source"), e.get("line") or e.get("text"))
        for record in conductor.records.values()
        for f in record.findings
        for e in f.evidence
    }
    entries: dict[tuple[Any, Any], dict[str, Any]] = {}
    for stage_id in conductor.path:
        for facts in conductor.records[stage_id].facts.values():
            for item in _timed_evidence(facts):
                when = parse_time(item.get("time"), local)
                key = (item.get("source"), item.get("line") or item.get("text"))
                if when is None or key in entries:
                    continue
                entries[key] = {
                    "time": when.astimezone(dt.timezone.utc).isoformat(),
                    "source": item.get("source"),
                    "line": item.get("line"),
                    "text": str(item.get("text", ""))[:300],
                    "stage": stage_id,
                    "anomaly": key in anomalies,
                }
    ordered = sorted(entries.values(), key=lambda e: (e["time"], str(e["source"]), e["line"] or 0))
    if len(ordered) > TIMELINE_MAX:
        keep = {id(e) for e in ordered if e["anomaly"]}
        room = max(0, TIMELINE_MAX - len(keep))
        keep |= {id(e) for e in [e for e in ordered if not e["anomaly"]][:room]}
        ordered = [e for e in ordered if id(e) in keep]
    return ordered


def _earliest_time(finding: RuleFinding, local: dt.tzinfo | None = None) -> dt.datetime | None:
    times = [
        t
        for t in (
            parse_time(e.get("time"), local) for e in finding.evidence if not e.get("time_inferred")
        )
        if t
    ]
    return min(times) if times else None


#: roles of findings that blame their cause outright; `context` findings blame only when
#: nothing else does (low confidence)
BLAMING_ROLES = ("cause", "local-error")
#: roles of the failure's consequences: part of the chain, never its root
CONSEQUENCE_ROLES = ("peer-consequence", "surfaced")
#: a node's own fault explains a hang read beside it: from the job's side, a GPU the driver
#: lost, a failed PCIe link or an OOM-killed rank is a collective that never completes (or a
#: rank that never arrives), so the hang is a link of that fault's chain, not its root
HANG_EXPLAINED_BY = ("gpu-hardware", "pcie-error", "host-memory-oom")


def finding_role(finding: RuleFinding) -> str:
    """The finding's causal role (see the module docstring)."""
    if finding.role:
        return finding.role
    roles = [str(e["role"]) for e in finding.evidence if isinstance(e.get("role"), str)]
    if roles:
        return min(roles, key=role_rank)
    # a finding that names no cause is still an anomaly (a failed check, an error) unless its
    # rule says it is context
    return "cause" if finding.cause else "local-error"


def _finding_position(finding: RuleFinding) -> tuple[str, int]:
    lined = [e for e in finding.evidence if isinstance(e.get("line"), int)]
    if lined:
        e = lined[0]
        return (str(e.get("source") or ""), int(e["line"]))
    return ("~" + finding.stage, 1 << 62)


def rank_findings(findings: list[RuleFinding], local: dt.tzinfo | None = None) -> list[RuleFinding]:
    """The findings in causal order (runbook.causal.causal_order)."""
    return causal_order(
        findings,
        local=local,
        time_of=lambda f: _earliest_time(f, local),
        role_of=finding_role,
        position_of=_finding_position,
    )


def _first_evidence(finding: RuleFinding, local: dt.tzinfo | None = None) -> dict[str, Any] | None:
    """The finding's first evidence in causal order that names a bundle file (and its line
    when known), or None when its evidence names no file."""
    files = [e for e in finding.evidence if isinstance(e.get("source"), str) and e.get("source")]
    lined = [e for e in files if isinstance(e.get("line"), int)]
    pool = lined or files
    if not pool:
        return None
    first = causal_order(pool, local=local)[0]
    return {k: first.get(k) for k in ("source", "line", "time", "text") if k in first}


def root_cause_of(ranked: list[RuleFinding]) -> tuple[str | None, RuleFinding | None, bool]:
    """(root cause, the finding that names it, weak): the first blaming finding's cause; a
    `context` finding's only when no other finding blames anything (weak). A hang's cause
    yields to a fault of the node's own that explains it (HANG_EXPLAINED_BY)."""
    blaming = [f for f in ranked if f.cause and finding_role(f) in BLAMING_ROLES]
    if blaming:
        first = blaming[0]
        if first.cause in typed.HANG_CAUSES:
            node_fault = next((f for f in blaming if f.cause in HANG_EXPLAINED_BY), None)
            if node_fault is not None:
                return node_fault.cause, node_fault, False
        return first.cause, first, False
    for f in ranked:
        if f.cause and finding_role(f) not in CONSEQUENCE_ROLES:
            return f.cause, f, True
    return None, None, False


def first_anomaly_of(
    ranked: list[RuleFinding], root: RuleFinding | None, local: dt.tzinfo | None = None
) -> dict[str, Any] | None:
    """The root cause's first evidence; without a cause, the first anomaly read (a rank's own
    error, a lost peer, where it surfaced); None when nothing anomalous was read."""
    candidates: list[RuleFinding] = []
    if root is not None:
        candidates = [root] + [f for f in ranked if f is not root and f.cause == root.cause]
    else:
        candidates = [f for f in ranked if finding_role(f) not in ("context", "benign")]
    firsts = [e for e in (_first_evidence(f, local) for f in candidates) if e is not None]
    lined = [e for e in firsts if isinstance(e.get("line"), int)]
    pool = lined or firsts
    return pool[0] if pool else None


def split_chain(
    ranked: list[RuleFinding], root_cause: str | None
) -> tuple[list[RuleFinding], list[RuleFinding]]:
    """(chain, also seen): the chain holds the root cause's findings, the faults after it and
    the consequences (causeless errors, lost peers, where it surfaced), in causal order; the
    rest — context such as a stale label or a neighbour's OOM — is also seen."""
    chain: list[RuleFinding] = []
    also: list[RuleFinding] = []
    rooted = False
    for f in ranked:
        role = finding_role(f)
        if root_cause and f.cause == root_cause and (role != "context" or not chain):
            chain.append(f)
            rooted = True
        elif not f.cause and role in ("local-error", *CONSEQUENCE_ROLES):
            chain.append(f)
        elif f.cause in typed.HANG_CAUSES and root_cause in HANG_EXPLAINED_BY:
            # the hang the node's fault caused: a consequence in the chain
            chain.append(f)
        elif rooted and f.cause and role in BLAMING_ROLES:
            # another fault after the root one (a GPU falling off the bus after its link
            # failed): a link of the chain, not its start
            chain.append(f)
        else:
            also.append(f)
    return chain, also


def _proposal(conductor: Conductor, remedy_id: str, context: dict[str, Any]) -> dict[str, Any]:
    remedy = conductor.runbook.remedy(remedy_id)
    params: dict[str, Any] = {}
    errors = []
    for key, template in remedy.params.items():
        value, problem = templating.render_message(template, context)
        if value is None:
            errors.append(f"param {key}: {problem}")
        else:
            params[key] = value
    summary, problem = templating.render_message(remedy.summary or remedy.title, context)
    if summary is None:
        # the title is a plain sentence of its own
        summary = f"{remedy.title} (details unavailable: {problem})"
        errors.append(f"summary: {problem}")
    digest = hashlib.sha256(
        json.dumps([remedy.id, params], sort_keys=True, default=str).encode()
    ).hexdigest()[:10]
    proposal: dict[str, Any] = {
        "id": f"{remedy.id}-{digest}",
        "kind": remedy.kind,
        # advice changes nothing: there is nothing to approve
        "requires_approval": not kinds.is_advice(remedy.kind),
        "summary": " ".join(summary.split()),
        "params": params,
        "remedy": remedy.id,
    }
    if remedy.playbook:
        proposal["playbook"] = remedy.playbook
    if errors:
        proposal["errors"] = errors
    return proposal


def _read_cleanly(record: StageRecord) -> bool:
    """The stage read its evidence and found nothing wrong in it: ok, or an anomaly whose
    every finding is context (a neighbour's OOM on a node running no job, a stale label),
    which a healthy verdict lists under also_seen."""
    if record.status is StageStatus.OK:
        return True
    return (
        record.status is StageStatus.ANOMALY
        and not record.errors
        and all(finding_role(f) in ("context", "benign") for f in record.findings)
    )


def _read_something(walked: list[StageRecord], runbook: Runbook) -> bool:
    """Evidence was read that a healthy verdict can stand on: something was ruled out, or a
    collective test passed (a parser's `all_passed: true`), in a stage that read cleanly. A
    runbook that rules nothing out anywhere (a plain collection) stands on every stage having
    read its files."""
    if not any(rule.rule_out for stage in runbook.stages for rule in stage.decide):
        return bool(walked) and all(r.status is StageStatus.OK for r in walked)
    return any(
        _read_cleanly(r)
        and (
            r.ruled_out
            or any(isinstance(f, Mapping) and f.get("all_passed") is True for f in r.facts.values())
        )
        for r in walked
    )


def confidence_of(
    root_cause: str,
    cause_finding: RuleFinding | None,
    weak: bool,
    errors: list[Any],
    gaps: list[Any],
) -> str:
    if root_cause == "inconclusive" or weak:
        return "low"
    if root_cause == "healthy":
        return "high" if not gaps else "medium"
    if cause_finding is not None and cause_finding.evidence and not errors:
        return "high"
    return "medium"


def _root_cause(
    conductor: Conductor,
    ranked: list[RuleFinding],
    walked: list[Any],
    anomalies: list[RuleFinding],
    errors: list[Any],
) -> tuple[str, RuleFinding | None, bool]:
    """(root cause, the finding that names it, weak): an explicit `conclude:` wins, then the
    first blaming finding's cause (`root_cause_of`); without one, `inconclusive` — or
    `healthy` when nothing wrong was read and something was."""
    cause, cause_finding, weak = root_cause_of(ranked)
    if conductor.concluded:
        root_cause = conductor.concluded
        cause_finding = next((f for f in ranked if f.cause == root_cause), None)
        weak = False
    elif cause:
        root_cause = cause
    elif anomalies or errors or not _read_something(walked, conductor.runbook):
        root_cause = "inconclusive"
    else:
        # nothing wrong in what was read, and something was read; what could not be read
        # lowers the confidence and is named in a collect-more proposal
        root_cause = "healthy"
    return root_cause, cause_finding, weak


def _surfaced_as(runbook: Runbook, context: dict[str, Any]) -> str | None:
    """The runbook's `surfaced_as:` evaluated; None when it is unset, empty or fails."""
    if not runbook.surfaced_as:
        return None
    try:
        value = templating.evaluate(runbook.surfaced_as, context)
    except TemplateError:
        return None
    return None if value in (None, "") else str(value)


def _ruled_out(
    walked: list[Any], findings: list[RuleFinding], root_cause: str
) -> list[dict[str, str]]:
    """The causes the walk ruled out, once each, less any a finding (other than context) or
    the root cause blames."""
    blamed = {f.cause for f in findings if f.cause and finding_role(f) != "context"}
    ruled_out: list[dict[str, str]] = []
    seen: set[str] = set()
    for record in walked:
        for out in record.ruled_out:
            if out["cause"] in blamed or out["cause"] == root_cause or out["cause"] in seen:
                continue
            seen.add(out["cause"])
            ruled_out.append(dict(out))
    return ruled_out


def _remedy_proposals(
    conductor: Conductor, walked: list[Any], root_cause: str, context: dict[str, Any]
) -> list[dict[str, Any]]:
    """The remedies the walk proposed, once each, that address the root cause (or gather
    evidence); one whose plan lacks a measurement is advice, not queued."""
    wanted: list[str] = []
    for record in walked:
        for remedy_id in record.proposals:
            if remedy_id not in wanted:
                wanted.append(remedy_id)
    proposals = []
    for remedy_id in wanted:
        kind = conductor.runbook.remedy(remedy_id).kind
        if not kinds.proposed_on(kind, root_cause):
            continue  # decided on the kind: its templates are not rendered for nothing
        if kinds.takes_node_out(kind) and not node_hardware_evidence(walked, root_cause):
            # the application's words can name a GPU fault; they never drain a node by
            # themselves (a tenant could print the line): collect the node's own first
            proposals.append(collect_more.corroboration_proposal(root_cause))
            continue
        proposal = _proposal(conductor, remedy_id, context)
        missing = kinds.missing(proposal)
        if missing:
            proposal["requires_approval"] = False
            proposal["missing"] = missing
            proposal["summary"] = (
                f"advice, not queued (missing: {'; '.join(missing)}): " + proposal["summary"]
            )
        proposals.append(proposal)
    return proposals


#: what the job itself wrote (its logs, NCCL's, its benchmarks' output): words a tenant
#: controls, never by themselves evidence of the node's hardware
_APPLICATION_SOURCES = ("app/", "nccl/", "nccl-tests/")


def node_hardware_evidence(walked: list[Any], cause: str) -> bool:
    """Some finding of `cause` stands on more than the job's own words: evidence from the
    node's tools (kernel log, nvidia-smi, DCGM, …), or a finding a runbook drew without an
    evidence list (its rule read the node's files). A finding whose every evidence line is
    the application's (app/, nccl/) does not."""
    for record in walked:
        for finding in record.findings:
            if finding.cause != cause:
                continue
            sources = [str(e.get("source") or "") for e in finding.evidence]
            if not sources or not all(s.startswith(_APPLICATION_SOURCES) for s in sources):
                return True
    return False


def _proposals(
    conductor: Conductor,
    walked: list[Any],
    gaps: list[Any],
    root_cause: str,
    context: dict[str, Any],
) -> list[dict[str, Any]]:
    """The verdict's proposals, in the order to apply them: reduce the peak before adding
    memory, drain last; a collect-more proposal when the verdict is inconclusive or evidence
    is missing and none was proposed."""
    proposals = _remedy_proposals(conductor, walked, root_cause, context)
    proposals.sort(key=lambda p: kinds.fix_rank(p["kind"]))
    if (root_cause == "inconclusive" or gaps) and not any(
        p["kind"] == collect_more.NAME for p in proposals
    ):
        proposals.append(collect_more.gap_proposal([r.id for r in gaps]))
    return proposals


#: what a line is when no signature names it: the kernel parser's `unrecognized` error lines
#: (runbook.parsers.errorlines), and the catalog's catch-alls, which say only that a line is
#: an error (an NCCL WARN of no known kind, a rank's `ERROR …`)
UNRECOGNIZED = ("unrecognized", "nccl-warn", "generic-error")
#: items of one list searched for unrecognized lines (the parsers keep no more than this)
_UNRECOGNIZED_MAX = 2000


def _unrecognized_evidence(value: Any, depth: int = 0) -> list[dict[str, Any]]:
    """Every evidence record (source, line) in some facts whose signature is unrecognized."""
    if depth > 8:
        return []
    if isinstance(value, Mapping):
        if value.get("signature") in UNRECOGNIZED and "source" in value and "line" in value:
            return [dict(value)]
        return [e for v in value.values() for e in _unrecognized_evidence(v, depth + 1)]
    if isinstance(value, list | tuple):
        return [e for v in value[:_UNRECOGNIZED_MAX] for e in _unrecognized_evidence(v, depth + 1)]
    return []


def unrecognized_first(
    walked: list[StageRecord], ranked: list[RuleFinding], local: dt.tzinfo | None = None
) -> RuleFinding | None:
    """The earliest unrecognized error line the walk read, in causal order, as a finding
    (`unrecognized: <line>`, role local-error, no cause) when it comes before every anomaly
    in `ranked`; else None."""
    seen: dict[tuple[Any, Any], tuple[str, dict[str, Any]]] = {}
    for record in walked:
        for facts in record.facts.values():
            for e in _unrecognized_evidence(facts):
                seen.setdefault((e.get("source"), e.get("line")), (record.id, e))
    if not seen:
        return None
    stage_of = {id(e): stage for stage, e in seen.values()}
    first = causal_order([e for _, e in seen.values()], local=local)[0]
    text = " ".join(str(first.get("text") or "").split())
    evidence = {k: first.get(k) for k in ("source", "line", "time", "text") if first.get(k)}
    if first.get("time_inferred"):
        evidence["time_inferred"] = True
    candidate = RuleFinding(
        stage=stage_of[id(first)],
        text=f"unrecognized: {text[:300]}",
        role="local-error",
        evidence=[{**evidence, "role": "local-error", "signature": "unrecognized"}],
    )
    anomalies = [f for f in ranked if finding_role(f) not in ("context", "benign")]
    if rank_findings([candidate, *anomalies], local)[0] is not candidate:
        return None
    return candidate


def _linked(finding: RuleFinding) -> typed.Finding:
    """A finding as a link of the verdict's chain (or of what was also seen)."""
    return typed.Finding(
        stage=finding.stage,
        finding=finding.text,
        cause=finding.cause,
        role=finding_role(finding),
        evidence=tuple(
            typed.EvidenceRef(
                source=str(e.get("source") or f"stage:{finding.stage}"),
                line=e.get("line") if isinstance(e.get("line"), int) else None,
                time=e.get("time") if isinstance(e.get("time"), str) else None,
            )
            for e in finding.evidence
        ),
    )


def build_verdict(
    conductor: Conductor, *, node: str, target: str = "", local_utc_offset: str | None = None
) -> typed.Verdict:
    """The verdict; `local_utc_offset` (`date +%z` of the node) places naive log times."""
    runbook = conductor.runbook
    local = utc_offset(local_utc_offset)
    walked = [conductor.records[s] for s in conductor.path]
    findings = [f for record in walked for f in record.findings]
    ranked = rank_findings(findings, local)
    gaps = [
        r
        for r in walked
        if r.status in (StageStatus.ERROR, StageStatus.NOT_COLLECTED, StageStatus.UNRECOGNIZED)
    ]
    # evidence that is absent lowers nothing; evidence we failed to read (errors) does
    errors = [r for r in walked if r.status is StageStatus.ERROR]
    anomalies = [f for f in ranked if finding_role(f) not in ("context", "benign")]

    root_cause, cause_finding, weak = _root_cause(conductor, ranked, walked, anomalies, errors)
    unrecognized = None
    if root_cause in ("inconclusive", "healthy") and not conductor.concluded:
        unrecognized = unrecognized_first(walked, ranked, local)
    if unrecognized is not None:
        # nothing names a cause, and a line nothing names came first: it is the first anomaly
        findings = [unrecognized, *findings]
        ranked = rank_findings(findings, local)
        anomalies = [f for f in ranked if finding_role(f) not in ("context", "benign")]
        root_cause, cause_finding, weak = _root_cause(conductor, ranked, walked, anomalies, errors)
    confidence = confidence_of(root_cause, cause_finding, weak, errors, gaps)
    context = conductor.context()
    surfaced_as = _surfaced_as(runbook, context)
    chain, also_seen = split_chain(
        ranked, root_cause if root_cause not in ("healthy", "inconclusive") else None
    )
    ruled_out = _ruled_out(walked, findings, root_cause)
    # a remedy is proposed only when it addresses the root cause (or gathers evidence)
    proposals = _proposals(conductor, walked, gaps, root_cause, context)

    first = first_anomaly_of(ranked, cause_finding, local) if root_cause != "healthy" else None
    verdict = typed.Verdict(
        node=node,
        runbook=runbook.id,
        target=target,
        root_cause=root_cause,
        confidence=confidence,
        surfaced_as=surfaced_as,
        first_anomaly=typed.EvidenceRef.from_json(first, "first_anomaly") if first else None,
        chain=tuple(_linked(f) for f in chain),
        also_seen=tuple(_linked(f) for f in also_seen),
        ruled_out=tuple(typed.RuledOut(r["cause"], r["because"]) for r in ruled_out),
        stages=tuple(
            typed.StageSummary.from_json(stage_summary(conductor, s.id), s.id)
            for s in runbook.stages
        ),
        proposals=tuple(typed.Proposal.from_json(p, p["id"]) for p in proposals),
        extra={
            "timeline": build_timeline(conductor, local),
            # a hang's stalled ranks (rank, node, since, stack), when the walk read them
            **hang.verdict_fields((r.facts for r in walked), root_cause),
            # the line no signature names that came first (when nothing names a cause)
            **({"unrecognized": _unrecognized_field(unrecognized)} if unrecognized else {}),
        },
    )
    # a credential a log line carried never reaches a verdict, a report or a sweep result
    return typed.Verdict.from_json(redact_data(verdict.to_json()))


def _unrecognized_field(finding: RuleFinding) -> dict[str, Any]:
    """The verdict's `unrecognized` (an optional field): the line's source, number and text."""
    e = finding.evidence[0]
    return {k: e[k] for k in ("source", "line", "text") if e.get(k) is not None}


def stage_summary(conductor: Conductor, stage_id: str) -> dict[str, Any]:
    record = conductor.records[stage_id]
    data: dict[str, Any] = {
        "id": record.id,
        "title": record.title,
        "status": record.status.value,
        "facts": record.facts,
    }
    if record.findings:
        data["findings"] = [f.text for f in record.findings]
    if record.errors:
        data["errors"] = list(record.errors)
    probe_failures = {p.name: p.failure for p in record.probes if p.failure}
    if probe_failures:
        data["not_collected"] = probe_failures
    if record.reason:
        data["reason"] = record.reason
    return data


def summarize(verdict: typed.Verdict) -> str:
    """One line for logs and sweep tables."""
    first = verdict.first_anomaly
    where = f" (first anomaly: {first.where})" if first and first.line else ""
    return f"{verdict.node}: {verdict.root_cause} [{verdict.confidence}]{where}"
