"""`runbook approvals …` and `runbook audit …`: the approval queue and its audit trail.

Exit codes: 0 done; 1 refused, denied by the state of the proposal (already decided, running,
ran), a failed execution (the playbook failed, or what it runs could not run on the node: a
tool missing, exit 126/127, a timeout, no GPU) or a broken audit chain; 2 usage (unknown ID,
bad flags).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from runbook.cli.options import (
    complete_proposal,
    format_option,
    load_config,
    proposal_id,
    textfile_dir_option,
)
from runbook.output import PrintableConsole, count, output_console, write_rendered
from runbook.verdict import Proposal as VerdictProposal
from runbook.verdict import Verdict

if TYPE_CHECKING:
    from runbook.config import Config
    from runbook.remedies.approval import Desk, Execution, Queued
    from runbook.remedies.playbook import PlaybookResult, TaskOutcome
    from runbook.remedies.store import QueuedProposal
    from runbook.rundir import ApprovalLedger, RunDirectory, RunRecord
    from runbook.spec.models import Runbook

_STATUS_STYLE = {
    "ok": "green",
    "changed": "yellow",
    "failed": "bold red",
    "unreachable": "bold red",
    "skipped": "dim",
}


def task_printer(console: Console) -> Any:
    from runbook.output import quiet

    def show(task: TaskOutcome) -> None:
        if quiet():  # -q: the outcome, not each task
            return
        style = _STATUS_STYLE.get(task.status, "")
        line = f"  [{style}]{task.status:>11}[/] {escape(task.host)}: {escape(task.task)}"
        if task.message and task.status in ("failed", "unreachable"):
            line += f" — {escape(task.message[:200])}"
        console.print(line, highlight=False)

    return show


def print_diff(console: Console, diff: str, *, ok: bool = True) -> None:
    """The check run's diff; with no diff, "no change" only from a check run that passed (a
    failed one may have stopped before anything it would change)."""
    if not diff.strip():
        console.print(
            "  (the check run reports no change)"
            if ok
            else "  (no diff: the check run failed before reporting what would change)"
        )
        return
    for line in diff.splitlines():
        style = (
            "green"
            if line.startswith("+") and not line.startswith("+++")
            else "red"
            if line.startswith("-") and not line.startswith("---")
            else "cyan"
            if line.startswith("@@")
            else ""
        )
        console.print(
            f"  [{style}]{escape(line)}[/]" if style else f"  {escape(line)}", highlight=False
        )


def _when(ts: float | None) -> str:
    if not ts:
        return "-"
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def _desk(ctx: click.Context, *, readonly: bool = False) -> Any:
    """The approval desk; `readonly` for commands that only read (they work on a full disk)."""
    from runbook.remedies.approval import Desk

    # a reading command sends no notice: a bad notify setting only warns there
    cfg = load_config(ctx, db=(ctx.obj or {}).get("db"), notifies=not readonly)
    return Desk(cfg, readonly=readonly)


#: what --db takes, on every command that opens the approval store
DB_HELP = (
    "Approval store: a SQLite file, or postgresql://USER@HOST:PORT/DBNAME shared by several "
    "machines (the password from PGPASSWORD or PGPASSFILE, never in the URL)."
)


def _set_db(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value:
        ctx.obj = {**(ctx.obj or {}), "db": value}


#: `--db` after the subcommand too (`approvals list --db X`, as `run --db X`); the group's
#: own `approvals --db X list` still works
_db_option = click.option(
    "--db", type=click.Path(dir_okay=False), expose_value=False, callback=_set_db,
    is_eager=True, help=DB_HELP,
)  # fmt: skip


def _a_reason(text: str) -> str:
    """A denial's reason at the prompt: asked again while blank (the audit trail keeps it)."""
    if not text.strip():
        raise click.BadParameter("a denial needs a reason")
    return text.strip()


@click.group()
@click.option("--db", type=click.Path(dir_okay=False), help=DB_HELP)
@click.pass_context
def approvals(ctx: click.Context, db: str | None) -> None:
    """The queue of proposals waiting for a human decision."""
    ctx.obj = {**(ctx.obj or {}), "db": db}


