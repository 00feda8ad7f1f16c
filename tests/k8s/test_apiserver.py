"""The Kubernetes API double itself, driven by the real kubectl and by raw HTTPS requests.

There is no API server on this machine (see ../shared/TESTING.md), so the remedies' Kubernetes
tests run against tests/k8s/apiserver.py, a double of the API seeded from objects in the shape
`kubectl get -o json` writes. These tests pin the double's wire behaviour to what a real v1.30
server answers: discovery that kubectl accepts, typed lists, server-side tables,
strategic-merge cordons, Status objects for errors, and evictions held by a
PodDisruptionBudget with 429.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.k8s.apiserver import TOKEN
from tests.k8s.fixtures import KubeApi, kubectl_env
from tests.k8s.store import PDB_VIOLATION

FIXTURES = Path(__file__).parent / "fixtures"
GPU_NODES = [f"gpu-node-{i:02d}" for i in range(1, 11)]


def kubectl(api: KubeApi, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", *args],
        env=kubectl_env(api, tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )


def call(
    api: KubeApi,
    method: str,
    path: str,
    body: Any = None,
    *,
    content_type: str = "application/json",
    token: str | None = TOKEN,
) -> tuple[int, Any]:
    """One raw HTTPS request, verified against the double's CA."""
    context = ssl.create_default_context(cadata=api.ca_pem.decode())
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(api.url + path, data=data, method=method)
    request.add_header("Accept", "application/json")
    if data is not None:
        request.add_header("Content-Type", content_type)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        with err:
            return err.code, json.loads(err.read())


def test_kubectl_lists_the_gpu_pool_by_label_selector(k8s_api: KubeApi, tmp_path: Path) -> None:
    """Double of the API (no API server here): kubectl's discovery and server-side table."""
    names = kubectl(
        k8s_api, tmp_path, "get", "nodes", "-l", "nvidia.com/gpu.present=true", "-o", "name"
    )
    assert names.returncode == 0, names.stderr
    assert names.stdout.split() == [f"node/{n}" for n in GPU_NODES]

    table = kubectl(k8s_api, tmp_path, "get", "nodes", "-l", "node-pool notin (h100)")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert sorted(rows) == ["control-plane-01", "cpu-node-01"]
    assert rows["control-plane-01"][1:3] == ["Ready", "control-plane"]
    assert rows["cpu-node-01"][4] == "v1.30.4"

    lists = [r for r in k8s_api.requests if r.path == "/api/v1/nodes"]
    assert [r.query["labelSelector"] for r in lists] == [
        ["nvidia.com/gpu.present=true"],
        ["node-pool notin (h100)"],
    ]
    assert k8s_api.writes() == []


def test_kubectl_cordon_patches_spec_unschedulable_and_the_table_shows_it(
    k8s_api: KubeApi, tmp_path: Path
) -> None:
    """Double of the API (no API server here): `kubectl cordon` writes one strategic merge patch."""
    before = k8s_api.state.get("nodes", "gpu-node-07")
    assert before is not None and "unschedulable" not in before["spec"]

    cordon = kubectl(k8s_api, tmp_path, "cordon", "gpu-node-07")
    assert cordon.returncode == 0, cordon.stderr
    assert cordon.stdout.strip() == "node/gpu-node-07 cordoned"

    (patch,) = k8s_api.writes()
    assert (patch.method, patch.path) == ("PATCH", "/api/v1/nodes/gpu-node-07")
    assert patch.content_type == "application/strategic-merge-patch+json"
    assert patch.body == {"spec": {"unschedulable": True}}
    after = k8s_api.state.get("nodes", "gpu-node-07")
    assert after is not None and after["spec"]["unschedulable"] is True
    assert int(after["metadata"]["resourceVersion"]) > int(before["metadata"]["resourceVersion"])
    assert after["spec"]["taints"] == before["spec"]["taints"]  # merged, not replaced

    shown = kubectl(k8s_api, tmp_path, "get", "node", "gpu-node-07", "--no-headers")
    assert shown.stdout.split()[1] == "Ready,SchedulingDisabled"
    again = kubectl(k8s_api, tmp_path, "cordon", "gpu-node-07")
    assert again.stdout.strip() == "node/gpu-node-07 already cordoned"
    assert len(k8s_api.writes()) == 1


