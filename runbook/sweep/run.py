"""A sweep: every host through the bounded pool, each verdict's proposals into the approval
queue (never executed: a sweep only queues, `runbook approvals approve` runs), one
`SweepResult` at the end."""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runbook.errors import RunbookError
from runbook.sweep.host import HostOptions, sweep_host, timeout_result, warm
from runbook.sweep.inventory import HostEntry
from runbook.sweep.knownhosts import KnownHosts
from runbook.sweep.pool import Slot, run_pool
from runbook.sweep.results import (
    HostResult,
    HostStatus,
    NullSweepObserver,
    SweepObserver,
    SweepResult,
)
from runbook.timestamps import now_iso

if TYPE_CHECKING:
    from runbook.remedies.approval import Desk

log = logging.getLogger(__name__)




def crashed_result(
    name: str, target: str, groups: tuple[str, ...], slot: Slot, exc: BaseException
) -> HostResult:
    return HostResult(
        name,
        target,
        HostStatus.ERROR,
        slot.elapsed(),
        groups,
        error=f"internal error: {type(exc).__name__}: {exc}",
    )


class ProposalQueue:
    """Puts a swept host's proposals in the approval queue (`source="sweep"`), with the target
    as the sweep reached it, so `approvals approve` can re-check and reach the same node."""

    def __init__(
        self,
        desk: Desk,
        *,
        runbook_ref: str,
        variables: Mapping[str, Any],
        options: HostOptions,
    ) -> None:
        self.desk = desk
        self.runbook_ref = runbook_ref
        self.variables = dict(variables)
        self.options = options

    def target_of(self, entry: HostEntry) -> Any:
        from runbook.remedies.plans import Target

        identities = entry.identities or tuple(str(p) for p in self.options.identities)
        known = entry.known_hosts or (
            str(self.options.known_hosts) if self.options.known_hosts else None
        )
        return Target(
            url=self._url(entry),
            identities=tuple(str(Path(p).expanduser().resolve()) for p in identities),
            known_hosts=str(Path(known).expanduser().resolve()) if known else None,
            jump=entry.jump,
            connect_timeout=entry.connect_timeout or self.options.connect_timeout,
            nsenter=self.options.nsenter,
            kubectl=self.options.kubectl,
            kube_context=entry.kube_context or self.options.kube_context,
            ssh_config=self.options.ssh_config_file,
        )

    def _url(self, entry: HostEntry) -> str:
        """The entry's target as an approval should reach it again: what the ssh config
        decided (User, Port) left for the config to decide again, not frozen to defaults."""
        if entry.scheme != "ssh" or (entry.user_given and entry.port_given):
            return entry.target
        from runbook.transports.address import split_address
        from runbook.transports.ssh_config import host_config

        user, host, port = split_address(entry.target.split("://", 1)[1])
        if not entry.user_given and host_config(self.options.ssh_config, host).user:
            user = None
        shown = f"[{host}]" if ":" in host else host
        return (
            "ssh://"
            + (f"{user}@" if user else "")
            + shown
            + (f":{port}" if entry.port_given and port else "")
        )

    def __call__(self, entry: HostEntry, result: HostResult) -> tuple[str, ...]:
        if result.verdict is None or not result.verdict.proposals:
            return ()
        variables = {**self.options.runbook.vars, **entry.variables, **self.variables}
        try:
            queued = self.desk.queue_verdict(
                result.verdict,
                node=entry.name,
                target=self.target_of(entry),
                runbook_id=self.runbook_ref,
                variables=variables,
                run_dir=result.run_dir,
                source="sweep",
            )
        except (RunbookError, OSError) as exc:
            log.warning("%s: could not queue its proposals: %s", entry.name, exc)
            return ()
        return tuple(str(q.proposal.id) for q in queued)


def _pool(
    entries: Sequence[HostEntry],
    options: HostOptions,
    *,
    forks: int,
    on_result: Callable[[HostResult], None],
    grace_s: float,
) -> None:
    run_pool(
        entries,
        lambda entry, slot: sweep_host(entry, options, slot),
        overdue=lambda entry, slot: timeout_result(entry, slot, options),
        crashed=lambda entry, slot, exc: crashed_result(
            entry.name, entry.target, entry.groups, slot, exc
        ),
        forks=forks,
        deadline_s=options.timeout_per_host,
        on_result=on_result,
        grace_s=grace_s,
    )


def run_sweep(
    entries: Sequence[HostEntry],
    options: HostOptions,
    *,
    forks: int,
    runbook_ref: str,
    source: str,
    shard: str | None = None,
    observer: SweepObserver | None = None,
    queue: Callable[[HostEntry, HostResult], tuple[str, ...]] | None = None,
    grace_s: float = 1.0,
    reused: Mapping[str, HostResult] | None = None,
    on_host: Callable[[HostResult], None] | None = None,
    resumed_from: str | None = None,
) -> SweepResult:
    """Sweep `entries` read-only; results in the entries' order. Hosts in `reused` (finished
    by an interrupted earlier sweep) are not contacted: their results stand, marked reused.
    `on_host` sees each new result once it is final, its proposals queued (checkpoint.py)."""
    observer = observer or NullSweepObserver()
    by_name = {e.name: e for e in entries}
    reused = {k: replace(v, reused=True) for k, v in (reused or {}).items() if k in by_name}
    todo = [e for e in entries if e.name not in reused]
    final: dict[str, HostResult] = {}
    started_at, t0 = now_iso(), time.monotonic()
    warm(options.runbook)  # a second call (the sweep command's was earlier) finds it all made
    observer.started(len(todo))

    def on_result(result: HostResult) -> None:
        if queue is not None:
            ids = queue(by_name[result.host], result)
            if ids:
                result = replace(result, queued=ids)
        final[result.host] = result
        if on_host is not None:
            on_host(result)
        observer.host_done(result)

    private = tempfile.TemporaryDirectory(prefix="runbook-sweep-")
    if not options.accept_new_host_keys:
        options = replace(options, known_hosts_cache=KnownHosts(Path(private.name)))
    try:
        _pool(todo, options, forks=forks, on_result=on_result, grace_s=grace_s)
    except BaseException:
        observer.aborted()
        raise
    finally:
        private.cleanup()
    sweep = SweepResult(
        runbook=runbook_ref,
        source=source,
        hosts=[final.get(e.name) or reused[e.name] for e in entries],
        started_at=started_at,
        finished_at=now_iso(),
        duration_s=time.monotonic() - t0,
        mode="sweep",
        shard=shard,
        forks=forks,
        timeout_per_host_s=options.timeout_per_host,
        finished_ts=time.time(),
        resumed_from=resumed_from if reused else None,
    )
    observer.finished(sweep)
    return sweep