@approvals.command("list")
@_db_option
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice(["pending", "running", "succeeded", "failed", "denied", "refused", "all"]),
    help="Only these states (repeatable; default pending and running).",
)
@format_option("text", "json", default="text")
@click.pass_context
def list_cmd(ctx: click.Context, states: tuple[str, ...], fmt: str) -> None:
    """List queued proposals."""
    with _desk(ctx, readonly=True) as desk:
        wanted = None if "all" in states else (states or ("pending", "running"))
        items = desk.store.list(states=wanted)
    if fmt == "json":
        click.echo(json.dumps([p.to_json() for p in items], indent=2, default=str))
        return
    # a pipe gets whole lines (rich would wrap at 80 columns)
    wide = sys.stdout.isatty() or os.environ.get("COLUMNS")  # COLUMNS honoured, as rich does
    console = PrintableConsole(highlight=False, width=None if wide else 240)
    if not items:
        console.print("no proposals" + (f" in state {', '.join(wanted)}" if wanted else ""))
        return
    table = Table(box=None, pad_edge=False)
    for column in ("ID", "STATE", "KIND", "NODE", "PROPOSED", "EXPIRES"):
        table.add_column(column, no_wrap=True)
    table.add_column("SUMMARY", overflow="fold")
    from runbook.remedies.store import runner_gone

    for p in items:
        state = "running, process gone" if runner_gone(p) else p.state
        table.add_row(
            p.id,
            state,
            p.kind,
            p.node or "-",
            _when(p.created_at),
            "expired" if p.expired and p.state == "pending" else _when(p.expires_at),
            escape(p.summary),
        )
    with console.capture() as captured:
        console.print(table)
    # rich pads each row to the table's width: a pipe (grep, awk, a diff) gets clean lines
    lines = "\n".join(line.rstrip() for line in captured.get().splitlines())
    write_rendered(sys.stdout, lines + "\n")  # rich's colours kept, its text made printable


def _value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    lines = text.splitlines()
    if len(lines) > 1:
        import hashlib

        digest = hashlib.sha256(text.encode()).hexdigest()[:12]
        return f"{lines[0][:100]} … ({len(lines)} lines, sha256 {digest})"
    return text if len(text) < 160 else text[:157] + "..."


def show_proposal(console: Console, p: QueuedProposal, *, brief: bool = False) -> None:
    # the state in brackets is text, not markup: unescaped, rich took `[pending]` for a style
    # and printed nothing in its place (leaving two trailing spaces)
    console.print(f"[bold]{p.id}[/]  {p.kind} on {escape(p.node or '?')}  {escape(f'[{p.state}]')}")
    console.print(f"  {escape(p.summary)}")
    evidence = p.evidence or {}
    console.print(
        f"  verdict: {evidence.get('root_cause')} ({evidence.get('confidence')}); "
        f"surfaced as {escape(str(evidence.get('surfaced_as') or '-'))}"
    )
    first = evidence.get("first_anomaly") or {}
    if first:
        where = first.get("source")
        if first.get("line"):
            where = f"{where}:{first['line']}"
        when = str(first.get("time") or "")
        console.print(f"  first anomaly: {escape(' '.join(filter(None, (str(where), when))))}")
        if first.get("text"):
            console.print(f"    {escape(str(first['text'])[:200])}")
    for link in [] if brief else evidence.get("chain") or []:
        console.print(f"  - {escape(str(link.get('stage')))}: {escape(str(link.get('finding')))}")
    plan = p.plan or {}
    if "playbook" in plan:
        from runbook.remedies.plans import inventory_hosts

        # where it will run, as Ansible will be told (the name typed, the address it resolves to)
        runs_on = plan.get("runs_on") or inventory_hosts(plan.get("inventory") or {})
        console.print(f"  runs on: {escape(str(runs_on))}")
        console.print(f"  playbook: playbooks/{plan['playbook']}")
        for line in plan.get("describe") or []:
            console.print(f"    {escape(str(line))}")
        console.print("  variables:")
        for key, value in sorted((plan.get("extravars") or {}).items()):
            console.print(f"    {key} = {escape(_value(value))}")
        if not brief:
            # the inventory as Ansible will get it: how each host is reached
            console.print("  inventory:")
            hosts = ((plan.get("inventory") or {}).get("all") or {}).get("hosts") or {}
            for host, hostvars in hosts.items():
                console.print(f"    {escape(str(host))}:")
                for key, value in sorted((hostvars or {}).items()):
                    console.print(f"      {key} = {escape(_value(value))}")
    else:
        console.print(f"  [yellow]not executable:[/] {escape(str(plan.get('error')))}")
    console.print(
        f"  proposed {_when(p.created_at)}, expires {_when(p.expires_at)}"
        + (f" (queued by {escape(p.requested_by)})" if p.requested_by else "")
    )
    if p.approvals and p.state == "pending":
        console.print(
            f"  approved so far by {escape(', '.join(p.approvals))}: "
            "waiting for another person's approval"
        )
    if p.decided_by:
        console.print(
            f"  decided by {escape(p.decided_by)} at {_when(p.decided_at)}"
            + (f": {escape(p.reason)}" if p.reason else "")
        )
    if p.result:
        played = f"{p.result.get('status')} (rc {p.result.get('rc')})"
        if p.state == "failed" and p.result.get("reason"):
            # the reason first: a playbook Ansible calls successful may have run nothing
            console.print(
                f"  result: failed — {escape(str(p.result['reason']))}"
                + (f"; the playbook: {played}" if p.result.get("status") else "")
            )
        else:
            console.print(f"  result: {played}")
        for line in p.result.get("failed") or []:
            console.print(f"    failed: {escape(str(line))}")
    if p.verification:
        from runbook.render.verify import print_lines, verification_lines

        print_lines(console, [f"  {line}" for line in verification_lines(p.verification)])


