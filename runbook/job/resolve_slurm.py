"""A Slurm job (`slurm:JOBID`, `slurm:ARRAYID_TASK`, `slurm:HETID+OFFSET`) → its nodes and GPUs.

Commands, run through a `runner(command, timeout) -> CommandResult`: locally
(`local_runner()`) or on a login node over SSH (`transport_runner(SSHTransport(…))`):

    scontrol -d show job ID      the record and, with -d, each node's CPUs and GPU indices
    sacct -X -n -P -j ID -o …    only when the controller has forgotten the job (a finished job
                                 leaves slurmctld after MinJobAge, 300 s by default): the
                                 accounting record, without GPU indices
    scontrol show hostnames LIST the NodeList expanded by Slurm itself

Each host must be a host name or an address (transports/address.py `is_host`: nothing a
shell could expand, since an ssh config's `Match exec` may hand it to one), else the job is
refused in one line. Each becomes a sweep target: its entry in the Ansible inventory when one
is given (so `ansible_host`, port, key and ProxyJump apply; a short name also matches an
inventory FQDN), else `ssh://USER@HOST:22`. Ranks: scontrol does not say which task ran
where (the layout depends on srun's distribution and on what each task starts), so each node
gets one RankSpec(rank=None) with the node's GPU indices; the job's state, reason, exit code and
signal, start and end are in `JobSpec.details`. Variables on each node: `slurm_job_id` and
`nodes` (how many nodes the job spans).
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Callable, Sequence
from typing import Any

from runbook.errors import JobError
from runbook.job.models import JobNode, JobSpec, RankSpec
from runbook.job.resolve_hosts import default_ssh_user
from runbook.job.slurm_parse import (
    SACCT_FIELDS,
    SlurmJob,
    expand_hostlist,
    parse_sacct,
    parse_scontrol_jobs,
)
from runbook.sweep.inventory import HostEntry
from runbook.transports.address import HOST_RULE, is_host
from runbook.transports.base import CommandResult, Probe, Transport
from runbook.transports.local import LocalTransport

#: runs one shell command with a timeout (seconds); a transport's run, adapted
Runner = Callable[[str, float], CommandResult]

JOB_ID = re.compile(r"^\d+(?:_\d+|\+\d+)?$")
_FORGOTTEN = ("Invalid job id specified", "Invalid job id")


def transport_runner(transport: Transport) -> Runner:
    """A runner over any transport (SSHTransport to a login node, LocalTransport)."""

    def run(command: str, timeout: float) -> CommandResult:
        name = command.split()[0] if command.split() else "command"
        return transport.run(Probe(f"{name}.txt", command, timeout))

    return run


def local_runner() -> Runner:
    return transport_runner(LocalTransport())


def select_record(records: Sequence[SlurmJob], job_id: str) -> SlurmJob:
    """The record `job_id` names among what scontrol or sacct printed; JobError when none or
    several (an array or a heterogeneous job asked for by its bare id)."""
    if not records:
        raise JobError(f"slurm:{job_id}: no such job")
    if "_" in job_id or "+" in job_id:
        named = [r for r in records if r.ref == job_id]
        if named or len(records) == 1:
            return (named or list(records))[0]
    elif len(records) == 1:
        return records[0]
    refs = ", ".join(r.ref for r in records[:4]) + (", …" if len(records) > 4 else "")
    raise JobError(
        f"slurm:{job_id} is {len(records)} jobs ({refs}): name one, e.g. slurm:{records[0].ref}"
    )


def host_entry(
    host: str,
    inventory: Sequence[HostEntry],
    *,
    user: str,
    variables: dict[str, Any],
    user_given: bool = True,
) -> HostEntry:
    """The sweep target of a Slurm host: its inventory entry (the same name, else one name the
    FQDN of the other), else `ssh://USER@HOST`, reached as `ssh HOST` reaches it: the ssh
    config's Port (and User, when no --ssh-user was given) apply, never a port 22 written
    over them; `variables` win over the inventory's."""
    by_name = {e.name: e for e in inventory}
    entry = by_name.get(host) or next(
        (e for e in inventory if e.name.startswith(f"{host}.") or host.startswith(f"{e.name}.")),
        None,
    )
    if entry is None:
        return HostEntry(
            host, f"ssh://{user}@{host}:22", variables=dict(variables),
            user_given=user_given, port_given=False,
        )  # fmt: skip
    return dataclasses.replace(entry, name=host, variables={**entry.variables, **variables})


