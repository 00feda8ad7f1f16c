"""`--nsenter[=PID]` and `kubectl://NAMESPACE/POD` (or `kubectl://node/NAME`: the node agent on
that node, transports/kube_agent.py): the article's way into a node's host namespaces from a
privileged agent. The argv/command builders are pure and tested alone."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import replace

from runbook.errors import UnreachableError, UsageError
from runbook.transports.base import (
    BatchTransport,
    CommandResult,
    Deliver,
    Probe,
    Spill,
    Transport,
    batch_of,
)

NAMESPACES = ("--mount", "--uts", "--ipc", "--net", "--pid")


def nsenter_argv(command: str, pid: int = 1) -> list[str]:
    """`nsenter --target PID --mount --uts --ipc --net --pid -- /bin/sh -c COMMAND`."""
    if pid < 1:
        raise UsageError(f"--nsenter PID must be a positive process id, not {pid}")
    return ["nsenter", "--target", str(pid), *NAMESPACES, "--", "/bin/sh", "-c", command]


def nsenter_command(command: str, pid: int = 1) -> str:
    """The same as one shell command line (every word quoted), for a shell transport."""
    return shlex.join(nsenter_argv(command, pid))


class NsenterTransport:
    """Wraps another transport so every probe runs inside PID's namespaces."""

    def __init__(self, inner: Transport, pid: int = 1) -> None:
        nsenter_argv("true", pid)  # validates pid
        self.inner = inner
        self.pid = pid
        self.description = f"{inner.description} (nsenter --target {pid})"
        self.node_name: str | None = getattr(inner, "node_name", None)
        batch_of(self, inner)

    def run(self, probe: Probe) -> CommandResult:
        result = self.inner.run(replace(probe, command=nsenter_command(probe.command, self.pid)))
        # reports show what the runbook asked for; the wrapper is the transport's business
        return replace(result, command=probe.command, extra={"wrapped": "nsenter"})

    def _run_batch(
        self,
        probes: Sequence[Probe],
        deliver: Deliver,
        spill: Spill,
        *,
        within: float | None = None,
    ) -> None:
        assert isinstance(self.inner, BatchTransport)
        wrapped = [replace(p, command=nsenter_command(p.command, self.pid)) for p in probes]

        def unwrapped(index: int, result: CommandResult) -> None:
            deliver(
                index,
                replace(result, command=probes[index].command, extra={"wrapped": "nsenter"}),
            )

        self.inner.run_batch(wrapped, unwrapped, spill, within=within)

    def close(self) -> None:
        self.inner.close()


def kubectl_exec_argv(
    namespace: str,
    pod: str,
    command: str,
    *,
    container: str | None = None,
    context: str | None = None,
    kubectl: str = "kubectl",
    nsenter_pid: int | None = 1,
    stdin: bool = False,
) -> list[str]:
    """`kubectl exec [-i] -n NS POD [-c C] -- nsenter --target 1 … -- /bin/sh -c COMMAND`;
    `stdin`: the command reads what kubectl is given on its input (a probe's secret)."""
    argv = [kubectl]
    if context:
        argv += ["--context", context]
    argv += ["exec", *(["-i"] if stdin else []), "-n", namespace, pod]
    if container:
        argv += ["-c", container]
    argv.append("--")
    if nsenter_pid is None:
        argv += ["/bin/sh", "-c", command]
    else:
        argv += nsenter_argv(command, nsenter_pid)
    return argv


#: Kubernetes object names (RFC 1123): a namespace is a DNS label, a pod a DNS subdomain. Only
#: such a name reaches kubectl's argv, so none can be read as an option (`--kubeconfig=…`).
_DNS_LABEL = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"
_NAMESPACE = re.compile(_DNS_LABEL)
_POD = re.compile(rf"(?=.{{1,253}}$){_DNS_LABEL}(?:\.{_DNS_LABEL})*")


def check_kubectl_names(namespace: str, pod: str) -> None:
    """UsageError unless both are Kubernetes names."""
    for what, name, pattern in (("namespace", namespace, _NAMESPACE), ("pod", pod, _POD)):
        if not pattern.fullmatch(name):
            raise UsageError(f"{name!r} is not a Kubernetes {what} name (RFC 1123)")


def parse_kubectl_target(text: str) -> tuple[str, str]:
    """`NAMESPACE/POD` (the part after `kubectl://`)."""
    parts = text.strip("/").split("/")
    if len(parts) != 2 or not all(parts):
        raise UsageError(f"kubectl target must be kubectl://NAMESPACE/POD, not kubectl://{text}")
    check_kubectl_names(parts[0], parts[1])
    return parts[0], parts[1]


class KubectlTransport:
    """Runs probes through `kubectl exec` into a privileged node-agent pod, nsenter implied
    (the pod's PID 1 namespace view is the container's; nsenter reaches the host's). A burst
    of probes is one exec (transports/kube_exec.py: the SSH batch script, a timed-out probe's
    process group stopped on the node)."""

    #: the node's name when the target named the node (`kubectl://node/NAME`)
    node_name: str | None = None
    #: a burst of up to this many probes is one exec (the executor's batches; a script larger
    #: than batch.MAX_SCRIPT_BYTES still goes as two): each exec is a process start here and
    #: an API request, where an SSH channel is neither (measured, one node's walk: 16 a batch,
    #: 5 execs, 0.57 s; 64, one exec a burst: 3, 0.29 to 0.64 s)
    batch_size = 64

    def __init__(
        self,
        namespace: str,
        pod: str,
        *,
        container: str | None = None,
        context: str | None = None,
        kubectl: str = "kubectl",
        nsenter_pid: int | None = 1,
        check_timeout: float = 20.0,
        description: str | None = None,
    ) -> None:
        from runbook.transports.kube_exec import PodExec

        check_kubectl_names(namespace, pod)
        self.namespace, self.pod = namespace, pod
        self._container, self._context = container, context
        self._kubectl, self._nsenter_pid = kubectl, nsenter_pid
        self.description = description or f"kubectl://{namespace}/{pod}"
        self.exec = PodExec(self._argv, self.description)
        self.run_batch = self.exec.run_batch
        self.expect_more = self.exec.expect_more
        # the first exec, ready for the walk's first burst, is the check
        why = self.exec.connect(check_timeout)
        if why is not None:
            self.exec.close()
            raise UnreachableError(f"{self.description}: kubectl exec failed: {why}")

    def _argv(self, command: str, stdin: bool = False) -> list[str]:
        return kubectl_exec_argv(
            self.namespace,
            self.pod,
            command,
            container=self._container,
            context=self._context,
            kubectl=self._kubectl,
            nsenter_pid=self._nsenter_pid,
            stdin=stdin,
        )

    def run(self, probe: Probe) -> CommandResult:
        # the secret goes over kubectl's input (-i), never into its argv or the pod's
        return self.exec.run(probe)

    def close(self) -> None:
        self.exec.close()  # execs in flight (an interrupted run): in the pod, then here
