"""`kubectl-debug://NODE` end to end: the `runbook` command, the real kubectl 1.32 binary, the
Kubernetes API's wire format and streams, and commands run on a real host. The API is a recorded
double (no API server can run here, tests/k8s/apiserver.py): it stores the debug pod, reports it
Running once "its kubelet" has seen it, and runs what is exec'd in it on the SSH test host that
stands for node gpu-node-01 (tests/k8s/nodes.py). Every exit path deletes the pod: the end of the
run, an error, ^C and SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from runbook.transports import kube_debug
from tests.k8s.nodes import NODE, KubeCluster, manifest
from tests.k8s.nodes import kube_cluster as kube_cluster

pytestmark = pytest.mark.ssh

RUNBOOK = [sys.executable, "-m", "runbook"]


def _env(cluster: KubeCluster, tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in cluster.env.items() if not k.startswith("RUNBOOK_")}
    env.update(
        RUNBOOK_STATE_DIR=str(tmp_path / "state"),
        COLUMNS="200",
        **extra,
    )
    if "RUNBOOK_CACHE_DIR" in os.environ:
        env["RUNBOOK_CACHE_DIR"] = os.environ["RUNBOOK_CACHE_DIR"]
    return env


def _cli(cluster: KubeCluster, tmp_path: Path, *args: str, **extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*RUNBOOK, *args],
        env=_env(cluster, tmp_path, **extra),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )


def _debug_pods(cluster: KubeCluster) -> list[str]:
    return cluster.api.state.names("pods", kube_debug.DEFAULT_NAMESPACE)


def _created(cluster: KubeCluster) -> list[Any]:
    return [
        r for r in cluster.api.requests
        if r.method == "POST" and r.resource == "pods" and r.status == 201
    ]  # fmt: skip


def _deleted(cluster: KubeCluster) -> list[str]:
    return [
        r.path.rsplit("/", 1)[1] for r in cluster.api.requests
        if r.method == "DELETE" and r.resource == "pods" and r.status == 200
    ]  # fmt: skip


def _role_allows(role: dict[str, Any], group: str, resource: str, verb: str) -> bool:
    return any(
        group in rule.get("apiGroups", []) and resource in rule.get("resources", [])
        and verb in rule.get("verbs", [])
        for rule in role["rules"]
    )  # fmt: skip


def _shipped_role(name: str, file: str) -> dict[str, Any]:
    return next(d for d in manifest(file) if d["kind"] == "Role" and d["metadata"]["name"] == name)


def _assert_rbac_within(cluster: KubeCluster, role: dict[str, Any]) -> None:
    """Every request that named a resource asked only what the shipped Role grants, in its
    namespace (discovery and /version are not resources: no Role governs them)."""
    asked = {
        (r.api_group, r.resource, verb, r.namespace)
        for r in cluster.api.requests for verb in r.verbs
    }  # fmt: skip
    assert asked, "no request was authorized by resource"
    for group, resource, verb, namespace in sorted(asked):
        assert namespace == role["metadata"]["namespace"], (verb, resource, namespace)
        assert _role_allows(role, group, resource, verb), f"{verb} {resource} not in the Role"


def test_collect_through_a_debug_pod_makes_the_pod_kubectl_debug_makes_and_deletes_it(
    kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    """API double: `runbook collect --target kubectl-debug://gpu-node-01` creates a pod bound to
    the node in the host's PID, network and IPC namespaces, privileged, the host's root at
    /host, tolerating every taint, labelled for clean-up; waits for it to run; collects through
    it (nsenter into the node: the bundle's hostname is the host's); deletes it; asks the API
    only what the shipped debug Role grants."""
    proc = _cli(
        kube_cluster, tmp_path, "collect", "--target", f"kubectl-debug://{NODE}",
        "--nsenter", str(kube_cluster.nsenter_pid), "-o", str(tmp_path / "bundle"),
    )  # fmt: skip
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    (created,) = _created(kube_cluster)
    pod = created.body
    spec = pod["spec"]
    assert spec["nodeName"] == NODE
    assert spec["hostPID"] and spec["hostNetwork"] and spec["hostIPC"]
    assert spec["tolerations"] == [{"operator": "Exists"}]
    (container,) = spec["containers"]
    assert container["securityContext"] == {"privileged": True}
    assert container["image"] == kube_debug.DEFAULT_IMAGE
    assert {"name": "host-root", "mountPath": "/host"} in container["volumeMounts"]
    assert {"name": "host-root", "hostPath": {"path": "/"}} in spec["volumes"]
    assert spec["activeDeadlineSeconds"] == kube_debug.LIFETIME_S
    labels = pod["metadata"]["labels"]
    assert labels[kube_debug.LABEL_MANAGED] == "nccl-runbook"
    assert labels[kube_debug.LABEL_COMPONENT] == "node-debugger"
    assert labels[kube_debug.LABEL_RUN]
    kubernetes_validate.validate(pod, "1.32.0", strict=True)
    # probes ran in it, through nsenter into the node
    name = pod["metadata"]["name"]
    assert all(ns == "default" and p == name for ns, p, _ in kube_cluster.api.execs)
    assert kube_cluster.api.execs[0][2][:2] == ["nsenter", "--target"]
    assert (tmp_path / "bundle" / "hostname.txt").read_text().strip() == kube_cluster.host.name
    assert _deleted(kube_cluster) == [name] and _debug_pods(kube_cluster) == []
    _assert_rbac_within(kube_cluster, _shipped_role("nccl-runbook-node-debug",
                                                   "runbook-debug-rbac.yaml"))  # fmt: skip


def test_a_guided_run_through_a_debug_pod_ends_with_the_pod_deleted(
    kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    """API double: `runbook run` over kubectl-debug:// walks the runbook (its verdict names the
    node) and the pod is gone after it; the image came from --debug-image."""
    proc = _cli(
        kube_cluster, tmp_path, "run", "nccl-init-failure", "--target", f"kubectl-debug://{NODE}",
        "--nsenter", str(kube_cluster.nsenter_pid), "--no-input", "--format", "json",
        "--debug-image", "registry.example.org/tools/debug:1",
    )  # fmt: skip
    out, err = proc.communicate(timeout=180)
    assert proc.returncode in (0, 1), err
    verdict = json.loads(out)
    assert verdict["node"] == kube_cluster.host.name
    (created,) = _created(kube_cluster)
    assert created.body["spec"]["containers"][0]["image"] == "registry.example.org/tools/debug:1"
    assert _deleted(kube_cluster) == [created.body["metadata"]["name"]]
    assert _debug_pods(kube_cluster) == []


def test_a_debug_pod_the_walk_cannot_use_is_deleted_and_the_error_is_one_line(
    kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    """API double: the pod runs but nothing can be exec'd into the node (nsenter into a PID
    that does not exist): exit 3 with one line, and the pod deleted all the same."""
    proc = _cli(
        kube_cluster, tmp_path, "collect", "--target", f"kubectl-debug://{NODE}",
        "--nsenter", "4194303", "-o", str(tmp_path / "bundle"),
    )  # fmt: skip
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err
    assert "Traceback" not in err and f"kubectl-debug://{NODE}" in err
    (created,) = _created(kube_cluster)
    assert _deleted(kube_cluster) == [created.body["metadata"]["name"]]
    assert _debug_pods(kube_cluster) == []


def test_a_debug_pod_whose_image_cannot_be_pulled_is_reported_with_the_kubelets_reason(
    kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    """API double: the image is never pulled (ErrImagePull); the wait ends at its timeout with
    the kubelet's reason, exit 3, and the pod is deleted."""
    kube_cluster.api.unpullable.add("registry.example.org/missing:1")
    proc = _cli(
        kube_cluster, tmp_path, "collect", "--target", f"kubectl-debug://{NODE}",
        "-o", str(tmp_path / "bundle"), "--debug-image", "registry.example.org/missing:1",
        RUNBOOK_DEBUG_TIMEOUT="3",
    )  # fmt: skip
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err
    assert "ErrImagePull" in err and "did not run within 3s" in err
    assert len(_deleted(kube_cluster)) == 1 and _debug_pods(kube_cluster) == []