def job_spec_from_slurm(
    job: SlurmJob,
    hosts: Sequence[str],
    *,
    inventory: Sequence[HostEntry] = (),
    ssh_user: str | None = None,
    source: str = "scontrol",
) -> JobSpec:
    """Pure: a job record and its expanded NodeList → the JobSpec (see the module docstring)."""
    user = ssh_user or default_ssh_user()
    bad = [h for h in hosts if not is_host(h)]
    if bad:
        # a node list is read from the controller's text, which a job's own name can imitate:
        # a name is checked before it becomes a target (an ssh config's `Match exec` would
        # hand it to a shell)
        shown = ", ".join(repr(h[:120]) for h in bad[:3]) + (", …" if len(bad) > 3 else "")
        raise JobError(f"slurm:{job.ref}: {source} NodeList gave {shown}: not {HOST_RULE}")
    started = job.get("StartTime")
    failed = job.get("FailedNode")
    failed_hosts = expand_hostlist(failed) if failed else []
    variables = {"slurm_job_id": job.ref, "nodes": len(hosts)}
    nodes = tuple(
        JobNode(
            h,
            host_entry(
                h, inventory, user=user, variables=variables, user_given=ssh_user is not None
            ),
            (None,),
        )
        for h in hosts
    )
    ranks = tuple(
        RankSpec(
            rank=None,
            node=h,
            gpus=job.gpus_on(h),
            started_at=started,
            phase=job.state,
            reason="FailedNode" if h in failed_hosts else None,
        )
        for h in hosts
    )
    code, signal = job.exit
    details = {
        "job_id": job.job_id,
        "array_job_id": job.get("ArrayJobId"),
        "array_task_id": job.get("ArrayTaskId"),
        "het_job_id": job.get("HetJobId"),
        "job_name": job.get("JobName"),
        "user": job.get("UserId"),
        "partition": job.get("Partition"),
        "state": job.state,
        "reason": job.get("Reason"),
        "exit_code": code,
        "signal": signal,
        "start_time": started,
        "end_time": job.get("EndTime"),
        "node_list": job.node_list,
        "num_nodes": job.get("NumNodes"),
        "num_tasks": job.get("NumTasks"),
        "batch_host": job.get("BatchHost"),
        "failed_node": failed,
        "tres": job.get("AllocTRES") or job.get("TRES"),
        "source": source,
    }
    return JobSpec(kind="slurm", name=job.ref, nodes=nodes, ranks=ranks, details=details)


def _run(runner: Runner, command: str, timeout: float) -> CommandResult:
    result = runner(command, timeout)
    if result.failure and result.failure != "permission denied":
        raise JobError(f"{command}: {result.failure}")
    return result


def _why(result: CommandResult) -> str:
    lines = [line.strip() for line in (result.stderr or result.stdout).splitlines() if line.strip()]
    return lines[-1] if lines else f"exit {result.exited}"


def resolve_slurm_job(
    job_id: str,
    *,
    runner: Runner | None = None,
    inventory: Sequence[HostEntry] = (),
    ssh_user: str | None = None,
    timeout: float = 30.0,
) -> JobSpec:
    """Ask Slurm where job `job_id` ran; see the module docstring. Every failure (no such
    job, a pending job, scontrol missing or failing) is a one-line JobError."""
    job_id = job_id.strip()
    if not JOB_ID.match(job_id):
        raise JobError(f"slurm:{job_id}: a Slurm job id is digits, ID_TASK or ID+OFFSET")
    run = runner or local_runner()
    quoted = shlex.quote(job_id)
    shown = _run(run, f"scontrol -d show job {quoted}", timeout)
    source = "scontrol"
    if shown.exited == 0:
        job = select_record(parse_scontrol_jobs(shown.stdout), job_id)
    elif any(text in shown.stderr + shown.stdout for text in _FORGOTTEN):
        fields = ",".join(SACCT_FIELDS)
        acct = _run(run, f"sacct -X -n -P -j {quoted} -o {fields}", timeout)
        source = "sacct"
        if acct.exited != 0:
            raise JobError(f"slurm:{job_id}: sacct: {_why(acct)}")
        try:
            job = select_record(parse_sacct(acct.stdout), job_id)
        except JobError as exc:
            if "no such job" in str(exc):
                raise JobError(f"slurm:{job_id}: neither scontrol nor sacct knows it") from None
            raise
    else:
        raise JobError(f"slurm:{job_id}: scontrol: {_why(shown)}")
    node_list = job.node_list
    if not node_list:
        why = f"Reason={job.get('Reason')}" if job.get("Reason") else "no NodeList"
        raise JobError(f"slurm:{job.ref} is {job.state or 'unknown'} and ran on no node ({why})")
    expanded = _run(run, f"scontrol show hostnames {shlex.quote(node_list)}", timeout)
    if expanded.exited != 0:
        raise JobError(f"slurm:{job.ref}: scontrol show hostnames: {_why(expanded)}")
    hosts = list(dict.fromkeys(h.strip() for h in expanded.stdout.split() if h.strip()))
    if not hosts:
        raise JobError(f"slurm:{job.ref}: scontrol expanded NodeList={node_list} to no host")
    return job_spec_from_slurm(job, hosts, inventory=inventory, ssh_user=ssh_user, source=source)