def test_kubectl_drain_evicts_through_the_budget_and_a_second_eviction_gets_429(
    k8s_api: KubeApi, tmp_path: Path
) -> None:
    """Double of the API (no API server here): PDB llm-serve (minAvailable 1, two ready pods)
    lets kubectl drain evict one replica; evicting the other is refused exactly as eviction.go
    refuses it."""
    drain = kubectl(
        k8s_api,
        tmp_path,
        "drain",
        "gpu-node-07",
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--timeout=30s",
    )
    assert drain.returncode == 0, drain.stderr
    assert "node/gpu-node-07 drained" in drain.stdout
    evictions = sorted(r.path for r in k8s_api.writes() if r.path.endswith("/eviction"))
    assert evictions == [
        "/api/v1/namespaces/ml/pods/llm-serve-6d5f7c9b8-k2xqp/eviction",
        "/api/v1/namespaces/ml/pods/trainer-worker-3/eviction",
    ]
    assert (
        k8s_api.state.names("pods", "gpu-operator").count("nvidia-device-plugin-daemonset-m3rjc")
        == 1
    )  # the DaemonSet pod stays
    pdb = k8s_api.state.get("poddisruptionbudgets", "llm-serve", "ml")
    assert pdb is not None
    assert (pdb["status"]["currentHealthy"], pdb["status"]["disruptionsAllowed"]) == (1, 0)

    code, status = call(
        k8s_api,
        "POST",
        "/api/v1/namespaces/ml/pods/llm-serve-6d5f7c9b8-w7mzn/eviction",
        {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": "llm-serve-6d5f7c9b8-w7mzn", "namespace": "ml"},
        },
    )
    assert code == 429
    assert status == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": PDB_VIOLATION,
        "reason": "TooManyRequests",
        "details": {
            "causes": [
                {
                    "reason": "DisruptionBudget",
                    "message": "The disruption budget llm-serve needs 1 healthy pods "
                    "and has 1 currently",
                }
            ]
        },
        "code": 429,
    }
    assert k8s_api.state.get("pods", "llm-serve-6d5f7c9b8-w7mzn", "ml") is not None


def test_the_seeded_budget_status_is_what_the_doubles_controller_computes(
    k8s_api: KubeApi,
) -> None:
    """Double of the API (no API server here): its disruption-controller model reproduces the
    PDB status in the fixtures from the fixtures' pods."""
    recorded = json.loads((FIXTURES / "poddisruptionbudgets.json").read_text())["items"][0]
    served = k8s_api.state.get("poddisruptionbudgets", "llm-serve", "ml")
    assert served is not None
    assert served["status"] == recorded["status"]


def test_errors_come_back_as_status_objects_with_the_servers_codes(k8s_api: KubeApi) -> None:
    """Double of the API (no API server here): 401, 404, 400, 409 and 422 as Status objects."""
    code, status = call(k8s_api, "GET", "/api/v1/nodes", token=None)
    assert (code, status["reason"]) == (401, "Unauthorized")

    code, status = call(k8s_api, "GET", "/api/v1/nodes/gpu-node-99")
    assert code == 404
    assert status["message"] == 'nodes "gpu-node-99" not found'
    assert status["details"] == {"name": "gpu-node-99", "kind": "nodes"}

    code, status = call(k8s_api, "GET", "/apis/apps/v1/namespaces/ml/deployments/nope")
    assert (code, status["message"]) == (404, 'deployments.apps "nope" not found')

    code, status = call(k8s_api, "GET", "/api/v1/pods?fieldSelector=spec.color%3Dblue")
    assert (code, status["reason"], status["message"]) == (
        400,
        "BadRequest",
        "field label not supported: spec.color",
    )

    code, node = call(k8s_api, "GET", "/api/v1/nodes/gpu-node-01")
    stale = dict(node, metadata=dict(node["metadata"], resourceVersion="1"))
    code, status = call(k8s_api, "PUT", "/api/v1/nodes/gpu-node-01", stale)
    assert (code, status["reason"]) == (409, "Conflict")
    assert "the object has been modified" in status["message"]

    code, job = call(k8s_api, "GET", "/apis/batch/v1/namespaces/ml/jobs/nccl-allreduce")
    code, status = call(
        k8s_api,
        "POST",
        "/apis/batch/v1/namespaces/ml/jobs",
        {k: job[k] for k in ("apiVersion", "kind", "metadata", "spec")},
    )
    assert (code, status["reason"]) == (409, "AlreadyExists")

    patch = {
        "spec": {
            "template": {
                "spec": {
                    "volumes": [
                        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}
                    ]
                }
            }
        }
    }
    code, status = call(
        k8s_api,
        "PATCH",
        "/apis/batch/v1/namespaces/ml/jobs/nccl-allreduce",
        patch,
        content_type="application/strategic-merge-patch+json",
    )
    assert (code, status["reason"]) == (422, "Invalid")
    assert status["message"].startswith('Job.batch "nccl-allreduce" is invalid: spec.template: ')
    assert status["message"].endswith("field is immutable")
    assert k8s_api.writes(include_dry_run=True)[-1].status == 422


