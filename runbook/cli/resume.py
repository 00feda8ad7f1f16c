"""`runbook resume RUN_DIR`, and the approval phase a guided run and its resume share.

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
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from runbook.cli.options import format_option, textfile_dir_option
from runbook.errors import StateError
from runbook.output import output_console, verbosity
from runbook.verdict import Verdict


def _queued(desk: Any, pid: str) -> Any:
    """A proposal this run queued, as guided_approvals takes it, from the store as it is now."""
    from runbook.remedies import plans
    from runbook.remedies.approval import Queued

    p = desk.store.get(pid)
    plan = plans.Plan.from_dict(p.plan) if p.plan and "playbook" in p.plan else None
    error = None if plan else str((p.plan or {}).get("error") or "no plan")
    return Queued(p, False, plan, error)


def approvals_phase(
    console: Console,
    cfg: Any,
    directory: Any,
    record: Any,
    runbook: Any,
    verdict: Verdict,
    *,
    interactive: bool,
    as_user: str | None,
) -> None:
    """Queue the verdict's proposals (once: the ledger in approvals.json remembers), then the
    prompts for those not decided yet — or, not interactive, where each one waits."""
    from runbook.rundir import ApprovalLedger

    ledger = ApprovalLedger.load(directory)
    if not verdict.proposals and ledger is None:
        # nothing to queue, advise or ask: the approval store is not opened (a healthy
        # node's run creates no store and takes no lock on it), and approvals.json says the
        # run's approvals are done
        ApprovalLedger(directory, []).finish()
        return
    from runbook.cli.approvals import guided_approvals
    from runbook.remedies.approval import Desk
    from runbook.remedies.plans import Target

    with Desk(cfg) as desk:
        if ledger is None:
            queued = desk.queue_verdict(
                verdict,
                node=verdict.node or "node",
                target=Target.from_dict(record.target),
                runbook_id=record.runbook.ref,
                variables={**runbook.vars, **record.variables},
                run_dir=str(directory.path),
                source="run",
            )
            ledger = ApprovalLedger(directory, [q.proposal.id for q in queued])
            ledger.save()
        else:
            queued = [_queued(desk, pid) for pid in ledger.undecided()]
        guided_approvals(
            console,
            desk,
            queued,
            interactive=interactive,
            as_user=as_user,
            advice=verdict.proposals,
            ledger=ledger,
        )
        ledger.finish()


def _target_kw(record: Any) -> dict[str, Any]:
    """The target flags of `run`, as run.json recorded them (for cli._open)."""
    target = record.target
    return {
        "identities": tuple(target.get("identities") or ()),
        "known_hosts": target.get("known_hosts"),
        "accept_new_host_keys": record.accept_new_host_keys,
        "jump": target.get("jump"),
        "connect_timeout": float(target.get("connect_timeout") or 10.0),
        "nsenter": target.get("nsenter"),
        "kubectl": target.get("kubectl") or "kubectl",
        "kube_context": target.get("kube_context"),
        # an ssh:// alias resolves through the same config file as the run did
        "ssh_config": target.get("ssh_config"),
    }


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
    from runbook.interrupt import as_interrupted
    from runbook.render.console import render_verdict
    from runbook.rundir import (
        RunDirectory,
        events,
        read_ledger,
        read_record,
        read_verdict,
        reload_runbook,
        repair,
    )

    path = Path(run_dir).resolve()
    record = read_record(path)
    # locked before anything is read: the run (or another resume) may still be going
    directory = RunDirectory(path, exclusive=True)
    try:
        ledger = read_ledger(path)
        verdict = read_verdict(path)
        if verdict is not None and ledger is not None and ledger.get("done"):
            queued = ", its proposals are in the approval queue" if ledger.get("queued") else ""
            click.echo(f"nothing to do: {path} finished (verdict {verdict.root_cause}{queued})")
            return
        runbook = reload_runbook(record)
        if record.redacted:
            raise StateError(
                f"{path}: variable(s) {', '.join(record.redacted)} looked like credentials and "
                "were never written; this run cannot be resumed: start a new one"
            )
        obj = ctx.find_root().obj or {}
        config_file = obj.get("config") or record.config
        cfg = config_mod.load(Path(config_file) if config_file else None, db=record.db)
        console = output_console(stderr=fmt == "json")
        if record.cwd and Path(record.cwd).is_dir():
            os.chdir(record.cwd)  # relative paths in the variables mean what they meant
        for note in repair(path):
            console.print(f"[dim]{escape(note)}[/]")
        if verdict is None:
            verdict = _walk_rest(
                console, directory, record, runbook, verbose=verbosity() > 0
            )
        else:
            logged = events(path)
            if logged and logged[-1].get("event") != "run-done":  # killed just before it
                directory.event("run-done", root_cause=verdict.root_cause)
            console.print(f"[bold]resuming {escape(str(path))}[/]: the walk had finished")
            render_verdict(console, verdict)
        interactive = not no_input and fmt == "text" and sys.stdin.isatty()
        approvals_phase(
            console, cfg, directory, record, runbook, verdict,
            interactive=interactive, as_user=as_user or record.as_user,
        )  # fmt: skip
    except (KeyboardInterrupt, click.exceptions.Abort) as exc:
        raise as_interrupted(exc, hint=f"resume with: runbook resume {path}") from None
    finally:
        directory.close()
    if fmt == "json":
        click.echo(json.dumps(verdict.to_json(), indent=2, default=str))
    else:
        click.echo(f"\nrun directory: {path}")


def _walk_rest(
    console: Console, directory: Any, record: Any, runbook: Any, *, verbose: bool
) -> Verdict:
    """Re-open the target, read its preamble again and walk what is left; the verdict."""
    from runbook.cli.app import _open, guided_walk
    from runbook.conductor import Conductor
    from runbook.rundir import events, read_state

    state = read_state(directory.path)
    conductor = (
        Conductor.from_state(runbook, state)
        if state is not None
        else Conductor(runbook, record.variables)
    )
    # interrupted before its first event (in the preamble): there is nothing to continue
    started = state is not None or any(
        e.get("event") == "run-started" for e in events(directory.path)
    )
    console.print(
        f"[bold]resuming {escape(str(directory.path))}[/]: {escape(runbook.id)} over "
        f"{escape(str(record.target.get('url')))}; {len(conductor.path)} stage(s) done, "
        f"next: {escape(conductor.current or 'the verdict')}"
    )
    variables = dict(record.variables)
    transport = _open(str(record.target["url"]), _target_kw(record))
    try:
        result = guided_walk(
            runbook,
            transport,
            variables,
            directory,
            console,
            verbose=verbose,
            resume=conductor if started else None,
        )
    finally:
        transport.close()
    return result.verdict


COMMANDS = [resume]
