"""`runbook resume RUN_DIR`: an interrupted guided run continued (runbook.session.resume_point).

Exit codes: 0 resumed to the end (whatever it found) or nothing to do; 2 not a resumable run
(no run.json, its runbook changed, a state that does not fit), or the run is still going in
another process; 3 the target is unreachable or refused; 130/143/129 interrupted again (the
run directory stays resumable). Registered by runbook/cli/app.py through `COMMANDS`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click
from rich.markup import escape

from runbook.cli.options import format_option, textfile_dir_option
from runbook.output import output_console, verbosity


@click.command("resume")
@click.argument("run_dir", metavar="RUN_DIR", type=click.Path(file_okay=False))
@click.option(
    "--no-input", is_flag=True, help="Never prompt; proposals not decided yet are only listed."
)
@format_option("text", "json", default="text")
@textfile_dir_option
@click.option(
    "--as", "as_user", metavar="NAME", help="Record NAME as the approver (default: as the run)."
)
@click.pass_context
def resume(
    ctx: click.Context,
    /,
    run_dir: str,
    no_input: bool,
    fmt: str,
    as_user: str | None,
) -> None:
    """Continue a guided run that was interrupted (^C, SIGTERM, SIGKILL, a lost terminal) from
    its last completed stage, then its approvals.

    The run's record (RUN_DIR/run.json, written when it started) names the runbook file and
    its sha256, the target (URL, key paths, known_hosts, jump host — never a key's contents)
    and the variables. The target is re-opened, its preamble (hostname, clocks) read again,
    the remaining stages walked into the same run directory, and the verdict written. Then
    the approvals: proposals already decided at a prompt are not asked again; those still
    pending are prompted on a terminal, or listed.

    A finished run: nothing to do (exit 0). Exit 2: not a run directory with run.json (job
    runs cannot be resumed), the runbook file changed since the run started, a variable that
    looked like a credential (never written, so not known), or the run still going in another
    process. Interrupted again (^C: 130, SIGTERM: 143), it stays resumable.

    \b
    runbook resume ~/.local/state/nccl-runbook/runs/20260304T104000Z-nccl-init-failure-3f9c0a
    """
    from runbook import config as config_mod
    from runbook import signatures
    from runbook.cli.approvals import approvals_phase
    from runbook.interrupt import as_interrupted
    from runbook.render.console import GuidedConsole, render_verdict
    from runbook.session import resume_point

    point = resume_point(Path(run_dir))
    path, verdict = point.path, point.verdict
    try:
        if point.finished and verdict is not None:
            queued = ", its proposals are in the approval queue" if point.queued_any else ""
            click.echo(f"nothing to do: {path} finished (verdict {verdict.root_cause}{queued})")
            return
        runbook = point.runbook()
        record = point.record
        obj = ctx.find_root().obj or {}
        config_file = obj.get("config") or record.config
        cfg = config_mod.load(Path(config_file) if config_file else None, db=record.db)
        # the rest of the evidence is read with the catalog the run began with; a run from
        # before runs recorded it: the config's
        signatures.use_user_catalog(
            record.signatures
            or config_mod.user_catalog(Path(config_file) if config_file else None)
        )
        console = output_console(stderr=fmt == "json")
        if record.cwd and Path(record.cwd).is_dir():
            os.chdir(record.cwd)  # relative paths in the variables mean what they meant
        for note in point.repair():
            console.print(f"[dim]{escape(note)}[/]")
        if verdict is None:
            conductor, started = point.restored(runbook)
            console.print(
                f"[bold]resuming {escape(str(path))}[/]: {escape(runbook.id)} over "
                f"{escape(str(record.target.get('url')))}; {len(conductor.path)} stage(s) "
                f"done, next: {escape(conductor.current or 'the verdict')}"
            )
            observer = GuidedConsole(console, verbose=verbosity() > 0)
            verdict = point.walk(runbook, conductor, started, observer)
        else:
            point.mark_done()
            console.print(f"[bold]resuming {escape(str(path))}[/]: the walk had finished")
            render_verdict(console, verdict)
        interactive = not no_input and fmt == "text" and sys.stdin.isatty()
        approvals_phase(
            console, cfg, point.directory, record, runbook, verdict,
            interactive=interactive, as_user=as_user or record.as_user,
        )  # fmt: skip
    except (KeyboardInterrupt, click.exceptions.Abort) as exc:
        raise as_interrupted(exc, hint=f"resume with: runbook resume {path}") from None
    finally:
        point.close()
    if fmt == "json":
        click.echo(json.dumps({**verdict.to_json(), "run_dir": str(path)}, indent=2, default=str))
    else:
        click.echo(f"\nrun directory: {path}")


COMMANDS = [resume]
