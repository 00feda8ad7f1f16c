"""Kubernetes nodes for the API double that are SSH test hosts: what `kubectl exec` runs in a pod
bound to such a node runs on the host (tests/k8s/streams.py). The API is a recorded double (no
API server can run here); the hosts, their sshd, processes and signals are real.

``kube_cluster`` (a fixture): the double with one test host attached as node ``gpu-node-01``,
the shipped node agent's pod (examples/kubernetes/node-agent.yaml, the DaemonSet's template) on
it, and kubectl's environment (KUBECONFIG, HOME and its cache) set for this process and its
children. The nsenter PID of a run is the host's sshd (`nsenter --target 1` is refused on these
machines; the sshd is in the test host's namespaces, as PID 1 is in a node's).
"""

from __future__ import annotations

import contextlib
import copy
import os
import signal
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.hosts.harness import TestHost
from tests.k8s.fixtures import KubeApi, kubectl_env

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "examples" / "kubernetes"
NODE = "gpu-node-01"


def manifest(name: str) -> list[dict[str, Any]]:
    """The documents of a shipped manifest."""
    return [d for d in yaml.safe_load_all((MANIFESTS / name).read_text()) if d]


def agent_pod(node: str, name: str | None = None) -> dict[str, Any]:
    """A Running pod of the shipped node-agent DaemonSet on `node`, as its controller and the
    kubelet would have written it."""
    daemonset = next(d for d in manifest("node-agent.yaml") if d["kind"] == "DaemonSet")
    template = copy.deepcopy(daemonset["spec"]["template"])
    meta = daemonset["metadata"]
    pod_name = name or f"{meta['name']}-{uuid.uuid4().hex[:5]}"
    spec = template["spec"]
    spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name,
            "namespace": meta["namespace"],
            "labels": template["metadata"]["labels"],
            "uid": str(uuid.uuid4()),
            "creationTimestamp": "2026-12-01T08:00:00Z",
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "DaemonSet",
                    "name": meta["name"],
                    "uid": str(uuid.uuid4()),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": c["name"],
                    "ready": True,
                    "restartCount": 0,
                    "started": True,
                    "image": c["image"],
                    "state": {"running": {"startedAt": "2026-12-01T08:00:05Z"}},
                }
                for c in spec["containers"]
            ],
        },
    }


def namespace_object(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name},
                     "uid": str(uuid.uuid4()), "creationTimestamp": "2025-02-20T14:04:10Z"},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }  # fmt: skip


@dataclass
class KubeCluster:
    api: KubeApi
    host: TestHost
    agent: str
    env: dict[str, str]

    @property
    def nsenter_pid(self) -> int:
        pid = self.host.sshd_pid
        assert pid is not None
        return pid

    def processes(self, text: str) -> list[int]:
        """Live (not zombie) processes in the node's namespaces whose command line has `text`."""
        found = []
        for pid in self.host.pids():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0]
            except (OSError, IndexError):
                continue
            if text.encode() in cmdline and state != "Z":
                found.append(pid)
        return found

    def kill(self, text: str) -> None:
        """SIGKILL to what `processes(text)` finds (a test's leftovers, by their pids)."""
        for pid in self.processes(text):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def exec_requests(self) -> list[Any]:
        return [r for r in self.api.requests if r.resource == "pods/exec"]


@pytest.fixture
def kube_cluster(
    k8s_api: KubeApi, ssh_host: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[KubeCluster]:
    host = ssh_host(NODE)
    # a v1.32 cluster: the machine's kubectl dispatcher then runs kubectl 1.32
    k8s_api.server_version.update(minor="32", gitVersion="v1.32.4")
    k8s_api.attach_node(NODE, host, host.network)
    for namespace in ("default", "kube-system"):  # every cluster has them
        if k8s_api.state.get("namespaces", namespace) is None:
            k8s_api.state.put(namespace_object(namespace))
    pod = agent_pod(NODE)
    k8s_api.state.put(pod)
    env = kubectl_env(k8s_api, tmp_path)
    for key in ("KUBECONFIG", "HOME", "KUBECACHEDIR"):
        monkeypatch.setenv(key, env[key])
    yield KubeCluster(k8s_api, host, pod["metadata"]["name"], env)
