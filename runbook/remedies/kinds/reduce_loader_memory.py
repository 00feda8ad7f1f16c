"""`reduce-loader-memory`: advice to lower the pod's peak before adding memory (fewer loader
workers, a shallower prefetch queue, a smaller cache), with the estimate's numbers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runbook.remedies.kinds._defaults import KindDefaults

NAME = "reduce-loader-memory"


class ReduceLoaderMemory(KindDefaults):
    name = NAME
    advice = True
    proposed_on: tuple[str, ...] | None = ("host-memory-oom",)
    memory_remedy = True
    advice_title: str | None = "advice: reduce the peak first"

    def advice_lines(self, params: Mapping[str, Any]) -> tuple[str, ...]:
        """Which term of the estimate dominates and what each cut saves (EstimateError when
        the params hold nothing to estimate from)."""
        from runbook.remedies import advice, estimate

        return advice.advise(estimate.from_params(dict(params))).lines()


KIND = ReduceLoaderMemory()
