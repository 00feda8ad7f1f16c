"""From a verdict's proposal to the exact Ansible run that would carry it out.

A *plan* is what the approver approves: the playbook, the inventory it runs on and every
variable, fixed when the proposal is queued and stored with it. Sizes are computed here from the
proposal's measured params (never a copied constant); a plan that cannot be made (no workload
manifest, a limit the guard refuses, a replayed bundle with no live node) is stored as the
reason instead, and such a proposal cannot be approved.

Here: the plan's types and what the kinds' plans share (the inventories, the workload patch's
variables, the playbook a remedy names). Each kind plans itself (runbook.remedies.kinds).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runbook.errors import RunbookError, UsageError


class PlanError(RunbookError):
    exit_code = 1


@dataclass(frozen=True)
class Target:
    """How the run reached the node, kept so a proposal can re-check it and Ansible reach it."""

    url: str
    identities: tuple[str, ...] = ()
    known_hosts: str | None = None
    jump: str | None = None
    connect_timeout: float = 10.0
    nsenter: int | None = None
    kubectl: str = "kubectl"
    kube_context: str | None = None
    #: the ssh config file the name was resolved with (None: the default one)
    ssh_config: str | None = None

    @property
    def scheme(self) -> str:
        return self.url.split("://", 1)[0] if "://" in self.url else self.url

    @property
    def live(self) -> bool:
        return self.scheme != "replay"

    def as_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "identities": list(self.identities),
            "known_hosts": self.known_hosts,
            "jump": self.jump,
            "connect_timeout": self.connect_timeout,
            "nsenter": self.nsenter,
            "kubectl": self.kubectl,
            "kube_context": self.kube_context,
            "ssh_config": self.ssh_config,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Target:
        return cls(
            url=str(data["url"]),
            identities=tuple(data.get("identities") or ()),
            known_hosts=data.get("known_hosts"),
            jump=data.get("jump"),
            connect_timeout=float(data.get("connect_timeout") or 10.0),
            nsenter=data.get("nsenter"),
            kubectl=str(data.get("kubectl") or "kubectl"),
            kube_context=data.get("kube_context"),
            ssh_config=data.get("ssh_config"),
        )


@dataclass(frozen=True)
class Plan:
    playbook: str
    inventory: dict[str, Any]
    extravars: dict[str, Any]
    describe: tuple[str, ...] = ()
    limit: str | None = None
    #: node-drain: the guard is evaluated again, live, just before the check run
    guard: dict[str, Any] = field(default_factory=dict)
    #: files the plan was computed from, with their sha256: changed since → the plan is stale
    sources: dict[str, str] = field(default_factory=dict)
    #: where the playbook runs, said for the approver: `gpu-node-01 = root@10.0.0.5:24510
    #: via root@10.0.0.9:22`, or this machine (runs_on_node, runs_here)
    runs_on: str = ""
    #: the kubectl the run reached the node with (`--kubectl`), when not the one on PATH:
    #: Ansible's kubectl connection runs it too (node_kubectl)
    kubectl: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "playbook": self.playbook,
            "inventory": self.inventory,
            "extravars": self.extravars,
            "describe": list(self.describe),
            "limit": self.limit,
            "guard": self.guard,
            "sources": self.sources,
            "runs_on": self.runs_on,
            # only when the run named one: a plan over ssh says nothing of kubectl
            **({"kubectl": self.kubectl} if self.kubectl else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Plan:
        return cls(
            playbook=str(data["playbook"]),
            inventory=dict(data.get("inventory") or {}),
            extravars=dict(data.get("extravars") or {}),
            describe=tuple(data.get("describe") or ()),
            limit=data.get("limit"),
            guard=dict(data.get("guard") or {}),
            sources=dict(data.get("sources") or {}),
            runs_on=str(data.get("runs_on") or ""),
            kubectl=data.get("kubectl") or None,
        )


@dataclass(frozen=True)
class PlanContext:
    node: str
    target: Target | None
    variables: Mapping[str, Any]
    work_dir: Path  # this proposal's directory (outputs, Ansible artifacts)
    root_cause: str | None = None
    kubeconfig: str | None = None
    kube_context: str | None = None
    drain_max_cordoned: int = 1
    drain_max_fraction: float = 0.1
    drain_pool_selector: str = "nvidia.com/gpu.present=true"


def localhost_inventory() -> dict[str, Any]:
    """The controller itself: where a workload patch or a drain runs."""
    # the interpreter running ansible-playbook is this one (its bin dir leads PATH), named as a
    # path: every inventory value is handed to Ansible as text, never as a template
    return {
        "all": {
            "hosts": {
                "localhost": {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": sys.executable,
                }
            }
        }
    }


#: what a plan on localhost_inventory() says of where it runs
RUNS_HERE = "this machine (localhost): the change goes through kubectl or the manifest file"


def node_plan(name: str, target: Target) -> tuple[dict[str, Any], str]:
    """The one-host inventory for the node the run was on, and where it runs said for the
    approver, from one resolution of the target (node_inventory, runs_on_node)."""
    if target.scheme == "ssh":
        from runbook.remedies import reach

        reached = reach.resolve(target)
        return _inventory_of(name, reach.ansible_host_vars(reached)), reached.describe()
    return node_inventory(name, target), runs_on_node(name, target)


def node_kubectl(target: Target) -> str | None:
    """The kubectl a plan on node_inventory(…, target) must run when the run used another
    than the one on PATH (`--kubectl`): kubernetes.core's kubectl connection takes no path of
    its own, it runs the `kubectl` its PATH finds (run_playbook puts this one there)."""
    if target.scheme == "kubectl" and target.kubectl and target.kubectl != "kubectl":
        return target.kubectl
    return None


def runs_on_node(name: str, target: Target) -> str:
    """Where node_inventory(name, target) runs, for the approver: the node's name and the
    address it resolves to (user@host:port, the jump hosts)."""
    scheme = target.scheme
    if scheme == "ssh":
        from runbook.remedies import reach

        return reach.resolve(target).describe()
    if scheme == "local":
        return f"{name} = this machine (local)"
    if scheme == "kubectl":
        context = f", context {target.kube_context}" if target.kube_context else ""
        program = node_kubectl(target) or "kubectl"
        return f"{name} = {target.url} ({program} exec{context})"
    return f"{name} = {target.url}"


def inventory_hosts(inventory: Mapping[str, Any]) -> str:
    """Where an inventory's hosts are, said plainly (for a plan stored before runs_on)."""
    hosts = ((inventory.get("all") or {}).get("hosts") or {}) if inventory else {}
    said = []
    for name, hostvars in hosts.items():
        hostvars = hostvars or {}
        if hostvars.get("ansible_connection") == "local":
            said.append(f"{name} = this machine (local)")
        elif hostvars.get("ansible_connection") == "kubernetes.core.kubectl":
            said.append(f"{name} = kubectl://{hostvars.get('ansible_kubectl_namespace')}/"
                        f"{hostvars.get('ansible_kubectl_pod')}")
        else:
            said.append(f"{name} = {hostvars.get('ansible_user', '?')}@"
                        f"{hostvars.get('ansible_host', name)}:{hostvars.get('ansible_port', 22)}")
    return "; ".join(said) or "no host"


