"""Approvals and recovery checks started from the desk, each run in a worker thread.

An approval on the page runs what `runbook approvals approve ID` runs, through the same
`Desk.approve` (runbook.remedies.approval): the approver authorised, the proposal still
pending and within its TTL, the evidence re-checked on the live node, the blast-radius guard
of a drain, the claim (exactly one winner, across processes), check mode, the real run, what
its kind reads after it. Its progress is printed by the CLI's own printers (task lines, the
result, the recovery check's command) onto a console of runbook.render.lines, which hands the
run each plain line; the proposal's page shows them as they come. A recovery check runs
`runbook verify`'s check (runbook.cli.verify_offer.run_now).

Each worker opens its own Desk (an SQLite connection belongs to the thread that opened it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from runbook.desk.policy import Identity, Policy
from runbook.errors import RunbookError
from runbook.remedies.approval import Desk, Refused, actor_name, os_user

if TYPE_CHECKING:
    from rich.console import Console

    from runbook.config import Config
    from runbook.desk.publisher import Publisher
    from runbook.remedies.store import QueuedProposal

log = logging.getLogger(__name__)


class WebDesk(Desk):
    """The approval desk acting for a person signed in on the web: who may decide is the
    desk's policy (desk.allow: users or groups → kinds and severities), checked where the
    CLI checks its approvers list, and refused the same way (audited; the proposal stays
    pending). The actor recorded is `OSUSER as NAME`, as for `--as NAME`.

    It never publishes in the thread that decides: a decision, and letting go of the queue,
    kick the desk's publisher (runbook.desk.publisher), which resolves the pages and sends
    what is due in a thread of its own."""

    def __init__(
        self,
        config: Config,
        identity: Identity,
        policy: Policy,
        publisher: Publisher | None = None,
    ) -> None:
        super().__init__(config)
        self.identity = identity
        self.policy = policy
        self.publisher = publisher

    def _decided(self, proposal: QueuedProposal) -> None:
        if self.publisher is None:
            super()._decided(proposal)
        else:
            self.publisher.kick()

    def close(self, *, publish: bool = True) -> None:
        if self.publisher is None:
            super().close(publish=publish)
            return
        super().close(publish=False)
        if publish:
            self.publisher.kick()

    def record(
        self, event: str, proposal: str | None, actor: str | None, data: Mapping[str, Any]
    ) -> None:
        """Every entry this desk writes is on the signed-in person's behalf: one the Desk would
        sign with the bare OS user (a preview) names them too."""
        if actor == os_user():
            actor = actor_name(self.identity.name)
        super().record(event, proposal, actor, data)

    def _authorise(
        self, proposal: QueuedProposal, actor: str, as_user: str | None, action: str = "approve"
    ) -> None:
        why = self.policy.why_not(self.identity, proposal.kind, proposal.root_cause)
        if why is None:
            return
        self.record(
            "refused",
            proposal.id,
            actor,
            {"reason": why, "action": action, "via": f"desk ({self.identity.via})"},
        )
        raise Refused(why)


@dataclass
class Run:
    """One approval (or recovery check) started here: its output so far and how it ended."""

    pid: str
    what: str  # approve | verify
    by: str
    started: float = field(default_factory=time.time)
    lines: list[str] = field(default_factory=list)
    finished: float | None = None
    outcome: str | None = None  # succeeded | failed | refused | error
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def say(self, line: str) -> None:
        from runbook.redact import redact

        with self._lock:
            self.lines.append(redact(line.rstrip()))

    def output(self) -> list[str]:
        with self._lock:
            return list(self.lines)

    @property
    def running(self) -> bool:
        return self.finished is None

    def console(self) -> Console:
        """The console the CLI's printers print this run's progress on: its lines, plain."""
        from runbook.render.lines import line_console

        return line_console(self.say)


class Stopping(RunbookError):
    """The desk is stopping: it takes no new decision."""


class Runs:
    """The runs started by this desk process, newest per proposal; one at a time each.

    Stopping (SIGTERM, ^C): `close` refuses every new run (and the views every decision),
    `drain` waits for those running to finish, up to a bound; `abandon` (a second signal)
    ends the wait at once, leaving an approval that was running `running` in the store for
    `runbook approvals recover`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, Run] = {}
        self.closing = False
        self.abandoned = threading.Event()

    def close(self) -> None:
        self.closing = True

    def abandon(self) -> None:
        self.closing = True
        self.abandoned.set()

    def running(self) -> list[Run]:
        with self._lock:
            return [run for run in self._runs.values() if run.running]

    def drain(self, bound: float, say: Callable[[str], None]) -> list[Run]:
        """Refuse new runs, and wait for the running ones to finish: at most `bound` seconds,
        less if `abandon` is called. Says what it waits for, and what it left. Returns the
        runs still running."""
        self.close()
        waiting = self.running()
        if not waiting:
            return []
        say(
            f"desk: stopping: waiting up to {_seconds(bound)} for "
            + ", ".join(f"the {r.what} of {r.pid} (by {r.by})" for r in waiting)
            + " to finish; a second SIGTERM or ^C stops now and leaves a running approval "
            "for `runbook approvals recover`"
        )
        end = time.monotonic() + bound
        while waiting and time.monotonic() < end and not self.abandoned.is_set():
            self.abandoned.wait(0.1)
            waiting = self.running()
        for run in waiting:
            say(
                f"desk: stopped while the {run.what} of {run.pid} ran"
                + (
                    f": it stays `running`; `runbook approvals recover {run.pid}` once its "
                    "playbook is known to be gone"
                    if run.what == "approve"
                    else ""
                )
            )
        if not waiting:
            say("desk: every run finished")
        return waiting

    def get(self, pid: str) -> Run | None:
        with self._lock:
            return self._runs.get(pid)

    def start(self, run: Run, body: Callable[[Run], str]) -> Run:
        """Run `body(run)` (it returns the outcome) in a worker thread; a run of the same
        proposal still going is returned instead of starting another."""
        with self._lock:
            if self.closing:
                raise Stopping("the desk is stopping: it takes no new decision (try again shortly)")
            current = self._runs.get(run.pid)
            if current is not None and current.running:
                return current
            self._runs[run.pid] = run

        def work() -> None:
            try:
                run.outcome = body(run)
            except RunbookError as exc:
                run.say(exc.one_line())
                run.outcome = "refused" if isinstance(exc, Refused) else "failed"
            except Exception:
                log.exception("desk run of %s", run.pid)
                run.say("internal error: the desk's log has the details")
                run.outcome = "error"
            finally:
                run.finished = time.time()

        threading.Thread(target=work, name=f"desk-{run.what}-{run.pid}", daemon=True).start()
        return run

    def wait(self, pid: str, timeout: float) -> Run | None:
        """For tests and shutdown: the run, once finished (or the timeout passed)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            run = self.get(pid)
            if run is None or not run.running:
                return run
            time.sleep(0.05)
        return self.get(pid)


def _seconds(value: float) -> str:
    return f"{value:g} s" if value < 120 else f"{value / 60:g} min"


#: what a run does with its proposal: the run, the console it prints on, the desk acting for
#: the signed-in person, the proposal as the run started; its outcome
_Step = Callable[[Run, "Console", Desk, "QueuedProposal"], str]


def _on_proposal(
    config: Config, policy: Policy, who: Identity, publisher: Publisher | None, step: _Step
) -> Callable[[Run], str]:
    """A run's body: `step` on the run's proposal, in a desk of the worker's own thread."""

    def body(run: Run) -> str:
        console = run.console()
        with WebDesk(config, who, policy, publisher) as desk:
            return step(run, console, desk, desk.store.get(run.pid))

    return body


