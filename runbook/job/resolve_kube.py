"""A Kubernetes workload (`Job`, `PyTorchJob`, `TFJob`, `MPIJob`) → its ranks, pods, nodes and
GPUs, each node reached through the privileged node-agent pod on it, as `runbook sweep
--kube-selector` reaches nodes (runbook/sweep/kube.py: `join_nodes_and_agents`).

Three reads: `kubectl get RESOURCE NAME -n NS -o json` (the workload), `kubectl get pods -n NS
-l SELECTOR -o json` (its pods) and `kubectl get pods -n AGENT_NS -l AGENT_SELECTOR -o json`
(the agents, one list whatever the cluster's size). The pods' selector:

    Job          its `spec.selector` (the controller-uid the API server set), else `job-name`
    PyTorchJob   `training.kubeflow.org/job-name=NAME`, then the older `pytorch-job-name` and
    TFJob        `job-name` + `group-name=kubeflow.org` (`tf-job-name` for TFJob) when the
    MPIJob       first finds nothing; `mpi-job-name` for mpi-operator before v2

A Kubeflow pod whose `training.kubeflow.org/operator-name` names another operator belongs to a
job of another kind with the same name, and is left out. How ranks are numbered:
runbook/job/kube_pods.py. Each node's entry carries the runbook variables `pod` (the node's
pod of this job with the lowest rank), `pods` (all of them, by rank), `namespace` and `nodes`
(how many nodes the job spans).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from runbook.errors import JobError, RunbookError, UnreachableError
from runbook.job.kube_pods import JobPod, layout_of, pod_facts, rank_specs
from runbook.job.models import JobNode, JobSpec
from runbook.sweep.inventory import HostEntry, InventoryError
from runbook.sweep.kube import join_nodes_and_agents, kubectl_json

OPERATOR_LABEL = "training.kubeflow.org/operator-name"


@dataclass(frozen=True)
class KubeKind:
    """A workload kind runbook resolves, and how its pods are found."""

    kind: str
    #: the fully qualified resource kubectl is asked for (no clash with another group's `jobs`)
    resource: str
    #: pod selectors to try in order, `{name}` filled in; the first that finds pods wins
    selectors: tuple[str, ...]
    #: values of the operator-name label that mark this kind's pods
    operators: tuple[str, ...] = ()
    #: the framework's default container name
    container: str | None = None


KINDS: dict[str, KubeKind] = {
    k.kind.lower(): k
    for k in (
        KubeKind("Job", "jobs.batch", ("job-name={name}",)),
        KubeKind(
            "PyTorchJob",
            "pytorchjobs.kubeflow.org",
            (
                "training.kubeflow.org/job-name={name}",
                "pytorch-job-name={name}",
                "job-name={name},group-name=kubeflow.org",
            ),
            ("pytorchjob-controller",),
            "pytorch",
        ),
        KubeKind(
            "TFJob",
            "tfjobs.kubeflow.org",
            (
                "training.kubeflow.org/job-name={name}",
                "tf-job-name={name}",
                "job-name={name},group-name=kubeflow.org",
            ),
            ("tfjob-controller",),
            "tensorflow",
        ),
        KubeKind(
            "MPIJob",
            "mpijobs.kubeflow.org",
            ("training.kubeflow.org/job-name={name}", "mpi-job-name={name}"),
            ("mpi-operator", "mpijob-controller"),
        ),
    )
}


def kube_kind(text: str) -> KubeKind | None:
    """`pytorchjob`, `PyTorchJobs`, `pytorchjobs.kubeflow.org`, `job`, `jobs.batch` … → the
    kind; None when it is not one runbook resolves."""
    word = text.strip().lower()
    for group in (".batch", ".kubeflow.org"):
        word = word.removesuffix(group)
    return KINDS.get(word) or KINDS.get(word.removesuffix("s"))


def selector_string(selector: Mapping[str, Any]) -> str:
    """A `metav1.LabelSelector` (matchLabels, matchExpressions) as kubectl's `-l` text."""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or ():
        key, op = expr.get("key"), expr.get("operator")
        values = ",".join(str(v) for v in expr.get("values") or ())
        if op == "In":
            parts.append(f"{key} in ({values})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({values})")
        elif op == "Exists":
            parts.append(str(key))
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts)


