"""`node-drain`: cordon the node and evict its pods — taken out of service — proposed only on
hardware evidence, and run only when the pool's blast-radius guard allows it
(runbook.remedies.guards, checked again live just before the approved run)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runbook.remedies import plans
from runbook.remedies.kinds._defaults import KindDefaults
from runbook.remedies.plans import Plan, PlanContext, PlanError

NAME = "node-drain"
#: the root causes with hardware evidence: the only ones a drain may be proposed on
HARDWARE_CAUSES = ("gpu-hardware", "pcie-error")


def drain_allowed_for(root_cause: str) -> bool:
    """Whether a verdict with this root cause may propose a drain (hardware evidence only)."""
    return root_cause in HARDWARE_CAUSES


class NodeDrain(KindDefaults):
    name = NAME
    proposed_on: tuple[str, ...] | None = HARDWARE_CAUSES
    takes_node_out = True

    def plan(self, proposal: Mapping[str, Any], ctx: PlanContext) -> Plan:
        if not drain_allowed_for(str(ctx.root_cause)):
            raise PlanError(
                f"a drain is only proposed on {' or '.join(HARDWARE_CAUSES)} evidence, "
                f"not on {ctx.root_cause}"
            )
        params: Mapping[str, Any] = proposal.get("params") or {}
        node = str(params.get("node") or "")
        if not node:
            raise PlanError("the Kubernetes node name is unknown (no node in pod.json)")
        return Plan(
            playbook=plans.playbook_named(proposal, "node-drain.yml"),
            inventory=plans.localhost_inventory(),
            runs_on=plans.RUNS_HERE,
            extravars=_extravars(node, ctx),
            describe=(
                f"cordon {node} and evict its pods (PodDisruptionBudgets respected, "
                "DaemonSets left)",
                f"refused if the pool ({ctx.drain_pool_selector}) already has "
                f"{ctx.drain_max_cordoned} cordoned or the drain takes it past "
                f"{ctx.drain_max_fraction:.0%}",
            ),
            guard={
                "node": node,
                "pool_selector": ctx.drain_pool_selector,
                "max_cordoned": ctx.drain_max_cordoned,
                "max_fraction": ctx.drain_max_fraction,
            },
        )


KIND = NodeDrain()


def _extravars(node: str, ctx: PlanContext) -> dict[str, Any]:
    """The node_drain role's variables: the node, the pool and its limits, the cluster."""
    extravars: dict[str, Any] = {
        "node_drain_node": node,
        "node_drain_pool_selector": ctx.drain_pool_selector,
        "node_drain_max_cordoned": ctx.drain_max_cordoned,
        "node_drain_max_fraction": ctx.drain_max_fraction,
    }
    if ctx.kubeconfig:
        extravars["node_drain_kubeconfig"] = ctx.kubeconfig
    if ctx.kube_context:
        extravars["node_drain_context"] = ctx.kube_context
    return extravars