def approve(
    config: Config, policy: Policy, who: Identity, publisher: Publisher | None = None
) -> Callable[[Run], str]:
    """The body of an approval: `runbook approvals approve ID`, step for step."""

    def step(run: Run, console: Console, desk: Desk, p: QueuedProposal) -> str:
        from runbook.cli.approvals import report_execution, task_printer
        from runbook.cli.verify_offer import offer_verification
        from runbook.remedies import live

        recheckable = bool(p.target) and not str((p.target or {}).get("url", "")).startswith(
            "replay://"
        )
        console.print(
            f"approving {p.id} ({p.kind} on {p.node})"
            + ("; re-checking the node first" if recheckable else "")
        )
        execution = desk.approve(
            run.pid,
            as_user=who.name,
            recheck=recheckable,
            recheck_fn=live.recheck,
            guard_fn=live.drain_guard,
            on_task=task_printer(console),
            identity=who.name,  # the two-person rule's approver: the signed-in person
        )
        report_execution(console, execution)
        if execution.ok:
            offer_verification(
                console, desk, execution.proposal, interactive=False, as_user=who.name
            )
        return execution.proposal.state

    return _on_proposal(config, policy, who, publisher, step)


def verify(
    config: Config, policy: Policy, who: Identity, publisher: Publisher | None = None
) -> Callable[[Run], str]:
    """The body of a recovery check: what `runbook verify ID` runs on the proposal's node."""

    def step(run: Run, console: Console, desk: Desk, p: QueuedProposal) -> str:
        from runbook.cli.verify_offer import run_now
        from runbook.remedies import plans
        from runbook.verify.record import verifiable

        why = policy.why_not(who, p.kind, p.root_cause) or verifiable(p)
        if why:
            raise Refused(why)
        target = plans.Target.from_dict(p.target) if p.target else None
        if target is None or not target.live:
            raise Refused(
                f"proposal {p.id} came from a recorded bundle: there is no live "
                "node to check (run `runbook verify` naming the node)"
            )
        console.print(f"recovery check of {p.id} on {p.node}")
        run_now(console, desk, p, target, as_user=who.name)
        done = desk.store.get(run.pid)
        return str((done.verification or {}).get("status") or "not run")

    return _on_proposal(config, policy, who, publisher, step)


def describe(run: Run | None) -> dict[str, Any] | None:
    if run is None:
        return None
    return {
        "what": run.what,
        "by": run.by,
        "running": run.running,
        "outcome": run.outcome,
        "lines": run.output(),
        "started": run.started,
        "finished": run.finished,
    }
