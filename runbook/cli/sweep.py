"""`runbook sweep`, `sweep-merge`, `analyze-dir` and `collect-plan`: the fleet commands.

Exit codes of sweep, sweep-merge and analyze-dir: 0 every host healthy, 1 a finding (a root
cause) or an inconclusive verdict on some host, 3 some hosts not swept (unreachable, refused,
hung past the deadline) and none of those, 2 usage or a bad inventory, another sweep of the
same inventory holds the lock, or no space left for the reports. Inconclusive hosts are
counted and listed apart from findings, yet exit 1 as they do: the runbook could not clear
them, so a scheduled sweep must not report the fleet green while a node nobody has looked at
may be the one that kills the next job. Registered by runbook/cli/app.py through `COMMANDS`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from runbook import atomic
from runbook.cli.options import (
    DB_HELP,
    complete_runbook,
    format_option,
    load_config,
    parse_vars,
    runbook_option,
    textfile_dir_option,
    var_option,
)
from runbook.errors import UsageError
from runbook.output import count

if TYPE_CHECKING:
    from runbook.session import SweepRequest
    from runbook.sweep.checkpoint import Checkpoint
    from runbook.sweep.inventory import HostEntry
    from runbook.sweep.results import SweepResult


def _default_report_dir(kind: str, runbook_id: str) -> Path:
    from runbook.rundir import new_path

    return new_path("sweeps", kind, runbook_id)


def _finish(
    sweep: SweepResult,
    report_dir: Path,
    fmt: str,
    checkpoint: Checkpoint | None = None,
    *,
    textfile_dir: Path | None = None,
) -> None:
    """Write the four reports (and runbook.prom into `textfile_dir`), print the result, exit
    with the sweep's code. `checkpoint` (a sweep's progress.jsonl) is marked finished once
    the reports are written."""
    from runbook.render.sweep_summary import summary_lines
    from runbook.sweep.reports import write_reports

    written = write_reports(sweep, report_dir, textfile_dir=textfile_dir)
    if checkpoint is not None:
        checkpoint.finish()
    if fmt == "json":
        click.echo(written["sweep.json"].read_text(encoding="utf-8"), nl=False)
    else:
        for line in summary_lines(sweep, written.values()):
            click.echo(line)
    raise click.exceptions.Exit(sweep.exit_code())


def _textfile_dir(ctx: click.Context) -> Path | None:
    """The textfile directory the configuration (or --textfile-dir) names, if any."""
    textfile: Path | None = load_config(ctx, notifies=False).textfile_dir
    return textfile


def _progress(title: str) -> Any:
    """The live bar when stderr is a terminal, plain lines otherwise (both on stderr)."""
    from runbook.render.sweep_progress import progress_for

    return progress_for(title, sys.stderr)


@click.command("sweep")
@click.argument("runbook_ref", metavar="RUNBOOK", shell_complete=complete_runbook)
@click.option("--inventory", "-i", help="Ansible inventory: file, directory or script.")
@click.option("--limit", metavar="PATTERN", help="Ansible host pattern (as ansible --limit).")
@click.option(
    "--kube-selector",
    metavar="LABELS",
    help="Instead of an inventory: the Kubernetes nodes with these labels, each through its "
    "node-agent pod (kubectl exec + nsenter).",
)
@click.option(
    "--kube-namespace",
    default="kube-system",
    show_default=True,
    help="Namespace of the node-agent pods.",
)
@click.option(
    "--agent-selector",
    default="app=node-agent",
    show_default=True,
    help="Label selector of the node-agent pods.",
)
@click.option("--agent-container", help="Container of the node-agent pod to exec into.")
@click.option(
    "--kube-debug",
    is_flag=True,
    help="With --kube-selector: reach each node through a debug pod made for it "
    "(kubectl-debug://NODE, deleted after it) instead of its node agent.",
)
@click.option(
    "--forks",
    type=click.IntRange(1, 1024),
    default=16,
    show_default=True,
    help="Hosts in flight at once.",
)
@click.option(
    "--timeout-per-host",
    type=click.FloatRange(min=0.5),
    default=120.0,
    show_default=True,
    help="Seconds one host may take, connect included.",
)
@click.option(
    "--report",
    "report_dir",
    type=click.Path(file_okay=False),
    help="Directory for sweep.json, sweep.md, junit.xml, runbook.prom "
    "(default: a new one in the state dir).",
)
@format_option("text", "json", default="text")
@click.option(
    "--keep-bundles",
    is_flag=True,
    help="Keep each host's run directory (evidence bundle, events, verdict) under REPORT/hosts/.",
)
@click.option("--shard", metavar="K/N", help="Sweep only shard K of N (stable by host name).")
@click.option(
    "--var",
    "var_items",
    multiple=True,
    metavar="NAME=VALUE",
    help="Set a runbook variable for every host (repeatable).",
)
@click.option(
    "--identity",
    "identities",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="SSH key for hosts without ansible_ssh_private_key_file (repeatable).",
)
@click.option(
    "--known-hosts",
    type=click.Path(dir_okay=False),
    help="known_hosts for hosts without UserKnownHostsFile (default ~/.ssh/known_hosts).",
)
@click.option(
    "--accept-new-host-keys",
    is_flag=True,
    help="Trust and record a host key seen for the first time (a changed key is still refused).",
)
@click.option(
    "--connect-timeout",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    help="Seconds to connect and authenticate (at most the time left of the host's deadline).",
)
@click.option(
    "--ssh-config",
    metavar="FILE",
    envvar="RUNBOOK_SSH_CONFIG",
    help="OpenSSH client config resolving inventory names, as `ssh NAME` does (default "
    "~/.ssh/config; `none` for none); inventory variables win over it.",
)
@click.option(
    "--nsenter",
    type=click.IntRange(min=1),
    is_flag=False,
    flag_value=1,
    default=None,
    metavar="[PID]",
    help="Run every command inside PID's namespaces (--nsenter alone: PID 1).",
)
@click.option(
    "--kubectl", default="kubectl", show_default=True, help="kubectl binary for kubectl:// hosts."
)
@click.option("--context", "kube_context", help="kubectl context.")
@click.option("--db", type=click.Path(dir_okay=False), metavar="FILE|URL", help=DB_HELP)
@textfile_dir_option
@click.option(
    "--inventory-timeout",
    type=click.FloatRange(min=1),
    default=120.0,
    show_default=True,
    help="Seconds ansible-inventory (or kubectl) may take.",
)
@click.option(
    "--resume",
    is_flag=True,
    help="With --report DIR: when an earlier sweep of this inventory into DIR was interrupted, "
    "keep the results of the hosts it finished and sweep only the rest.",
)
@click.pass_context
def sweep(
    ctx: click.Context,
    /,
    runbook_ref: str,
    fmt: str,
    db: str | None,
    shard: str | None,
    var_items: tuple[str, ...],
    **flags: Any,
) -> None:
    """Sweep RUNBOOK read-only over every host of an inventory: collection and analysis only,
    never a remedy; each host's proposals go to the approval queue.

    Each host's result is appended to REPORT/progress.jsonl as it completes. A sweep killed
    before its end can be re-run with the same --report DIR: it says which hosts the
    interrupted one had finished, and with --resume sweeps only the others (the reports then
    cover every host, the reused ones marked); without --resume it starts over and keeps the
    old progress file as progress.interrupted-STAMP.jsonl.

    \b
    runbook sweep nccl-init-failure -i inventory/ --limit gpu_nodes --forks 64
    runbook sweep nccl-init-failure --kube-selector nvidia.com/gpu.present=true --shard 2/8
    runbook sweep nccl-init-failure -i inventory/ --report /var/lib/sweeps/nightly --resume
    """
    from runbook.cli.signatures import use_signatures
    from runbook.session import run_sweep_session, sweep_fleet

    use_signatures(ctx, None)  # the config's signatures.user_catalog, if it names one
    request = _sweep_request(runbook_ref, shard, var_items, flags)
    with sweep_fleet(request, _earlier_sweep, on_close=ctx.call_on_close) as session:
        cfg = load_config(ctx, db=db)
        try:
            result = run_sweep_session(session, cfg, _progress(f"sweep {session.runbook.id}"))
            _finish(
                result, session.report_dir, fmt, session.checkpoint, textfile_dir=cfg.textfile_dir
            )
        except KeyboardInterrupt as exc:  # ^C, SIGTERM: every host finished is in progress.jsonl
            from runbook.interrupt import as_interrupted

            hint = (
                f"the same sweep with --report {session.report_dir} --resume sweeps only the "
                "hosts not finished"
            )
            raise as_interrupted(exc, hint=hint) from None


#: the sweep's own flags, as SweepRequest takes them (the host flags go to HostAccess)
_REQUEST_KEYS = (
    "inventory",
    "limit",
    "kube_selector",
    "kube_namespace",
    "agent_selector",
    "agent_container",
    "kube_debug",
    "forks",
    "timeout_per_host",
    "keep_bundles",
    "inventory_timeout",
    "resume",
)


def _sweep_request(
    runbook_ref: str, shard: str | None, var_items: tuple[str, ...], flags: dict[str, Any]
) -> SweepRequest:
    """The sweep the flags ask for; a UsageError for one that cannot run (checked before the
    shard and the variables are read, as the command always has)."""
    from runbook.session import HostAccess, SweepRequest
    from runbook.sweep import shard as shard_mod

    report_dir = flags.get("report_dir")
    request = SweepRequest(
        runbook_ref=runbook_ref,
        report_dir=Path(report_dir) if report_dir else None,
        access=HostAccess.from_flags(flags),
        **{key: flags[key] for key in _REQUEST_KEYS},
    )
    request.check()
    return replace(
        request,
        shard=shard_mod.parse_shard(shard) if shard else None,
        variables=parse_vars(var_items),
    )


def _earlier_sweep(
    out: Path, key: str, runbook_ref: str, entries: Sequence[HostEntry], *, resume: bool
) -> tuple[dict[str, Any], str | None]:
    """An interrupted sweep's progress in the report directory: said on stderr; with --resume
    the results of the hosts it finished (still in the inventory), else moved aside."""
    from runbook.render.sweep_summary import names as host_names
    from runbook.sweep import checkpoint

    earlier = checkpoint.read(out)
    if earlier is None or earlier.finished:
        if resume:
            click.echo(f"nothing to resume in {out}: sweeping every host", err=True)
        return {}, None
    done = sorted(earlier.results)
    if not earlier.of(key, runbook_ref):
        kept = checkpoint.move_aside(earlier)
        click.echo(
            f"{earlier.path} is the progress of an interrupted sweep of another inventory or "
            f"runbook ({earlier.header.get('key')}, {earlier.header.get('runbook')}); "
            f"starting over, it is kept as {kept.name}",
            err=True,
        )
        return {}, None
    click.echo(
        f"an earlier sweep of this inventory was interrupted after {len(done)} of "
        f"{count(earlier.total, 'host')}; finished: {host_names(done) or 'none'} (it started "
        f"{earlier.started_at or 'at an unknown time'})",
        err=True,
    )
    if not resume:
        kept = checkpoint.move_aside(earlier)
        click.echo(
            f"starting over (its progress is kept as {kept}; --resume would sweep only the "
            "hosts it had not finished)",
            err=True,
        )
        return {}, None
    names = {e.name for e in entries}
    reused = {name: replace(r, reused=True) for name, r in earlier.results.items() if name in names}
    gone = [name for name in done if name not in names]
    click.echo(
        f"resuming: reusing {len(reused)} finished hosts' results, sweeping the other "
        f"{len(names) - len(reused)}"
        + (f" ({len(gone)} finished hosts are no longer in the inventory)" if gone else ""),
        err=True,
    )
    return reused, earlier.started_at or None


@click.command("sweep-merge")
@click.argument("dirs", nargs=-1, required=True, type=click.Path(exists=True))
@click.option(
    "--report",
    "report_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Directory for the merged reports.",
)
@format_option("text", "json", default="text")
@textfile_dir_option
@click.pass_context
def sweep_merge(ctx: click.Context, dirs: tuple[str, ...], report_dir: str, fmt: str) -> None:
    """Join shard reports (directories holding sweep.json) into one set of reports."""
    from runbook.sweep.merge import merge, read_report

    merged = merge([read_report(Path(d)) for d in dirs])
    _finish(merged, Path(report_dir), fmt, textfile_dir=_textfile_dir(ctx))


@click.command("analyze-dir")
@click.argument("directory", type=click.Path(exists=True, file_okay=False))
@runbook_option()
@click.option(
    "--report",
    "report_dir",
    type=click.Path(file_okay=False),
    help="Directory for the reports (default: a new one in the state dir).",
)
@format_option("text", "json", default="text")
@click.option(
    "--forks",
    type=click.IntRange(1, 256),
    default=4,
    show_default=True,
    help="Bundles analysed at once.",
)
@var_option()
@textfile_dir_option
@click.pass_context
def analyze_dir(
    ctx: click.Context,
    directory: str,
    runbook_ref: str,
    report_dir: str | None,
    fmt: str,
    forks: int,
    var_items: tuple[str, ...],
) -> None:
    """Analyse every evidence bundle in DIRECTORY (HOST.tar.gz as playbooks/collect.yml fetches
    them, or HOST/ bundle directories) and write the same reports as `sweep`. Proposals are
    reported, not queued: a bundle is not a live node to plan against."""
    from runbook.cli.signatures import use_signatures
    from runbook.spec import load_file, resolve
    from runbook.sweep.analyze import analyze_dir as analyze

    use_signatures(ctx, None)  # the config's signatures.user_catalog, if it names one
    runbook = load_file(resolve(runbook_ref))
    out = Path(report_dir) if report_dir else _default_report_dir("analyze", runbook.id)
    result = analyze(
        Path(directory),
        runbook,
        runbook_ref=runbook_ref,
        variables=parse_vars(var_items),
        forks=forks,
        observer=_progress(f"analyze {runbook.id}"),
    )
    _finish(result, out, fmt, textfile_dir=_textfile_dir(ctx))


@click.command("collect-plan")
@click.argument("runbook_ref", metavar="RUNBOOK", shell_complete=complete_runbook)
@var_option()
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False),
    help="Write the plan here (default: standard output).",
)
@format_option("yaml", "json", default="yaml")
def collect_plan(
    var_items: tuple[str, ...], runbook_ref: str, output: str | None, fmt: str
) -> None:
    """Print RUNBOOK's probes, rendered, as extra vars for playbooks/collect.yml
    (`ansible-playbook playbooks/collect.yml -e @plan.yml -e evidence_collect_dest=DIR`)."""
    from runbook.spec import load_file, resolve
    from runbook.sweep.plan import collection_plan, dump_plan

    plan = collection_plan(load_file(resolve(runbook_ref)), parse_vars(var_items))
    text = dump_plan(plan) if fmt == "yaml" else json.dumps(plan, indent=2) + "\n"
    for note in plan["evidence_collect_notes"]:
        click.echo(f"note: {note}", err=True)
    if output:
        try:
            atomic.write_text(Path(output), text, mode=0o644)
        except OSError as exc:
            raise UsageError(f"cannot write {output}: {exc.strerror or exc}") from None
    else:
        click.echo(text, nl=False)


COMMANDS = [sweep, sweep_merge, analyze_dir, collect_plan]