@approvals.command("show")
@_db_option
@click.argument("pid", metavar="ID", shell_complete=complete_proposal, callback=proposal_id)
@format_option("text", "json", default="text")
@click.pass_context
def show_cmd(ctx: click.Context, pid: str, fmt: str) -> None:
    """Show one proposal: summary, the evidence it rests on, the exact playbook and variables."""
    with _desk(ctx, readonly=True) as desk:
        p = desk.store.get(pid)
    if fmt == "json":
        click.echo(json.dumps(p.to_json(), indent=2, default=str))
        return
    show_proposal(output_console(), p)


@approvals.command("preview")
@_db_option
@click.argument("pid", metavar="ID", shell_complete=complete_proposal, callback=proposal_id)
@format_option("text", "json", default="text")
@click.pass_context
def preview_cmd(ctx: click.Context, pid: str, fmt: str) -> None:
    """Run the proposal's playbook in check mode and show the diff of what it would change
    (exit 1 if the check run failed). --format json: {"id", "ok", "check": {..., "diff"}};
    the tasks as they run go to stderr."""
    console = output_console(stderr=fmt == "json")  # no hard wrap into a pipe or a file
    with _desk(ctx) as desk:
        result = desk.preview(pid, on_task=task_printer(console))
    if fmt == "json":
        click.echo(
            json.dumps(
                {"id": pid, "ok": result.ok, "check": result.as_dict()}, indent=2, default=str
            )
        )
    else:
        print_diff(console, result.diff_text(), ok=result.ok)
    if not result.ok:
        raise click.exceptions.Exit(1)


def report_execution(console: Console, execution: Execution) -> None:
    """What the run did: the A/B's comparison, then the proposal's state and, when it did not
    succeed, why (a command that could not run on the node is said, never read as a result)."""
    from runbook.remedies import ab, kinds

    p = execution.proposal
    if execution.apply is None:
        console.print(
            f"[bold red]check run failed[/] ({execution.check.status}); "
            f"nothing was changed; {p.id} is {p.state}: {escape(execution.reason or '')}"
        )
        return
    for node, comparison in (execution.result.get("comparison") or {}).items():
        console.print(f"[bold]A/B on {escape(node)}[/]")
        for line in ab.render(comparison):
            console.print(f"  {escape(line)}")
    colour = "green" if execution.ok else "bold red"
    why = "" if execution.ok else f": {escape(execution.reason or '')}"
    note = (
        " (a diagnostic: nothing was changed on the node)"
        if execution.ok and kinds.is_diagnostic(p.kind)
        else ""
    )
    console.print(
        f"[{colour}]{p.id} {p.state}[/]{why}{note} (artifacts: {execution.apply.artifact_dir})"
    )


