"""Pure: the pods of a Kubernetes workload → its ranks (who ran where, on which GPUs, how it ended).

The rank of a pod, in this order (the first rule that gives a number wins):

1. the main container's env `RANK`, when the pod spec holds it as a literal integer: the
   Kubeflow training operator writes it there for a PyTorchJob with a Master (Master 0, Worker
   i → i + 1), and a user may set it for a plain Job;
2. the replica type and index labels (`training.kubeflow.org/replica-type` / `job-role` and
   `replica-index`, or the older `replica-type`, `pytorch-replica-*`, `tf-replica-*`,
   `mpi-job-role` spellings), numbered as each framework numbers its processes:
   PyTorchJob Master 0, Worker i → i + 1 when the job has a Master, else i (a job without a
   Master rendezvous through torchrun, whose c10d backend may order nodes otherwise);
   TFJob Chief (or Master) 0, Worker i → i + 1 when there is a Chief, else i (TensorFlow's
   `id_in_cluster`); PS and Evaluator are not ranks of the collective: None;
   MPIJob Worker i → slots i·s … i·s + s − 1 (`slotsPerWorker` s, the hostfile order mpirun
   fills by slot), shifted by s when `runLauncherAsWorker` puts the Launcher first in the
   hostfile; the Launcher otherwise runs no rank: None;
3. an indexed Job's completion index (label, or annotation before Kubernetes 1.28,
   `batch.kubernetes.io/job-completion-index`);
4. else None (a non-indexed Job's pod: the scheduler does not say).

A pod that runs several processes (torchrun `--nproc-per-node N` in its command or the
operator's `PET_NPROC_PER_NODE`) holds ranks r·N … r·N + N − 1 for its node rank r (PyTorchJob
and Job); when its GPUs are known one per process, local rank i gets the i-th.

GPUs: the indices or UUIDs in a literal `NVIDIA_VISIBLE_DEVICES` of the main container (the
device plugin sets it at run time, invisible here, so usually only the count is known; the
count, `resources.limits["nvidia.com/gpu"]`, is kept per pod in `PodFacts.gpu_count`).
Exit: the main container's `state.terminated`, else `lastState.terminated` (a restarted
container's previous run); a signal is the recorded one, else exit codes above 128 read as
128 + signal. A pod not scheduled yet has node "" and the scheduler's reason (Unschedulable).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runbook.job.models import RankSpec

TYPE_LABELS = (
    "training.kubeflow.org/replica-type",
    "training.kubeflow.org/job-role",
    "replica-type",
    "pytorch-replica-type",
    "tf-replica-type",
    "mpi-job-role",
)
INDEX_LABELS = (
    "training.kubeflow.org/replica-index",
    "replica-index",
    "pytorch-replica-index",
    "tf-replica-index",
)
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
#: how a replica type is spelled in reports, whatever the label's case
ROLES = {r.lower(): r for r in ("Master", "Worker", "Chief", "PS", "Evaluator", "Launcher")}
_NPROC = re.compile(r"--nproc[-_]per[-_]node(?:=|\s+)(\d+|gpu|auto)\b")
_NO_DEVICES = frozenset({"", "all", "none", "void"})
#: more processes than one pod runs (or MPI slots than one worker has): a spec saying more is
#: taken as not saying (1), rather than expanded into that many ranks
MAX_PROCS = 4096


@dataclass(frozen=True)
class JobLayout:
    """What of the workload's spec numbering needs: has it a Master/Chief, MPI slots."""

    kind: str
    has_master: bool = False
    slots_per_worker: int = 1
    launcher_is_worker: bool = False


@dataclass(frozen=True)
class JobPod:
    """One pod of the job, as the merge and the report need it."""

    name: str
    node: str
    role: str | None
    ranks: tuple[int | None, ...]
    container: str | None
    gpu_count: int
    gpus: tuple[str, ...]
    phase: str | None
    started_at: str | None
    exit_code: int | None
    signal: int | None
    reason: str | None
    restarts: int

    @property
    def first_rank(self) -> float:
        known = [r for r in self.ranks if r is not None]
        return min(known) if known else float("inf")


def layout_of(kind: str, job: Mapping[str, Any]) -> JobLayout:
    """The numbering facts of a workload object (`kubectl get KIND NAME -o json`)."""
    spec = job.get("spec") or {}
    replicas = (
        spec.get("pytorchReplicaSpecs")
        or spec.get("tfReplicaSpecs")
        or spec.get("mpiReplicaSpecs")
        or {}
    )
    types = {str(t).lower() for t in replicas}
    slots = _int(spec.get("slotsPerWorker"))
    return JobLayout(
        kind=kind,
        has_master=bool(types & {"master", "chief"}),
        slots_per_worker=slots if slots and 0 < slots <= MAX_PROCS else 1,
        launcher_is_worker=bool(spec.get("runLauncherAsWorker")),
    )


def _int(value: Any) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def _env(container: Mapping[str, Any], name: str) -> str | None:
    """A literal env value of the container (None when unset or taken from elsewhere)."""
    for var in container.get("env") or ():
        if var.get("name") == name and "value" in var:
            return str(var["value"])
    return None


def _gpu_limit(container: Mapping[str, Any]) -> int:
    limits = (container.get("resources") or {}).get("limits") or {}
    return _int(limits.get("nvidia.com/gpu")) or 0


def main_container(pod: Mapping[str, Any], default_name: str | None = None) -> Mapping[str, Any]:
    """The container that does the work: the framework's default name (`pytorch`,
    `tensorflow`), else the first one given GPUs, else the first."""
    containers: list[Mapping[str, Any]] = [
        c for c in (pod.get("spec") or {}).get("containers") or () if isinstance(c, Mapping)
    ]
    for container in containers:
        if default_name and container.get("name") == default_name:
            return container
    for container in containers:
        if _gpu_limit(container):
            return container
    return containers[0] if containers else {}


