"""`nccl-ib-disable-ab`: a diagnostic A/B run on the node — all_reduce_perf with
NCCL_IB_DISABLE unset and =1 — whose two outputs are compared after the run."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runbook.remedies import plans
from runbook.remedies.kinds._defaults import KindDefaults
from runbook.remedies.plans import Plan, PlanContext, PlanError

NAME = "nccl-ib-disable-ab"


class NcclIbDisableAb(KindDefaults):
    name = NAME
    proposed_on: tuple[str, ...] | None = ("rdma-misconfigured", "collective-hung")
    diagnostic = True

    def plan(self, proposal: Mapping[str, Any], ctx: PlanContext) -> Plan:
        """Runs on the node itself, as the run reached it."""
        if ctx.target is None:
            raise PlanError("no target to run the A/B test on")
        params: Mapping[str, Any] = proposal.get("params") or {}
        gpus = int(plans.measured(params, "gpus", "the GPU count"))
        out = ctx.work_dir / "ab"
        extravars: dict[str, Any] = {"nccl_ab_test_gpus": gpus, "nccl_ab_test_output_dir": str(out)}
        # where the walk entered the node's namespaces (a node agent's pod, --nsenter), the
        # test runs there too: in the agent's own container there is no all_reduce_perf
        pid = ctx.target.nsenter or (1 if ctx.target.scheme == "kubectl" else None)
        if pid is not None:
            from runbook.transports.nsenter import NAMESPACES

            extravars["nccl_ab_test_wrapper"] = " ".join(
                ["nsenter", "--target", str(pid), *NAMESPACES, "--"]
            )
        inventory, runs_on = plans.node_plan(ctx.node, ctx.target)
        return Plan(
            playbook=plans.playbook_named(proposal, "nccl-ib-disable-ab.yml"),
            inventory=inventory,
            runs_on=runs_on,
            kubectl=plans.node_kubectl(ctx.target),
            extravars=extravars,
            describe=(
                f"on {ctx.node}: all_reduce_perf -b 8M -e 1G -f 2 -g {gpus} twice, with "
                "NCCL_IB_DISABLE unset and =1 (NCCL_DEBUG=INFO); nothing is left set",
                f"outputs under {out}",
            ),
        )

    def after_apply(self, plan: Plan) -> dict[str, Any]:
        """The A/B comparison of each host's two outputs, from the playbook's output dir;
        `not_run` when a case could not run on a node (nothing was measured there)."""
        from runbook.remedies import ab

        # a proposal queued before the role's variables took its prefix has the old name
        extravars = plan.extravars
        out = Path(str(extravars.get("nccl_ab_test_output_dir") or extravars["nccl_ab_output_dir"]))
        command = str(extravars.get("nccl_ab_test_command") or ab.COMMAND)
        hosts = [p for p in sorted(out.iterdir()) if p.is_dir()] if out.is_dir() else []
        # each result under the node's name as typed (`10.0.0.5:24510`, not the inventory key)
        named = plans.node_names(plan.inventory)
        comparison = {}
        for h in hosts:
            node = named.get(h.name, h.name)
            comparison[node] = ab.compare(ab.read_dir(h), node=node, command=command)
        found: dict[str, Any] = {"comparison": comparison}
        reason = ab.not_measured(comparison)
        if reason is not None:
            found["not_run"] = reason
        return found


KIND = NcclIbDisableAb()
