"""`runbook run`, `analyze`, `collect` and `report`: one node — walked live, a recorded bundle
analysed, its evidence collected, a run or bundle written up. Registered by runbook/cli/app.py
through `COMMANDS`; the work is runbook.session's."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from runbook.cli.options import (
    DB_HELP,
    JOB_CONTEXT_VARS,
    JOB_KEYS,
    apply_job_context,
    complete_runbook,
    format_option,
    job_context_options,
    job_options,
    load_config,
    parse_vars,
    runbook_option,
    sanitize_map_path,
    sanitize_options,
    target_options,
    textfile_dir_option,
    var_option,
)
from runbook.cli.signatures import signatures_option, use_signatures
from runbook.errors import UsageError
from runbook.output import count, output_console, verbosity


@click.command()
@click.argument("runbook_ref", metavar="RUNBOOK", shell_complete=complete_runbook)
@click.option(
    "--target",
    "-t",
    help="local | ssh://[user@]host[:port] | kubectl://NAMESPACE/POD | kubectl://node/NODE | "
    "kubectl-debug://NODE | replay://BUNDLE",
)
@click.option(
    "--var",
    "var_items",
    multiple=True,
    metavar="NAME=VALUE",
    help="Set a runbook variable (repeatable).",
)
@click.option(
    "--no-input", is_flag=True, help="Never prompt (cron, CI); proposals are only listed."
)
@click.option(
    "--run-dir", type=click.Path(file_okay=False), help="Where to keep this run's artifacts."
)
@format_option("text", "json", default="text")
@click.option("--db", type=click.Path(dir_okay=False), metavar="FILE|URL", help=DB_HELP)
@click.option("--as", "as_user", metavar="NAME", help="Record NAME as the approver at prompts.")
@job_context_options
@textfile_dir_option
@job_options
@target_options
@signatures_option
@click.pass_context
def run(
    ctx: click.Context,
    /,
    runbook_ref: str,
    target: str | None,
    var_items: tuple[str, ...],
    no_input: bool,
    run_dir: str | None,
    fmt: str,
    db: str | None,
    as_user: str | None,
    signatures_file: str | None,
    **kw: Any,
) -> None:
    """Walk RUNBOOK (a shipped id or a YAML file) over a target, guided stage by stage.

    Each proposal is queued in the approval store; on a terminal it then stops at a prompt
    showing its evidence and the Ansible check-mode diff: approve, deny (with a reason) or
    skip (leave it queued, audited). --no-input, or no terminal, never approves.

    Interrupted anywhere (^C: exit 130, SIGTERM: 143, SIGHUP: 129, or killed), the run
    directory stays consistent and `runbook resume RUN_DIR` continues it from the last
    completed stage, asking only the approvals not yet answered.

    With --job (or --hosts-from-file) instead of --target: the whole failed job — every node
    it ran on, read-only and at once — merged into one job verdict on one clock-corrected
    time axis.

    --pod, --namespace and --cgroup name the failed job on the node, as with `collect`
    (the same as --var pod=…, --var namespace=…, --var cgroup_dir=…).

    \b
    runbook run nccl-init-failure --target ssh://root@gpu-node-07 --pod trainer-0 -n ml
    runbook run nccl-init-failure --job pytorchjob/ml/llama-ft
    runbook run nccl-init-failure --job slurm:48211 --slurm-via ssh://login-1 --inventory inv/
    runbook run nccl-init-failure --hosts-from-file job-hosts.txt"""
    from runbook.cli.approvals import approvals_phase
    from runbook.cli.job import run_job_command
    from runbook.interrupt import as_interrupted
    from runbook.render.console import GuidedConsole
    from runbook.session import RunOptions, TargetSpec, start_run

    use_signatures(ctx, signatures_file)
    job_kw = {key: kw.pop(key) for key in JOB_KEYS}
    context = {name: kw.pop(name) for name in JOB_CONTEXT_VARS}
    if job_kw["job"] or job_kw["hosts_from_file"]:
        if target:
            raise UsageError("give --target for one node, or --job/--hosts-from-file for a job")
        if any(value is not None for value in context.values()):
            raise UsageError(
                "--pod, --namespace and --cgroup name one node's job: with --job, each node's "
                "pod comes from the job (per node in --hosts-from-file: pod=NAME)"
            )
        run_job_command(ctx, runbook_ref, var_items, run_dir, fmt, db, job_kw, kw)
        return
    if not target:
        raise UsageError("give --target (one node), or --job/--hosts-from-file (a whole job)")
    # kubectl://node/NAME looks for the node agent where --agent-namespace/-selector say
    agent = {key: job_kw[key] for key in ("agent_namespace", "agent_selector")}
    spec = TargetSpec.from_flags(target, {**kw, **agent})
    spec.check_scheme()  # an unknown scheme is a usage error before anything starts
    variables = apply_job_context(parse_vars(var_items), context)
    cfg = load_config(ctx, db=db)
    node_run = start_run(
        runbook_ref,
        spec,
        variables,
        run_dir=Path(run_dir) if run_dir else None,
        options=RunOptions(db, ctx.obj.get("config"), as_user, no_input),
    )
    console = output_console(stderr=fmt == "json")
    try:
        result = node_run.walk(GuidedConsole(console, verbose=verbosity() > 0))
        interactive = not no_input and fmt == "text" and sys.stdin.isatty()
        approvals_phase(
            console, cfg, node_run.directory, node_run.record, node_run.runbook,
            result.verdict, interactive=interactive, as_user=as_user,
        )  # fmt: skip
    except (KeyboardInterrupt, click.exceptions.Abort) as exc:
        # the run directory is consistent wherever this came (runbook/interrupt.py)
        hint = f"resume with: runbook resume {node_run.directory.path}"
        raise as_interrupted(exc, hint=hint) from None
    finally:
        node_run.close()
    if fmt == "json":
        # the verdict, and where the run is kept: a script chains to
        # `runbook resume`/`report` with it (an added field: readers ignore what they do not know)
        data = {**result.verdict.to_json(), "run_dir": str(result.run_dir)}
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        click.echo(f"\nrun directory: {result.run_dir}", err=False)


@click.command()
@click.argument("bundle", type=click.Path())
@runbook_option()
@format_option("text", "json", "markdown", default="text")
@var_option()
@signatures_option
@click.pass_context
def analyze(
    ctx: click.Context,
    /,
    bundle: str,
    runbook_ref: str,
    fmt: str,
    var_items: tuple[str, ...],
    signatures_file: str | None,
) -> None:
    """Analyse a recorded evidence BUNDLE (a directory or .tar.gz) offline.

    --signatures FILE (or signatures.user_catalog in the config) adds your own error
    signatures, tried before the shipped ones; `runbook signatures test FILE BUNDLE` shows
    what each matches."""
    from runbook.render import node_markdown
    from runbook.render.console import render_verdict
    from runbook.session import analyze as analyze_bundle

    use_signatures(ctx, signatures_file)
    result = analyze_bundle(bundle, runbook_ref, parse_vars(var_items))
    if fmt == "json":
        click.echo(json.dumps(result.verdict.to_json(), indent=2, default=str))
    elif fmt == "markdown":
        click.echo(node_markdown.render(result.verdict), nl=False)
    else:
        render_verdict(output_console(), result.verdict)


@click.command()
@click.option("--target", "-t", required=True, help="Where to collect from (as for `run`).")
@click.option(
    "--output",
    "-o",
    required=True,
    type=click.Path(file_okay=False),
    help="Bundle directory to write.",
)
@click.option(
    "--runbook",
    "runbook_ref",
    default="nccl-init-failure",
    show_default=True,
    help="Whose stages say what to collect.",
)
@job_context_options
@var_option()
@format_option("text", "json", default="text")
@sanitize_options
@target_options
def collect(
    target: str,
    output: str,
    runbook_ref: str,
    pod: str | None,
    namespace: str | None,
    cgroup_dir: str | None,
    var_items: tuple[str, ...],
    fmt: str,
    sanitize: bool,
    sanitize_map: str | None,
    **kw: Any,
) -> None:
    """Collect every stage's evidence into a bundle (format 1: runbook/bundle.py), deciding nothing.

    With --sanitize the bundle holds placeholders (<NODE_1>, <POD_UID_1>, …) instead of
    identifiers, and still analyses to the same verdict. --format json: {"bundle", "node",
    "sanitized", "files", "failed": [names]}."""
    from runbook.bundle import BundleMeta
    from runbook.report.incident import check_map_path, write_collected
    from runbook.session import TargetSpec
    from runbook.session import collect as collect_evidence
    from runbook.timestamps import now_iso

    spec = TargetSpec.from_flags(target, kw)
    variables = apply_job_context(
        parse_vars(var_items), {"pod": pod, "namespace": namespace, "cgroup_dir": cgroup_dir}
    )
    out = Path(output)
    if (out / "bundle.yaml").exists():
        raise UsageError(f"{out} already holds a bundle; choose another --output")
    map_path = sanitize_map_path(sanitize, sanitize_map)
    if map_path is not None:
        check_map_path(map_path, out)
    result = collect_evidence(spec, runbook_ref, variables)
    extra = {"cgroup_dir": cgroup_dir} if cgroup_dir else {}
    offset = result.results.get("timezone.txt")
    if offset is not None and offset.ok and offset.stdout.strip():
        extra["utc_offset"] = offset.stdout.strip()
    meta = BundleMeta(
        node=result.node, collected_at=now_iso(), pod=pod, namespace=namespace, extra=extra
    )
    node = write_collected(out, meta, result.results.values(), sanitize=sanitize, map_path=map_path)
    failed_names = sorted(name for name, r in result.results.items() if r.failure)
    failed = len(failed_names)
    if fmt == "json":
        click.echo(json.dumps({
            "bundle": str(out.resolve()),
            "node": node,
            "sanitized": sanitize,
            "files": len(result.results),
            "failed": failed_names,
        }, indent=2))
        return
    click.echo(
        f"wrote {out}{' (sanitized)' if sanitize else ''}: {count(len(result.results), 'file')} "
        f"from {node}"
        + (f" ({failed} not collected or failed)" if failed else "")
    )


@click.command()
@click.argument("path", metavar="BUNDLE_OR_RUN_DIR", type=click.Path(exists=True))
@format_option("markdown", "json", default="markdown")
@click.option(
    "--output", "-o", type=click.Path(dir_okay=False), help="Write the report here (not stdout)."
)
@click.option(
    "--runbook",
    "runbook_ref",
    default="nccl-init-failure",
    show_default=True,
    help="For a bundle: the runbook to analyse it with.",
)
@var_option()
@sanitize_options
def report(
    path: str,
    fmt: str,
    output: str | None,
    runbook_ref: str,
    var_items: tuple[str, ...],
    sanitize: bool,
    sanitize_map: str | None,
) -> None:
    """The incident report of a run directory (its bundle/ and verdict.json) or a bundle:
    conclusion first, evidence chain, the numbers, timeline, ruled out, fixes. A job's run
    directory (`run --job`) gives the job report: ranks, nodes, cross-node timeline.

    \b
    runbook report ~/.local/state/nccl-runbook/runs/20260304T104000Z-nccl-init-failure-3f9c0a
    runbook report ./bundle --sanitize --output incident.md"""
    from runbook.report.incident import build_report, check_map_path, write_private

    map_path = sanitize_map_path(sanitize, sanitize_map)
    if map_path is not None:
        check_map_path(map_path, *([Path(output)] if output else []))
    variables = parse_vars(var_items)
    built = build_report(
        Path(path), fmt=fmt, sanitize=sanitize, runbook_ref=runbook_ref, variables=variables
    )
    if map_path is not None and built.sanitizer is not None:
        write_private(map_path, built.sanitizer.mapping())
    if output:
        from runbook import atomic

        # replaced by rename: a link at the output's name is replaced, never written through
        atomic.write_text(Path(output), built.text, mode=0o644)
    else:
        click.echo(built.text, nl=False)


COMMANDS = [run, analyze, collect, report]