@approvals.command("approve")
@_db_option
@textfile_dir_option
@click.argument("pid", metavar="ID", shell_complete=complete_proposal, callback=proposal_id)
@click.option(
    "--as",
    "as_user",
    metavar="NAME",
    help="Record NAME as the approver (alongside the OS user), e.g. behind a shared account.",
)
@click.option(
    "--no-recheck",
    is_flag=True,
    help="Do not re-walk the runbook on the node first (the skip is recorded in the audit trail).",
)
@format_option("text", "json", default="text")
@click.pass_context
def approve_cmd(
    ctx: click.Context, pid: str, as_user: str | None, no_recheck: bool, fmt: str
) -> None:
    """Approve ID: re-check, check mode, then the real run; exactly once (exit 1 when refused,
    the playbook fails, or its commands could not run on the node: a tool missing, a timeout).
    --format json: {"ok", "reason", "proposal": {...}, "check", "apply"} on stdout (`reason`:
    why it did not succeed, else null); the progress goes to stderr."""
    from runbook.remedies import live

    console = output_console(stderr=fmt == "json")  # no hard wrap into a pipe or a file
    with _desk(ctx) as desk:
        p = desk.store.get(pid)
        if no_recheck:
            desk.record("recheck-skipped", pid, as_user, {"by": "--no-recheck"})
        recheckable = bool(p.target) and not str((p.target or {}).get("url", "")).startswith(
            "replay://"
        )
        console.print(
            f"approving {pid} ({p.kind} on {p.node})"
            + ("; re-checking the node first" if recheckable and not no_recheck else "")
        )
        execution = desk.approve(
            pid,
            as_user=as_user,
            recheck=recheckable and not no_recheck,
            recheck_fn=live.recheck,
            guard_fn=live.drain_guard,
            on_task=task_printer(console),
        )
        report_execution(console, execution)
        if execution.ok:
            from runbook.cli.verify_offer import offer_verification

            offer_verification(
                console,
                desk,
                execution.proposal,
                interactive=sys.stdin.isatty() and fmt == "text",
                as_user=as_user,
            )
    if fmt == "json":
        click.echo(
            json.dumps(
                {
                    "ok": execution.ok,
                    "reason": execution.reason,
                    "proposal": execution.proposal.to_json(),
                    "check": execution.check.as_dict(),
                    "apply": execution.apply.as_dict() if execution.apply is not None else None,
                },
                indent=2,
                default=str,
            )
        )
    if not execution.ok:
        raise click.exceptions.Exit(1)


@approvals.command("deny")
@_db_option
@textfile_dir_option
@click.argument("pid", metavar="ID", shell_complete=complete_proposal, callback=proposal_id)
@click.option("--reason", required=True, help="Why (recorded in the audit trail).")
@click.option(
    "--as",
    "as_user",
    metavar="NAME",
    help="Record NAME as who denied (alongside the OS user), e.g. behind a shared account.",
)
@format_option("text", "json", default="text")
@click.pass_context
def deny_cmd(ctx: click.Context, pid: str, reason: str, as_user: str | None, fmt: str) -> None:
    """Deny ID with a reason; nothing runs. --format json: the proposal as it now stands."""
    with _desk(ctx) as desk:
        p = desk.deny(pid, reason=reason, as_user=as_user)
    if fmt == "json":
        click.echo(json.dumps(p.to_json(), indent=2, default=str))
        return
    click.echo(f"{p.id} denied by {p.decided_by}: {reason}")


@approvals.command("recover")
@_db_option
@textfile_dir_option
@click.argument("pid", metavar="ID", shell_complete=complete_proposal, callback=proposal_id)
@click.option("--as", "as_user", help="Act as NAME (a name the config's delegation allows).")
@click.option(
    "--force",
    is_flag=True,
    help="Recover although the claiming process ran on another host (check it is gone).",
)
@format_option("text", "json", default="text")
@click.pass_context
def recover_cmd(ctx: click.Context, pid: str, as_user: str | None, force: bool, fmt: str) -> None:
    """Mark a proposal left `running` by a process that is gone (killed mid-playbook) as
    failed; it is never run again (re-run the runbook for a fresh proposal). Audited.
    --format json: the proposal as it now stands."""
    with _desk(ctx) as desk:
        p = desk.recover(pid, as_user=as_user, force=force)
    if fmt == "json":
        click.echo(json.dumps(p.to_json(), indent=2, default=str))
        return
    click.echo(f"{p.id} recovered: failed ({(p.result or {}).get('error')})")