def pod_selectors(kind: KubeKind, job: Mapping[str, Any]) -> list[str]:
    """The label selectors that find the workload's pods, best first."""
    name = str((job.get("metadata") or {}).get("name") or "")
    first = []
    if kind.kind == "Job":
        own = selector_string((job.get("spec") or {}).get("selector") or {})
        first = [own] if own else []
    return [*first, *(s.format(name=name) for s in kind.selectors)]


def job_pods(kind: KubeKind, pods: Any) -> list[Mapping[str, Any]]:
    """The items of a pod List that belong to a workload of this kind."""
    items = pods.get("items") if isinstance(pods, Mapping) else None
    out = []
    for pod in items if isinstance(items, list) else ():
        if not isinstance(pod, Mapping):
            continue
        operator = ((pod.get("metadata") or {}).get("labels") or {}).get(OPERATOR_LABEL)
        if operator and kind.operators and operator not in kind.operators:
            continue
        out.append(pod)
    return out


def _state(job: Mapping[str, Any]) -> dict[str, Any]:
    status = job.get("status") or {}
    current = [c for c in status.get("conditions") or () if c.get("status") == "True"]
    last = current[-1] if current else {}
    return {
        "state": last.get("type"),
        "reason": last.get("reason"),
        "message": last.get("message"),
        "start_time": status.get("startTime"),
        "completion_time": status.get("completionTime"),
    }


def _pods_by_node(
    facts: Sequence[JobPod], kind: str, namespace: str, name: str
) -> dict[str, list[JobPod]]:
    """The job's pods by the node each is scheduled on, in rank order; JobError when none is
    on a node (naming why each is not)."""
    by_node: dict[str, list[JobPod]] = {}
    for pod in facts:
        if pod.node:
            by_node.setdefault(pod.node, []).append(pod)
    unscheduled = [
        f"{p.name} ({p.reason or p.phase or 'not scheduled'})" for p in facts if not p.node
    ]
    if not by_node:
        why = "; ".join(unscheduled) or "no pods"
        raise JobError(f"{kind} {namespace}/{name}: no pod of the job is on a node: {why}")
    return by_node


def _job_nodes(
    entries: Sequence[HostEntry], by_node: Mapping[str, Sequence[JobPod]], namespace: str
) -> list[JobNode]:
    """Each node's inventory entry with the runbook variables of the job's pods on it, and
    its ranks; the nodes ordered by their first rank."""
    nodes = []
    for entry in entries:
        mine = by_node[entry.name]
        variables = {
            **entry.variables,
            "pod": mine[0].name,
            "pods": [p.name for p in mine],
            "namespace": namespace,
            "nodes": len(by_node),
        }
        ranks = sorted(
            {r for p in mine for r in p.ranks}, key=lambda r: (r is None, r if r is not None else 0)
        )
        nodes.append(JobNode(entry.name, replace(entry, variables=variables), tuple(ranks)))
    nodes.sort(key=lambda n: (min(p.first_rank for p in by_node[n.name]), n.name))
    return nodes


def _pod_details(pod: JobPod) -> dict[str, Any]:
    return {
        "node": pod.node or None,
        "role": pod.role,
        "ranks": list(pod.ranks),
        "phase": pod.phase,
        "gpu_count": pod.gpu_count,
        "restarts": pod.restarts,
        "exit_code": pod.exit_code,
        "reason": pod.reason,
    }


def _job_details(
    job: Mapping[str, Any], selector: str, facts: Sequence[JobPod], nodes: Sequence[JobNode]
) -> dict[str, Any]:
    """The workload's identity and state, its pods, and which are unscheduled or on a node
    that cannot be reached."""
    return {
        "apiVersion": job.get("apiVersion"),
        "uid": (job.get("metadata") or {}).get("uid"),
        "selector": selector,
        **_state(job),
        "pods": {p.name: _pod_details(p) for p in facts},
        "unscheduled": [p.name for p in facts if not p.node],
        "unreachable": {n.name: n.entry.problem for n in nodes if n.entry.problem},
    }


