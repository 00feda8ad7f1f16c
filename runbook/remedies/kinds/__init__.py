"""The remedy kinds (DESIGN §5): one module per kind, each implementing `RemedyKind`, listed
once in `KINDS`.

The table's order is the order fixes are listed and applied in: gather evidence first, reduce
the peak before adding memory, drain last. Every question about a kind — is it advice, which
root causes it may be proposed on, its plan, what its plan needs, what follows its run — is
asked here, so adding a kind is one module and one row::

    from runbook.remedies import kinds
    kinds.plan_for(proposal, ctx)            # PlanError says why there can be none
    proposals.sort(key=lambda p: kinds.fix_rank(p["kind"]))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from runbook.remedies.kinds import (
    collect_more,
    drain,
    memory_limit,
    nccl_ib_disable_ab,
    reduce_loader_memory,
    shm_size,
)
from runbook.remedies.plans import Plan, PlanContext, PlanError


class RemedyKind(Protocol):
    """What one kind of remedy is and how a proposal of it is planned."""

    #: the `kind:` a runbook's remedy names
    name: str
    #: advice changes nothing: shown with the verdict, never queued, planned or run
    advice: bool
    #: the root causes it may be proposed on (None: any)
    proposed_on: tuple[str, ...] | None
    #: takes the node out of service: hardware evidence only, the blast-radius guard checked
    #: live before its run, never one per node for a cause a whole job shares
    takes_node_out: bool
    #: changes the job's memory: its recovery check replays the job under the pod's limit
    memory_remedy: bool
    #: a diagnostic (an experiment): measures, changes nothing, so there is no fix to verify
    diagnostic: bool
    #: the heading its advice is shown under after a walk (None: nothing to show)
    advice_title: str | None

    def plan(self, proposal: Mapping[str, Any], ctx: PlanContext) -> Plan:
        """The playbook, inventory and variables that carry the proposal out; PlanError."""
        ...

    def missing(self, params: Mapping[str, Any]) -> list[str]:
        """What the plan lacks among the proposal's params (then it is advice, not queued)."""
        ...

    def after_apply(self, plan: Plan) -> dict[str, Any]:
        """What its run found, added to the execution's result (a diagnostic's comparison).
        A `not_run` key says why its commands could not run on the node (a tool missing, a
        timeout): the execution is then `failed` with that reason, whatever Ansible said."""
        ...

    def advice_lines(self, params: Mapping[str, Any]) -> tuple[str, ...]:
        """The advice shown under `advice_title`; a RunbookError when it cannot be given."""
        ...


#: every kind, in the order fixes are applied
KINDS: tuple[RemedyKind, ...] = (
    collect_more.KIND,
    reduce_loader_memory.KIND,
    shm_size.KIND,
    memory_limit.KIND,
    nccl_ib_disable_ab.KIND,
    drain.KIND,
)

_BY_NAME = {kind.name: kind for kind in KINDS}


def names() -> tuple[str, ...]:
    """Every kind's name, in fix order: what a runbook's `kind:` may say."""
    return tuple(_BY_NAME)


def find(name: str) -> RemedyKind | None:
    return _BY_NAME.get(name)


def fix_rank(name: str) -> int:
    """The kind's place in the order fixes are applied (an unknown kind after every known)."""
    kind = _BY_NAME.get(name)
    return KINDS.index(kind) if kind is not None else len(KINDS)


def is_advice(name: str) -> bool:
    kind = _BY_NAME.get(name)
    return kind is not None and kind.advice


def queued_names() -> tuple[str, ...]:
    """The kinds a proposal of which can wait in the approval queue (advice never does)."""
    return tuple(kind.name for kind in KINDS if not kind.advice)


def proposed_on(name: str, root_cause: str) -> bool:
    """Whether a proposal of this kind addresses a verdict with this root cause (an unknown
    kind is not filtered: the spec check names it)."""
    kind = _BY_NAME.get(name)
    return kind is None or kind.proposed_on is None or root_cause in kind.proposed_on


def takes_node_out(name: str) -> bool:
    kind = _BY_NAME.get(name)
    return kind is not None and kind.takes_node_out


def drain_root_causes() -> tuple[str, ...]:
    """The root causes a node may be taken out of service on (hardware evidence)."""
    causes: list[str] = []
    for kind in KINDS:
        if kind.takes_node_out:
            causes += [c for c in kind.proposed_on or () if c not in causes]
    return tuple(causes)


def is_diagnostic(name: str) -> bool:
    """An experiment that changes nothing: its run is never followed by a recovery check."""
    kind = _BY_NAME.get(name)
    return kind is not None and kind.diagnostic


def is_memory_remedy(name: str) -> bool:
    kind = _BY_NAME.get(name)
    return kind is not None and kind.memory_remedy


def missing(proposal: Mapping[str, Any]) -> list[str]:
    """What a proposal's plan lacks to be computed (its params came out empty)."""
    kind = _BY_NAME.get(str(proposal.get("kind")))
    return kind.missing(proposal.get("params") or {}) if kind is not None else []


def plan_for(proposal: Mapping[str, Any], ctx: PlanContext) -> Plan:
    """The plan for one of a verdict's proposals; PlanError says why there can be none."""
    name = str(proposal.get("kind"))
    kind = _BY_NAME.get(name)
    if kind is None:
        raise PlanError(f"no playbook for proposals of kind {name!r}")
    return kind.plan(proposal, ctx)


def after_apply(name: str, plan: Plan) -> dict[str, Any]:
    """What the run of a proposal of this kind found, beyond the playbook's own result."""
    kind = _BY_NAME.get(name)
    return kind.after_apply(plan) if kind is not None else {}
