"""A recovery check's verdict, recorded against the proposal whose fix it checked.

The approval store keeps the latest verification on the proposal (`verification`, JSON: status,
reason, who, when, what each layer found; earlier attempts under `previous`), and the audit
trail gets one entry per check: `verified`, or `failed-verification` with the reason. Only a
proposal whose remedy ran and succeeded can be verified.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from runbook.remedies.approval import Desk, Refused, os_user
from runbook.remedies.store import QueuedProposal

VERIFIED = "verified"
FAILED = "failed-verification"
#: earlier attempts kept on the proposal (the audit trail keeps every one)
KEEP_PREVIOUS = 10


def verifiable(proposal: QueuedProposal) -> str | None:
    """Why `proposal` cannot be verified, or None."""
    if proposal.state != "succeeded":
        return (f"proposal {proposal.id} is {proposal.state}: only a remedy that ran and "
                "succeeded can be verified")
    return None


def record(
    desk: Desk,
    pid: str,
    *,
    verified: bool,
    reason: str,
    details: Mapping[str, Any],
    actor: str | None = None,
) -> QueuedProposal:
    """Store the verdict on the proposal and append `verified` / `failed-verification` (with
    the reason) to the audit trail."""
    proposal = desk.store.get(pid)
    why = verifiable(proposal)
    if why:
        raise Refused(why)
    who = actor or os_user()
    status = VERIFIED if verified else FAILED
    previous = []
    if proposal.verification:
        earlier = dict(proposal.verification)
        previous = list(earlier.pop("previous", []) or [])
        previous.insert(0, {k: earlier.get(k) for k in ("status", "reason", "at", "by")})
    entry: dict[str, Any] = {
        "status": status,
        "verified": verified,
        "reason": reason,
        "at": time.time(),
        "by": who,
        **dict(details),
        "previous": previous[:KEEP_PREVIOUS],
    }
    updated = desk.store.set_verification(pid, entry)
    brief = {k: details[k] for k in ("target", "run_dir", "root_cause", "layers") if k in details}
    desk.record(status, pid, who, {"reason": reason, **brief})
    return updated
