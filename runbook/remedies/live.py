"""The I/O an approval needs before it may run: a read-only re-check of the node, and the
blast-radius guard of a kind that takes the node out (node-drain), read from the live cluster."""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from runbook.errors import RunbookError
from runbook.remedies import kinds, plans
from runbook.remedies.store import QueuedProposal
from runbook.verdict import Verdict


def recheck(proposal: QueuedProposal) -> Verdict | None:
    """Walk the proposal's runbook again, read-only, on the node it came from; the verdict
    (None when the proposal names no target or runbook to walk)."""
    from runbook.executor import NullObserver, execute
    from runbook.rundir import RunDirectory
    from runbook.spec import load_file, resolve
    from runbook.targets import TargetOptions, open_target

    if not proposal.target or not proposal.runbook:
        return None
    target = plans.Target.from_dict(proposal.target)
    runbook = load_file(resolve(proposal.runbook))
    options = TargetOptions(
        identities=tuple(Path(p) for p in target.identities),
        known_hosts=Path(target.known_hosts) if target.known_hosts else None,
        jump=target.jump,
        connect_timeout=target.connect_timeout,
        nsenter=target.nsenter,
        kubectl=target.kubectl,
        kube_context=target.kube_context,
        ssh_config=target.ssh_config,
    )
    transport = open_target(target.url, options)
    directory = RunDirectory(Path(tempfile.mkdtemp(prefix="runbook-recheck-")))
    try:
        result = execute(
            runbook,
            transport,
            variables=dict(proposal.vars),
            observer=NullObserver(),
            run_dir=directory,
            node=proposal.node,
        )
    finally:
        directory.close()
        transport.close()
    return result.verdict


def kubectl_nodes(
    selector: str, *, kubeconfig: str | None, context: str | None, timeout: float = 30.0
) -> list[dict[str, Any]]:
    argv = ["kubectl", "get", "nodes", "-l", selector, "-o", "json"]
    if kubeconfig:
        argv += ["--kubeconfig", kubeconfig]
    if context:
        argv += ["--context", context]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RunbookError(f"kubectl get nodes: {exc}") from exc
    if done.returncode != 0:
        first = (done.stderr.strip().splitlines() or ["failed"])[0]
        raise RunbookError(f"kubectl get nodes: {first}")
    items = json.loads(done.stdout).get("items") or []
    return [i for i in items if isinstance(i, dict)]


def drain_guard(proposal: QueuedProposal, plan: plans.Plan) -> tuple[bool, str]:
    """The blast-radius guard on the pool as it is now (kinds that take the node out only)."""
    if not kinds.takes_node_out(proposal.kind):
        return True, "not a drain"
    from runbook.remedies import guards

    guard = plan.guard
    nodes = kubectl_nodes(
        str(guard["pool_selector"]),
        kubeconfig=plan.extravars.get("node_drain_kubeconfig"),
        context=plan.extravars.get("node_drain_context"),
    )
    verdict = guards.drain_guard(
        nodes,
        str(guard["node"]),
        max_cordoned=int(guard["max_cordoned"]),
        max_fraction=float(guard["max_fraction"]),
        pool_selector=str(guard["pool_selector"]),
    )
    return verdict.allowed, verdict.reason
