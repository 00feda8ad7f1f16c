"""Kubernetes objects for the resolver tests: the training workloads and their pods of
tests/k8s/fixtures/trainingjobs.json (plus the `trainer` workers of pods.json), and node-agent
pods like the sweep's (tests/sweep/test_kube_source.py), each in `kubectl get -o json` shape."""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parents[1] / "k8s" / "fixtures"
TRAINING_JOBS = FIXTURES / "trainingjobs.json"


def _items(name: str) -> list[dict[str, Any]]:
    return list(json.loads((FIXTURES / name).read_text())["items"])


def workload(kind: str, name: str) -> dict[str, Any]:
    """A workload object of trainingjobs.json (a Job, PyTorchJob, TFJob or MPIJob)."""
    return next(
        o
        for o in _items("trainingjobs.json")
        if o["kind"] == kind and o["metadata"]["name"] == name
    )


def pods_labelled(key: str, value: str) -> list[dict[str, Any]]:
    """Every seeded pod (trainingjobs.json and pods.json) whose label `key` is `value`."""
    pods = [o for o in _items("trainingjobs.json") + _items("pods.json") if o["kind"] == "Pod"]
    return [p for p in pods if (p["metadata"].get("labels") or {}).get(key) == value]


def agent(node: str, *, phase: str = "Running") -> dict[str, Any]:
    """The privileged node-agent pod on `node` (kube-system, app=node-agent)."""
    name = f"node-agent-{node}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "kube-system",
            "labels": {"app": "node-agent"},
            "creationTimestamp": "2025-03-10T22:14:00Z",
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
            "containerStatuses": [
                {"name": "node-agent", "ready": phase == "Running", "restartCount": 0}
            ],
        },
    }


#: every node of the seeded cluster but gpu-node-09 has a running agent
AGENT_NODES = ["cpu-node-01", *(f"gpu-node-{i:02d}" for i in range(1, 11) if i != 9)]


def agents() -> dict[str, Any]:
    return {"kind": "PodList", "apiVersion": "v1", "items": [agent(n) for n in AGENT_NODES]}
