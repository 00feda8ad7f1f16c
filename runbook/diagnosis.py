"""From a finished walk to the verdict object of DESIGN §5 (a contract: add fields only).

Pure: takes the conductor, returns a JSON-ready dict. The root cause is the cause of the
*earliest* anomaly — the finding whose evidence has the earliest time — not of the last error;
findings without times are ordered by where the walk met them. An explicit `conclude:` wins.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from runbook import templating
from runbook.conductor import Conductor, Finding, Status
from runbook.errors import TemplateError
from runbook.report.secrets import redact_data

VERDICT_FORMAT = 1

#: the order fixes are listed (and should be applied) in
FIX_ORDER = (
    "collect-more",
    "reduce-loader-memory",
    "shm-size-limit",
    "memory-limit",
    "nccl-ib-disable-ab",
    "node-drain",
)


def utc_offset(text: Any) -> dt.timezone | None:
    """`date +%z` output (`+0800`, `-0530`) as a timezone, or None."""
    if not isinstance(text, str):
        return None
    text = text.strip()
    if len(text) == 5 and text[0] in "+-" and text[1:].isdigit():
        minutes = int(text[1:3]) * 60 + int(text[3:])
        return dt.timezone(dt.timedelta(minutes=minutes if text[0] == "+" else -minutes))
    return None


def parse_time(value: Any, local: dt.tzinfo | None = None) -> dt.datetime | None:
    """ISO 8601, or None. A naive time (`dmesg -T`, syslog, most application logs) is the
    node's local time: `local` when the node's UTC offset is known, else taken as UTC."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=local or dt.timezone.utc)


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


def _earliest_time(finding: Finding, local: dt.tzinfo | None = None) -> dt.datetime | None:
    times = [t for t in (parse_time(e.get("time"), local) for e in finding.evidence) if t]
    return min(times) if times else None


def order_by_time(findings: list[Finding], local: dt.tzinfo | None = None) -> list[Finding]:
    """Timed findings by time first, then the untimed ones in walk order (stable)."""
    timed = [
        (t, i, f) for i, f in enumerate(findings) if (t := _earliest_time(f, local)) is not None
    ]
    untimed = [f for f in findings if _earliest_time(f, local) is None]
    return [f for _, _, f in sorted(timed, key=lambda x: (x[0], x[1]))] + untimed


def _first_evidence(finding: Finding, local: dt.tzinfo | None = None) -> dict[str, Any]:
    if not finding.evidence:
        return {"source": f"stage:{finding.stage}", "text": finding.text}
    timed = [
        (t, i, e) for i, e in enumerate(finding.evidence) if (t := parse_time(e.get("time"), local))
    ]
    if timed:
        return dict(min(timed, key=lambda x: (x[0], x[1]))[2])
    return dict(finding.evidence[0])


def _proposal(conductor: Conductor, remedy_id: str, ctx: dict[str, Any]) -> dict[str, Any]:
    remedy = conductor.runbook.remedy(remedy_id)
    params: dict[str, Any] = {}
    errors = []
    for key, template in remedy.params.items():
        try:
            params[key] = templating.render_text(template, ctx)
        except TemplateError as exc:
            errors.append(f"{key}: {exc.one_line()}")
    try:
        summary = templating.render_text(remedy.summary or remedy.title, ctx)
    except TemplateError as exc:
        summary, errors = remedy.title, [*errors, exc.one_line()]
    digest = hashlib.sha256(
        json.dumps([remedy.id, params], sort_keys=True, default=str).encode()
    ).hexdigest()[:10]
    proposal: dict[str, Any] = {
        "id": f"{remedy.id}-{digest}",
        "kind": remedy.kind,
        "requires_approval": True,
        "summary": " ".join(summary.split()),
        "params": params,
        "remedy": remedy.id,
    }
    if remedy.playbook:
        proposal["playbook"] = remedy.playbook
    if errors:
        proposal["errors"] = errors
    return proposal


def _mostly_missing(walked: list[Any]) -> bool:
    """Too little was read to call a node healthy: half or more of the stages walked collected
    nothing."""
    ran = [r for r in walked if r.status is not Status.SKIPPED]
    missing = [r for r in ran if r.status is Status.NOT_COLLECTED]
    return not ran or 2 * len(missing) >= len(ran)


