"""`memory-limit`: the pod's memory request and limit sized from the estimated peak (the
measured inputs the proposal carries, runbook.remedies.estimate), patched into its manifest."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runbook.errors import RunbookError
from runbook.remedies import plans
from runbook.remedies.kinds._defaults import KindDefaults
from runbook.remedies.plans import Plan, PlanContext, PlanError

NAME = "memory-limit"


class MemoryLimit(KindDefaults):
    name = NAME
    proposed_on: tuple[str, ...] | None = ("host-memory-oom",)
    memory_remedy = True

    def plan(self, proposal: Mapping[str, Any], ctx: PlanContext) -> Plan:
        from runbook.remedies import estimate, workload

        result = estimate.from_params(dict(proposal.get("params") or {}))
        if result.refused:
            raise PlanError(result.refused)
        path, manifest = plans.workload_manifest(ctx)
        patch = workload.memory_patch(
            manifest, request_bytes=result.request_bytes, limit_bytes=result.limit_bytes
        )
        return Plan(
            playbook=plans.playbook_named(proposal, "memory-limit.yml"),
            inventory=plans.localhost_inventory(),
            runs_on=plans.RUNS_HERE,
            extravars=plans.workload_vars(ctx, path, patch),
            sources=plans.manifest_sources(ctx, path),
            describe=(*patch.summary, *result.describe()),
        )

    def missing(self, params: Mapping[str, Any]) -> list[str]:
        """A limit needs a measured peak: without one the proposal is advice, not queued."""

        def have(*keys: str) -> bool:
            return any(str(params.get(k) or "").strip() not in ("", "None", "0") for k in keys)

        if not have("peak_bytes", "per_rank_anon_bytes", "anon_bytes"):
            return ["a measured memory peak (the pod's memory cgroup files or its processes)"]
        return []


KIND = MemoryLimit()


def planned_limit(params: Mapping[str, Any]) -> int | None:
    """The limit a proposal of this kind set, computed as its plan computed it (None when its
    params give none)."""
    from runbook.remedies import estimate

    try:
        return estimate.from_params(dict(params)).limit_bytes
    except RunbookError:
        return None
