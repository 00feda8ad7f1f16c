"""The Kubernetes targets' pure parts: target parsing, the debug pod's spec and name, its
settings' precedence, the clean-up line, the agent pod chosen on a node."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from runbook.errors import UnreachableError, UsageError
from runbook.targets import agent_node, open_target, scheme_of
from runbook.transports import kube_debug
from runbook.transports.kube_agent import agent_pod, lookup_argv

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def test_the_kubernetes_target_forms_are_told_apart() -> None:
    assert scheme_of("kubectl-debug://gpu-node-07") == "kubectl-debug"
    assert scheme_of("kubectl://node/gpu-node-07") == "kubectl"
    assert agent_node("node/gpu-node-07") == "gpu-node-07"
    assert agent_node("kube-system/node-agent-x") is None
    assert agent_node("node/") is None


BAD_TARGETS = ["kubectl-debug://", "kubectl-debug://a/b", "kubectl-debug://gpu;rm",
               "kubectl://node/gpu$(id)"]  # fmt: skip


@pytest.mark.parametrize("target", BAD_TARGETS)
def test_a_malformed_kubernetes_node_target_is_a_usage_error(target: str) -> None:
    with pytest.raises(UsageError):
        open_target(target)


@pytest.mark.parametrize("node", ["gpu-node-07", "GPU_Node.07.example.org", "x" * 200])
def test_a_debug_pods_name_is_a_dns_label_whatever_the_node_is_called(node: str) -> None:
    name = kube_debug.pod_name(node, "a1b2c3")
    assert _DNS_LABEL.fullmatch(name) and name.endswith("-a1b2c3")


def test_the_debug_pod_is_the_sysadmin_profiles_pod_bound_to_the_node() -> None:
    pod = kube_debug.debug_pod("gpu-node-07", name="p", namespace="ops", image="img:1", run="r1")
    spec = pod["spec"]
    assert (spec["nodeName"], spec["hostPID"], spec["hostNetwork"], spec["hostIPC"]) == (
        "gpu-node-07", True, True, True,
    )  # fmt: skip
    assert spec["containers"][0]["securityContext"] == {"privileged": True}
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert pod["metadata"]["labels"][kube_debug.LABEL_RUN] == "r1"
    assert pod["metadata"]["namespace"] == "ops"


def test_the_clean_up_line_selects_the_debug_pods_by_their_labels() -> None:
    line = kube_debug.cleanup_command(run="r1", context="prod")
    assert line.startswith("kubectl --context prod delete pods --all-namespaces -l ")
    assert "app.kubernetes.io/managed-by=nccl-runbook" in line and "runbook/run-id=r1" in line


def test_the_debug_image_comes_from_the_flag_then_the_environment_then_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("kubernetes:\n  debug_image: mirror.example.org/debian:12\n"
                      "  debug_namespace: ops\n  debug_timeout: 30\n")  # fmt: skip
    monkeypatch.setenv("RUNBOOK_CONFIG", str(config))
    for name in ("RUNBOOK_DEBUG_IMAGE", "RUNBOOK_DEBUG_NAMESPACE", "RUNBOOK_DEBUG_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    assert kube_debug.settings() == kube_debug.DebugSettings("mirror.example.org/debian:12",
                                                             "ops", 30.0)  # fmt: skip
    monkeypatch.setenv("RUNBOOK_DEBUG_IMAGE", "env.example.org/tools:1")
    assert kube_debug.settings().image == "env.example.org/tools:1"
    assert kube_debug.settings("flag.example.org/x:2").image == "flag.example.org/x:2"
    config.unlink()
    monkeypatch.delenv("RUNBOOK_DEBUG_IMAGE")
    assert kube_debug.settings() == kube_debug.DebugSettings()
    monkeypatch.setenv("RUNBOOK_DEBUG_TIMEOUT", "soon")
    with pytest.raises(UsageError):
        kube_debug.settings()


def _pod(name: str, node: str, phase: str = "Running", created: str = "2026-01-01T00:00:00Z",
         ready: bool = True) -> dict[str, object]:  # fmt: skip
    return {
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {"nodeName": node},
        "status": {"phase": phase, "containerStatuses": [{"ready": ready}]},
    }


def test_the_agent_on_a_node_is_its_newest_running_ready_pod() -> None:
    pods = {"items": [
        _pod("old", "n1", created="2026-01-01T00:00:00Z"),
        _pod("new", "n1", created="2026-02-01T00:00:00Z"),
        _pod("unready", "n1", created="2026-03-01T00:00:00Z", ready=False),
        _pod("elsewhere", "n2", created="2026-04-01T00:00:00Z"),
    ]}  # fmt: skip
    assert agent_pod(pods, "n1", namespace="kube-system", selector="app=node-agent") == "new"
    with pytest.raises(UnreachableError, match="not running and ready"):
        agent_pod({"items": [_pod("p", "n3", "Pending")]}, "n3", namespace="k", selector="s")
    with pytest.raises(UnreachableError, match="kubectl-debug://n4"):
        agent_pod({"items": []}, "n4", namespace="k", selector="s")


def test_the_agent_lookup_asks_by_label_and_node_name() -> None:
    argv = lookup_argv("n1", namespace="kube-system", selector="app=node-agent", context="c")
    assert argv == [
        "kubectl", "--context", "c", "get", "pods", "-n", "kube-system", "-l", "app=node-agent",
        "--field-selector", "spec.nodeName=n1", "-o", "json",
    ]  # fmt: skip