def build_verdict(
    conductor: Conductor, *, node: str, target: str = "", local_utc_offset: str | None = None
) -> dict[str, Any]:
    """The verdict; `local_utc_offset` (`date +%z` of the node) places naive log times."""
    runbook = conductor.runbook
    local = utc_offset(local_utc_offset)
    walked = [conductor.records[s] for s in conductor.path]
    findings = [f for record in walked for f in record.findings]
    ordered = order_by_time(findings, local)
    with_cause = [f for f in ordered if f.cause]
    problems = [r for r in walked if r.status in (Status.ERROR, Status.NOT_COLLECTED)]
    # evidence that is absent lowers nothing; evidence we failed to read (errors) does
    errors = [r for r in walked if r.status is Status.ERROR]

    if conductor.concluded:
        root_cause = conductor.concluded
    elif with_cause:
        root_cause = with_cause[0].cause or "inconclusive"
    elif findings or errors or _mostly_missing(walked):
        root_cause = "inconclusive"
    else:
        # nothing wrong in what was read; what could not be read lowers the confidence and
        # is named in a collect-more proposal
        root_cause = "healthy"

    cause_finding = next((f for f in with_cause if f.cause == root_cause), None)
    if root_cause in ("healthy", "inconclusive"):
        confidence = (
            "low" if root_cause == "inconclusive" else ("high" if not problems else "medium")
        )
    elif cause_finding and cause_finding.evidence and not errors:
        confidence = "high"
    else:
        confidence = "medium"

    ctx = conductor.context()
    surfaced_as = None
    if runbook.surfaced_as:
        try:
            value = templating.evaluate(runbook.surfaced_as, ctx)
            surfaced_as = None if value in (None, "") else str(value)
        except TemplateError:
            surfaced_as = None

    blamed = {f.cause for f in findings if f.cause}
    ruled_out: list[dict[str, str]] = []
    seen: set[str] = set()
    for record in walked:
        for out in record.ruled_out:
            if out["cause"] in blamed or out["cause"] == root_cause or out["cause"] in seen:
                continue
            seen.add(out["cause"])
            ruled_out.append(dict(out))

    proposals = []
    proposed: set[str] = set()
    for record in walked:
        for remedy_id in record.proposals:
            if remedy_id not in proposed:
                proposed.add(remedy_id)
                proposals.append(_proposal(conductor, remedy_id, ctx))
    # fixes in the order to apply them: reduce the peak before adding memory; drain last
    proposals.sort(key=lambda p: FIX_ORDER.index(p["kind"]) if p["kind"] in FIX_ORDER else 99)
    if (root_cause == "inconclusive" or problems) and not any(
        p["kind"] == "collect-more" for p in proposals
    ):
        missing = [r.id for r in problems]
        proposals.append(
            {
                "id": "collect-more-" + hashlib.sha256(",".join(missing).encode()).hexdigest()[:10],
                "kind": "collect-more",
                "requires_approval": False,
                "summary": (
                    "collect the evidence of: " + ", ".join(missing)
                    if missing
                    else "the findings name no cause: collect the application logs and dmesg"
                ),
                "params": {"stages": missing},
            }
        )

    verdict: dict[str, Any] = {
        "format": VERDICT_FORMAT,
        "node": node,
        "runbook": runbook.id,
        "target": target,
        "root_cause": root_cause,
        "confidence": confidence,
        "surfaced_as": surfaced_as,
        # the earliest link of the causal chain; a causeless finding (a label, a surfaced
        # error) is context, unless nothing names a cause
        "first_anomaly": (_first_evidence((with_cause or ordered)[0], local) if ordered else None),
        "chain": [
            {
                "stage": f.stage,
                "finding": f.text,
                **({"cause": f.cause} if f.cause else {}),
                "evidence": [
                    {k: e[k] for k in ("source", "line", "time") if k in e} for e in f.evidence
                ],
            }
            for f in ordered
        ],
        "ruled_out": ruled_out,
        "stages": [stage_summary(conductor, s.id) for s in runbook.stages],
        "proposals": proposals,
        "timeline": build_timeline(conductor, local),
    }
    # a credential a log line carried never reaches a verdict, a report or a sweep result
    redacted: dict[str, Any] = redact_data(verdict)
    return redacted


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


def summarize(verdict: Mapping[str, Any]) -> str:
    """One line for logs and sweep tables."""
    first = verdict.get("first_anomaly") or {}
    where = (
        f" (first anomaly: {first.get('source')}:{first.get('line')})" if first.get("line") else ""
    )
    return f"{verdict['node']}: {verdict['root_cause']} [{verdict['confidence']}]{where}"
