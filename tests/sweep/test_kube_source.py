"""GPU nodes from Kubernetes: `--kube-selector` picks nodes by label, each reached through the
node-agent pod on it (`kubectl://NS/POD`).

No Kubernetes API server can run here: these tests use the recorded API double of tests/k8s
(real kubectl, real HTTPS, the API's wire format; seeded with the 10-node GPU pool of
tests/k8s/fixtures plus the node-agent pods added below). The double does not serve
`pods/exec`, so the sweep's `kubectl exec` into each agent fails, which is itself what must be
shown: each node becomes an `unreachable` result with kubectl's reason, not a crashed sweep."""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

import pytest

from runbook.sweep.kube import join_nodes_and_agents, kube_entries
from tests.k8s.fixtures import kubectl_env
from tests.sweep.helpers import runbook

SELECTOR = "nvidia.com/gpu.present=true"


def agent(
    node: str,
    name: str,
    *,
    phase: str = "Running",
    ready: bool = True,
    created: str = "2025-03-10T22:14:00Z",
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "kube-system",
            "labels": {"app": "node-agent"},
            "creationTimestamp": created,
            "uid": f"00000000-0000-4000-8000-{zlib.crc32(name.encode()):012d}",
        },
        "spec": {
            "nodeName": node,
            "hostPID": True,
            "containers": [
                {
                    "name": "node-agent",
                    "image": "registry.local/node-agent:1.4",
                    "securityContext": {"privileged": True},
                }
            ],
        },
        "status": {
            "phase": phase,
            "containerStatuses": [{"name": "node-agent", "ready": ready, "restartCount": 0}],
        },
    }


@pytest.fixture
def cluster(k8s_api: Any) -> Any:
    for i in range(1, 9):
        k8s_api.state.put(agent(f"gpu-node-{i:02d}", f"node-agent-g{i:02d}"))
    # a replacement pod still starting next to the running one: the running one is used
    k8s_api.state.put(
        agent(
            "gpu-node-03",
            "node-agent-new03",
            phase="Pending",
            ready=False,
            created="2025-03-11T08:00:00Z",
        )
    )
    k8s_api.state.put(agent("gpu-node-09", "node-agent-g09", phase="Pending", ready=False))
    # gpu-node-10 has none; cpu-node-01 has one but is not a GPU node
    k8s_api.state.put(agent("cpu-node-01", "node-agent-c01"))
    return k8s_api


def test_gpu_nodes_by_label_each_through_its_node_agent_pod(
    cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in kubectl_env(cluster, tmp_path).items():
        monkeypatch.setenv(key, value)
    before = len(cluster.requests)
    entries = {e.name: e for e in kube_entries(SELECTOR, context=cluster.context)}
    assert sorted(entries) == [f"gpu-node-{i:02d}" for i in range(1, 11)]
    assert entries["gpu-node-01"].target == "kubectl://kube-system/node-agent-g01"
    assert entries["gpu-node-03"].target == "kubectl://kube-system/node-agent-g03"
    assert entries["gpu-node-01"].kube_context == cluster.context
    assert entries["gpu-node-01"].problem is None
    assert "not running and ready (phase Pending)" in str(entries["gpu-node-09"].problem)
    assert "no node-agent pod (app=node-agent in kube-system)" in str(
        entries["gpu-node-10"].problem
    )
    assert entries["gpu-node-10"].problem_status == "unreachable"
    # two reads whatever the pool's size, and nothing written
    reads = [r for r in cluster.requests[before:] if r.path.startswith("/api/v1/")]
    assert [(r.method, r.path, r.query.get("labelSelector")) for r in reads] == [
        ("GET", "/api/v1/nodes", [SELECTOR]),
        ("GET", "/api/v1/namespaces/kube-system/pods", ["app=node-agent"]),
    ]
    assert not cluster.writes()


def test_a_sweep_of_the_kube_source_records_each_node_it_cannot_exec_into(
    cluster: Any, tmp_path: Path, env: dict[str, str]
) -> None:
    env = {**env, **kubectl_env(cluster, tmp_path)}
    result = runbook(
        [
            "sweep",
            "nccl-init-failure",
            "--kube-selector",
            SELECTOR,
            "--context",
            cluster.context,
            "--timeout-per-host",
            "20",
            "--forks",
            "10",
            "--report",
            str(tmp_path / "report"),
            "--format",
            "json",
        ],
        env,
    )
    assert result.rc == 3, result.stderr[-2000:]  # nothing swept, no finding
    hosts = {h["host"]: h for h in result.json()["hosts"]}
    assert len(hosts) == 10
    assert {h["status"] for h in hosts.values()} == {"unreachable"}
    assert hosts["gpu-node-01"]["target"] == "kubectl://kube-system/node-agent-g01"
    assert "kubectl exec failed" in hosts["gpu-node-01"]["error"]
    assert "no node-agent pod" in hosts["gpu-node-10"]["error"]
    execs = [r for r in cluster.requests if r.path.endswith("/exec")]
    assert {r.path.split("/")[-2] for r in execs} == {f"node-agent-g{i:02d}" for i in range(1, 9)}


def test_the_join_is_pure_and_prefers_the_newest_running_agent() -> None:
    nodes = {"items": [{"metadata": {"name": "n1", "labels": {"nvidia.com/gpu.product": "H100"}}}]}
    older = agent("n1", "a-old", created="2025-01-01T00:00:00Z")
    newer = agent("n1", "a-new", created="2025-02-01T00:00:00Z")
    (entry,) = join_nodes_and_agents(
        nodes, {"items": [older, newer]}, namespace="kube-system", agent_selector="app=node-agent"
    )
    assert entry.target == "kubectl://kube-system/a-new" and entry.groups == ("H100",)


def test_a_node_name_that_is_no_host_name_is_a_host_error_never_a_target() -> None:
    """The API's answer is a source of host names like any other (security round 3, item 4):
    a name a shell or an ssh config's `%h` could expand is that node's error, not a target."""
    hostile = "gpu-1;touch${IFS}/tmp/x"
    nodes = {"items": [{"metadata": {"name": hostile}}, {"metadata": {"name": "gpu-2"}}]}
    pods = {"items": [
        {"metadata": {"name": f"agent-{i}", "creationTimestamp": "2026-01-01T00:00:00Z"},
         "spec": {"nodeName": node}, "status": {"phase": "Running"}}
        for i, node in enumerate((hostile, "gpu-2"))
    ]}  # fmt: skip
    entries = {e.name: e for e in join_nodes_and_agents(
        nodes, pods, namespace="kube-system", agent_selector="app=node-agent")}  # fmt: skip
    bad = entries[hostile]
    assert bad.problem and "is not a host name" in bad.problem
    assert bad.target == "kubectl://kube-system/-"
    good = entries["gpu-2"]
    assert good.target == "kubectl://kube-system/agent-1" and not good.problem
