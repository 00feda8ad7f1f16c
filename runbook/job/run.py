"""A job run: every node of a resolved job through the sweep's pool at once (read-only, one
connection per node, each node's clock measured first), then one job verdict.

The run directory holds `job.json` (the job verdict), `job.md` (the report), the sweep's own
four reports for the per-node view, and each node's run directory (`nodes/NAME/`: events,
bundle, verdict) so a node's evidence can be replayed alone.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from runbook import atomic
from runbook.job.clock import SAMPLES
from runbook.job.merge import merge_job
from runbook.job.models import JobSpec
from runbook.render.job_markdown import job_markdown
from runbook.sweep.host import HostOptions
from runbook.sweep.results import HostResult, SweepObserver, SweepResult
from runbook.sweep.run import ProposalQueue, run_sweep


@dataclass
class JobResult:
    verdict: dict[str, Any]
    sweep: SweepResult
    run_dir: Path

    def exit_code(self) -> int:
        """0 the job was diagnosed (whatever it found); 3 no node of it could be read."""
        return 3 if not any(h.verdict is not None for h in self.sweep.hosts) else 0


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return False
    return True


def named_by_hostname(spec: JobSpec, hosts: list[HostResult]) -> tuple[JobSpec, list[HostResult]]:
    """A node known only by its address (an `ssh://10.0.0.5` line of a hosts file) is named
    by the hostname it reported, when that name is unique in the job: "rank 5 on gpu-node-3"
    reads better at 3 a.m. than "rank 5 on 10.0.0.5"."""
    names = {h.host for h in hosts}
    rename: dict[str, str] = {}
    for host in hosts:
        reported = host.verdict.node if host.verdict else ""
        if (
            _is_address(host.host)
            and reported
            and reported not in names
            and reported not in rename.values()
        ):
            rename[host.host] = reported
    if not rename:
        return spec, hosts
    spec = replace(
        spec,
        nodes=tuple(replace(n, name=rename.get(n.name, n.name)) for n in spec.nodes),
        ranks=tuple(replace(r, node=rename.get(r.node, r.node)) for r in spec.ranks),
    )
    return spec, [replace(h, host=rename.get(h.host, h.host)) for h in hosts]


def run_job(
    spec: JobSpec,
    options: HostOptions,
    run_dir: Path,
    *,
    forks: int,
    runbook_ref: str,
    observer: SweepObserver | None = None,
    queue: ProposalQueue | None = None,
) -> JobResult:
    from runbook.sweep.reports import write_reports

    if not run_dir.is_dir():
        run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        run_dir.chmod(0o700)  # owner-only whatever the umask: it holds every node's evidence
    options = replace(
        options,
        clock_samples=options.clock_samples or SAMPLES,
        keep_dir=options.keep_dir or run_dir / "nodes",
    )
    entries = [node.entry for node in spec.nodes]
    sweep = run_sweep(
        entries,
        options,
        forks=max(1, min(forks, len(entries))),
        runbook_ref=runbook_ref,
        source=f"job {spec.ref}",
        observer=observer,
        queue=queue,
    )
    spec, hosts = named_by_hostname(spec, sweep.hosts)
    verdict = merge_job(spec, hosts)
    verdict["runbook"] = options.runbook.id
    verdict["duration_s"] = round(sweep.duration_s, 3)
    write_reports(sweep, run_dir / "nodes-report")
    atomic.write_text(run_dir / "job.json", json.dumps(verdict, indent=2, default=str) + "\n")
    atomic.write_text(run_dir / "job.md", job_markdown(verdict))
    return JobResult(verdict, sweep, run_dir)
