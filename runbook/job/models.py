"""What a job resolves to: its ranks and the nodes they ran on, each node a sweep target.

Every resolver (Kubernetes workloads, Slurm, a hosts file) returns a :class:`JobSpec`; the job
run (run.py) walks `JobSpec.nodes` through the sweep pool and the merge (merge.py) reads
`JobSpec.ranks` to put each rank on its node, pod and GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runbook.sweep.inventory import HostEntry


@dataclass(frozen=True)
class RankSpec:
    """One rank of the job, as far as the scheduler knows it."""

    #: the global rank (None when the scheduler does not say: a bare pod, a Slurm task)
    rank: int | None
    #: the node it ran on (a Kubernetes node name, a Slurm host name)
    node: str
    pod: str | None = None
    namespace: str | None = None
    container: str | None = None
    #: GPU indices or UUIDs it was given, when known (NVIDIA_VISIBLE_DEVICES, resources)
    gpus: tuple[str, ...] = ()
    #: the replica type of a Kubeflow job (Master, Worker, Launcher, Chief, PS), when there is one
    role: str | None = None
    #: what the scheduler recorded of its life: start (ISO 8601), phase, exit code, reason
    started_at: str | None = None
    phase: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    reason: str | None = None


@dataclass(frozen=True)
class JobNode:
    """One node of the job and how to reach it: `entry` is a sweep target whose `variables`
    already name what the runbook needs on that node (`pod`, `namespace`, ...)."""

    name: str
    entry: HostEntry
    ranks: tuple[int | None, ...] = ()


@dataclass(frozen=True)
class JobSpec:
    """A job resolved: `kind` is `Job`, `PyTorchJob`, `TFJob`, `MPIJob`, `slurm` or `hosts`."""

    kind: str
    name: str
    namespace: str | None = None
    nodes: tuple[JobNode, ...] = ()
    ranks: tuple[RankSpec, ...] = ()
    #: what the source said about the job as a whole (selector, Slurm state, exit code, ...)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def ref(self) -> str:
        if self.kind in ("slurm", "hosts"):
            return f"{self.kind}:{self.name}"
        return f"{self.kind}/{self.namespace}/{self.name}"