@approvals.command("publish")
@_db_option
@textfile_dir_option
@format_option("text", "json", default="text")
@click.pass_context
def publish_cmd(ctx: click.Context, fmt: str) -> None:
    """Write the queue's metrics and send the notices due (queued; about to expire), changing
    no proposal. Every command that changes the queue does this on its way out; run this from
    a timer too, so that a queue nobody touches still warns before its proposals expire."""
    from runbook.errors import UsageError
    from runbook.oncall import publish
    from runbook.remedies.store import Store

    cfg = load_config(ctx, db=(ctx.obj or {}).get("db"))
    if cfg.textfile_dir is None and not cfg.notify.enabled:
        raise UsageError(
            "nothing to publish to: give --textfile-dir DIR, or set metrics.textfile_dir or "
            "a notify place in the config (webhook_url, slack, teams, pagerduty; or "
            "RUNBOOK_TEXTFILE_DIR, RUNBOOK_WEBHOOK_URL)"
        )
    with Store(cfg.db) as store:
        done = publish(cfg, store)
    if fmt == "json":
        click.echo(
            json.dumps(
                {
                    "pending": done.pending,
                    "metrics_file": str(done.metrics_file) if done.metrics_file else None,
                    "notices_sent": done.notices_sent if cfg.notify.enabled else None,
                },
                indent=2,
            )
        )
        return
    click.echo(
        f"{done.pending} pending"
        + (f"; metrics: {done.metrics_file}" if done.metrics_file else "")
        + (f"; {done.notices_sent} notices sent" if cfg.notify.enabled else "")
    )


@click.group()
def audit() -> None:
    """The tamper-evident audit trail of proposals, decisions and executions."""


def _audit_trail(ctx: click.Context, log: str | None, db: str | None) -> tuple[Any, Any]:
    """The audit trail a command reads, and the config: `--log FILE`; else the store's own
    (the file beside a SQLite store, the database of a shared one)."""
    from runbook.remedies.audit import AuditLog
    from runbook.remedies.store import Store

    cfg = load_config(ctx, db=db)
    if log:
        return AuditLog(Path(log)), cfg
    if isinstance(cfg.db, Path):
        return AuditLog(cfg.audit_log), cfg
    store = Store(cfg.db, readonly=True)
    ctx.call_on_close(store.close)
    return store.audit_log(cfg.audit_log), cfg


@audit.command("verify")
@click.option("--log", type=click.Path(dir_okay=False), help="Audit log (default from config).")
@click.option(
    "--db",
    type=click.Path(dir_okay=False),
    help="Approval store holding the anchor (a shared postgresql:// store holds the chain itself).",
)
@format_option("text", "json", default="text")
@click.pass_context
def verify_cmd(ctx: click.Context, log: str | None, db: str | None, fmt: str) -> None:
    """Recompute the hash chain; exit 1 naming the first broken entry. --format json:
    {"log", "ok", "entries", "head", "anchored", "problems"}."""
    from runbook.remedies.store import Store

    trail, cfg = _audit_trail(ctx, log, db)
    anchor = None
    if not isinstance(cfg.db, Path) or cfg.db.exists():
        with Store(cfg.db, readonly=True) as store:  # reads only: works on a full disk
            anchor = store.audit_head()
    result = trail.verify(anchor=anchor)
    where = trail.where
    if fmt == "json":
        click.echo(
            json.dumps(
                {
                    "log": where,
                    "ok": result.ok,
                    "entries": result.entries,
                    "head": result.head.hash if result.head else None,
                    "anchored": anchor is not None,
                    "problems": list(result.problems),
                },
                indent=2,
            )
        )
        if not result.ok:
            raise click.exceptions.Exit(1)
        return
    if result.ok:
        click.echo(
            f"{where}: {count(result.entries, 'entry', 'entries')}, chain intact"
            + (f" (head {result.head.hash[:12]})" if result.head else "")
        )
        if anchor is None and result.entries:
            # without the store's anchor a chain cut short at its end is still a valid chain
            click.echo(
                f"{where}: warning: the approval store ({cfg.db}) holds no anchor for "
                "this log: entries cut off its end cannot be detected",
                err=True,
            )
        return
    for problem in result.problems:
        click.echo(f"{where}: {problem}", err=True)
    raise click.exceptions.Exit(1)


