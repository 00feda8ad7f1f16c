"""Who may decide what on the desk: pure, no I/O.

A proposal's severity is its root cause's, as the queue's metrics and its pages say it
(runbook.metrics.severity): `critical` for the hardware causes a node is drained on, `info`
for nothing found, `warning` otherwise.

The config's `desk.allow` rules map users (the identity's name, e.g. its e-mail) or IdP groups
to the kinds and severities they may approve or deny; `*` is any. A rule with no kinds lets
its people read the desk without deciding. A signed-in identity that no rule names is refused
every page: the desk is not open to everyone the organisation's sign-in knows.
"""

from __future__ import annotations

from dataclasses import dataclass

from runbook.metrics import SEVERITIES
from runbook.metrics import severity as severity_of

__all__ = ["SEVERITIES", "Identity", "Policy", "Rule", "severity_of"]


@dataclass(frozen=True)
class Identity:
    """Who is signed in: `name` as recorded in the audit trail, `groups` from the IdP (or the
    proxy's header), and how it was established (`oidc` or `header`)."""

    name: str
    groups: tuple[str, ...] = ()
    via: str = "oidc"


@dataclass(frozen=True)
class Rule:
    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    severities: tuple[str, ...] = ("*",)

    def names(self, who: Identity) -> bool:
        return who.name in self.users or bool(set(self.groups) & set(who.groups))

    def covers(self, kind: str, severity: str) -> bool:
        kind_ok = "*" in self.kinds or kind in self.kinds
        return kind_ok and ("*" in self.severities or severity in self.severities)


@dataclass(frozen=True)
class Policy:
    rules: tuple[Rule, ...] = ()

    def may_enter(self, who: Identity) -> bool:
        return any(rule.names(who) for rule in self.rules)

    def may_decide(self, who: Identity, kind: str, root_cause: str | None) -> bool:
        severity = severity_of(root_cause)
        return any(rule.names(who) and rule.covers(kind, severity) for rule in self.rules)

    def why_not(self, who: Identity, kind: str, root_cause: str | None) -> str | None:
        """None when `who` may approve or deny a proposal of `kind` for `root_cause`; else
        the reason."""
        if self.may_decide(who, kind, root_cause):
            return None
        return (
            f"{who.name} may not decide {kind} proposals of severity "
            f"{severity_of(root_cause)}: no desk.allow rule of the config names them for it"
        )
