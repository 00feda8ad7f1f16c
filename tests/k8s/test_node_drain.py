"""playbooks/node-drain.yml through ansible-runner, against the Kubernetes API double.

There is no API server on this machine, so kubernetes.core's k8s_info and k8s_drain talk to
tests/k8s/apiserver.py: a double of the API seeded from objects in the shape `kubectl get -o json`
writes, for a ten-node H100 pool (tests/k8s/fixtures/). Everything else is real: ansible-runner,
ansible-playbook, the collection's modules and the kubernetes client over HTTPS. What the
playbook did is read back from the double's request log and its stored objects.

The node drained is gpu-node-07: a DaemonSet pod (nvidia-device-plugin), one llm-serve replica
under PDB llm-serve (minAvailable 1 of two ready replicas: one disruption allowed) and
trainer-worker-3 (a PyTorchJob worker with a /dev/shm emptyDir).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ansible_runner
import pytest

from runbook.remedies.guards import drain_guard
from tests.k8s.fixtures import KubeApi
from tests.k8s.store import PDB_VIOLATION
from tests.tools.ansible_env import (
    ansible_environment,
    run_playbook,
    runner_output,
    task_result,
)

pytestmark = pytest.mark.ansible

NODE = "gpu-node-07"
SERVE_HERE = "llm-serve-6d5f7c9b8-k2xqp"
SERVE_ELSEWHERE = "llm-serve-6d5f7c9b8-w7mzn"
EVICTIONS = [
    f"/api/v1/namespaces/ml/pods/{SERVE_HERE}/eviction",
    "/api/v1/namespaces/ml/pods/trainer-worker-3/eviction",
]
#: an inventory whose localhost Python has no kubernetes client: the role must not use it
INVENTORY = {
    "all": {
        "hosts": {
            "localhost": {
                "ansible_connection": "local",
                "ansible_python_interpreter": "/usr/bin/python3",
            }
        }
    }
}


def drain(
    api: KubeApi, tmp_path: Path, name: str, *, check: bool = False, **extra: Any
) -> ansible_runner.Runner:
    return run_playbook(
        tmp_path / name,
        "node-drain.yml",
        envvars=ansible_environment(tmp_path / "ansible"),
        extravars={
            "node_drain_node": NODE,
            "node_drain_kubeconfig": str(api.kubeconfig),
            "node_drain_context": api.context,
            **extra,
        },
        inventory=INVENTORY,
        cmdline="--check --diff" if check else "--diff",
    )


def test_check_mode_writes_nothing_then_the_drain_cordons_and_evicts_through_the_budget(
    k8s_api: KubeApi, tmp_path: Path
) -> None:
    """Double of the API (no API server here). Check mode: only reads, the plan shown and
    reported as the change. Real run: one cordon patch, one eviction per evictable pod (never
    a DELETE: the eviction API is what makes the budget count), the DaemonSet pod left."""
    check = drain(k8s_api, tmp_path, "check", check=True)
    assert check.status == "successful", runner_output(check)
    assert k8s_api.writes() == [], "check mode wrote to the cluster"
    guard = task_result(check, "ok", "Refuse a drain past the blast-radius limits")["res"]
    assert guard["msg"] == (
        f"drain of {NODE} allowed: 0 other node(s) of the pool nvidia.com/gpu.present=true "
        "(10 nodes) already cordoned (none), limit 1; 1 of 10 cordoned after the drain = 0.10, "
        "limit 0.10"
    )
    plan = task_result(check, "ok", "Show the drain plan")["res"]
    assert plan["changed"] is True
    assert plan["msg"] == (
        f"would cordon {NODE}; evict 2 pod(s): ml/{SERVE_HERE}, ml/trainer-worker-3; left on "
        "the node: gpu-operator/nvidia-device-plugin-daemonset-m3rjc"
    )
    assert task_result(check, "skipped", "Cordon the node and evict its pods")
    assert check.stats["changed"] == {"localhost": 1}

    k8s_api.clear_log()
    real = drain(k8s_api, tmp_path, "real")
    assert real.status == "successful", runner_output(real)
    writes = k8s_api.writes()
    assert [(w.method, w.path) for w in writes] == [
        ("PATCH", f"/api/v1/nodes/{NODE}"),
        *[("POST", path) for path in EVICTIONS],
    ]
    assert writes[0].content_type == "application/strategic-merge-patch+json"
    assert writes[0].body == {"spec": {"unschedulable": True}}
    assert [w.body for w in writes[1:]] == [
        {"deleteOptions": {"gracePeriodSeconds": 60}, "metadata": {"name": n, "namespace": "ml"}}
        for n in (SERVE_HERE, "trainer-worker-3")
    ]
    assert all(w.status in (200, 201) for w in writes)
    node = k8s_api.state.get("nodes", NODE)
    assert node is not None and node["spec"]["unschedulable"] is True
    assert k8s_api.state.names("pods", "ml") == [SERVE_ELSEWHERE, *_workers(0, 1, 2)]
    assert "nvidia-device-plugin-daemonset-m3rjc" in k8s_api.state.names("pods", "gpu-operator")
    pdb = k8s_api.state.get("poddisruptionbudgets", "llm-serve", "ml")
    assert pdb is not None
    assert (pdb["status"]["currentHealthy"], pdb["status"]["disruptionsAllowed"]) == (1, 0)
    result = task_result(real, "ok", "Cordon the node and evict its pods")["res"]
    assert result["changed"] is True
    assert result["result"] == f"node {NODE} marked unschedulable. 2 Pod(s) deleted from node."


def _workers(*indexes: int) -> list[str]:
    return [f"trainer-worker-{i}" for i in indexes]


def test_the_guard_refuses_when_another_pool_node_is_already_cordoned(
    k8s_api: KubeApi, tmp_path: Path
) -> None:
    """Double of the API (no API server here): gpu-node-02 is cordoned, the limit is one; the
    play stops at the assert with the numbers, and nothing is written. The role's message is
    the one runbook.remedies.guards gives for the same NodeList."""
    other = k8s_api.state.get("nodes", "gpu-node-02")
    assert other is not None
    other["spec"]["unschedulable"] = True
    k8s_api.state.put(other)

    run = drain(k8s_api, tmp_path, "refused")
    assert run.status == "failed", runner_output(run)
    failed = task_result(run, "failed", "Refuse a drain past the blast-radius limits")
    expected = drain_guard(
        [k8s_api.state.get("nodes", n) or {} for n in k8s_api.state.names("nodes")],
        NODE,
        max_cordoned=1,
        max_fraction=0.1,
        pool_selector="nvidia.com/gpu.present=true",
    )
    assert not expected.allowed
    assert failed["res"]["msg"] == expected.reason
    assert "(gpu-node-02), limit 1; 2 of 10 cordoned after the drain = 0.20" in expected.reason
    assert k8s_api.writes() == []
    assert not [r for r in k8s_api.requests if r.path == f"/api/v1/nodes/{NODE}"]
    assert len(k8s_api.state.names("pods", "ml")) == 6


def test_a_budget_with_no_disruption_left_stops_the_drain_and_the_node_stays_cordoned(
    k8s_api: KubeApi, tmp_path: Path
) -> None:
    """Double of the API (no API server here): the other llm-serve replica is not Ready, so
    PDB llm-serve allows no disruption. The eviction gets the server's 429; k8s_drain fails on
    it at once (it does not retry as `kubectl drain` does) and leaves the node cordoned; the
    protected pod keeps running, and the pods after it in the list are not evicted."""
    pod = k8s_api.state.get("pods", SERVE_ELSEWHERE, "ml")
    assert pod is not None
    for cond in pod["status"]["conditions"]:
        if cond["type"] in ("Ready", "ContainersReady"):
            cond["status"] = "False"
    k8s_api.state.put(pod)
    pdb = k8s_api.state.get("poddisruptionbudgets", "llm-serve", "ml")
    assert pdb is not None and pdb["status"]["disruptionsAllowed"] == 0

    run = drain(k8s_api, tmp_path, "blocked")
    assert run.status == "failed", runner_output(run)
    failed = task_result(run, "failed", "Cordon the node and evict its pods")
    assert failed["res"]["msg"] == f"Failed to delete pod ml/{SERVE_HERE} due to: {PDB_VIOLATION}"
    writes = k8s_api.writes()
    assert [(w.method, w.path, w.status) for w in writes] == [
        ("PATCH", f"/api/v1/nodes/{NODE}", 200),
        ("POST", EVICTIONS[0], 429),
    ]
    assert writes[1].response["reason"] == "TooManyRequests"
    node = k8s_api.state.get("nodes", NODE)
    assert node is not None and node["spec"]["unschedulable"] is True
    assert SERVE_HERE in k8s_api.state.names("pods", "ml")
    assert "trainer-worker-3" in k8s_api.state.names("pods", "ml")
