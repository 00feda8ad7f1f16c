"""`runbook npd`: one read-only check of this node for node-problem-detector's custom plugin
monitor (examples/node-problem-detector/): the runbook's walk, its verdict mapped to NPD's
exit status and a one-line message (runbook.npd says which status means what).

NPD runs its plugins on the node itself, every few minutes, so the check is local by default
(`--target local --nsenter` from a privileged NPD pod reads the host's kernel log and tools).
It only reads: no proposal is queued, no prompt is shown, no run directory is written (a check
every five minutes must not fill the state dir), and every failure — a target that cannot be
used, a runbook that does not load — is exit 2 with its one line on standard output, which is
where NPD reads the message from.
"""

from __future__ import annotations

import json
from typing import Any

import click

from runbook.cli.options import format_option, parse_vars, target_options, var_option
from runbook.cli.signatures import signatures_option, use_signatures
from runbook.errors import RunbookError


@click.command("npd")
@click.argument("runbook_ref", metavar="[RUNBOOK]", default="nccl-init-failure")
@click.option(
    "--target",
    "-t",
    default="local",
    show_default=True,
    help="The node to check: local (NPD runs on the node), ssh://…, kubectl://… or replay://BUNDLE.",
)
@var_option()
@click.option(
    "--max-output-length",
    type=click.IntRange(min=20),
    default=80,
    show_default=True,
    help="Longest message to print: NPD's pluginConfig.max_output_length (it cuts the rest).",
)
@format_option("text", "json", default="text")
@target_options
@signatures_option
@click.pass_context
def npd(
    ctx: click.Context,
    /,
    runbook_ref: str,
    target: str,
    var_items: tuple[str, ...],
    max_output_length: int,
    fmt: str,
    signatures_file: str | None,
    **kw: Any,
) -> None:
    """Check this node once for node-problem-detector: exit 0 OK, 1 a hardware fault that
    warrants a drain or a GPU node whose NVIDIA driver is missing or broken (NPD sets the
    condition), 2 unknown (the check could not say).
    --format json (for other health agents): {"status", "condition", "message"}, same exit."""
    from runbook import npd as mapping
    from runbook.session import TargetSpec, diagnose

    try:
        # the user's signatures (the flag's, or the config's) read the node as `run` would
        use_signatures(ctx, signatures_file)
        result = diagnose(TargetSpec.from_flags(target, kw), runbook_ref, parse_vars(var_items))
        outcome = mapping.from_verdict(result.verdict, max_output_length)
    except RunbookError as exc:
        outcome = mapping.from_error(exc.one_line(), max_output_length)
    if fmt == "json":
        condition = {0: "OK", 1: "NonOK", 2: "Unknown"}[outcome.status]
        click.echo(json.dumps(
            {"status": outcome.status, "condition": condition, "message": outcome.message}
        ))  # fmt: skip
    else:
        click.echo(outcome.message)
    raise SystemExit(outcome.status)


COMMANDS = [npd]
