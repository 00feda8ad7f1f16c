"""`kubectl://node/NAME`: the node agent (examples/kubernetes/node-agent.yaml) running on node
NAME, found by its label selector and the node's name (`--field-selector spec.nodeName=NAME`),
so a person names the node, not the DaemonSet's generated pod name."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from runbook.errors import UnreachableError, UsageError
from runbook.transports.address import HOST_RULE, is_host

#: where the shipped node agent runs, and the label its pods carry
AGENT_NAMESPACE = "kube-system"
AGENT_SELECTOR = "app=node-agent"


def running(pod: Mapping[str, Any]) -> bool:
    """Running, not being deleted, and every container ready."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running" or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    statuses = status.get("containerStatuses") or []
    return all(bool(c.get("ready")) for c in statuses) if statuses else True


def agent_pod(pods: Any, node: str, *, namespace: str, selector: str) -> str:
    """Pure: the newest running agent pod of a `kubectl get pods -o json` answer that is on
    `node`; UnreachableError saying why there is none."""
    items = pods.get("items") if isinstance(pods, Mapping) else None
    if not isinstance(items, list):
        raise UnreachableError(f"kubectl get pods: expected a List with items, for node {node}")
    here = [
        p for p in items
        if isinstance(p, Mapping) and (p.get("spec") or {}).get("nodeName") == node
    ]  # fmt: skip
    ready = sorted(
        (p for p in here if running(p)),
        key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or ""),
        reverse=True,
    )
    if ready:
        return str(ready[0]["metadata"]["name"])
    if here:
        pod = here[0]
        phase = (pod.get("status") or {}).get("phase") or "unknown"
        raise UnreachableError(
            f"kubectl://node/{node}: node-agent pod {namespace}/{pod['metadata']['name']} is "
            f"not running and ready (phase {phase})"
        )
    raise UnreachableError(
        f"kubectl://node/{node}: no node-agent pod ({selector} in {namespace}) on this node; "
        "install it (examples/kubernetes/node-agent.yaml) or use kubectl-debug://" + node
    )


def lookup_argv(
    node: str, *, namespace: str, selector: str, kubectl: str = "kubectl",
    context: str | None = None,
) -> list[str]:  # fmt: skip
    """`kubectl get pods -n NS -l SELECTOR --field-selector spec.nodeName=NODE -o json`."""
    if not is_host(node):
        raise UsageError(f"kubectl://node/{node[:120]!r}: the node name is not {HOST_RULE}")
    return [
        kubectl, *(["--context", context] if context else []),
        "get", "pods", "-n", namespace, "-l", selector,
        "--field-selector", f"spec.nodeName={node}", "-o", "json",
    ]  # fmt: skip


def find_agent(
    node: str,
    *,
    namespace: str = AGENT_NAMESPACE,
    selector: str = AGENT_SELECTOR,
    kubectl: str = "kubectl",
    context: str | None = None,
    timeout: float = 30.0,
) -> str:
    """The name of the running agent pod on `node` (one API request)."""
    argv = lookup_argv(node, namespace=namespace, selector=selector, kubectl=kubectl,
                       context=context)  # fmt: skip
    return agent_pod(_get_json(argv, timeout), node, namespace=namespace, selector=selector)


def _get_json(argv: Sequence[str], timeout: float) -> Any:
    try:
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout,
            stdin=subprocess.DEVNULL, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise UnreachableError(f"{shown(argv)}: no answer within {timeout:g}s") from None
    except OSError as exc:
        raise UnreachableError(f"cannot run {argv[0]}: {exc.strerror or exc}") from None
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        raise UnreachableError(
            f"{shown(argv)}: {lines[-1].strip() if lines else f'exit {proc.returncode}'}"
        )
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        raise UnreachableError(f"{shown(argv)}: not JSON: {exc}") from None


def shown(argv: Sequence[str]) -> str:
    """A kubectl command as an error names it: its verb and object (`kubectl get pods`)."""
    at = next((i for i, w in enumerate(argv) if w in ("get", "create", "delete")), None)
    return "kubectl" if at is None else "kubectl " + " ".join(argv[at : at + 2])