def job_spec_from_kube(
    kind: str,
    job: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    agents: Any,
    *,
    selector: str,
    agent_namespace: str = "kube-system",
    agent_selector: str = "app=node-agent",
    agent_container: str | None = None,
    context: str | None = None,
    debug: bool = False,
) -> JobSpec:
    """Pure: the workload, its pods and the node-agent pods (`kubectl get … -o json`) → the
    JobSpec. Raises JobError when no pod of the job is on a node."""
    spec = KINDS[kind.lower()]
    meta = job.get("metadata") or {}
    name, namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "")
    layout = layout_of(spec.kind, job)
    facts = sorted(
        (pod_facts(p, layout, default_container=spec.container) for p in pods),
        key=lambda f: (f.first_rank, f.name),
    )
    by_node = _pods_by_node(facts, spec.kind, namespace, name)
    entries = join_nodes_and_agents(
        {"items": [{"metadata": {"name": n}} for n in by_node]},
        agents,
        namespace=agent_namespace,
        agent_selector=agent_selector,
        container=agent_container,
        context=context,
        debug=debug,
    )
    nodes = _job_nodes(entries, by_node, namespace)
    return JobSpec(
        kind=spec.kind,
        name=name,
        namespace=namespace,
        nodes=tuple(nodes),
        ranks=rank_specs(facts, namespace),
        details=_job_details(job, selector, facts, nodes),
    )


#: kubectl's words for an API server it could not reach (client-go's and kubectl's own)
_UNREACHABLE = re.compile(
    r"connection to the server .* was refused|Unable to connect to the server|dial tcp|"
    r"i/o timeout|no such host|connection refused|TLS handshake timeout|"
    r"context deadline exceeded|timed out after",
    re.IGNORECASE,
)


def _failure(text: str) -> RunbookError:
    """A kubectl failure as the tool's error: the cluster out of reach is a target that cannot
    be reached (exit 3, as `kubectl://` says it), anything else a job that does not resolve."""
    if _UNREACHABLE.search(text):
        return UnreachableError(text)
    return JobError(text)


def _kubectl(argv: Sequence[str], what: str, timeout: float) -> Any:
    try:
        return kubectl_json(argv, what, timeout=timeout)
    except InventoryError as exc:
        raise _failure(str(exc)) from None


def resolve_kube_job(
    kind: str,
    namespace: str,
    name: str,
    *,
    kubectl: str = "kubectl",
    context: str | None = None,
    agent_namespace: str = "kube-system",
    agent_selector: str = "app=node-agent",
    agent_container: str | None = None,
    timeout: float = 60.0,
    debug: bool = False,
) -> JobSpec:
    """Read the workload, its pods and the node agents through kubectl (`debug`: no agents;
    each node through a debug pod, kubectl-debug://NODE); see the module
    docstring. Every failure is one line: a JobError, or an UnreachableError (exit 3, as a
    `kubectl://` target says it) when the cluster cannot be reached."""
    spec = kube_kind(kind)
    if spec is None:
        raise JobError(f"unsupported job kind {kind!r}: use Job, PyTorchJob, TFJob or MPIJob")
    ref = f"{spec.kind} {namespace}/{name}"
    base = [kubectl, *(["--context", context] if context else [])]
    try:
        job = kubectl_json(
            [*base, "get", spec.resource, name, "-n", namespace, "-o", "json"], ref, timeout=timeout
        )
    except InventoryError as exc:
        text = str(exc)
        if "(NotFound)" in text:
            raise JobError(f"{ref} not found") from None
        if "doesn't have a resource type" in text:
            raise JobError(
                f"{ref}: the cluster does not serve {spec.resource} (is its operator installed?)"
            ) from None
        raise _failure(text) from None
    if not isinstance(job, Mapping):
        raise JobError(f"{ref}: kubectl printed no object")
    tried = []
    for selector in pod_selectors(spec, job):
        tried.append(selector)
        found = _kubectl(
            [*base, "get", "pods", "-n", namespace, "-l", selector, "-o", "json"], "pods", timeout
        )
        pods = job_pods(spec, found)
        if pods:
            break
    else:
        raise JobError(f"{ref} has no pods (selector {' | '.join(tried)})")
    agents = (
        {"items": []}
        if debug
        else _kubectl(
            [*base, "get", "pods", "-n", agent_namespace, "-l", agent_selector, "-o", "json"],
            "pods",
            timeout,
        )
    )
    return job_spec_from_kube(
        spec.kind,
        job,
        pods,
        agents,
        selector=selector,
        agent_namespace=agent_namespace,
        agent_selector=agent_selector,
        agent_container=agent_container,
        context=context,
        debug=debug,
    )
