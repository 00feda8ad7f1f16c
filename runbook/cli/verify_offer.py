"""After an approved remedy succeeded: offer the recovery check of that proposal.

Only after a change that was applied: never after a diagnostic (the A/B test changes nothing,
so there is no fix to check), and never after a run that failed or could not run its commands
(runbook.verify.record.verifiable says which proposals can be verified).

On a terminal the person who approved is asked whether to run it now (the same target, the
proposal's own variables); otherwise, and for a proposal made from a replayed bundle (there is
no live node to check), the exact `runbook verify` command is printed.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.markup import escape

from runbook.remedies import plans
from runbook.remedies.store import QueuedProposal

if TYPE_CHECKING:
    from runbook.remedies.approval import Desk


def store_args(desk: Desk) -> list[str]:
    """`--db FILE` when the desk's store is not the one a plain command would open (the demo's
    scratch store, a --db given to this command): a printed command must reach this queue."""
    from runbook import config as config_mod

    try:
        default_db = config_mod.load(desk.config.source).db
    except Exception:  # an unreadable config: name the store explicitly
        default_db = None
    db = desk.config.db
    if default_db is None or db != default_db:
        # a shared store's URL without its password: the command reads PGPASSWORD/PGPASSFILE
        return ["--db", str(db) if isinstance(db, Path) else db.without_password()]
    return []


def approvals_commands(desk: Desk, pid: str, *verbs: str) -> list[str]:
    """`runbook approvals VERB ID` for each verb, with the store named when it is not the
    default one (the configuration read once for them all)."""
    store = store_args(desk)
    return [shlex.join(["runbook", "approvals", verb, pid, *store]) for verb in verbs]


def verify_command(desk: Desk, proposal: QueuedProposal, *, target: str | None = None) -> str:
    """`runbook verify ID --target URL` (with `--db` when the store is not the configured one)."""
    argv = ["runbook", "verify", proposal.id, *store_args(desk)]
    url = target or (proposal.target or {}).get("url")
    if url:
        argv += ["--target", str(url)]
    return shlex.join(argv)


def open_stored_target(target: plans.Target) -> Any:
    from runbook.targets import TargetOptions, open_target

    return open_target(target.url, TargetOptions(
        identities=tuple(Path(p) for p in target.identities),
        known_hosts=Path(target.known_hosts) if target.known_hosts else None,
        jump=target.jump,
        connect_timeout=target.connect_timeout,
        nsenter=target.nsenter,
        kubectl=target.kubectl,
        kube_context=target.kube_context,
        ssh_config=target.ssh_config,
    ))


def offer_verification(
    console: Console, desk: Desk, proposal: QueuedProposal, *, interactive: bool,
    as_user: str | None = None,
) -> None:
    from runbook.verify.record import verifiable

    if verifiable(proposal) is not None:
        return
    target = plans.Target.from_dict(proposal.target) if proposal.target else None
    if target is None or not target.live:
        # a recorded bundle (the demo's too) is not a node: the live one is for the user to
        # name, never a host invented from the bundle's node name
        command = verify_command(desk, proposal, target="ssh://NODE")
        console.print(
            "  check that the fix held, on the live node (this proposal came from a recorded "
            f"bundle; NODE is yours to name): {escape(command)}"
        )
        return
    command = verify_command(desk, proposal)
    if not interactive:
        console.print(f"  check that the fix held: {escape(command)}")
        return
    if not click.confirm("  run the recovery check now (collective test, then the staged "
                         "replay of the job)?", default=False, err=True):
        console.print(f"  later: {escape(command)}")
        return
    run_now(console, desk, proposal, target, as_user=as_user)


def run_now(
    console: Console, desk: Desk, proposal: QueuedProposal, target: plans.Target,
    *, as_user: str | None = None,
) -> None:
    from runbook.errors import RunbookError
    from runbook.remedies.approval import actor_name
    from runbook.render.console import GuidedConsole
    from runbook.render.verify import print_lines, print_verification, stage_lines
    from runbook.verify.check import ReplayRequest, new_run_dir, verify

    try:
        transport = open_stored_target(target)
    except RunbookError as exc:
        console.print(f"  [red]cannot reach {escape(target.url)}: {escape(exc.one_line())}[/]")
        return
    try:
        result = verify(
            desk, proposal.id, transport,
            variables={},
            request=ReplayRequest(),
            node=proposal.node,
            observer=GuidedConsole(console),
            run_dir=new_run_dir(),
            actor=actor_name(as_user),
            on_stage=lambda s: console.print(f"  replaying stage {s.index}: {escape(s.label)}"),
            on_result=lambda r: print_lines(console, [f"  {x}" for x in stage_lines(r.as_dict())]),
        )
    except RunbookError as exc:
        console.print(f"  [red]{escape(exc.one_line())}[/]")
        return
    finally:
        transport.close()
    print_verification(console, result.proposal.verification or {})