@audit.command("show")
@click.option("--log", type=click.Path(dir_okay=False), help="Audit log (default from config).")
@click.option(
    "--db",
    type=click.Path(dir_okay=False),
    help="Approval store whose audit log to show (its audit.jsonl, unless the config names one).",
)
@click.option(
    "--proposal",
    "pid",
    help="Only this proposal's entries.",
    shell_complete=complete_proposal,
    callback=proposal_id,
)
@format_option("text", "json", default="text")
@click.pass_context
def show_audit(
    ctx: click.Context, log: str | None, db: str | None, pid: str | None, fmt: str
) -> None:
    """Print the audit trail (optionally one proposal's)."""
    trail, _ = _audit_trail(ctx, log, db)
    for entry in trail.entries():
        if pid and entry.get("proposal") != pid:
            continue
        if fmt == "json":
            click.echo(json.dumps(entry, default=str))
        else:
            click.echo(
                f"{entry['seq']:>5} {entry['time'][:19]} {entry['event']:<11} "
                f"{entry.get('proposal') or '-':<10} {entry.get('actor') or '-'}"
                + _brief(entry.get("data") or {})
            )


def _brief(data: Mapping[str, Any]) -> str:
    for key in ("reason", "summary", "status", "playbook"):
        if data.get(key):
            return f"  {key}: {str(data[key])[:120]}"
    return ""


def show_advice(console: Console, proposal: VerdictProposal) -> None:
    """The advice of a kind that gives some (reduce-loader-memory: which term of the estimate
    dominates and what each cut saves)."""
    from runbook.errors import RunbookError
    from runbook.remedies import kinds

    kind = kinds.find(proposal.kind)
    if kind is None or kind.advice_title is None:
        return
    console.rule(f"[bold]{kind.advice_title}")
    try:
        lines = kind.advice_lines(proposal.params)
    except RunbookError as exc:
        console.print(f"  {escape(proposal.summary)} ({escape(exc.one_line())})")
        return
    for line in lines:
        console.print(f"  {escape(line)}")


def guided_approvals(
    console: Console,
    desk: Desk,
    queued: list[Queued],
    *,
    interactive: bool,
    as_user: str | None = None,
    advice: Sequence[VerdictProposal] = (),
    ledger: ApprovalLedger | None = None,
) -> None:
    """After a guided walk: each queued proposal with its evidence and check-mode diff, then
    approve / deny / skip. Not interactive: say where each one waits.

    `ledger` (runbook.rundir.ApprovalLedger) is told of each prompt before it waits and of
    each decision once taken, and saves them in the run directory, so that `runbook resume`
    after an interruption asks only what was not answered yet."""
    for proposal in advice:
        show_advice(console, proposal)
    if not queued:
        return
    console.rule("[bold]proposals")
    prompts = _Prompts(console, desk, interactive=interactive, as_user=as_user, ledger=ledger)
    for number, item in enumerate(queued, 1):
        console.print(f"\n[bold]proposal {number}/{len(queued)}[/]")
        prompts.one(item)


