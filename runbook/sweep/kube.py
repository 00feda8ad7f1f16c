"""Hosts from Kubernetes: the GPU nodes a label selector picks, each reached through the
privileged node-agent pod running on it (`kubectl://NAMESPACE/POD`, nsenter into the node's
PID 1 implied, as for `runbook run`).

Two reads, whatever the fleet's size: `kubectl get nodes -l SELECTOR -o json` and
`kubectl get pods -n NAMESPACE -l AGENT_SELECTOR -o json`, joined on the pod's
`spec.nodeName` — the same answer as one `--field-selector spec.nodeName=NODE` query per node,
without a thousand API calls for a thousand nodes. A node without a running agent pod is a
result (`unreachable`, with the reason), not a hole in the report.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from runbook.sweep.inventory import HostEntry, InventoryError
from runbook.transports.address import HOST_RULE, is_host


def _items(data: Any, what: str) -> list[Mapping[str, Any]]:
    items = data.get("items") if isinstance(data, Mapping) else None
    if not isinstance(items, list):
        raise InventoryError(f"kubectl get {what}: expected a List with items")
    return [i for i in items if isinstance(i, Mapping)]


def _running(pod: Mapping[str, Any]) -> bool:
    from runbook.transports.kube_agent import running

    return running(pod)


def join_nodes_and_agents(
    nodes: Any,
    pods: Any,
    *,
    namespace: str,
    agent_selector: str,
    container: str | None = None,
    context: str | None = None,
    debug: bool = False,
) -> list[HostEntry]:
    """Pure: one entry per selected node, sorted by name; its target is the newest running
    agent pod on it, else the entry carries why there is none. `debug`: every node is reached
    through a debug pod made for it (`kubectl-debug://NODE`), `pods` are not looked at."""
    by_node: dict[str, list[Mapping[str, Any]]] = {}
    for pod in _items(pods, "pods"):
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            by_node.setdefault(str(node), []).append(pod)
    entries = []
    for node in sorted(
        _items(nodes, "nodes"), key=lambda n: str((n.get("metadata") or {}).get("name"))
    ):
        name = str((node.get("metadata") or {}).get("name") or "")
        if not name:
            continue
        if not is_host(name):
            # the API's answer names the node: the one host-name check every source passes
            # (a name reaches reports, proposals and, through an inventory, an ssh config)
            entries.append(HostEntry(
                name[:120], f"kubectl://{namespace}/-",
                problem=f"node name {name[:120]!r} is not {HOST_RULE}", problem_status="error",
            ))  # fmt: skip
            continue
        candidates = by_node.get(name, [])
        running = sorted(
            (p for p in candidates if _running(p)),
            key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or ""),
            reverse=True,
        )
        labels = (node.get("metadata") or {}).get("labels") or {}
        pool = labels.get("nvidia.com/gpu.product") or labels.get(
            "node.kubernetes.io/instance-type"
        )
        groups = (str(pool),) if pool else ()
        if debug:
            entries.append(
                HostEntry(name, f"kubectl-debug://{name}", groups=groups, kube_context=context)
            )
            continue
        if running:
            pod_name = str(running[0]["metadata"]["name"])
            entries.append(
                HostEntry(
                    name,
                    f"kubectl://{namespace}/{pod_name}",
                    groups=groups,
                    container=container,
                    kube_context=context,
                )
            )
            continue
        if candidates:
            pod = candidates[0]
            phase = (pod.get("status") or {}).get("phase") or "unknown"
            why = (
                f"node-agent pod {namespace}/{pod['metadata']['name']} is not running and "
                f"ready (phase {phase})"
            )
        else:
            why = f"no node-agent pod ({agent_selector} in {namespace}) on this node"
        entries.append(
            HostEntry(
                name,
                f"kubectl://{namespace}/-",
                groups=groups,
                problem=why,
                problem_status="unreachable",
            )
        )
    return entries


def _kubectl_json(argv: Sequence[str], what: str, timeout: float) -> Any:
    try:
        proc = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise InventoryError(f"kubectl get {what}: no answer within {timeout:g}s") from None
    except OSError as exc:
        raise InventoryError(f"cannot run {argv[0]}: {exc.strerror or exc}") from None
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        why = lines[-1].strip() if lines else f"exit {proc.returncode}"
        raise InventoryError(f"kubectl get {what}: {why}")
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        raise InventoryError(f"kubectl get {what}: not JSON: {exc}") from None


def kube_entries(
    selector: str,
    *,
    namespace: str = "kube-system",
    agent_selector: str = "app=node-agent",
    container: str | None = None,
    kubectl: str = "kubectl",
    context: str | None = None,
    timeout: float = 60.0,
    debug: bool = False,
) -> list[HostEntry]:
    """The GPU nodes matching `selector`, each with its node-agent pod (`debug`: each through
    a debug pod of its own, kubectl-debug://NODE; the agents are not read)."""
    base = [kubectl, *(["--context", context] if context else [])]
    nodes = _kubectl_json([*base, "get", "nodes", "-l", selector, "-o", "json"], "nodes", timeout)
    pods = (
        {"items": []}
        if debug
        else _kubectl_json(
            [*base, "get", "pods", "-n", namespace, "-l", agent_selector, "-o", "json"],
            "pods",
            timeout,
        )
    )
    entries = join_nodes_and_agents(
        nodes,
        pods,
        namespace=namespace,
        agent_selector=agent_selector,
        container=container,
        context=context,
        debug=debug,
    )
    if not entries:
        raise InventoryError(f"no nodes match the label selector {selector!r}")
    return entries


def kubectl_json(argv: Sequence[str], what: str, *, timeout: float = 60.0) -> Any:
    """`kubectl … -o json`, parsed, as the sweep reads nodes and agent pods: an InventoryError
    with kubectl's last stderr line when it fails, hangs past `timeout` or prints no JSON.
    Public for the job resolver (runbook/job/resolve_kube.py), which reads the job's pods and
    the agent pods the same way."""
    return _kubectl_json(argv, what, timeout)
