"""What every notice says, whichever service carries it: the headline of a queued, expiring or
resolved proposal, its outcome, times, and the link to its page on the approval desk.

Every text field goes through the redactor first (a summary is rendered from a node's facts
and must not carry a credential out) and is made printable (runbook.printable). Pure.
"""

from __future__ import annotations

import datetime as dt
import urllib.parse
from typing import Any, Protocol

from runbook.printable import printable
from runbook.redact import redact

QUEUED = "queued"
EXPIRING = "expiring"
#: decided (approved and run, denied, refused, recovered) or expired undecided
RESOLVED = "resolved"
EVENTS = (QUEUED, EXPIRING, RESOLVED)


class NoticeProposal(Protocol):
    """What a notice reads of a proposal (runbook.remedies.store.QueuedProposal); a resolved
    notice also reads `state`, `decided_by`, `reason` and `result` where it has them."""

    id: str
    kind: str
    summary: str
    node: str | None
    root_cause: str | None
    evidence: dict[str, Any]
    created_at: float
    expires_at: float
    source: str


def iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def relative(seconds: float) -> str:
    minutes = int(abs(seconds) // 60)
    text = f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"
    return f"in {text}" if seconds >= 0 else f"{text} ago"


def show_command(pid: str) -> str:
    return f"runbook approvals show {pid}"


def plain(text: Any) -> str:
    """A text field of a notice: redacted, printable."""
    return printable(redact(str(text)))


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def desk_link(base_url: str | None, pid: str) -> str | None:
    """The proposal's page on the approval desk (`desk.base_url` + `/p/ID`, the desk's route)."""
    if not base_url:
        return None
    return f"{base_url.rstrip('/')}/p/{urllib.parse.quote(pid, safe='')}"


def outcome(p: NoticeProposal, *, now: float) -> str:
    """What became of a proposal no longer waiting: its final state, or `expired`."""
    state = str(getattr(p, "state", "pending"))
    if state == "pending":
        return "expired" if p.expires_at <= now else "pending"
    return state


def outcome_text(p: NoticeProposal, *, now: float) -> str:
    """`succeeded (approved by alice)`, `denied by bob: change freeze`, `expired undecided`."""
    done = outcome(p, now=now)
    who = getattr(p, "decided_by", None) or "?"
    reason = getattr(p, "reason", None)
    result = getattr(p, "result", None) or {}
    if done == "expired":
        return f"expired undecided {relative(p.expires_at - now)}"
    if done == "succeeded":
        return f"approved by {who} and run: succeeded"
    if done == "failed":
        why = result.get("reason") or result.get("error") or "see the desk"
        return f"approved by {who} and run: failed: {cut(str(why), 300)}"
    if done == "running":
        return f"approved by {who}: running"
    if done == "denied":
        return f"denied by {who}: {cut(str(reason or '?'), 300)}"
    if done == "refused":
        return f"refused: {cut(str(reason or '?'), 300)}"
    return done


def headline(p: NoticeProposal, event: str, *, now: float) -> str:
    node = p.node or "?"
    verdict = p.root_cause or "?"
    if event == QUEUED:
        return f"runbook: proposal {p.id} ({p.kind}) on {node} waits for approval: {verdict}"
    if event == RESOLVED:
        return f"runbook: proposal {p.id} ({p.kind}) on {node} {outcome_text(p, now=now)}"
    when = relative(p.expires_at - now)
    verb = "expires" if p.expires_at >= now else "expired"
    return f"runbook: proposal {p.id} ({p.kind}) on {node} {verb} {when} undecided: {verdict}"
