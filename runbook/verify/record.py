"""A recovery check's verdict, recorded against the proposal whose fix it checked.

The approval store keeps the latest verification on the proposal (`verification`, JSON: status,
reason, who, when, what each layer found; earlier attempts under `previous`), and the audit
trail gets one entry per check: `verified`, `failed-verification` with the reason, or
`verification-not-run` when the check could not run (status `not-run`). Only a
proposal whose remedy ran and succeeded can be verified, and never a diagnostic (the A/B test
changes nothing: there is no fix to check).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from runbook.remedies.approval import Desk, Refused, os_user
from runbook.remedies.store import QueuedProposal

VERIFIED = "verified"
FAILED = "failed-verification"
#: the check could not run (a tool missing on the node, no GPU, no job command): nothing was
#: verified, and nothing was found to have failed; its audit entry is `verification-not-run`
NOT_RUN = "not-run"
_EVENTS = {NOT_RUN: "verification-not-run"}
#: earlier attempts kept on the proposal (the audit trail keeps every one)
KEEP_PREVIOUS = 10


def verifiable(proposal: QueuedProposal) -> str | None:
    """Why `proposal` cannot be verified, or None: only a change that was applied can be (not
    a diagnostic, which changes nothing; not a run that failed or could not run)."""
    from runbook.remedies import kinds

    if kinds.is_diagnostic(proposal.kind):
        return (
            f"proposal {proposal.id} is a {proposal.kind}, a diagnostic that changes "
            "nothing on the node: there is no fix to verify"
        )
    if proposal.state != "succeeded":
        why = (proposal.result or {}).get("reason")
        return (
            f"proposal {proposal.id} is {proposal.state}"
            + (f" ({why})" if why and proposal.state == "failed" else "")
            + ": only a remedy that ran and succeeded can be verified"
        )
    return None


def record(
    desk: Desk,
    pid: str,
    *,
    verified: bool,
    reason: str,
    details: Mapping[str, Any],
    actor: str | None = None,
    ran: bool = True,
) -> QueuedProposal:
    """Store the verdict on the proposal and append `verified` / `failed-verification` (with
    the reason) to the audit trail; `ran` False: the check could not run (`not-run`, audited
    as `verification-not-run`)."""
    proposal = desk.store.get(pid)
    why = verifiable(proposal)
    if why:
        raise Refused(why)
    who = actor or os_user()
    status = VERIFIED if verified else (FAILED if ran else NOT_RUN)
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
    desk.record(_EVENTS.get(status, status), pid, who, {"reason": reason, **brief})
    return updated