def _replica(labels: Mapping[str, str]) -> tuple[str | None, int | None]:
    kind = next((labels[k] for k in TYPE_LABELS if labels.get(k)), None)
    index = next((_int(labels[k]) for k in INDEX_LABELS if labels.get(k) is not None), None)
    role = ROLES.get(kind.lower(), kind) if kind else None
    return role, index


def _node_ranks(
    layout: JobLayout, role: str | None, index: int | None, env_rank: int | None
) -> tuple[int | None, ...]:
    """The ranks the pod holds before per-process expansion (rules 1–2 of the docstring)."""
    if layout.kind == "MPIJob":
        slots = layout.slots_per_worker
        shift = slots if layout.launcher_is_worker else 0
        if role == "Launcher":
            return tuple(range(slots)) if layout.launcher_is_worker else (None,)
        if role == "Worker" and index is not None:
            return tuple(range(shift + index * slots, shift + (index + 1) * slots))
        return (None,)
    if env_rank is not None:
        return (env_rank,)
    if role in ("Master", "Chief"):
        return (0,)
    if role == "Worker" and index is not None:
        return (index + 1 if layout.has_master else index,)
    return (None,)


def _procs(container: Mapping[str, Any], gpu_count: int) -> int:
    """Processes the container starts (torchrun's --nproc-per-node), 1 when not known."""
    value = _env(container, "PET_NPROC_PER_NODE")
    if value is None:
        words = [*(container.get("command") or ()), *(container.get("args") or ())]
        match = _NPROC.search(" ".join(str(w) for w in words))
        value = match.group(1) if match else None
    if value in ("gpu", "auto"):
        return gpu_count or 1
    count = _int(value)
    return count if count and 0 < count <= MAX_PROCS else 1


def _terminated(status: Mapping[str, Any]) -> Mapping[str, Any]:
    return (
        (status.get("state") or {}).get("terminated")
        or (status.get("lastState") or {}).get("terminated")
        or {}
    )


def _unscheduled_reason(pod: Mapping[str, Any]) -> str | None:
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return str(cond.get("reason") or "Unschedulable")
    return None


def pod_facts(
    pod: Mapping[str, Any], layout: JobLayout, *, default_container: str | None = None
) -> JobPod:
    """One pod → its node, role, ranks, GPUs and how it ended (see the module docstring)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    status = pod.get("status") or {}
    container = main_container(pod, default_container)
    cname = container.get("name")
    cstatus: Mapping[str, Any] = next(
        (s for s in status.get("containerStatuses") or () if s.get("name") == cname), {}
    )
    role, index = _replica(labels)
    ranks = _node_ranks(layout, role, index, _int(_env(container, "RANK")))
    if ranks == (None,) and layout.kind == "Job":
        completion = labels.get(COMPLETION_INDEX) or (meta.get("annotations") or {}).get(
            COMPLETION_INDEX
        )
        ranks = (_int(completion),)
    gpu_count = _gpu_limit(container)
    visible = _env(container, "NVIDIA_VISIBLE_DEVICES")
    gpus: tuple[str, ...] = ()
    if visible is not None and visible.strip().lower() not in _NO_DEVICES:
        gpus = tuple(g.strip() for g in visible.split(",") if g.strip())
    if layout.kind in ("PyTorchJob", "Job") and len(ranks) == 1 and ranks[0] is not None:
        procs = _procs(container, len(gpus) or gpu_count)
        ranks = tuple(range(ranks[0] * procs, (ranks[0] + 1) * procs))
    term = _terminated(cstatus)
    state = cstatus.get("state") or {}
    exit_code = _int(term.get("exitCode")) if term else None
    signal = _int(term.get("signal")) if term.get("signal") else None
    if signal is None and exit_code is not None and exit_code > 128:
        signal = exit_code - 128
    reason = (
        term.get("reason")
        or status.get("reason")
        or (state.get("waiting") or {}).get("reason")
        or _unscheduled_reason(pod)
    )
    started = (
        (state.get("running") or {}).get("startedAt")
        or term.get("startedAt")
        or status.get("startTime")
    )
    return JobPod(
        name=str(meta.get("name") or ""),
        node=str((pod.get("spec") or {}).get("nodeName") or ""),
        role=role,
        ranks=ranks,
        container=str(cname) if cname else None,
        gpu_count=gpu_count,
        gpus=gpus,
        phase=status.get("phase"),
        started_at=started,
        exit_code=exit_code,
        signal=signal,
        reason=str(reason) if reason else None,
        restarts=_int(cstatus.get("restartCount")) or 0,
    )


def rank_specs(facts: Sequence[JobPod], namespace: str) -> tuple[RankSpec, ...]:
    """One RankSpec per rank of every pod (a pod's local rank i gets its i-th GPU when the
    pod lists one GPU per process), ordered by rank, unknown ranks last by pod name."""
    out = []
    for pod in facts:
        per_rank = len(pod.gpus) == len(pod.ranks) > 1
        for local, rank in enumerate(pod.ranks):
            out.append(
                RankSpec(
                    rank=rank,
                    node=pod.node,
                    pod=pod.name,
                    namespace=namespace,
                    container=pod.container,
                    gpus=(pod.gpus[local],) if per_rank else pod.gpus,
                    role=pod.role,
                    started_at=pod.started_at,
                    phase=pod.phase,
                    exit_code=pod.exit_code,
                    signal=pod.signal,
                    reason=pod.reason,
                )
            )
    return tuple(sorted(out, key=lambda r: (r.rank is None, r.rank or 0, r.pod or "")))
