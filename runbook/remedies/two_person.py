"""The two-person rule: a disruptive kind runs only with a second person's approval.

A proposal of a disruptive kind (`node-drain` unless the config's `two_person.kinds` says
otherwise) runs when someone other than the person whose run queued it approves it; when the
requester approves, or when nobody knows who queued it (a proposal queued before the store
recorded it), it waits for one more distinct approver. Each approval is recorded in the store
(`Store.add_approval`), so the two may approve from two machines, the desk and a terminal.

Who is "a person": an actor is recorded as `USER` or, behind a shared account, `USER as NAME`
(runbook.remedies.approval.actor_name). Every name in the requester's record counts as the
requester: `root as alice` queued it, so neither `root` nor `alice` is the second person. The
approver's identity is one name, given by the caller: the desk's signed-in user, or on the
command line the `--as` name only where the config's approvers and delegation vouch for it,
else the OS user (`--as` alone is a label anyone can type).

Pure: `check` decides, the callers record and refuse.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

DEFAULT_KINDS = ("node-drain",)


class Approvable(Protocol):
    """What the rule reads of a queued proposal (runbook.remedies.store.QueuedProposal)."""

    @property
    def kind(self) -> str: ...
    @property
    def requested_by(self) -> str | None: ...
    @property
    def approvals(self) -> list[str]: ...


@dataclass(frozen=True)
class Policy:
    """The kinds that need a second person."""

    kinds: tuple[str, ...] = DEFAULT_KINDS

    @classmethod
    def from_config(cls, config: object) -> Policy:
        """From runbook.config.Config (`two_person.kinds`)."""
        kinds = getattr(config, "two_person_kinds", DEFAULT_KINDS)
        return cls(tuple(kinds))

    def applies(self, kind: str) -> bool:
        return kind in self.kinds


def names(actor: str | None) -> set[str]:
    """Every name an actor record carries: `root as alice` → {root, alice}."""
    if not actor:
        return set()
    user, sep, alias = actor.partition(" as ")
    return {user.strip(), alias.strip()} - {""} if sep else {actor.strip()}


def _label(kind: str) -> str:
    return "a node drain" if kind == "node-drain" else f"a {kind}"


def check(proposal: Approvable, approver: str, policy: Policy) -> str | None:
    """None when `approver` may run `proposal` now (its approvals so far and this one
    counted); otherwise why not, in a sentence: "a node drain needs a second person: you
    queued it", or "one more approval needed"."""
    if not policy.applies(proposal.kind):
        return None
    approvers = _distinct([*proposal.approvals, approver])
    requesters = names(proposal.requested_by)
    if requesters:
        if any(not (names(a) & requesters) for a in approvers):
            return None
        if names(approver) & requesters:
            return f"{_label(proposal.kind)} needs a second person: you queued it"
        return "one more approval needed"
    # nobody knows who queued it: two people (no name in common)
    if any(not (names(a) & names(b)) for i, a in enumerate(approvers) for b in approvers[i:]):
        return None
    return "one more approval needed"


def _distinct(items: Iterable[str]) -> Sequence[str]:
    seen: dict[str, None] = {}
    for item in items:
        seen.setdefault(item, None)
    return list(seen)


def stated(kind: str, policy: Policy) -> str | None:
    """The rule as the page and `approvals show` state it, for a kind it applies to."""
    if not policy.applies(kind):
        return None
    return (
        f"{_label(kind)} needs a second person: an approver other than whoever queued it, "
        "or two approvals"
    )
