"""The approval desk: queue a verdict's proposals, preview them, approve or deny, execute once.

Every step writes the audit trail first-hand (`proposed`, `previewed`, `approved`, `denied`,
`refused`, `check`, `executed`, `failed`), each entry naming the actor and, for an approval, the
exact playbook and variables. Order of an approval::

    authorised approver?  → still pending?  → within its TTL?  → a second person, for a
    disruptive kind (runbook.remedies.two_person: this approval recorded; refused while it
    waits for another person's)  → evidence still there
    (re-check on the live node)?  → a kind that takes the node out (node-drain): blast-radius
    guard, live  → claim (exactly one winner)  → check mode + diff  → the real run  → what
    the kind reads after it (the A/B comparison)  → succeeded | failed (never retried)

`succeeded` means the playbook ran on its host and what it ran could run there: a run whose
commands could not (the A/B's all_reduce_perf not found, exit 127; a timeout; no GPU) or a play
that matched no host is `failed`, with the reason in its result (`result.reason`) and in the
audit trail's `failed` entry.

Any "no" before the claim leaves the proposal refused with the reason (or, for an approver
who is not allowed, untouched); after the claim the proposal is never run again.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runbook.config import Config, state_dir
from runbook.errors import RunbookError
from runbook.remedies import kinds, plans, two_person
from runbook.remedies.playbook import PlaybookResult, TaskOutcome, run_playbook
from runbook.remedies.store import QueuedProposal, Store
from runbook.verdict import Verdict

#: re-walks the proposal's runbook on its node (runbook.remedies.live.recheck)
Recheck = Callable[[QueuedProposal], Verdict | None]
#: the blast-radius guard on the pool as it is now (runbook.remedies.live.drain_guard)
Guard = Callable[[QueuedProposal, plans.Plan], tuple[bool, str]]


class Refused(RunbookError):
    """The approval was refused (stale, evidence gone, guard, not an approver)."""

    exit_code = 1


class SecondPersonNeeded(Refused):
    """The two-person rule: this approval is recorded, the proposal still waits for another
    person's (it stays pending)."""


def os_user() -> str:
    """Who runs this, from the OS (uid → passwd), never from LOGNAME/USER: the environment is
    the caller's to set, and `LOGNAME=alice runbook approvals deny` must not record alice."""
    import pwd

    uid = os.getuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def actor_name(as_user: str | None) -> str:
    """Who acts: the OS user, and `--as NAME` beside it ("root as alice": a shared account)."""
    user = os_user()
    return f"{user} as {as_user}" if as_user and as_user != user else user


@dataclass
class Queued:
    proposal: QueuedProposal
    new: bool
    plan: plans.Plan | None
    plan_error: str | None


@dataclass
class Execution:
    proposal: QueuedProposal
    check: PlaybookResult
    apply: PlaybookResult | None
    result: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """The proposal as recorded: succeeded (its playbook ran, and what it was for was
        done) — never read from Ansible's status alone."""
        return self.apply is not None and self.proposal.state == "succeeded"

    @property
    def reason(self) -> str | None:
        """Why it did not succeed, in one line (None when it did)."""
        if self.ok:
            return None
        if self.apply is None:
            return str(self.result.get("reason") or self.check.reason or "the check run failed")
        return str(self.result.get("reason") or self.apply.reason or "failed")


def _evidence(verdict: Verdict) -> dict[str, Any]:
    first = verdict.first_anomaly
    return {
        "root_cause": verdict.root_cause,
        "confidence": verdict.confidence,
        "surfaced_as": verdict.surfaced_as,
        "first_anomaly": first.to_json() if first else None,
        "chain": [link.to_json() for link in verdict.chain],
    }


