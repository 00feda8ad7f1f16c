"""`shm-size-limit`: a sizeLimit on the workload's memory-backed /dev/shm emptyDir, sized from
the measured use × the headroom, patched into its manifest."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runbook.remedies import plans
from runbook.remedies.kinds._defaults import KindDefaults
from runbook.remedies.plans import Plan, PlanContext

NAME = "shm-size-limit"


class ShmSizeLimit(KindDefaults):
    name = NAME
    proposed_on: tuple[str, ...] | None = ("shm-exhausted", "host-memory-oom")

    def plan(self, proposal: Mapping[str, Any], ctx: PlanContext) -> Plan:
        from runbook.remedies import workload

        params: Mapping[str, Any] = proposal.get("params") or {}
        measured = plans.measured(params, "measured_bytes", "the /dev/shm use")
        headroom = plans.measured(params, "headroom", "the headroom")
        size = workload.size_from_measured(int(measured), headroom)
        path, manifest = plans.workload_manifest(ctx)
        patch = workload.shm_size_patch(manifest, size)
        return Plan(
            playbook=plans.playbook_named(proposal, "shm-size-limit.yml"),
            inventory=plans.localhost_inventory(),
            runs_on=plans.RUNS_HERE,
            extravars=plans.workload_vars(ctx, path, patch),
            sources=plans.manifest_sources(ctx, path),
            describe=(*patch.summary, f"size = measured {int(measured)} B × {headroom}"),
        )


KIND = ShmSizeLimit()
