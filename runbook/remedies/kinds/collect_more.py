"""`collect-more`: advice to gather the evidence a walk lacked. A runbook may propose it; the
diagnosis adds one itself (`gap_proposal`) when a verdict is inconclusive or a stage could not
be read and none was proposed."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from runbook.remedies.kinds._defaults import KindDefaults

NAME = "collect-more"


class CollectMore(KindDefaults):
    name = NAME
    advice = True
    #: evidence can be missing whatever the cause
    proposed_on: tuple[str, ...] | None = None


KIND = CollectMore()


#: the node's own hardware evidence a drain needs (DESIGN: the application's words never drain)
HARDWARE_EVIDENCE = ("the kernel log (dmesg -T)", "nvidia-smi -q", "dcgmi health -c")


def corroboration_proposal(cause: str) -> dict[str, Any]:
    """Instead of a drain the application's words alone asked for: collect the node's own
    hardware evidence first, and say why."""
    return {
        "id": NAME + "-hw-" + hashlib.sha256(cause.encode()).hexdigest()[:10],
        "kind": NAME,
        "requires_approval": False,
        "summary": (
            f"no drain: only the application's own words name {cause}; nothing the node "
            f"itself reports shows it. Collect {', '.join(HARDWARE_EVIDENCE)} and re-run: "
            "a drain needs the node's own hardware evidence"
        ),
        "params": {"stages": [], "corroborate": cause},
    }


def gap_proposal(missing_stages: Sequence[str]) -> dict[str, Any]:
    """The proposal to collect what the walk could not read (the stages' ids), or, with
    nothing missing, the application logs and dmesg."""
    stages = list(missing_stages)
    return {
        "id": NAME + "-" + hashlib.sha256(",".join(stages).encode()).hexdigest()[:10],
        "kind": NAME,
        "requires_approval": False,
        "summary": (
            "collect the evidence of: " + ", ".join(stages)
            if stages
            else "the findings name no cause: collect the application logs and dmesg"
        ),
        "params": {"stages": stages},
    }
