"""junit.xml: one test case per host, so a CI system or a dashboard that reads JUnit shows a
sweep like a test run. A finding (or an inconclusive verdict) is a `<failure>`, a host that was
not swept (unreachable, refused, timeout, error) an `<error>`, a healthy host passes. Pure.

Valid under the Jenkins xUnit plugin's JUnit schema (junit-10.xsd, which the tests validate
against) and Ant's: `<properties>` only on the suite (a test case may not hold them: each host's
target and status go in its `<system-out>`), the suite's timestamp in UTC without a zone offset
(Ant's pattern has none)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from runbook.printable import printable
from runbook.sweep.results import FAILING, NOT_SWEPT, HostResult, SweepResult
from runbook.verdict import Verdict

# characters XML 1.0 cannot carry at all (log lines can hold any of them)
_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _clean(text: Any) -> str:
    # control characters a terminal would act on (a CI log shows this text) written visibly
    return _INVALID_XML.sub("\ufffd", printable(str(text)))


def _failure_text(host: HostResult, verdict: Verdict) -> str:
    lines = [f"root cause: {verdict.root_cause} ({verdict.confidence})"]
    if verdict.surfaced_as:
        lines.append(f"surfaced as: {verdict.surfaced_as}")
    first = verdict.first_anomaly
    if first:
        lines.append(f"first anomaly: {first.where} {first.text or ''}".rstrip())
    for link in verdict.chain:
        lines.append(f"[{link.stage}] {link.finding}")
    for proposal in verdict.proposals:
        lines.append(f"proposal {proposal.kind}: {proposal.summary}".rstrip())
    if host.queued:
        lines.append(f"queued for approval: {', '.join(host.queued)}")
    return "\n".join(lines)


def _timestamp(started_at: str) -> str:
    """`2026-03-04T10:40:00` in UTC: what Ant's schema and Jenkins both read."""
    import datetime as dt

    try:
        from runbook.timestamps import parse_iso

        at = parse_iso(started_at)
    except ValueError:
        return ""
    if at.tzinfo is not None:
        at = at.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return at.replace(microsecond=0).isoformat()


def render(sweep: SweepResult) -> str:
    counts = sweep.counts()
    failures = sum(counts[s.value] for s in FAILING)
    errors = sum(counts[s.value] for s in NOT_SWEPT)
    attrs = {
        "name": f"runbook sweep {sweep.runbook}",
        "tests": str(len(sweep.hosts)),
        "failures": str(failures),
        "errors": str(errors),
        "time": f"{sweep.duration_s:.3f}",
    }
    suites = ET.Element("testsuites", attrs)
    suite = ET.SubElement(
        suites,
        "testsuite",
        {
            **attrs,
            "name": sweep.runbook,
            "skipped": "0",
            "timestamp": _timestamp(sweep.started_at),
            "hostname": _clean(sweep.source)[:200],
        },
    )
    props = ET.SubElement(suite, "properties")
    for name, value in (("runbook", sweep.runbook), ("source", sweep.source),
                        ("started_at", sweep.started_at)):  # fmt: skip
        ET.SubElement(props, "property", {"name": name, "value": _clean(value)})
    for host in sweep.hosts:
        case = ET.SubElement(
            suite,
            "testcase",
            {
                "classname": f"{sweep.runbook}.{host.groups[0] if host.groups else 'all'}",
                "name": _clean(host.host),
                "time": f"{host.duration_s:.3f}",
            },
        )
        if host.status in FAILING and host.verdict is not None:
            verdict = host.verdict
            summary = verdict.root_cause
            if verdict.first_anomaly and verdict.first_anomaly.text:
                summary += f": {' '.join(verdict.first_anomaly.text.split())[:200]}"
            failure = ET.SubElement(
                case, "failure", {"message": _clean(summary), "type": verdict.root_cause}
            )
            failure.text = _clean(_failure_text(host, verdict))
        elif host.status in NOT_SWEPT:
            error = ET.SubElement(
                case,
                "error",
                {"message": _clean(host.error or host.status.value), "type": host.status.value},
            )
            error.text = _clean(f"{host.target}: {host.error or host.status.value}")
        out = ET.SubElement(case, "system-out")
        out.text = _clean(f"target: {host.target}\nstatus: {host.status.value}\n")
    ET.indent(suites)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
    )