class _Prompts:
    """The prompt of each queued proposal in turn, each decision told to the ledger."""

    def __init__(
        self,
        console: Console,
        desk: Desk,
        *,
        interactive: bool,
        as_user: str | None,
        ledger: ApprovalLedger | None,
    ) -> None:
        self.console = console
        self.desk = desk
        self.interactive = interactive
        self.as_user = as_user
        self.ledger = ledger

    def decided(self, pid: str, outcome: str) -> None:
        if self.ledger is not None:
            self.ledger.decided(pid, outcome)

    def one(self, item: Queued) -> None:
        """Show the proposal; on a terminal, its check run, the question, and the answer."""
        console = self.console
        p = item.proposal
        if p.state == "pending" and self.interactive and item.plan is not None:
            # an earlier approval in this walk may have changed the file this plan patches
            from runbook.errors import RunbookError

            try:
                p = self.desk.replan_if_stale(p.id)
            except RunbookError as exc:
                console.print(f"  [red]{escape(exc.one_line())}[/]")
                self.decided(p.id, "refused")
                return
        show_proposal(console, p, brief=True)
        if p.state != "pending":
            self.decided(p.id, p.state)  # decided elsewhere meanwhile (`runbook approvals …`)
            return
        if not self.interactive:
            from runbook.cli.verify_offer import approvals_commands

            # whole commands, each one that runs as printed (the store named when not default)
            show, approve = approvals_commands(self.desk, p.id, "show", "approve")
            console.print(f"  queued: {escape(show)}")
            console.print(f"          {escape(approve)}")
            return
        if item.plan is None:
            console.print(f"  left in the queue as {p.id}: it cannot run as it is")
            self.decided(p.id, "not executable")
            return
        preview = self._check_run(p)
        answer = self._ask(p, preview)
        if answer == "skip":
            self.desk.skip(p.id, as_user=self.as_user)
            console.print(f"  skipped: left in the queue as {p.id}")
            self.decided(p.id, "skipped")
        elif answer == "deny":
            reason = click.prompt("  reason", err=True, value_proc=_a_reason)
            self.desk.deny(p.id, reason=reason, as_user=self.as_user)
            self.decided(p.id, "denied")
            console.print(f"  denied: {escape(reason)}")
        else:
            self._approved(p, preview)

    def _check_run(self, p: QueuedProposal) -> PlaybookResult | None:
        """The plan in Ansible's check mode, and its diff shown; None if it could not start."""
        console = self.console
        console.print("  [bold]check mode[/] (changes nothing):")
        try:
            preview = self.desk.preview(p.id, on_task=task_printer(console))
        except Exception as exc:
            console.print(f"  [red]check run could not start:[/] {escape(str(exc))}")
            return None
        console.print("  [bold]what would change:[/]")
        print_diff(console, preview.diff_text(), ok=preview.ok)
        return preview

    def _ask(self, p: QueuedProposal, preview: PlaybookResult | None) -> str:
        """approve / deny / skip (approve only after a check run that passed)."""
        choices = (
            ["approve", "deny", "skip"] if preview is not None and preview.ok else ["deny", "skip"]
        )
        if preview is not None and not preview.ok:
            self.console.print("  [red]the check run failed: approval is not offered[/]")
        if self.ledger is not None:
            self.ledger.asking(p.id)  # saved before the wait: an interrupt here loses nothing
        answer = click.prompt(
            "  " + " / ".join(choices),
            type=click.Choice([*choices, *(c[0] for c in choices)]),
            show_choices=False,
            err=True,
        )
        return next(c for c in choices if c.startswith(answer))

    def _approved(self, p: QueuedProposal, preview: PlaybookResult | None) -> None:
        """Run the approved plan, report it, and offer its recovery check."""
        from runbook.errors import RunbookError
        from runbook.remedies import live
        from runbook.remedies.approval import SecondPersonNeeded

        console = self.console
        # before the claim: an interrupt while the playbook runs must not prompt again (the
        # store says how it ended: running, succeeded, failed)
        self.decided(p.id, "approved")
        console.print("  [bold]running[/]")
        try:
            execution = self.desk.approve(
                p.id,
                as_user=self.as_user,
                recheck=False,  # the evidence is this run's, seconds old
                guard_fn=live.drain_guard,
                on_task=task_printer(console),
                checked=preview,  # the check run just shown, of this same plan
            )
        except SecondPersonNeeded as exc:
            # recorded, and still pending: another person approves it (here or on the desk)
            console.print(f"  [yellow]{escape(exc.one_line())}[/]")
            self.decided(p.id, "waiting for a second person")
            return
        except RunbookError as exc:
            console.print(f"  [red]{escape(exc.one_line())}[/]")
            self.decided(p.id, "refused")
            return
        self.decided(p.id, execution.proposal.state)
        report_execution(console, execution)
        if execution.ok:
            from runbook.cli.verify_offer import offer_verification

            offer_verification(
                console,
                self.desk,
                execution.proposal,
                interactive=self.interactive,
                as_user=self.as_user,
            )


def approvals_phase(
    console: Console,
    cfg: Config,
    directory: RunDirectory,
    record: RunRecord,
    runbook: Runbook,
    verdict: Verdict,
    *,
    interactive: bool,
    as_user: str | None,
) -> None:
    """A guided run's approvals (`run`, `resume`, `demo`): its proposals queued once (the
    ledger in approvals.json remembers), then the prompts for those not decided yet — or, not
    interactive, where each one waits."""
    from runbook.session import queued_approvals

    with queued_approvals(cfg, directory, record, runbook, verdict) as pending:
        if pending is not None:
            guided_approvals(
                console,
                pending.desk,
                pending.queued,
                interactive=interactive,
                as_user=as_user,
                advice=verdict.proposals,
                ledger=pending.ledger,
            )
