"""`runbook demo`: a guided run over a built-in replayed incident, then its approval prompts,
with a scratch approval store and manifest (nothing of the user's is touched). Registered by
runbook/cli/app.py through `COMMANDS`."""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

import click

from runbook.output import output_console, verbosity


@click.command()
@click.option(
    "--run-dir", type=click.Path(file_okay=False), help="Keep the demo run's artifacts here."
)
@click.option(
    "--no-input", is_flag=True, help="Stop after the verdict: list the proposals, never prompt."
)
def demo(run_dir: str | None, no_input: bool) -> None:
    """A guided run of the shipped nccl-init-failure runbook over a built-in replayed incident
    (the host-memory OOM that surfaced as ncclCommInitRank failure), then, on a terminal, the
    approval prompt for each proposed fix of the incident's workload manifest (check-mode
    diff; approve, deny or skip). No cluster, GPU or root.

    The demo keeps its own approval store and a copy of the manifest in a scratch folder:
    your queue, your config and your files are never touched."""
    from runbook import config as config_mod
    from runbook.cli.approvals import approvals_phase
    from runbook.demo import incident_bundle, workload_manifest
    from runbook.render.console import GuidedConsole
    from runbook.rundir import RECORD, RunDirectory, new_record, read_runbook
    from runbook.session import TargetSpec, walk
    from runbook.transports.replay import ReplayTransport

    runbook, runbook_file = read_runbook("nccl-init-failure")
    console = output_console()
    scratch = Path(tempfile.mkdtemp(prefix="runbook-demo-"))
    manifest = scratch / "workload.yaml"
    manifest.write_text(workload_manifest(), encoding="utf-8")
    settings = scratch / "config.yaml"
    settings.write_text(f"approvals:\n  db: {json.dumps(str(scratch / 'approvals.db'))}\n")
    # its own store, and nowhere to publish: RUNBOOK_TEXTFILE_DIR or RUNBOOK_WEBHOOK_URL in the
    # environment must not carry the demo's proposals to a real dashboard or on-call channel
    cfg = dataclasses.replace(
        config_mod.load(settings), textfile_dir=None, notify=config_mod.Notify()
    )
    root = Path(run_dir) if run_dir else scratch / "run"
    variables: dict[str, Any] = {"manifest": str(manifest)}
    with incident_bundle() as path:
        target = f"replay://{path}"
        transport = ReplayTransport(path)
        console.print(
            f"[bold]runbook demo[/]: {runbook.title}, over replay of a recorded incident "
            f"on node {transport.bundle.meta.node}"
        )
        directory = RunDirectory(root)
        try:
            record = new_record(
                runbook_file,
                TargetSpec(target).record().as_dict(),
                variables,
                config=str(settings),
                no_input=no_input,
            )
            directory.write_json(RECORD, record.as_dict())
            observer = GuidedConsole(console, verbose=verbosity() > 0)
            result = walk(runbook, transport, variables, directory, observer)
            transport.close()
            interactive = not no_input and sys.stdin.isatty() and sys.stdout.isatty()
            approvals_phase(
                console,
                cfg,
                directory,
                record,
                runbook,
                result.verdict,
                interactive=interactive,
                as_user=None,
            )
        finally:
            directory.close()
            transport.close()
    db = shlex.quote(str(cfg.db))
    from runbook.remedies.approval import Desk

    # the demo's own proposals by their ids: every suggestion below runs as printed
    with Desk(cfg, readonly=True) as desk:
        ids = [p.id for p in desk.store.list(states=None)]
    console.print(f"\nrun directory: {root}")
    console.print(
        "\n[bold]next[/]:\n"
        f"  runbook report {shlex.quote(str(root))}            # the incident report (markdown)\n"
        f"  runbook approvals list --db {db}   # the demo's queue\n"
        + "".join(f"  runbook approvals show {pid} --db {db}\n" for pid in ids)
        + f"  cat {shlex.quote(str(manifest))}   # the demo's manifest (a fix approved here "
        "patched it)\n"
        "  runbook run nccl-init-failure --target ssh://root@NODE --pod POD --namespace NS"
        "   # a real node",
        soft_wrap=True,
    )


COMMANDS = [demo]
