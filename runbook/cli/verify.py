"""`runbook verify ID` and `runbook replay-stages`: prove a fix held (docs/recovery.md).

Exit codes: 0 verified / every stage fits; 1 failed verification / a stage did not fit, the
check could not run on the node (`not-run`: all_reduce_perf or the job's command not found, no
GPU), or the proposal cannot be verified (not a succeeded change: a failed run, a diagnostic);
2 usage; 3 the target is unreachable.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.markup import escape

from runbook.cli.options import (
    DB_HELP,
    complete_proposal,
    format_option,
    load_config,
    parse_vars,
    proposal_id,
    target_options,
    textfile_dir_option,
)
from runbook.output import output_console

if TYPE_CHECKING:
    from runbook.verify.stages import ReplayStage, StageResult

_REPLAY_OPTIONS = [
    click.option("--cgroup", "pod_cgroup", metavar="DIR",
                 help="The pod's memory cgroup (v1 or v2 directory) the job runs under."),
    click.option("--command", "job_command", metavar="CMD",
                 help="The job's command, with {workers} {prefetch} {batch} (any knob of the "
                      "stages) where the stage's values go; each value is shell-quoted."),
    click.option("--stage", "stages", multiple=True, metavar="K=V[,K=V…]",
                 help="One stage's knobs, in order (repeatable)."),
    click.option("--headroom", default="10%", show_default=True,
                 help="Stop a stage whose working set comes this close to the limit "
                      "(a % of the limit, or a size: 256Mi)."),
    click.option("--stage-seconds", type=click.FloatRange(min=1), default=300.0,
                 show_default=True, help="A stage still running after this long has held."),
    click.option("--collective-pattern", metavar="REGEX",
                 help="The job's output line that marks its first collective "
                      "(default: Init COMPLETE or all_reduce)."),
    click.option("--python", default="python3", show_default=True,
                 help="The node's Python, which runs the stage watcher."),
]


def replay_options(func: Any) -> Any:
    for decorator in reversed(_REPLAY_OPTIONS):
        func = decorator(func)
    return func


def _desk(ctx: click.Context, db: str | None) -> Any:
    from runbook.remedies.approval import Desk

    return Desk(load_config(ctx, db=db))


def _stage_printer(
    console: Console,
) -> tuple[Callable[[ReplayStage], None], Callable[[StageResult], None]]:
    from runbook.render.verify import print_lines, stage_lines

    def started(stage: ReplayStage) -> None:
        console.print(f"\n[bold]━━ replay stage {stage.index}[/]: {escape(stage.label)}")

    def done(result: StageResult) -> None:
        style = "green" if result.passed else "bold red"
        lines = stage_lines(result.as_dict())
        console.print(f"  [{style}]{escape(lines[0])}[/]")
        print_lines(console, [f"  {line}" for line in lines[1:]])

    return started, done


@click.command("verify")
@click.argument("pid", metavar="ID", shell_complete=complete_proposal, callback=proposal_id)
@click.option("--target", "-t", help="Where to check (default: the proposal's own target).")
@click.option("--var", "var_items", multiple=True, metavar="NAME=VALUE",
              help="A variable of nccl-recovery-check (gpus, repeats, nodes, hosts, nics, "
                   "min_busbw, …).")
@replay_options
@click.option("--no-replay", is_flag=True, help="Only the collective test (the reason says so).")
@click.option("--db", type=click.Path(dir_okay=False), metavar="FILE|URL", help=DB_HELP)
@click.option("--as", "as_user", metavar="NAME", help="Record NAME as who verified.")
@click.option("--run-dir", type=click.Path(file_okay=False),
              help="Keep this check's artifacts here.")
@format_option("text", "json", default="text")
@textfile_dir_option
@target_options
@click.pass_context
def verify_cmd(
    ctx: click.Context, /, pid: str, target: str | None, var_items: tuple[str, ...],
    pod_cgroup: str | None, job_command: str | None, stages: tuple[str, ...], headroom: str,
    stage_seconds: float, collective_pattern: str | None, python: str, no_replay: bool,
    db: str | None, as_user: str | None, run_dir: str | None, fmt: str, **kw: Any,
) -> None:
    """Check that proposal ID's fix held: the nccl-recovery-check collective test on the node,
    then (memory remedies, or with --command) the staged replay of the job under the pod's
    limit; record `verified`, `failed-verification`, or `not-run` (the check could not run:
    a tool missing on the node, no GPU) against ID; exit 0 only when verified."""
    from runbook.cli.verify_offer import open_stored_target
    from runbook.remedies import plans
    from runbook.remedies.approval import Refused, actor_name
    from runbook.render.console import GuidedConsole
    from runbook.render.verify import print_verification
    from runbook.session import TargetSpec
    from runbook.verify.check import ReplayRequest, new_run_dir, verify
    from runbook.verify.record import verifiable

    variables = parse_vars(var_items)
    request = ReplayRequest(command=job_command, stages=stages, pod_cgroup=pod_cgroup,
                            headroom=headroom, duration_s=stage_seconds, python=python,
                            collective_pattern=collective_pattern, skip=no_replay)
    console = output_console(stderr=fmt == "json")
    with _desk(ctx, db) as desk:
        proposal = desk.store.get(pid)
        why = verifiable(proposal)
        if why:
            raise Refused(why)
        if target:
            transport = TargetSpec.from_flags(target, kw).open()
        elif proposal.target:
            stored = plans.Target.from_dict(proposal.target)
            if not stored.live:
                raise click.UsageError(
                    f"{pid} was proposed from {stored.url}: a bundle is not a node; "
                    "give --target ssh://… (the live node)")
            transport = open_stored_target(stored)
        else:
            raise click.UsageError(f"{pid} records no target: give --target")
        started, done = _stage_printer(console)
        try:
            result = verify(
                desk, pid, transport,
                variables=variables,
                request=request,
                node=proposal.node,
                observer=GuidedConsole(console),
                run_dir=Path(run_dir) if run_dir else new_run_dir(),
                actor=actor_name(as_user),
                on_stage=started,
                on_result=done,
            )
        finally:
            transport.close()
    if fmt == "json":
        click.echo(json.dumps(result.proposal.verification, indent=2, default=str))
    else:
        console.print()
        print_verification(console, result.proposal.verification or {})
        if result.run_dir:
            console.print(f"\nrun directory: {result.run_dir}")
    if not result.verified:
        raise click.exceptions.Exit(1)


@click.command("replay-stages")
@click.option("--target", "-t", required=True, help="The node (as for `run`).")
@replay_options
@click.option("--original", metavar="K=V[,K=V…]",
              help="The job's original configuration: stages restore it one knob at a time "
                   "(workers, then prefetch, then batch) from a reduced start.")
@click.option("--expect-limit", metavar="SIZE",
              help="The limit the fix set: refuse to replay under a smaller one.")
@format_option("text", "json", default="text")
@target_options
def replay_stages_cmd(
    target: str, pod_cgroup: str | None, job_command: str | None, stages: tuple[str, ...],
    headroom: str, stage_seconds: float, collective_pattern: str | None, python: str,
    original: str | None, expect_limit: str | None, fmt: str, **kw: Any,
) -> None:
    """Re-run a job's configuration stage by stage in its pod's memory cgroup, recording each
    stage's pod peak (per container), per-rank peak and first collective; stop at the first
    stage that comes within the headroom of the limit, before the kernel OOM-kills anything."""
    from runbook.render.verify import print_lines, replay_lines
    from runbook.session import TargetSpec
    from runbook.units import parse_size
    from runbook.verify.replay import DEFAULT_PATTERN, ReplaySpec, run_replay
    from runbook.verify.stages import ladder, parse_headroom, parse_knobs, stages_from

    if not pod_cgroup or not job_command:
        raise click.UsageError("--cgroup and --command are required")
    if bool(stages) == bool(original):
        raise click.UsageError("give the stages (--stage …) or the original configuration "
                               "(--original …), not both")
    planned = stages_from(stages) if stages else ladder(parse_knobs(original or ""))
    spec = ReplaySpec(
        pod_cgroup=pod_cgroup, command=job_command, stages=planned,
        headroom=parse_headroom(headroom), duration_s=stage_seconds, python=python,
        collective_pattern=collective_pattern or DEFAULT_PATTERN,
        expected_limit_bytes=parse_size(expect_limit, "--expect-limit") if expect_limit else None,
    )
    console = output_console(stderr=fmt == "json")
    started, done = _stage_printer(console)
    transport = TargetSpec.from_flags(target, kw).open()
    try:
        outcome = run_replay(transport, spec, on_stage=started, on_result=done)
    finally:
        transport.close()
    if fmt == "json":
        click.echo(json.dumps(outcome.as_dict(), indent=2, default=str))
    else:
        console.print()
        print_lines(console, [*replay_lines(outcome.as_dict())[:1], f"  {outcome.reason}"])
    if not outcome.passed:
        raise click.exceptions.Exit(1)


COMMANDS = [verify_cmd, replay_stages_cmd]
