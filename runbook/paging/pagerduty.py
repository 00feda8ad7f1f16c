"""PagerDuty Events API v2 (`POST https://events.pagerduty.com/v2/enqueue`).

A queued proposal opens an alert (`event_action: trigger`); its `dedup_key` is
`runbook-proposal-<id>`, the proposal's stable id, so a trigger sent again (a retry, another
process) lands on the same alert, and the `resolve` sent when the proposal is decided
(approved and run, denied, refused, recovered) or expires undecided closes exactly that one.
The routing key travels in the body only, never in the URL, and is never shown.

Severity: the proposal's, the one the approval desk shows on its row and page, the queue's
metrics label and the desk's allow rules match (runbook.metrics.severity, from the root
cause): `critical` for a hardware cause (what a node is drained on), `warning` for another
named cause, `info` for an inconclusive one. PagerDuty's `error` is never sent: the desk has
no such word, and a person opening the page's link reads the severity the alert said.
PagerDuty has no "about to expire" event: the alert stays open until the resolve. Pure.
"""

from __future__ import annotations

from typing import Any

from runbook.paging.text import (
    QUEUED,
    RESOLVED,
    NoticeProposal,
    cut,
    iso,
    plain,
    relative,
    show_command,
)
from runbook.paging.text import (
    headline as _headline,
)

EVENTS = (QUEUED, RESOLVED)
#: the Events API's enum; what is sent is one of runbook.metrics.SEVERITIES
SEVERITIES = ("critical", "error", "warning", "info")
#: the Events API's limits on a summary and a dedup key
SUMMARY_LIMIT = 1024
DEDUP_LIMIT = 255
CLIENT = "nccl-runbook"


def dedup_key(pid: str) -> str:
    return f"runbook-proposal-{pid}"[:DEDUP_LIMIT]


def severity(p: NoticeProposal) -> str:
    """The proposal's severity as the desk shows it (runbook.metrics.severity)."""
    from runbook import metrics

    return metrics.severity(p.root_cause)


def event(
    p: NoticeProposal, action: str, *, routing_key: str, now: float, link: str | None = None
) -> dict[str, Any]:
    """The Events API v2 body: `trigger` for a queued proposal, `resolve` once decided."""
    body: dict[str, Any] = {
        "routing_key": routing_key,
        "event_action": "trigger" if action == QUEUED else "resolve",
        "dedup_key": dedup_key(p.id),
    }
    if action == RESOLVED:
        return body
    evidence = p.evidence or {}
    body["payload"] = {
        "summary": cut(plain(_headline(p, QUEUED, now=now)), SUMMARY_LIMIT),
        "source": plain(p.node or "unknown node"),
        "severity": severity(p),
        "timestamp": iso(p.created_at),
        "component": plain(p.kind),
        "group": plain(p.source),
        "class": plain(p.root_cause or "unknown"),
        "custom_details": {
            "proposal": p.id,
            "root_cause": p.root_cause,
            "confidence": evidence.get("confidence"),
            "summary": cut(plain(p.summary), 4000),
            "expires_at": iso(p.expires_at),
            "expires": relative(p.expires_at - now),
            "command": show_command(p.id),
        },
    }
    body["client"] = CLIENT
    if link:
        body["client_url"] = link
        body["links"] = [{"href": link, "text": "Open the proposal on the approval desk"}]
    return body
