"""`runbook run RUNBOOK --job REF` / `--hosts-from-file FILE`: a whole failed job.

The job is resolved to its nodes (runbook/job/resolve.py), every node is walked at once through
the sweep's pool (read-only; proposals queued, never run), and the nodes' verdicts are merged
into one job verdict (runbook/job/merge.py). Exit codes: 0 the job was diagnosed (whatever it
found), 2 usage or a job that does not resolve, 3 no node of the job could be read.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from runbook.cli.options import load_config
from runbook.errors import UsageError

JOB_KEYS = (
    "job",
    "hosts_from_file",
    "inventory",
    "slurm_via",
    "ssh_user",
    "agent_namespace",
    "agent_selector",
    "forks",
    "timeout_per_host",
)


def job_option_decorators() -> list[Any]:
    return [
        click.option(
            "--job",
            metavar="KIND/NAMESPACE/NAME | slurm:JOBID",
            help="Diagnose a whole job: a Kubernetes Job, PyTorchJob, TFJob or MPIJob, or a "
            "Slurm job; every node it ran on is read at once.",
        ),
        click.option(
            "--hosts-from-file",
            type=click.Path(dir_okay=False),
            help="A job's nodes, one per line: a target or inventory name, then optional "
            "NAME=VALUE runbook variables (ranks=0,1 app_log_dir=...).",
        ),
        click.option(
            "--inventory",
            "-i",
            type=click.Path(),
            help="Ansible inventory naming how to reach a job's hosts (Slurm host names, "
            "names in --hosts-from-file).",
        ),
        click.option(
            "--slurm-via",
            metavar="TARGET",
            default="local",
            show_default=True,
            help="Where to run scontrol (e.g. ssh://login-1).",
        ),
        click.option(
            "--ssh-user",
            default="root",
            show_default=True,
            help="SSH user for a job's hosts not in --inventory.",
        ),
        click.option(
            "--agent-namespace",
            default="kube-system",
            show_default=True,
            help="Namespace of the node-agent pods (Kubernetes jobs).",
        ),
        click.option(
            "--agent-selector",
            default="app=node-agent",
            show_default=True,
            help="Label selector of the node-agent pods (Kubernetes jobs).",
        ),
        click.option(
            "--forks",
            type=click.IntRange(1, 1024),
            default=32,
            show_default=True,
            help="Nodes of a job read at once.",
        ),
        click.option(
            "--timeout-per-host",
            type=click.FloatRange(min=0.5),
            default=120.0,
            show_default=True,
            help="Seconds one node of a job may take, connect included.",
        ),
    ]


def _new_job_dir(runbook_id: str) -> Path:
    from runbook.rundir import new_path

    return new_path("jobs", runbook_id)


def _print_summary(verdict: dict[str, Any], run_dir: Path) -> None:
    job = verdict.get("job") or {}
    click.echo(
        f"job {job.get('ref')}: {verdict['root_cause']} ({verdict['confidence']}"
        f"{', shared cause' if verdict.get('scope') == 'shared' else ''})"
    )
    click.echo(f"  {verdict.get('statement')}")
    for node in verdict.get("nodes") or []:
        clock = node.get("clock")
        offset = (
            f"clock {clock['offset_s']:+.3f}s ±{clock['uncertainty_s'] * 1000:.0f}ms"
            if clock
            else "clock not measured"
        )
        what = node.get("root_cause") or f"{node.get('status')}: {node.get('error')}"
        click.echo(f"  {node['node']:<24} {what:<22} {offset}")
    for outlier in verdict.get("outliers") or []:
        click.echo(f"  outlier: {outlier['summary']}")
    click.echo(f"job report: {run_dir / 'job.md'}")
    click.echo(f"run directory: {run_dir}")


def run_job_command(
    ctx: click.Context,
    runbook_ref: str,
    var_items: tuple[str, ...],
    run_dir: str | None,
    fmt: str,
    db: str | None,
    job_kw: dict[str, Any],
    kw: dict[str, Any],
) -> None:
    from runbook.cli.app import parse_vars
    from runbook.cli.sweep import ssh_config_options
    from runbook.job.resolve import resolve_job
    from runbook.job.run import run_job
    from runbook.remedies.approval import Desk
    from runbook.render.sweep_progress import progress_for
    from runbook.spec import load_file, resolve
    from runbook.sweep.host import HostOptions
    from runbook.sweep.run import ProposalQueue
    from runbook.targets import TargetOptions

    if kw.get("jump"):
        raise UsageError("--jump applies to --target; give a job's bastions in --inventory")
    runbook = load_file(resolve(runbook_ref))
    variables = parse_vars(var_items)
    spec = resolve_job(
        job_kw["job"],
        hosts_file=job_kw["hosts_from_file"],
        inventory=job_kw["inventory"],
        slurm_via=job_kw["slurm_via"],
        ssh_user=job_kw["ssh_user"],
        agent_namespace=job_kw["agent_namespace"],
        agent_selector=job_kw["agent_selector"],
        kubectl=kw.get("kubectl") or "kubectl",
        kube_context=kw.get("kube_context"),
        target_options=TargetOptions(
            identities=tuple(Path(p) for p in kw.get("identities") or ()),
            known_hosts=Path(kw["known_hosts"]) if kw.get("known_hosts") else None,
            accept_new_host_keys=bool(kw.get("accept_new_host_keys")),
            connect_timeout=kw.get("connect_timeout"),
            ssh_config=kw.get("ssh_config"),
            kubectl=kw.get("kubectl") or "kubectl",
            kube_context=kw.get("kube_context"),
        ),
    )
    options = HostOptions(
        runbook=runbook,
        # every node's own variables (its pod, its ranks) win over the job-wide --var
        variables={},
        timeout_per_host=job_kw["timeout_per_host"],
        connect_timeout=kw.get("connect_timeout") or 10.0,
        identities=tuple(Path(p) for p in kw.get("identities") or ()),
        known_hosts=Path(kw["known_hosts"]) if kw.get("known_hosts") else None,
        accept_new_host_keys=bool(kw.get("accept_new_host_keys")),
        kubectl=kw.get("kubectl") or "kubectl",
        kube_context=kw.get("kube_context"),
        nsenter=kw.get("nsenter"),
        **ssh_config_options(kw.get("ssh_config")),
    )
    import dataclasses

    spec = dataclasses.replace(
        spec,
        nodes=tuple(
            dataclasses.replace(
                n, entry=dataclasses.replace(n.entry, variables={**variables, **n.entry.variables})
            )
            for n in spec.nodes
        ),
    )
    directory = Path(run_dir) if run_dir else _new_job_dir(runbook.id)
    cfg = load_config(ctx, db=db)
    with Desk(cfg) as desk:
        result = run_job(
            spec,
            options,
            directory,
            forks=job_kw["forks"],
            runbook_ref=runbook_ref,
            observer=progress_for(f"job {spec.ref}", sys.stderr),
            queue=ProposalQueue(desk, runbook_ref=runbook_ref, variables={}, options=options),
        )
    if fmt == "json":
        click.echo(json.dumps(result.verdict, indent=2, default=str))
    else:
        _print_summary(result.verdict, result.run_dir)
    raise click.exceptions.Exit(result.exit_code())
