"""`reduce-loader-memory`: advice to lower the pod's peak before adding memory (fewer loader
workers, a shallower prefetch queue, a smaller cache), with the estimate's numbers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runbook.remedies.plans import Plan, PlanContext, PlanError

NAME = "reduce-loader-memory"


class ReduceLoaderMemory:
    name = NAME
    advice = True
    proposed_on: tuple[str, ...] | None = ("host-memory-oom",)
    takes_node_out = False
    memory_remedy = True
    advice_title: str | None = "advice: reduce the peak first"

    def plan(self, proposal: Mapping[str, Any], ctx: PlanContext) -> Plan:
        raise PlanError(f"{NAME} is advice, nothing to run")

    def missing(self, params: Mapping[str, Any]) -> list[str]:
        return []

    def after_apply(self, plan: Plan) -> dict[str, Any]:
        return {}

    def advice_lines(self, params: Mapping[str, Any]) -> tuple[str, ...]:
        """Which term of the estimate dominates and what each cut saves (EstimateError when
        the params hold nothing to estimate from)."""
        from runbook.remedies import advice, estimate

        return advice.advise(estimate.from_params(dict(params))).lines()


KIND = ReduceLoaderMemory()
