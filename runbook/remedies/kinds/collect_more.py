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
