"""What a remedy kind is when it says nothing else: a change (not advice, not a diagnostic)
that may be proposed on any root cause, keeps the node in service, leaves the job's memory
alone, lacks nothing, finds nothing after its run and shows no advice. Each kind subclasses
`KindDefaults` and states only where it differs (runbook/remedies/kinds/__init__.py has the
protocol)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runbook.remedies.plans import Plan, PlanContext, PlanError


class KindDefaults:
    name: str = ""
    advice = False
    proposed_on: tuple[str, ...] | None = None
    takes_node_out = False
    memory_remedy = False
    diagnostic = False
    advice_title: str | None = None

    def plan(self, proposal: Mapping[str, Any], ctx: PlanContext) -> Plan:
        raise PlanError(f"{self.name} is advice, nothing to run")

    def missing(self, params: Mapping[str, Any]) -> list[str]:
        return []

    def after_apply(self, plan: Plan) -> dict[str, Any]:
        return {}

    def advice_lines(self, params: Mapping[str, Any]) -> tuple[str, ...]:
        return ()
