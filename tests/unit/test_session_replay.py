"""The facade's replay: a recorded bundle lends the walk its node name, its context and the
variables the collector was told (pod, namespace, ranks, nodes), without touching the caller's
variables, and the caller's own --var wins. A run, `analyze` and `npd` over one bundle see the
same variables (a lost default once turned a multi-node IB misconfiguration into a socket
failure)."""

from __future__ import annotations

import json
from pathlib import Path

from runbook.session import analyze, replay_context
from runbook.transports.replay import ReplayTransport
from tests.tools import bundles


def test_a_bundle_lends_its_node_and_the_collectors_variables_and_the_callers_win() -> None:
    transport = ReplayTransport(bundles.path("network-socket"))
    try:
        given = {"pod": "mine-0"}
        node, merged, context = replay_context(transport, given)
    finally:
        transport.close()
    assert node == "gpu-node-07"
    assert merged["pod"] == "mine-0"  # the caller's own value
    assert merged["namespace"] == "ml-train" and merged["ranks"] == 8 and merged["nodes"] == 2
    assert given == {"pod": "mine-0"}  # the caller's mapping is left as it was
    # bundle.yaml as the parsers' context: the collection time places the node's log times
    assert context["node"] == "gpu-node-07"
    assert context["collected_at"] == "2026-03-04T10:30:00+00:00"


def _with_ib_hca(tmp_path: Path) -> Path:
    """network-socket whose pod asks for an HCA the node does not have."""
    bundle = tmp_path / "incident"
    bundles.materialize("network-socket", bundle)
    nccl = next((bundle / "nccl").glob("*.log"))
    with nccl.open("a") as handle:
        handle.write(
            "gpu-node-07:48201:48201 [0] NCCL INFO NCCL_IB_HCA set by environment to mlx5_0\n"
        )
    pod = json.loads((bundle / "pod.json").read_text())
    pod["spec"]["containers"][0]["env"] = [{"name": "NCCL_IB_HCA", "value": "mlx5_0"}]
    (bundle / "pod.json").write_text(json.dumps(pod))
    return bundle


def test_the_bundles_node_count_reaches_the_rules_and_a_var_overrides_it(tmp_path: Path) -> None:
    bundle = _with_ib_hca(tmp_path)
    # bundle.yaml says the job spans 2 nodes: IB asked for and no RDMA device is the cause
    assert analyze(bundle, "nccl-init-failure", {}).verdict.root_cause == "rdma-misconfigured"
    # told it is a single-node job, the missing RDMA device is no longer a fault
    single = analyze(bundle, "nccl-init-failure", {"nodes": 1}).verdict.root_cause
    assert single != "rdma-misconfigured"