class Desk:
    def __init__(
        self, config: Config, *, remedies_dir: Path | None = None, readonly: bool = False
    ) -> None:
        self.config = config
        self.readonly = readonly
        self.store = Store(config.db, readonly=readonly)
        # beside a SQLite store, its file; in a shared (PostgreSQL) store, the database
        self.audit = self.store.audit_log(config.audit_log)
        self.remedies_dir = remedies_dir or config.local_dir / "remedies"

    def close(self, *, publish: bool = True) -> None:
        """`publish`: the queue, as this desk leaves it, to its metrics file and webhook
        (runbook.oncall; never raises). Not after an interrupt: the user asked to stop."""
        try:
            wanted = self.config.textfile_dir is not None or self.config.notify.enabled
            if publish and not self.readonly and wanted:
                # imported only when there is somewhere to publish: the webhook client
                # (urllib, http.client) costs ~10 ms of every command's start otherwise
                from runbook.oncall import publish as publish_queue

                publish_queue(self.config, self.store)
        finally:
            self.store.close()

    def __enter__(self) -> Desk:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        self.close(publish=kind is None or not issubclass(kind, KeyboardInterrupt))

    def record(
        self, event: str, proposal: str | None, actor: str | None, data: Mapping[str, Any]
    ) -> None:
        entry = self.audit.append(event, proposal=proposal, actor=actor, data=data)
        self.store.record_audit_head(int(entry["seq"]), str(entry["hash"]))

    def _decided(self, proposal: QueuedProposal) -> None:
        """Its pages resolved where they were opened, in the background (runbook.notify)."""
        if self.config.notify.enabled and not self.readonly:
            from runbook import notify

            notify.decided(self.config, proposal, store=self.store)

    # ------------------------------------------------------------------------------ queue
    def queue_verdict(
        self,
        verdict: Verdict,
        *,
        node: str,
        target: plans.Target | None,
        runbook_id: str,
        variables: Mapping[str, Any],
        run_dir: str | None,
        source: str = "run",
        requested_by: str | None = None,
    ) -> list[Queued]:
        """Queue each executable proposal of a verdict (advice kinds, and proposals whose plan
        lacks an input — `requires_approval: false` — are not queued). `requested_by`: who
        ran the run (the two-person rule's requester; default the OS user)."""
        requester = requested_by or os_user()
        out: list[Queued] = []
        for typed_proposal in verdict.proposals:
            if kinds.is_advice(typed_proposal.kind) or not typed_proposal.requires_approval:
                # advice: its plan lacks an input (`missing`), so there is nothing to approve
                continue
            # the plan reads the proposal's JSON (its params and the remedy's extra fields)
            proposal = typed_proposal.to_json()
            key = f"{node}:{typed_proposal.id}"
            ctx = self._context(node=node, target=target, variables=variables,
                                root_cause=verdict.root_cause, key=key)
            plan: plans.Plan | None = None
            plan_error: str | None = None
            try:
                plan = kinds.plan_for(proposal, ctx)
            except RunbookError as exc:
                plan_error = exc.one_line()
            stored, new = self.store.enqueue(
                key=key,
                kind=str(proposal["kind"]),
                remedy=str(proposal.get("remedy") or proposal["kind"]),
                summary=str(proposal.get("summary") or ""),
                params=proposal.get("params") or {},
                evidence=_evidence(verdict),
                source=source,
                ttl=self.config.ttl,
                node=node,
                root_cause=verdict.root_cause,
                playbook=plan.playbook if plan else proposal.get("playbook"),
                plan=plan.as_dict() if plan else {"error": plan_error},
                target=target.as_dict() if target else None,
                runbook=runbook_id,
                variables=variables,
                run_dir=run_dir,
                requested_by=requester,
            )
            self.record(
                "proposed" if new else "refreshed",
                stored.id,
                requester,
                {
                    "kind": stored.kind,
                    "node": node,
                    "summary": stored.summary,
                    "root_cause": stored.root_cause,
                    "source": source,
                    "run_dir": run_dir,
                    "plan": stored.plan,
                },
            )
            out.append(Queued(stored, new, plan, plan_error))
        return out

    def _context(
        self, *, node: str, target: plans.Target | None, variables: Mapping[str, Any],
        root_cause: str | None, key: str,
    ) -> plans.PlanContext:
        return plans.PlanContext(
            node=node,
            target=target,
            variables=variables,
            work_dir=self.remedies_dir / _safe(key),
            root_cause=root_cause,
            kubeconfig=variables.get("kubeconfig") or self.config.kubeconfig,
            kube_context=variables.get("kube_context") or self.config.kube_context,
            drain_max_cordoned=self.config.drain.max_cordoned,
            drain_max_fraction=self.config.drain.max_fraction,
            drain_pool_selector=self.config.drain.pool_selector,
        )

    def replan_if_stale(self, pid: str) -> QueuedProposal:
        """A pending proposal whose source files changed since it was planned (an earlier
        approval patched the same manifest) gets a fresh plan against the files as they are,
        recorded in the audit trail; the approver then sees the new check-mode diff."""
        proposal = self.store.get(pid)
        if proposal.state != "pending" or not proposal.plan or "playbook" not in proposal.plan:
            return proposal
        plan = plans.Plan.from_dict(proposal.plan)
        if all(plans.file_digest(Path(n)) == d for n, d in plan.sources.items()):
            return proposal
        ctx = self._context(
            node=proposal.node or "node",
            target=plans.Target.from_dict(proposal.target) if proposal.target else None,
            variables=proposal.vars,
            root_cause=proposal.root_cause,
            key=proposal.key,
        )
        try:
            fresh = kinds.plan_for({"kind": proposal.kind, "params": proposal.params}, ctx)
        except RunbookError as exc:
            reason = f"cannot be re-planned: {exc.one_line()}"
            raise self._refuse(proposal, os_user(), reason) from exc
        self.store.set_plan(pid, fresh.as_dict())
        self.record("replanned", pid, os_user(), {"plan": fresh.as_dict(),
                                                  "because": "its source files changed"})
        return self.store.get(pid)

    # --------------------------------------------------------------------------- decisions
    def _authorise(
        self, proposal: QueuedProposal, actor: str, as_user: str | None, action: str = "approve"
    ) -> None:
        """The approver is the OS user. With `approvers:` set, `--as NAME` counts only where
        the config's `delegation:` lets this OS user act as NAME; without it anyone may
        decide and `--as` is only a label. Refusals are audited; the proposal stays pending."""
        allowed = self.config.approvers
        if not allowed:
            return
        user = os_user()
        who = as_user or user
        if who != user and who not in self.config.delegation.get(user, ()):
            why = f"os user {user} may not act as {who} (no delegation: for it in the config)"
        elif who not in allowed:
            why = f"{actor} may not {action} proposals (approvers: {', '.join(allowed)})"
        else:
            return
        self.record("refused", proposal.id, actor,
                    {"reason": why, "action": action, "approvers": list(allowed)})  # fmt: skip
        raise Refused(why)

    def _refuse(self, proposal: QueuedProposal, actor: str, reason: str) -> Refused:
        refused = self.store.decide(proposal.id, "refused", actor=actor, reason=reason)
        self.record("refused", proposal.id, actor, {"reason": reason})
        self._decided(refused)
        return Refused(f"proposal {proposal.id} refused: {reason}")

    def deny(self, pid: str, *, reason: str, as_user: str | None = None) -> QueuedProposal:
        if not reason.strip():
            raise Refused("a denial needs a reason (--reason)")
        actor = actor_name(as_user)
        self._authorise(self.store.get(pid), actor, as_user, "deny")
        proposal = self.store.decide(pid, "denied", actor=actor, reason=reason)
        self.record("denied", pid, actor, {"reason": reason})
        self._decided(proposal)
        return proposal

    def skip(self, pid: str, *, as_user: str | None = None) -> QueuedProposal:
        """Left in the queue at a prompt: nothing changes but the audit trail, which says who
        saw it and chose not to decide (so "nobody looked" and "someone looked" differ)."""
        proposal = self.store.get(pid)
        self.record("skipped", pid, actor_name(as_user), {"state": proposal.state})
        return proposal

    def recover(
        self, pid: str, *, as_user: str | None = None, force: bool = False
    ) -> QueuedProposal:
        """A proposal left `running` by a process that is gone → `failed`, audited; it is
        never run again (re-run the runbook for a fresh proposal). A runner that still lives is
        refused; one on another host (which this host cannot see) only with `force`."""
        from runbook.remedies.store import runner_gone

        actor = actor_name(as_user)
        proposal = self.store.get(pid)
        self._authorise(proposal, actor, as_user, "recover")
        if proposal.state != "running":
            from runbook.remedies.store import Conflict

            raise Conflict(f"proposal {pid} is {proposal.state}, not running: nothing to recover")
        gone = runner_gone(proposal)
        runner = proposal.runner or {}
        where = (
            f"pid {runner.get('pid')} on {runner.get('host')}" if runner else "an unknown process"
        )
        if gone is False:
            raise Refused(f"proposal {pid} is still being executed ({where}): not recovered")
        if gone is None and not force:
            raise Refused(
                f"proposal {pid} was claimed by {where}, which cannot be seen from here: "
                "check it is gone, then recover with --force"
            )
        result = {
            "stage": "recovered",
            "error": f"the process that claimed it ({where}) is gone; whether its playbook "
            "ran, and how far, is in the audit trail and its ansible artifacts",
            "by": actor,
        }
        done = self.store.recover(pid, result=result)
        self.record("recovered", pid, actor, {**result, "forced": force and gone is None})
        self._decided(done)
        return done

    def plan_of(self, proposal: QueuedProposal) -> plans.Plan:
        if not proposal.plan or "playbook" not in proposal.plan:
            error = (proposal.plan or {}).get("error") or "no plan"
            raise Refused(f"proposal {proposal.id} cannot be executed: {error}")
        return plans.Plan.from_dict(proposal.plan)

    def preview(
        self, pid: str, *, on_task: Callable[[TaskOutcome], None] | None = None
    ) -> PlaybookResult:
        """Check mode with diff: exactly what the real run would change. Changes nothing."""
        proposal = self.store.get(pid)
        plan = self.plan_of(proposal)
        result = self._run(proposal, plan, check=True, on_task=on_task)
        self.record(
            "previewed",
            pid,
            os_user(),
            {"status": result.status, "rc": result.rc, "diff": result.diff_text()[:20000]},
        )
        _stop_if_interrupted(result)
        return result

    def approve(
        self,
        pid: str,
        *,
        as_user: str | None = None,
        recheck: bool = True,
        on_task: Callable[[TaskOutcome], None] | None = None,
        recheck_fn: Recheck | None = None,
        guard_fn: Guard | None = None,
        checked: PlaybookResult | None = None,
        identity: str | None = None,
    ) -> Execution:
        """`checked`: the check-mode run the approver has just seen (the guided prompt's
        preview of this same plan); otherwise the check run happens here, after the claim.
        `identity`: the person approving as the caller vouches for them (the desk's signed-in
        user); by default `identity_of(as_user)`."""
        actor = actor_name(as_user)
        proposal = self.store.get(pid)
        self._authorise(proposal, actor, as_user)
        plan = self._approvable_plan(proposal, actor)
        self._second_person(proposal, actor, identity or self.identity_of(as_user))
        if recheck and recheck_fn is not None:
            self._evidence_holds(proposal, actor, recheck_fn)
        if guard_fn is not None and kinds.takes_node_out(proposal.kind):
            self._guard_allows(proposal, plan, actor, guard_fn)
        proposal = self.store.claim(pid, actor=actor)
        self.record(
            "approved",
            pid,
            actor,
            {"playbook": plan.playbook, "extravars": plan.extravars, "inventory": plan.inventory},
        )
        return self._execute(proposal, plan, actor, checked=checked, on_task=on_task)

    def identity_of(self, as_user: str | None) -> str:
        """The person approving, for the two-person rule: the `--as` name where the config's
        approvers (and delegation) vouch for it, else the OS user: `--as` alone is a label
        anyone may type."""
        if as_user and self.config.approvers:
            return as_user  # _authorise let it through: the config vouches for it
        return os_user()

    def _second_person(self, proposal: QueuedProposal, actor: str, who: str) -> None:
        """The two-person rule (runbook.remedies.two_person): this approval recorded, then
        refused while the kind still needs another person's; the proposal stays pending."""
        policy = two_person.Policy.from_config(self.config)
        if not policy.applies(proposal.kind):
            return
        proposal.approvals = self.store.add_approval(proposal.id, who)
        reason = two_person.check(proposal, who, policy)
        self.record(
            "approval-recorded",
            proposal.id,
            actor,
            {"approver": who, "approvals": proposal.approvals,
             "requested_by": proposal.requested_by, "waiting": reason},
        )  # fmt: skip
        if reason:
            raise SecondPersonNeeded(
                f"proposal {proposal.id}: {reason}; {who}'s approval is recorded, it runs when "
                "another person approves it"
            )

    def _approvable_plan(self, proposal: QueuedProposal, actor: str) -> plans.Plan:
        """The plan of a proposal still pending, within its TTL, with a plan whose source
        files are as they were planned; refused (stale, no plan) otherwise."""
        if proposal.state != "pending":
            from runbook.remedies.store import Conflict

            raise Conflict(self.store._not_pending(proposal))
        if proposal.expired:
            age = _duration(time.time() - proposal.created_at)
            ttl = _duration(proposal.expires_at - proposal.created_at)
            raise self._refuse(
                proposal,
                actor,
                f"stale: proposed {age} ago, past its TTL of {ttl}; "
                "re-run the runbook for fresh evidence",
            )
        plan = self.plan_of(proposal) if proposal.plan and "playbook" in proposal.plan else None
        if plan is None:
            error = (proposal.plan or {}).get("error") or "no plan"
            raise self._refuse(proposal, actor, f"cannot be executed: {error}")
        changed = [
            name
            for name, digest in plan.sources.items()
            if plans.file_digest(Path(name)) != digest
        ]
        if changed:
            raise self._refuse(
                proposal,
                actor,
                f"stale: {', '.join(changed)} changed since the proposal was made; "
                "re-run the runbook to plan against the file as it is now",
            )
        return plan

    def _evidence_holds(self, proposal: QueuedProposal, actor: str, recheck_fn: Recheck) -> None:
        """A read-only re-walk of the node still proposes this kind; refused otherwise."""
        verdict = recheck_fn(proposal)
        found = verdict.root_cause if verdict else "nothing (no target or runbook to walk)"
        proposed = {p.kind for p in verdict.proposals} if verdict else set()
        self.record(
            "rechecked",
            proposal.id,
            actor,
            {"root_cause": verdict.root_cause if verdict else None, "proposes": sorted(proposed)},
        )
        if proposal.kind not in proposed:
            raise self._refuse(
                proposal,
                actor,
                f"evidence no longer holds: a re-check now finds "
                f"{found} and proposes no {proposal.kind}",
            )

    def _guard_allows(
        self, proposal: QueuedProposal, plan: plans.Plan, actor: str, guard_fn: Guard
    ) -> None:
        """The blast-radius guard, live, for a kind that takes the node out; refused if not."""
        allowed, why = guard_fn(proposal, plan)
        self.record("guard", proposal.id, actor, {"allowed": allowed, "reason": why})
        if not allowed:
            raise self._refuse(proposal, actor, why)

    def _execute(
        self,
        proposal: QueuedProposal,
        plan: plans.Plan,
        actor: str,
        *,
        checked: PlaybookResult | None,
        on_task: Callable[[TaskOutcome], None] | None,
    ) -> Execution:
        """A claimed proposal: check mode (unless `checked` is the one just seen), then the
        real run, then what its kind reads after it; recorded as succeeded or failed."""
        try:
            check = checked if checked is not None and checked.check else self._run(
                proposal, plan, check=True, on_task=on_task
            )
        except RunbookError as exc:
            failure = {"stage": "check", "error": exc.one_line(), "reason": exc.one_line()}
            self._finish(proposal, actor, ok=False, result=failure)
            raise
        self.record("check", proposal.id, actor, _summary(check))
        if not check.ok:
            result = {"stage": "check", **check.as_dict()}
            done = self._finish(proposal, actor, ok=False, result=result)
            _stop_if_interrupted(check)  # recorded first: never left `running`
            return Execution(done, check, None, result)
        try:
            applied = self._run(proposal, plan, check=False, on_task=on_task)
        except RunbookError as exc:
            failure = {"stage": "apply", "error": exc.one_line(), "reason": exc.one_line()}
            self._finish(proposal, actor, ok=False, result=failure)
            raise
        result = {"stage": "apply", **applied.as_dict(), "check": _summary(check)}
        ok = applied.ok
        if applied.interrupted is None:
            found = kinds.after_apply(proposal.kind, plan)
            result.update(found)
            if ok and found.get("not_run"):
                # Ansible ran it, but its commands could not run on the node (a tool missing,
                # a timeout): nothing was done or measured, and the record says why
                ok = False
                result["reason"] = str(found["not_run"])
        done = self._finish(proposal, actor, ok=ok, result=result)
        _stop_if_interrupted(applied)
        return Execution(done, check, applied, result)

    # ------------------------------------------------------------------------------ helpers
    def _finish(
        self, proposal: QueuedProposal, actor: str, *, ok: bool, result: Mapping[str, Any]
    ) -> QueuedProposal:
        done = self.store.finish(proposal.id, ok=ok, result=result)
        summary = {k: v for k, v in result.items() if k not in ("diff",)}
        self.record("executed" if ok else "failed", proposal.id, actor, summary)
        self._decided(done)
        return done

    def _run(
        self,
        proposal: QueuedProposal,
        plan: plans.Plan,
        *,
        check: bool,
        on_task: Callable[[TaskOutcome], None] | None,
    ) -> PlaybookResult:
        work = self.remedies_dir / _safe(proposal.key)
        stamp = time.strftime("%Y%m%dT%H%M%S") + f"-{time.time_ns() % 1_000_000:06d}"
        return run_playbook(
            plan.playbook,
            inventory=plan.inventory,
            extravars=plan.extravars,
            private_dir=work / f"ansible-{'check' if check else 'apply'}-{stamp}",
            check=check,
            on_task=on_task,
            limit=plan.limit,
            kubectl=plan.kubectl,
        )


def _duration(seconds: float) -> str:
    """`45 s`, `12 min`, `3.5 h`, `2.0 d`: a TTL of seconds does not read as "0.0 h"."""
    if seconds < 120:
        return f"{max(seconds, 0):.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _stop_if_interrupted(result: PlaybookResult) -> None:
    """A playbook cancelled by ^C or SIGTERM: its outcome is recorded; now the command stops."""
    if result.interrupted is not None:
        from runbook.interrupt import Interrupted

        raise Interrupted(result.interrupted)


def _summary(result: PlaybookResult) -> dict[str, Any]:
    data = result.as_dict()
    data["diff"] = data["diff"][:20000]
    return data


def _safe(key: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in key)[:120]


def default_config_state() -> Path:
    return state_dir()


def dumps(proposal: QueuedProposal) -> str:
    return json.dumps(proposal.as_dict(), indent=2, default=str)