def node_inventory(name: str, target: Target) -> dict[str, Any]:
    """The one-host inventory for the node the run was on, verifying its host key as the run
    did (the same known_hosts, never accepting an unknown key) and without agent forwarding."""
    scheme = target.scheme
    host: dict[str, Any]
    if scheme == "local":
        host = {"ansible_connection": "local"}
    elif scheme == "ssh":
        from runbook.remedies import reach

        # resolved as the run resolved it, every setting handed to ssh (runbook/remedies/reach.py)
        host = reach.ansible_host_vars(reach.resolve(target))
    elif scheme == "kubectl":
        from runbook.targets import agent_node
        from runbook.transports.nsenter import parse_kubectl_target

        rest = target.url.split("://", 1)[1]
        node = agent_node(rest)
        if node is not None:  # kubectl://node/NAME: the agent pod on that node now
            from runbook.transports.kube_agent import AGENT_NAMESPACE, find_agent

            namespace = AGENT_NAMESPACE
            pod = find_agent(node, kubectl=target.kubectl or "kubectl",
                             context=target.kube_context)  # fmt: skip
        else:
            namespace, pod = parse_kubectl_target(rest)
        host = {
            "ansible_connection": "kubernetes.core.kubectl",
            "ansible_kubectl_namespace": namespace,
            "ansible_kubectl_pod": pod,
        }
        if target.kube_context:
            host["ansible_kubectl_context"] = target.kube_context
    elif scheme == "kubectl-debug":
        raise PlanError(
            f"{target.url}: the run's debug pod was deleted when it ended; run the approved "
            "plan through the node agent (kubectl://node/NAME) or ssh:// to the node"
        )
    else:
        raise PlanError(f"no live node to run on ({target.url}): re-run against the node itself")
    return _inventory_of(name, host)


def _inventory_of(name: str, host: dict[str, Any]) -> dict[str, Any]:
    host.setdefault("ansible_python_interpreter", "/usr/bin/python3")
    key = inventory_name(name)
    if key != name:
        host["runbook_node"] = name  # the node as typed, for what the play reports back
    return {"all": {"hosts": {key: host}}}


def inventory_name(name: str) -> str:
    """The node's name as an inventory host: Ansible reads `host:port` there as an address
    and port (the play would call the node `10.0.0.5`, dropping the port that tells two
    nodes apart), so a `:` or brackets become `_`."""
    return re.sub(r"[:\[\]]", "_", name).strip("_") if re.search(r"[:\[\]]", name) else name


