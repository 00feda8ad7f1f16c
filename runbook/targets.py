"""`--target` strings to transports: `local`, `ssh://[user@]host[:port]`, `kubectl://NS/POD`,
`kubectl://node/NAME` (the node agent on node NAME), `kubectl-debug://NODE` (a debug pod made
for the run on NODE, deleted after it), `replay://BUNDLE`; `--nsenter[=PID]` wraps ssh and local
(it sets the PID the kubectl targets enter). An ssh host may be a name from the
user's ssh config (transports/ssh_config.py), as with `ssh NAME`."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from runbook.errors import UsageError
from runbook.transports.base import Transport

# each transport is imported when its scheme is used: the SSH one brings paramiko and the
# cryptography library (~90 ms of a command's start), which a replay or a local run never needs


@dataclass(frozen=True)
class TargetOptions:
    identities: tuple[Path, ...] = ()
    known_hosts: Path | None = None
    accept_new_host_keys: bool = False
    jump: str | None = None
    #: seconds to connect; None: the ssh config's ConnectTimeout, else 10
    connect_timeout: float | None = None
    #: ssh config file (`none`: none); None: $RUNBOOK_SSH_CONFIG, else ~/.ssh/config if any
    ssh_config: str | None = None
    nsenter: int | None = None
    kubectl: str = "kubectl"
    kube_context: str | None = None
    container: str | None = None
    #: where `kubectl://node/NAME` looks for the node agent
    agent_namespace: str = "kube-system"
    agent_selector: str = "app=node-agent"
    #: `kubectl-debug://`: image and namespace of the debug pod (None: the configured or
    #: default ones, transports/kube_debug.py), seconds to wait for it to run
    debug_image: str | None = None
    debug_namespace: str | None = None
    debug_timeout: float | None = None
    extra: dict[str, str] = field(default_factory=dict)


def config_path(given: str | None) -> str | None:
    """The ssh config file to read: the one given, else $RUNBOOK_SSH_CONFIG, else None
    (~/.ssh/config when it exists)."""
    return given or os.environ.get("RUNBOOK_SSH_CONFIG") or None


def effective_config_path(given: str | None) -> str:
    """The ssh config file a name is resolved with, as `ssh -F` takes it: an absolute path, or
    `none` when no file applies (the default ~/.ssh/config, $HOME's, absent). What a run and
    a proposal record, to be read again later from anywhere (another shell, another $HOME)."""
    path = config_path(given)
    if path is not None and path.lower() == "none":
        return "none"
    if path is None:
        from runbook.transports.ssh_config import DEFAULT_PATH

        default = DEFAULT_PATH.expanduser()
        return str(default.resolve()) if default.exists() else "none"
    return str(Path(path).expanduser().resolve())


SCHEMES = ("ssh", "kubectl", "kubectl-debug", "replay")


def scheme_of(target: str) -> str:
    if target == "local":
        return "local"
    for scheme in SCHEMES:
        if target.startswith(f"{scheme}://"):
            return scheme
    raise UsageError(
        f"unknown target {target!r}: use local, ssh://[user@]host[:port], "
        "kubectl://NAMESPACE/POD, kubectl://node/NODE, kubectl-debug://NODE or replay://BUNDLE"
    )


def agent_node(rest: str) -> str | None:
    """The node of `kubectl://node/NAME` (the part after `kubectl://`), else None."""
    parts = rest.strip("/").split("/")
    return parts[1] if len(parts) == 2 and parts[0] == "node" and parts[1] else None


def open_target(target: str, options: TargetOptions | None = None) -> Transport:
    """Open (connect to) a target; raises TargetError if it cannot be used."""
    options = options or TargetOptions()
    scheme = scheme_of(target)
    rest = target.split("://", 1)[1] if "://" in target else ""
    transport: Transport
    if scheme == "local":
        from runbook.transports.local import LocalTransport

        transport = LocalTransport()
    elif scheme == "ssh":
        from runbook.transports import ssh_config
        from runbook.transports.address import typed_name
        from runbook.transports.ssh import SSHTransport

        address, ssh_options = ssh_config.resolve(
            rest,
            ssh_config.load(config_path(options.ssh_config)),
            ssh_config.Given(
                identities=options.identities,
                known_hosts=options.known_hosts,
                jump=options.jump,
                connect_timeout=options.connect_timeout,
                accept_new_host_keys=options.accept_new_host_keys,
            ),
        )
        transport = SSHTransport(address, ssh_options)
        transport.node_name = typed_name(rest)
    elif scheme == "kubectl":
        from runbook.transports.nsenter import KubectlTransport, parse_kubectl_target

        node = agent_node(rest)
        if node is not None:
            from runbook.transports.kube_agent import find_agent

            namespace = options.agent_namespace
            pod = find_agent(
                node,
                namespace=namespace,
                selector=options.agent_selector,
                kubectl=options.kubectl,
                context=options.kube_context,
            )
        else:
            namespace, pod = parse_kubectl_target(rest)
        # the node agent is entered with nsenter always; --nsenter only changes the PID
        kubectl_transport = KubectlTransport(
            namespace,
            pod,
            container=options.container,
            context=options.kube_context,
            kubectl=options.kubectl,
            nsenter_pid=options.nsenter or 1,
            description=f"kubectl://node/{node} ({namespace}/{pod})" if node else None,
        )
        kubectl_transport.node_name = node
        return kubectl_transport
    elif scheme == "kubectl-debug":
        from runbook.transports import kube_debug

        node = rest.strip("/")
        if not node or "/" in node:
            raise UsageError(f"kubectl-debug target must be kubectl-debug://NODE, not {target}")
        return kube_debug.DebugPodTransport(
            node,
            debug=kube_debug.settings(
                options.debug_image, options.debug_namespace, options.debug_timeout
            ),
            context=options.kube_context,
            kubectl=options.kubectl,
            nsenter_pid=options.nsenter or 1,
        )
    else:
        if not rest:
            raise UsageError("replay target needs a bundle: replay://PATH")
        if options.nsenter is not None:
            raise UsageError("--nsenter makes no sense with replay://")
        from runbook.transports.replay import ReplayTransport

        return ReplayTransport(rest)
    if options.nsenter is not None:
        from runbook.transports.nsenter import NsenterTransport

        transport = NsenterTransport(transport, options.nsenter)
    return transport
