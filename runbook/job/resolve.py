"""`--job REF` (or `--hosts-from-file FILE`) → the job's JobSpec, through the right resolver.

    KIND/NAMESPACE/NAME   a Kubernetes workload: Job, PyTorchJob, TFJob, MPIJob (any case,
                          singular or plural, with or without the group: `pytorchjobs`,
                          `jobs.batch`)                      → runbook/job/resolve_kube.py
    slurm:JOBID           a Slurm job, array element (ID_TASK) or het component (ID+OFFSET)
                                                             → runbook/job/resolve_slurm.py
    hosts:FILE            a hosts file (what --hosts-from-file reads)
                                                             → runbook/job/resolve_hosts.py

`JobSpec.ref` prints a resolved job back in this form.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from runbook.errors import JobError
from runbook.job.models import JobSpec
from runbook.job.resolve_hosts import load_hosts_file
from runbook.job.resolve_kube import kube_kind, resolve_kube_job
from runbook.job.resolve_slurm import (
    JOB_ID,
    Runner,
    local_runner,
    resolve_slurm_job,
    transport_runner,
)
from runbook.sweep.inventory import HostEntry, load_inventory
from runbook.targets import TargetOptions, open_target

#: a namespace is a DNS label; a workload name a DNS subdomain (RFC 1123, lower case)
_NAMESPACE = re.compile(r"^[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?$")
_NAME = re.compile(r"^[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?$")
FORMS = "KIND/NAMESPACE/NAME (Job, PyTorchJob, TFJob, MPIJob), slurm:JOBID or hosts:FILE"


def parse_job_ref(text: str) -> tuple[str, str | None, str]:
    """`KIND/NAMESPACE/NAME` → (the kind as Kubernetes spells it, namespace, name);
    `slurm:JOBID` → ("slurm", None, JOBID); `hosts:FILE` → ("hosts", None, FILE).
    A JobError (a UsageError, exit 2) with one line saying what is wrong otherwise."""
    ref = text.strip()
    scheme, colon, rest = ref.partition(":")
    if colon and scheme.lower() == "slurm":
        if not JOB_ID.match(rest.strip()):
            raise JobError(
                f"--job {text!r}: a Slurm job is slurm:JOBID, slurm:ID_TASK or slurm:ID+N"
            )
        return "slurm", None, rest.strip()
    if colon and scheme.lower() == "hosts":
        if not rest.strip():
            raise JobError(f"--job {text!r}: hosts:FILE needs a file")
        return "hosts", None, rest.strip()
    parts = ref.split("/")
    if len(parts) != 3 or not all(parts):
        raise JobError(f"--job {text!r}: expected {FORMS}")
    kind, namespace, name = parts
    spec = kube_kind(kind)
    if spec is None:
        raise JobError(
            f"--job {text!r}: unsupported kind {kind!r} (Job, PyTorchJob, TFJob or MPIJob)"
        )
    if not _NAMESPACE.match(namespace):
        raise JobError(f"--job {text!r}: {namespace!r} is not a Kubernetes namespace name")
    if not _NAME.match(name):
        raise JobError(f"--job {text!r}: {name!r} is not a Kubernetes object name")
    return spec.kind, namespace, name


def _inventory(inventory: str | Path | Sequence[HostEntry] | None) -> Sequence[HostEntry]:
    if inventory is None:
        return ()
    if isinstance(inventory, (str, Path)):
        return load_inventory(str(inventory))
    return inventory


def resolve_job(
    ref: str | None = None,
    *,
    hosts_file: str | Path | None = None,
    inventory: str | Path | Sequence[HostEntry] | None = None,
    slurm_via: str | Runner | None = None,
    target_options: TargetOptions | None = None,
    ssh_user: str | None = None,
    kubectl: str = "kubectl",
    kube_context: str | None = None,
    agent_namespace: str = "kube-system",
    agent_selector: str = "app=node-agent",
    agent_container: str | None = None,
    timeout: float = 60.0,
    kube_debug: bool = False,
) -> JobSpec:
    """The job `ref` names (or the hosts file `hosts_file`), resolved to its ranks and nodes.

    `inventory` (an Ansible inventory source, or its entries already loaded) says how Slurm
    and hosts-file nodes are reached, else `ssh://SSH_USER@HOST:22`; `kubectl`,
    `kube_context` and the `agent_*` options how Kubernetes nodes are (their node-agent
    pods, as for sweeps). `slurm_via` is where scontrol runs: `local` (default), a target
    such as `ssh://login-1` (opened with `target_options`, closed after) or a runner. Every
    failure to resolve is a one-line JobError; a login node that cannot be reached is the
    TargetError of opening it."""
    if (ref is None) == (hosts_file is None):
        raise JobError("give one of --job REF or --hosts-from-file FILE")
    if hosts_file is None:
        kind, namespace, name = parse_job_ref(str(ref))
        if kind not in ("slurm", "hosts"):
            return resolve_kube_job(
                kind,
                str(namespace),
                name,
                kubectl=kubectl,
                context=kube_context,
                agent_namespace=agent_namespace,
                agent_selector=agent_selector,
                agent_container=agent_container,
                timeout=timeout,
                debug=kube_debug,
            )
    else:
        kind, name = "hosts", str(hosts_file)
    entries = _inventory(inventory)
    if kind == "hosts":
        return load_hosts_file(name, inventory=entries, ssh_user=ssh_user)
    if slurm_via is None or slurm_via == "local":
        return resolve_slurm_job(
            name, runner=local_runner(), inventory=entries, ssh_user=ssh_user, timeout=timeout
        )
    if callable(slurm_via):
        return resolve_slurm_job(
            name, runner=slurm_via, inventory=entries, ssh_user=ssh_user, timeout=timeout
        )
    transport = open_target(slurm_via, target_options or TargetOptions())
    try:
        return resolve_slurm_job(
            name,
            runner=transport_runner(transport),
            inventory=entries,
            ssh_user=ssh_user,
            timeout=timeout,
        )
    finally:
        transport.close()
