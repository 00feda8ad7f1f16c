"""`kubectl-debug://NODE`: a node reached without any agent installed, the way `kubectl debug
node/NODE --image=IMAGE --profile=sysadmin` reaches it: a pod bound to the node (spec.nodeName,
so no scheduler decides), in the host's PID, network and IPC namespaces, privileged, the host's
root filesystem at /host, tolerating every taint. The walk runs in it as through a node agent:
`kubectl exec` into it, `nsenter --target 1` into the node's namespaces (transports/nsenter.py,
batched as transports/kube_exec.py does).

The pod lives exactly as long as the run: created when the target is opened, waited for until
Running (a bounded wait: an image that cannot be pulled is the target's error, with the
kubelet's reason), deleted when the transport is closed, which every command does on every way
out (its end, an error, ^C and SIGTERM: runbook/interrupt.py turns SIGTERM into an exception
that unwinds the same `finally`). A pod still being created when the process exits (^C while
the target opens in its own thread) is deleted at exit (`_Registry`). Only SIGKILL leaves one
behind: it is labelled (LABEL_MANAGED, LABEL_RUN) so `cleanup_command` finds it, and its
`activeDeadlineSeconds` stops its container after LIFETIME_S whatever happens.

The image needs only a shell, `nsenter` and `setsid` (util-linux): the probes run the node's
own tools, in its mount namespace. Default DEFAULT_IMAGE; `--debug-image`,
`$RUNBOOK_DEBUG_IMAGE` or `kubernetes.debug_image` in the config file change it (a registry
mirror, an air-gapped cluster). The RBAC it needs: examples/kubernetes/runbook-debug-rbac.yaml.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import secrets
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runbook.errors import UnreachableError, UsageError
from runbook.transports.address import HOST_RULE, is_host
from runbook.transports.nsenter import KubectlTransport

log = logging.getLogger(__name__)

#: has sh, nsenter and setsid (util-linux); everything else the probes use is the node's
DEFAULT_IMAGE = "docker.io/library/debian:bookworm-slim"
DEFAULT_NAMESPACE = "default"
#: seconds to wait for the pod to run (an image pull included)
DEFAULT_START_TIMEOUT = 120.0
#: the pod's container ends by itself after this long (activeDeadlineSeconds): a pod left
#: behind by a SIGKILLed run does not stay privileged on the node
LIFETIME_S = 3600
CONTAINER = "debugger"
LABEL_MANAGED = "app.kubernetes.io/managed-by"
MANAGED_BY = "nccl-runbook"
LABEL_COMPONENT = "app.kubernetes.io/component"
COMPONENT = "node-debugger"
LABEL_RUN = "runbook/run-id"
ANNOTATION_NODE = "runbook/node"
#: reasons a container waits that will not change by waiting
_HOPELESS = frozenset({"InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError"})

_RUN_ID: str | None = None
_RUN_ID_LOCK = threading.Lock()


def run_id() -> str:
    """This process's run id (a label value): every debug pod it makes carries it."""
    global _RUN_ID
    with _RUN_ID_LOCK:
        if _RUN_ID is None:
            _RUN_ID = time.strftime("%Y%m%dt%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)
        return _RUN_ID


def pod_name(node: str, suffix: str) -> str:
    """`runbook-debug-NODE-SUFFIX`, a DNS-1123 name of at most 63 characters."""
    base = re.sub(r"[^a-z0-9-]+", "-", node.lower()).strip("-")[:40].strip("-") or "node"
    return f"runbook-debug-{base}-{suffix}"


def debug_pod(
    node: str,
    *,
    name: str,
    namespace: str,
    image: str,
    run: str,
    lifetime: int = LIFETIME_S,
) -> dict[str, Any]:
    """Pure: the Pod `kubectl debug node/NODE --image=IMAGE --profile=sysadmin` makes, bound to
    `node`, labelled for cleanup, ending by itself after `lifetime` seconds."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                LABEL_MANAGED: MANAGED_BY,
                LABEL_COMPONENT: COMPONENT,
                LABEL_RUN: run,
            },
            "annotations": {ANNOTATION_NODE: node},
        },
        "spec": {
            "nodeName": node,
            "hostPID": True,
            "hostNetwork": True,
            "hostIPC": True,
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 5,
            "activeDeadlineSeconds": lifetime,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": CONTAINER,
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    # PID 1 of the container: ends at TERM (a deleted pod goes at once)
                    "command": ["/bin/sh", "-c", f"trap 'exit 0' TERM; sleep {lifetime} & wait"],
                    "securityContext": {"privileged": True},
                    "volumeMounts": [{"name": "host-root", "mountPath": "/host"}],
                    "resources": {
                        "requests": {"cpu": "50m", "memory": "64Mi"},
                        "limits": {"memory": "1Gi"},
                    },
                }
            ],
            "volumes": [{"name": "host-root", "hostPath": {"path": "/"}}],
        },
    }


def cleanup_command(
    namespace: str | None = None, run: str | None = None, context: str | None = None
) -> str:
    """The kubectl line that deletes leftover debug pods: of one run, or all of them."""
    selector = f"{LABEL_MANAGED}={MANAGED_BY},{LABEL_COMPONENT}={COMPONENT}"
    if run:
        selector += f",{LABEL_RUN}={run}"
    where = ["-n", namespace] if namespace else ["--all-namespaces"]
    ctx = ["--context", context] if context else []
    return " ".join(["kubectl", *ctx, "delete", "pods", *where, "-l", selector, "--wait=false"])


def waiting_reason(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(reason, message) of a container that waits (ErrImagePull…), or None."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            return str(waiting["reason"]), str(waiting.get("message") or "")
    return None


@dataclass(frozen=True)
class DebugSettings:
    """Where and with what the debug pod is made."""

    image: str = DEFAULT_IMAGE
    namespace: str = DEFAULT_NAMESPACE
    start_timeout: float = DEFAULT_START_TIMEOUT


def settings(
    image: str | None = None, namespace: str | None = None, start_timeout: float | None = None
) -> DebugSettings:
    """The flags given, else `$RUNBOOK_DEBUG_IMAGE`/`$RUNBOOK_DEBUG_NAMESPACE`/
    `$RUNBOOK_DEBUG_TIMEOUT`, else the config file's `kubernetes.debug_image`/
    `kubernetes.debug_namespace`/`kubernetes.debug_timeout`, else the defaults."""
    configured = _configured()
    return DebugSettings(
        image=image
        or os.environ.get("RUNBOOK_DEBUG_IMAGE")
        or str(configured.get("debug_image") or DEFAULT_IMAGE),
        namespace=namespace
        or os.environ.get("RUNBOOK_DEBUG_NAMESPACE")
        or str(configured.get("debug_namespace") or DEFAULT_NAMESPACE),
        start_timeout=start_timeout
        or _seconds(os.environ.get("RUNBOOK_DEBUG_TIMEOUT"))
        or float(configured.get("debug_timeout") or DEFAULT_START_TIMEOUT),
    )


def _seconds(text: str | None) -> float | None:
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"RUNBOOK_DEBUG_TIMEOUT={text!r}: expected seconds") from None
    if value <= 0:
        raise UsageError(f"RUNBOOK_DEBUG_TIMEOUT={text!r}: expected seconds above 0")
    return value


def _configured() -> Mapping[str, Any]:
    """The config file's `kubernetes:` mapping (runbook.config reads and checks the file)."""
    import yaml

    from runbook.config import config_path

    path = config_path()
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else None
    except (OSError, yaml.YAMLError) as exc:
        raise UsageError(f"config {path}: {' '.join(str(exc).split())}") from None
    kube = loaded.get("kubernetes") if isinstance(loaded, dict) else None
    return kube if isinstance(kube, dict) else {}


class _Registry:
    """The debug pods this process made and has not deleted yet, deleted at exit (a pod whose
    transport was never handed to anyone: ^C while the target opened in a thread). Exit waits
    a little for a create in flight, so that the pod it makes is deleted too."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._pods: dict[tuple[str, str], DebugPod] = {}
        self._creating = 0
        self._hooked = False

    def creating(self, pod: DebugPod) -> None:
        with self._cond:
            self._pods[(pod.namespace, pod.name)] = pod
            self._creating += 1
            if not self._hooked:
                atexit.register(self.at_exit)
                self._hooked = True

    def created(self) -> None:
        with self._cond:
            self._creating -= 1
            self._cond.notify_all()

    def gone(self, pod: DebugPod) -> None:
        with self._cond:
            self._pods.pop((pod.namespace, pod.name), None)

    def at_exit(self) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._creating == 0, timeout=15.0)
            left = list(self._pods.values())
        for pod in left:
            pod.delete()


_registry = _Registry()


class DebugPod:
    """One debug pod through kubectl: create, wait until Running, delete."""

    def __init__(
        self,
        node: str,
        debug: DebugSettings,
        *,
        kubectl: str = "kubectl",
        context: str | None = None,
    ) -> None:
        if not is_host(node):
            raise UsageError(f"kubectl-debug://{node[:120]!r}: the node name is not {HOST_RULE}")
        self.node = node
        self.namespace = debug.namespace
        self.name = pod_name(node, secrets.token_hex(3))
        self.run = run_id()
        self.spec = debug_pod(
            node, name=self.name, namespace=self.namespace, image=debug.image, run=self.run
        )
        self._kubectl = kubectl
        self._context = context
        self._deleted = False
        self._lock = threading.Lock()

    def _argv(self, *words: str) -> list[str]:
        return [self._kubectl, *(["--context", self._context] if self._context else []), *words]

    def _kubectl_run(
        self, words: Sequence[str], *, input: str | None = None, timeout: float = 30.0
    ) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                self._argv(*words), input=input, capture_output=True, text=True,
                timeout=timeout, check=False,
                # its own session: a ^C at the terminal does not stop the delete of a ^C
                start_new_session=True,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(words, 124, "", f"no answer within {timeout:g}s")
        except OSError as exc:
            return subprocess.CompletedProcess(words, 127, "", str(exc.strerror or exc))

    def create(self) -> None:
        _registry.creating(self)
        try:
            # --raw: the Pod as written, one POST (no client-side schema download)
            path = f"/api/v1/namespaces/{self.namespace}/pods"
            done = self._kubectl_run(
                ["create", "--raw", path, "-f", "-"], input=json.dumps(self.spec)
            )
        finally:
            _registry.created()
        if done.returncode != 0:
            if done.returncode != 124:  # refused: there is nothing to delete
                self._deleted = True
            _registry.gone(self)
            raise UnreachableError(
                f"kubectl-debug://{self.node}: cannot create the debug pod "
                f"{self.namespace}/{self.name}: {_last_line(done)}"
            )

    def wait_running(self, timeout: float) -> None:
        """Until the pod runs; UnreachableError with the kubelet's reason when it does not
        within `timeout` (or cannot: a bad image name, a failed pod)."""
        deadline = time.monotonic() + timeout
        pause = 0.1
        last = "Pending"
        while True:
            got = self._kubectl_run(["get", "pod", "-n", self.namespace, self.name, "-o", "json"])
            if got.returncode == 0:
                try:
                    pod = json.loads(got.stdout)
                except json.JSONDecodeError:
                    pod = {}
                phase = (pod.get("status") or {}).get("phase") or "Pending"
                waiting = waiting_reason(pod)
                if phase == "Running" and waiting is None:
                    return
                last = phase + (f", {waiting[0]}: {waiting[1]}" if waiting else "")
                if phase in ("Failed", "Succeeded") or (waiting and waiting[0] in _HOPELESS):
                    break
            else:
                last = _last_line(got)
            if time.monotonic() + pause > deadline:
                raise UnreachableError(
                    f"kubectl-debug://{self.node}: the debug pod {self.namespace}/{self.name} "
                    f"did not run within {timeout:g}s ({last})"
                )
            time.sleep(pause)
            pause = min(1.0, pause * 1.5)
        raise UnreachableError(
            f"kubectl-debug://{self.node}: the debug pod {self.namespace}/{self.name} "
            f"cannot run ({last})"
        )

    def delete(self) -> None:
        """Delete the pod (once; not waiting for it to be gone). A failure is logged with the
        line that deletes it by hand."""
        with self._lock:
            if self._deleted:
                return
            self._deleted = True
        words = ["delete", "pod", "-n", self.namespace, self.name, "--wait=false"]
        done = self._kubectl_run([*words, "--ignore-not-found"])
        _registry.gone(self)
        if done.returncode != 0:
            log.warning(
                "kubectl-debug://%s: could not delete the debug pod %s/%s: %s; delete it "
                "with: kubectl delete pod -n %s %s (every one left: %s)",
                self.node, self.namespace, self.name, _last_line(done), self.namespace,
                self.name, cleanup_command(context=self._context),
            )  # fmt: skip


def _last_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line.strip() for line in (done.stderr or "").splitlines() if line.strip()]
    return lines[-1] if lines else f"exit {done.returncode}"


class DebugPodTransport(KubectlTransport):
    """A walk in a debug pod made for it on `node` (see the module docstring)."""

    def __init__(
        self,
        node: str,
        *,
        debug: DebugSettings | None = None,
        context: str | None = None,
        kubectl: str = "kubectl",
        nsenter_pid: int = 1,
        check_timeout: float = 20.0,
    ) -> None:
        debug = debug or DebugSettings()
        self.debug_pod = DebugPod(node, debug, kubectl=kubectl, context=context)
        self.node_name = node
        try:
            self.debug_pod.create()
            log.info(
                "kubectl-debug://%s: debug pod %s/%s (run %s); were this command killed, "
                "delete what it left with: %s", node, debug.namespace, self.debug_pod.name,
                self.debug_pod.run, cleanup_command(debug.namespace, self.debug_pod.run, context),
            )  # fmt: skip
            self.debug_pod.wait_running(debug.start_timeout)
            super().__init__(
                debug.namespace,
                self.debug_pod.name,
                container=CONTAINER,
                context=context,
                kubectl=kubectl,
                nsenter_pid=nsenter_pid,
                check_timeout=check_timeout,
                description=f"kubectl-debug://{node}",
            )
        except BaseException:
            self.debug_pod.delete()
            raise

    def close(self) -> None:
        """Stop what runs in the pod, then delete it from a thread of its own: the command
        goes on with its report meanwhile, and does not exit before the delete is done (the
        thread is not a daemon: the interpreter waits for it, as for the registry's at exit)."""
        try:
            super().close()
        finally:
            # not a daemon, even when closed from one (a sweep's host threads are): the
            # interpreter waits for it before it exits
            threading.Thread(
                target=self.debug_pod.delete, name="delete-debug-pod", daemon=False
            ).start()
