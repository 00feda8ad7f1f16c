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

VERDICT_FORMAT = 1


def parse_time(value: Any) -> dt.datetime | None:
    """ISO 8601 (naive times are taken as UTC), or None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.timezone.utc)


def _earliest_time(finding: Finding) -> dt.datetime | None:
    times = [t for t in (parse_time(e.get("time")) for e in finding.evidence) if t is not None]
    return min(times) if times else None


def order_by_time(findings: list[Finding]) -> list[Finding]:
    """Timed findings by time first, then the untimed ones in walk order (stable)."""
    timed = [(t, i, f) for i, f in enumerate(findings) if (t := _earliest_time(f)) is not None]
    untimed = [f for f in findings if _earliest_time(f) is None]
    return [f for _, _, f in sorted(timed, key=lambda x: (x[0], x[1]))] + untimed


def _first_evidence(finding: Finding) -> dict[str, Any]:
    if not finding.evidence:
        return {"source": f"stage:{finding.stage}", "text": finding.text}
    timed = [e for e in finding.evidence if parse_time(e.get("time"))]
    if timed:
        return dict(min(timed, key=lambda e: parse_time(e["time"])))  # type: ignore[arg-type,return-value]
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


def build_verdict(conductor: Conductor, *, node: str, target: str = "") -> dict[str, Any]:
    runbook = conductor.runbook
    walked = [conductor.records[s] for s in conductor.path]
    findings = [f for record in walked for f in record.findings]
    ordered = order_by_time(findings)
    with_cause = [f for f in ordered if f.cause]
    problems = [r for r in walked if r.status in (Status.ERROR, Status.NOT_COLLECTED)]
    # evidence that is absent lowers nothing; evidence we failed to read (errors) does
    errors = [r for r in walked if r.status is Status.ERROR]

    if conductor.concluded:
        root_cause = conductor.concluded
    elif with_cause:
        root_cause = with_cause[0].cause or "inconclusive"
    elif findings or problems:
        root_cause = "inconclusive"
    else:
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
    if root_cause == "inconclusive" and not any(p["kind"] == "collect-more" for p in proposals):
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

    return {
        "format": VERDICT_FORMAT,
        "node": node,
        "runbook": runbook.id,
        "target": target,
        "root_cause": root_cause,
        "confidence": confidence,
        "surfaced_as": surfaced_as,
        "first_anomaly": _first_evidence(ordered[0]) if ordered else None,
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
    }


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
