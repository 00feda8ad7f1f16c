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
        kube_debug=job_kw["kube_debug"],
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
        # with where the run is kept, as a node's run says it (report, runs)
        data = {**result.verdict, "run_dir": str(result.run_dir)}
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        from runbook.render.job_summary import summary_lines

        for line in summary_lines(result.verdict, result.run_dir):
            click.echo(line)
    raise click.exceptions.Exit(result.exit_code())
