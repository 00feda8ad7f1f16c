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

from runbook.cli.options import load_config, parse_vars
from runbook.errors import UsageError


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
    """`run --job`/`--hosts-from-file`: the job diagnosed (runbook.session.diagnose_job), its
    summary or JSON printed, the job's exit code."""
    from runbook.render.sweep_progress import progress_for
    from runbook.session import HostAccess, JobRequest, diagnose_job

    if kw.get("jump"):
        raise UsageError("--jump applies to --target; give a job's bastions in --inventory")
    request = JobRequest(
        runbook_ref=runbook_ref,
        job=job_kw["job"],
        hosts_from_file=job_kw["hosts_from_file"],
        inventory=job_kw["inventory"],
        slurm_via=job_kw["slurm_via"],
        ssh_user=job_kw["ssh_user"],
        agent_namespace=job_kw["agent_namespace"],
        agent_selector=job_kw["agent_selector"],
        forks=job_kw["forks"],
        timeout_per_host=job_kw["timeout_per_host"],
        variables=parse_vars(var_items),
        access=HostAccess.from_flags(kw),
        run_dir=Path(run_dir) if run_dir else None,
    )
    result = diagnose_job(
        request, load_config(ctx, db=db), lambda ref: progress_for(f"job {ref}", sys.stderr)
    )
    if fmt == "json":
        click.echo(json.dumps(result.verdict, indent=2, default=str))
    else:
        _print_summary(result.verdict, result.run_dir)
    raise click.exceptions.Exit(result.exit_code())
