"""`kubectl exec` (the real kubectl 1.32 binary) against the API double's pods/exec stream: the
API is a recorded double (no API server can run here); what runs in the pod runs on a real SSH
test host standing for its node."""

from __future__ import annotations

import subprocess
import time

from tests.k8s import resources
from tests.k8s.nodes import KubeCluster
from tests.k8s.nodes import kube_cluster as kube_cluster


def _kubectl(cluster: KubeCluster, *args: str, input: str | None = None,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run(
        ["kubectl", *args], env={**cluster.env, **(env or {})}, capture_output=True, text=True,
        input=input, timeout=60,
    )  # fmt: skip


def test_kubectl_exec_runs_the_command_on_the_node_with_its_input_streams_and_exit_code(
    kube_cluster: KubeCluster,
) -> None:
    """API double: a WebSocket (v5.channel.k8s.io) exec; stdin reaches the command, stdout and
    stderr come back apart, and the exit code is kubectl's."""
    done = _kubectl(
        kube_cluster, "exec", "-i", "-n", "kube-system", kube_cluster.agent, "--",
        "/bin/sh", "-c", "read line; echo \"out:$line:$(hostname)\"; echo err >&2; exit 3",
        input="hello\n",
    )  # fmt: skip
    assert done.stdout == f"out:hello:{kube_cluster.host.name}\n"
    assert "err\n" in done.stderr
    assert done.returncode == 3, done.stderr
    (request,) = kube_cluster.exec_requests()
    assert request.status == 101 and request.user_agent.startswith("kubectl/v1.32.")
    # a v1.32 server authorizes a WebSocket exec as create (a GET before v1.31: get)
    assert request.verbs == ("create",) and request.namespace == "kube-system"


def test_kubectl_told_to_use_spdy_runs_the_command_over_spdy_3_1(
    kube_cluster: KubeCluster,
) -> None:
    """API double: with KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false kubectl asks for SPDY/3.1 only
    (a POST upgrade, v4.channel.k8s.io): the same input, streams and exit code."""
    done = _kubectl(
        kube_cluster, "exec", "-i", "-n", "kube-system", kube_cluster.agent, "--",
        "/bin/sh", "-c", "read line; echo \"out:$line:$(hostname)\"; echo err >&2; exit 4",
        input="spdy\n", env={"KUBECTL_REMOTE_COMMAND_WEBSOCKETS": "false"},
    )  # fmt: skip
    assert done.stdout == f"out:spdy:{kube_cluster.host.name}\n"
    assert "err\n" in done.stderr and done.returncode == 4, done.stderr
    (request,) = kube_cluster.exec_requests()
    assert (request.method, request.status, request.verbs) == ("POST", 101, ("create",))


def test_kubectl_falls_back_to_spdy_when_the_server_refuses_its_websocket_protocol(
    kube_cluster: KubeCluster,
) -> None:
    """API double, answering as a v1.29 server (WebSocket v4.channel.k8s.io only): kubectl
    1.32 offers v5 alone, is refused (400), and runs the command over SPDY instead."""
    kube_cluster.api.websocket_protocols = ("v4.channel.k8s.io",)
    done = _kubectl(
        kube_cluster, "exec", "-n", "kube-system", kube_cluster.agent, "--", "hostname",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{kube_cluster.host.name}\n"
    requests = kube_cluster.exec_requests()
    assert [(r.method, r.status) for r in requests] == [("GET", 400), ("POST", 101)]


def test_kubectl_attach_stays_attached_until_the_pod_is_deleted(
    kube_cluster: KubeCluster,
) -> None:
    """API double: pods/attach over WebSocket to a container that writes nothing (the agent's
    wait): kubectl stays attached, and ends when the pod goes away; RBAC sees the upgrade
    on pods/attach as a v1.32 server authorizes it: create."""
    attach = subprocess.Popen(
        ["kubectl", "attach", "-n", "kube-system", kube_cluster.agent, "-c", "agent"],
        env=kube_cluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not [r for r in kube_cluster.api.requests if r.resource == "pods/attach"]:
            assert attach.poll() is None and time.monotonic() < deadline, attach.communicate()
            time.sleep(0.05)
        time.sleep(0.5)
        assert attach.poll() is None, "kubectl attach ended while the pod ran"
        kube_cluster.api.state.delete(
            resources.BY_KIND["Pod"], "kube-system", kube_cluster.agent, {}, False
        )
        attach.communicate(timeout=30)
    finally:
        if attach.poll() is None:
            attach.kill()
            attach.communicate()
    (request,) = [r for r in kube_cluster.api.requests if r.resource == "pods/attach"]
    assert request.status == 101 and request.verbs == ("create",)