def node_names(inventory: Mapping[str, Any]) -> dict[str, str]:
    """Inventory host → the node as typed (runbook_node), for a play's per-host results."""
    hosts = ((inventory.get("all") or {}).get("hosts") or {}) if inventory else {}
    return {str(k): str((v or {}).get("runbook_node") or k) for k, v in hosts.items()}


def measured(params: Mapping[str, Any], key: str, what: str) -> float:
    """A positive number the proposal's params carry; PlanError naming `what` otherwise."""
    value = params.get(key)
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise PlanError(f"{what} was not measured ({key}={value!r})") from None
    if number <= 0:
        raise PlanError(f"{what} was not measured ({key}={value!r})")
    return number


def workload_manifest(ctx: PlanContext) -> tuple[Path, dict[str, Any]]:
    """The workload manifest `--var manifest=PATH` names, and its document to patch."""
    ref = ctx.variables.get("manifest")
    if not ref:
        raise PlanError(
            "needs the workload's manifest to patch: re-run with --var manifest=PATH "
            "(a Job, Deployment, StatefulSet, PyTorchJob or TFJob file in its Git checkout)"
        )
    path = Path(str(ref)).expanduser().resolve()
    from runbook.remedies import workload

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlanError(f"manifest {path}: {exc.strerror or exc}") from exc
    return path, workload.select_document(
        text,
        kind=ctx.variables.get("workload_kind") or None,
        name=ctx.variables.get("workload_name") or None,
    )


def file_digest(path: Path) -> str:
    import hashlib

    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return "missing"


def manifest_sources(ctx: PlanContext, path: Path) -> dict[str, str]:
    """The manifest and where the patch is written, with their digests (a plan's `sources`)."""
    dest = Path(str(ctx.variables.get("manifest_dest") or path)).expanduser().resolve()
    return {str(p): file_digest(p) for p in {path, dest}}


def workload_vars(ctx: PlanContext, path: Path, patch: Any) -> dict[str, Any]:
    """The workload_patch role's variables for `patch` of the manifest at `path`."""
    apply = str(ctx.variables.get("apply") or "file")
    if apply not in ("none", "file", "cluster"):
        raise UsageError(f"--var apply={apply!r}: expected none, file or cluster")
    if apply == "cluster" and patch.target.kind == "Job":
        raise PlanError(
            "a Job's pod template is immutable in the cluster: patch its manifest "
            "(--var apply=file) and re-create the Job"
        )
    import yaml

    from runbook.remedies import workload
    from runbook.remedies.kubectl import render_patch
    from runbook.remedies.manifest_edit import minimal_edit

    original = path.read_text(encoding="utf-8")
    # the real kubectl decides what the patch does; the file keeps its own layout
    rendered = render_patch(path, patch)
    if apply == "cluster":  # the one object, not the file's other documents
        content = yaml.safe_dump(
            workload.select_document(rendered, kind=patch.target.kind, name=patch.target.name),
            sort_keys=False,
        )
    else:
        content = minimal_edit(original, rendered)
    extravars: dict[str, Any] = {
        "workload_patch_manifest": str(path),
        "workload_patch_content": content,
        "workload_patch_patch": json.dumps(patch.body, separators=(",", ":")),
        "workload_patch_type": patch.type,
        "workload_patch_kustomize": patch.kustomize,
        "workload_patch_output_dir": str(ctx.work_dir / "patch"),
        "workload_patch_apply": apply,
        "workload_patch_dest": str(ctx.variables.get("manifest_dest") or path),
    }
    if str(ctx.variables.get("git_commit") or "").lower() in ("1", "true", "yes"):
        extravars["workload_patch_git_commit"] = True
        extravars["workload_patch_commit_message"] = (
            f"runbook: {patch.summary[0] if patch.summary else 'patch workload'}"
        )
    if apply == "cluster":
        if ctx.kubeconfig:
            extravars["workload_patch_kubeconfig"] = ctx.kubeconfig
        if ctx.kube_context:
            extravars["workload_patch_context"] = ctx.kube_context
    return extravars


_PLAYBOOK_NAME = re.compile(r"^[A-Za-z0-9][\w.-]{0,100}\.ya?ml$")


def playbook_named(proposal: Mapping[str, Any], default: str) -> str:
    """The playbook the runbook's remedy names (`playbook:`), so what the runbook says is what
    runs; its kind's own playbook when it names none. A name that is not a plain file name
    under playbooks/ is refused (run_playbook then also checks the file exists)."""
    name = proposal.get("playbook")
    if name in (None, ""):
        return default
    if not isinstance(name, str) or not _PLAYBOOK_NAME.match(name):
        raise PlanError(f"playbook {name!r} is not a file name under playbooks/")
    return name