@pytest.mark.parametrize(
    ("content_type", "patch"),
    [
        ("application/strategic-merge-patch+json", {"spec": {"unschedulable": True}}),
        ("application/merge-patch+json", {"spec": {"unschedulable": True}}),
        (
            "application/json-patch+json",
            [{"op": "add", "path": "/spec/unschedulable", "value": True}],
        ),
    ],
)
def test_each_patch_type_cordons_a_node(k8s_api: KubeApi, content_type: str, patch: Any) -> None:
    """Double of the API (no API server here): the three PATCH types on spec.unschedulable."""
    code, node = call(
        k8s_api, "PATCH", "/api/v1/nodes/gpu-node-02", patch, content_type=content_type
    )
    assert code == 200
    assert node["spec"]["unschedulable"] is True
    assert node["spec"]["taints"] == [
        {"effect": "NoSchedule", "key": "nvidia.com/gpu", "value": "present"}
    ]


def test_strategic_merge_merges_volumes_by_name_and_dry_run_stores_nothing(
    k8s_api: KubeApi,
) -> None:
    """Double of the API (no API server here): a /dev/shm sizeLimit patch on a Deployment."""
    path = "/apis/apps/v1/namespaces/ml/deployments/llm-serve"
    before = k8s_api.state.get("deployments", "llm-serve", "ml")
    assert before is not None
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "volumes": [
                        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}
                    ]
                }
            }
        }
    }

    code, dry = call(
        k8s_api,
        "PATCH",
        path + "?dryRun=All",
        patch,
        content_type="application/strategic-merge-patch+json",
    )
    assert code == 200
    assert dry["spec"]["template"]["spec"]["volumes"] == [
        {"emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}, "name": "dshm"}
    ]
    assert k8s_api.state.get("deployments", "llm-serve", "ml") == before

    code, done = call(
        k8s_api, "PATCH", path, patch, content_type="application/strategic-merge-patch+json"
    )
    assert code == 200
    containers = done["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["server"]  # merged by name, not replaced
    assert done["metadata"]["generation"] == before["metadata"]["generation"] + 1
    assert done["status"] == before["status"]


def test_lists_are_typed_and_their_items_carry_no_kind(k8s_api: KubeApi) -> None:
    """Double of the API (no API server here): the wire shape of a list, as the server sends it."""
    code, pods = call(k8s_api, "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dgpu-node-07")
    assert code == 200
    assert (pods["kind"], pods["apiVersion"]) == ("PodList", "v1")
    assert pods["metadata"]["resourceVersion"].isdigit()
    assert sorted(p["metadata"]["name"] for p in pods["items"]) == [
        "llm-serve-6d5f7c9b8-k2xqp",
        "nvidia-device-plugin-daemonset-m3rjc",
        "trainer-worker-3",
    ]
    assert all("kind" not in p and "apiVersion" not in p for p in pods["items"])

    code, pdbs = call(k8s_api, "GET", "/apis/policy/v1/namespaces/ml/poddisruptionbudgets")
    assert (pdbs["kind"], pdbs["apiVersion"]) == ("PodDisruptionBudgetList", "policy/v1")


def test_discovery_is_the_legacy_form_and_openapi_is_absent(k8s_api: KubeApi) -> None:
    """Double of the API (no API server here): what clients read before anything else."""
    code, core = call(k8s_api, "GET", "/api/v1")
    assert (code, core["kind"], core["groupVersion"]) == (200, "APIResourceList", "v1")
    eviction = next(r for r in core["resources"] if r["name"] == "pods/eviction")
    assert (eviction["group"], eviction["version"], eviction["kind"]) == (
        "policy",
        "v1",
        "Eviction",
    )
    code, groups = call(k8s_api, "GET", "/apis")
    assert [g["name"] for g in groups["groups"]] == ["policy", "apps", "batch", "kubeflow.org"]
    code, policy = call(k8s_api, "GET", "/apis/policy/v1")
    assert [r["name"] for r in policy["resources"]] == [
        "poddisruptionbudgets",
        "poddisruptionbudgets/status",
    ]
    code, version = call(k8s_api, "GET", "/version")
    assert version["gitVersion"] == "v1.30.4"

    context = ssl.create_default_context(cadata=k8s_api.ca_pem.decode())
    request = urllib.request.Request(k8s_api.url + "/openapi/v2")
    request.add_header("Authorization", f"Bearer {TOKEN}")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, context=context, timeout=10)
    with err.value:
        assert err.value.code == 404
        assert err.value.read() == b"404 page not found\n"