#: a probe of the walk's first burst that hangs on the node, so the run is stopped mid-walk
_HANG = "#!/bin/sh\n# test shim: an nvidia-smi that hangs\nexec sleep 300\n"


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_run_stopped_mid_walk_deletes_its_debug_pod_and_stops_its_probes_on_the_node(
    kube_cluster: KubeCluster, tmp_path: Path, signum: int, code: int
) -> None:
    """API double: ^C (SIGINT) or SIGTERM while a probe hangs in the debug pod: the command
    exits 128+N, the hung probe's process group on the node is stopped (an ended exec does not
    signal it: a second exec kills it), and the pod is deleted."""
    kube_cluster.host.write_shim("nvidia-smi", _HANG)
    proc = _cli(
        kube_cluster, tmp_path, "run", "nccl-init-failure", "--target", f"kubectl-debug://{NODE}",
        "--nsenter", str(kube_cluster.nsenter_pid), "--no-input",
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not kube_cluster.processes("sleep 300"):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the hanging probe never started"
            time.sleep(0.1)
        assert len(_debug_pods(kube_cluster)) == 1
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == code, err
    assert "Traceback" not in err
    assert _debug_pods(kube_cluster) == [] and len(_deleted(kube_cluster)) == 1
    assert kube_cluster.processes("sleep 300") == [], "the hung probe still runs on the node"


def test_a_debug_pod_left_by_a_killed_run_is_found_by_the_printed_clean_up_line(
    kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    """API double: SIGKILL runs no clean-up; the pod it leaves carries the labels the clean-up
    line selects, and that line (real kubectl) deletes it."""
    kube_cluster.host.write_shim("nvidia-smi", _HANG)
    proc = _cli(
        kube_cluster, tmp_path, "run", "nccl-init-failure", "--target", f"kubectl-debug://{NODE}",
        "--nsenter", str(kube_cluster.nsenter_pid), "--no-input",
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not kube_cluster.api.execs[1:]:
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    proc.kill()
    proc.communicate()
    assert len(_debug_pods(kube_cluster)) == 1
    line = kube_debug.cleanup_command()
    done = subprocess.run(line.split(), env=kube_cluster.env, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert _debug_pods(kube_cluster) == []
    kube_cluster.kill("sleep 300")
