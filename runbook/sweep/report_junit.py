"""junit.xml: one test case per host, so a CI system or a dashboard that reads JUnit shows a
sweep like a test run. A finding (or an inconclusive verdict) is a `<failure>`, a host that was
not swept (unreachable, refused, timeout, error) an `<error>`, a healthy host passes. Pure."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from runbook.sweep.results import FAILING, NOT_SWEPT, HostResult, SweepResult
from runbook.verdict import Verdict

# characters XML 1.0 cannot carry at all (log lines can hold any of them)
_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _clean(text: Any) -> str:
    return _INVALID_XML.sub("\ufffd", str(text))


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
            "timestamp": sweep.started_at,
            "hostname": _clean(sweep.source)[:200],
        },
    )
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
        props = ET.SubElement(case, "properties")
        ET.SubElement(props, "property", {"name": "target", "value": _clean(host.target)})
        ET.SubElement(props, "property", {"name": "status", "value": host.status.value})
    ET.indent(suites)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
    )
