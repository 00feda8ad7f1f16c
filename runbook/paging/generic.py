"""The generic JSON notice, and its signature.

With `notify.signing_secret` set (or RUNBOOK_WEBHOOK_SECRET), each POST carries::

    X-Runbook-Timestamp: 1765000000                 (Unix seconds, when it was signed)
    X-Runbook-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>." + body)>

A receiver verifies it (`verify` does exactly this): read the raw body before parsing it,
recompute the HMAC over the timestamp header, a dot and the body bytes with the shared secret,
compare in constant time, and refuse a timestamp more than `TOLERANCE` seconds from its own
clock (a captured request replayed later). A request replayed within that window is the same
notice: `proposal` and `event` in the signed body name it, so a receiver that keeps what it
has seen in the last five minutes drops the copy. Pure.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import Any

from runbook.paging.text import (
    EXPIRING,
    QUEUED,
    RESOLVED,
    NoticeProposal,
    iso,
    outcome,
    plain,
    show_command,
)
from runbook.paging.text import (
    headline as _headline,
)

TIMESTAMP_HEADER = "X-Runbook-Timestamp"
SIGNATURE_HEADER = "X-Runbook-Signature"
#: seconds a receiver accepts between the signed timestamp and its own clock
TOLERANCE = 300
EVENTS = (QUEUED, EXPIRING, RESOLVED)


def payload(
    p: NoticeProposal, event: str, *, now: float, link: str | None = None
) -> dict[str, Any]:
    evidence = p.evidence or {}
    body: dict[str, Any] = {
        "event": f"proposal-{event}",
        "text": plain(_headline(p, event, now=now)),
        "proposal": p.id,
        "kind": p.kind,
        "node": p.node,
        "verdict": {"root_cause": p.root_cause, "confidence": evidence.get("confidence")},
        "summary": plain(p.summary),
        "source": p.source,
        "created_at": iso(p.created_at),
        "expires_at": iso(p.expires_at),
        "expires_in_seconds": round(p.expires_at - now),
        "command": show_command(p.id),
        "link": link,
    }
    if event == RESOLVED:
        decided_at = getattr(p, "decided_at", None)
        reason = getattr(p, "reason", None)
        body["outcome"] = outcome(p, now=now)
        body["decided_by"] = getattr(p, "decided_by", None)
        body["decided_at"] = iso(decided_at) if decided_at else None
        body["reason"] = plain(reason) if reason else None
    return body


def signature(secret: str, timestamp: str, body: bytes) -> str:
    digest = hmac.new(secret.encode("utf-8"), timestamp.encode("ascii") + b"." + body,
                      hashlib.sha256).hexdigest()  # fmt: skip
    return f"v1={digest}"


def signed_headers(secret: str, body: bytes, *, now: float) -> dict[str, str]:
    timestamp = str(int(now))
    return {TIMESTAMP_HEADER: timestamp, SIGNATURE_HEADER: signature(secret, timestamp, body)}


def verify(
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: float,
    tolerance: float = TOLERANCE,
) -> str | None:
    """None when `body` was signed with `secret` within `tolerance` seconds of `now`; else
    why not, in a few words. What a receiver runs; `headers` looked up case-insensitively."""
    lower = {k.lower(): v for k, v in headers.items()}
    timestamp = lower.get(TIMESTAMP_HEADER.lower())
    given = lower.get(SIGNATURE_HEADER.lower())
    if not timestamp or not given:
        return "unsigned"
    if not timestamp.isdigit():
        return "bad timestamp"
    if abs(now - int(timestamp)) > tolerance:
        return "timestamp outside the window (a replay?)"
    if not hmac.compare_digest(signature(secret, timestamp, body), given):
        return "bad signature"
    return None
