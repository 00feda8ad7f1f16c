"""`runbook validate` and `runbook graph`: a runbook file checked, and its decision graph drawn.
Registered by runbook/cli/app.py through `COMMANDS`."""

from __future__ import annotations

import json
from pathlib import Path

import click

from runbook.cli.options import complete_runbook, format_option
from runbook.errors import UsageError
from runbook.output import count


@click.command()
@click.argument("runbook_ref", metavar="RUNBOOK", shell_complete=complete_runbook)
@format_option("text", "json", default="text")
def validate(runbook_ref: str, fmt: str) -> None:
    """Check RUNBOOK (a shipped id or a YAML file); print every problem with its line (exit 2
    if any error). --format json: one object, {"runbook", "file", "ok", "issues": [...]}."""
    from runbook.spec import inspect_text, resolve

    path = Path(runbook_ref)
    if not path.exists():
        path = resolve(runbook_ref)  # a shipped id, or one line naming what there is
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise UsageError(f"cannot read {runbook_ref}: {reason}") from None
    issues = inspect_text(text, str(path))
    errors = [i for i in issues if getattr(i, "severity", "error") == "error"]
    if fmt == "json":
        click.echo(json.dumps({
            "runbook": runbook_ref,
            "file": str(path),
            "ok": not errors,
            "issues": [
                {"line": i.line, "severity": i.severity, "path": i.path, "message": i.message}
                for i in issues
            ],
        }, indent=2))  # fmt: skip
    else:
        for issue in issues:
            click.echo(str(issue), err=True)
    if errors:
        raise click.exceptions.Exit(2)
    if fmt == "text":
        click.echo(f"{runbook_ref}: ok" + (f" ({count(len(issues), 'warning')})" if issues else ""))


@click.command()
@click.argument("runbook_ref", metavar="RUNBOOK", shell_complete=complete_runbook)
@format_option("dot", "mermaid", default="mermaid")
def graph(runbook_ref: str, fmt: str) -> None:
    """Print RUNBOOK's decision graph (Graphviz dot or Mermaid)."""
    from runbook.graph import render_dot, render_mermaid
    from runbook.spec import load_file, resolve

    runbook = load_file(resolve(runbook_ref))
    click.echo(render_dot(runbook) if fmt == "dot" else render_mermaid(runbook), nl=False)


COMMANDS = [validate, graph]
