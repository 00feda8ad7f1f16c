"""One host of a sweep: connect, walk the runbook read-only, classify the outcome.

The per-host deadline is enforced in three layers, innermost first:

1. the connect timeout is at most the time left, so a host that accepts TCP and never sends a
   banner fails its connect by the deadline;
2. every probe's timeout is cut to the time left (`DeadlineTransport`), so a hung command is
   stopped by the transport's own timeout handling — for SSH, TERM then KILL to the remote
   process group — at the deadline, and a probe that would start after it is not started;
3. the pool (pool.py) closes the transport from its coordinating thread a grace period after
   the deadline and records the host as `timeout` whatever its thread is doing.

Only `runbook.executor.execute` runs here: collection and analysis. A remedy is never run;
the verdict's proposals go to the approval queue, from the caller (run.py).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runbook.conductor import StageRecord
from runbook.errors import (
    AuthenticationError,
    HostKeyError,
    RunbookError,
    UnreachableError,
)
from runbook.executor import execute
from runbook.output import count
from runbook.rundir import RunDirectory
from runbook.spec.models import Runbook, Stage
from runbook.sweep.inventory import HostEntry
from runbook.sweep.knownhosts import KnownHosts
from runbook.sweep.pool import Slot
from runbook.sweep.results import HostResult, HostStatus, status_of
from runbook.transports.base import (
    BatchTransport,
    CommandResult,
    Deliver,
    Probe,
    Spill,
    Transport,
    batch_of,
    fail_all,
)
from runbook.verdict import Verdict

if TYPE_CHECKING:
    from paramiko import SSHConfig

    from runbook.transports.ssh import SSHOptions

#: a probe is not started with less time than this left before the deadline
MIN_PROBE_S = 0.05
_NOT_STARTED = "not started: the host's deadline has passed"


class DeadlineTransport:
    """Runs probes on `inner` with every timeout cut to what is left before `deadline`."""

    def __init__(
        self, inner: Transport, deadline: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.inner = inner
        self.deadline = deadline
        self.description = inner.description
        self._clock = clock
        self._lock = threading.Lock()
        #: probes stopped at the deadline, and probes not started because it had passed
        self.cut: list[str] = []
        self.not_started: list[str] = []
        batch_of(self, inner)

    @property
    def expired(self) -> bool:
        return bool(self.cut or self.not_started)

    def run(self, probe: Probe) -> CommandResult:
        remaining = self.deadline - self._clock()
        if remaining < MIN_PROBE_S:
            with self._lock:
                self.not_started.append(probe.name)
            return CommandResult(probe.name, probe.command, error=_NOT_STARTED)
        capped = remaining < probe.timeout
        result = self.inner.run(replace(probe, timeout=remaining) if capped else probe)
        # the deadline stopped it only if it ended there: a connection lost long before the
        # deadline is the host's failure, recorded in its verdict, not a timeout
        at_deadline = self._clock() >= self.deadline - MIN_PROBE_S
        if capped and (result.timed_out or result.error) and at_deadline:
            with self._lock:
                self.cut.append(probe.name)
        return result

    def _run_batch(
        self,
        probes: Sequence[Probe],
        deliver: Deliver,
        spill: Spill,
        *,
        within: float | None = None,
    ) -> None:
        """The batch bounded by the deadline: a probe that would start after it does not."""
        assert isinstance(self.inner, BatchTransport)
        remaining = self.deadline - self._clock()
        if remaining < MIN_PROBE_S:
            with self._lock:
                self.not_started.extend(probe.name for probe in probes)
            fail_all(probes, deliver, _NOT_STARTED)
            return

        def noted(index: int, result: CommandResult) -> None:
            if (result.timed_out or result.error) and self._clock() >= self.deadline - MIN_PROBE_S:
                with self._lock:
                    self.cut.append(result.name)
            deliver(index, result)

        bound = remaining if within is None else min(within, remaining)
        self.inner.run_batch(probes, noted, spill, within=bound)

    def close(self) -> None:
        self.inner.close()


@dataclass(frozen=True)
class HostOptions:
    """How every host of a sweep is reached and walked."""

    runbook: Runbook
    variables: Mapping[str, Any] = field(default_factory=dict)
    timeout_per_host: float = 120.0
    connect_timeout: float = 10.0
    identities: tuple[Path, ...] = ()
    known_hosts: Path | None = None
    accept_new_host_keys: bool = False
    kubectl: str = "kubectl"
    kube_context: str | None = None
    nsenter: int | None = None
    #: kubectl-debug:// hosts: the debug pod's image and namespace (None: configured/default)
    debug_image: str | None = None
    debug_namespace: str | None = None
    #: keep each host's run directory (events, bundle, verdict) under here
    keep_dir: Path | None = None
    #: a stage's probes run at once on one host (see probes_per_host)
    max_parallel: int = 8
    #: each known_hosts file parsed once for the whole sweep (knownhosts.py)
    known_hosts_cache: KnownHosts | None = None
    #: the user's ssh config (paramiko.SSHConfig), read once; None: none
    ssh_config: SSHConfig | None = None
    #: its path, recorded with proposals so an approval reaches the same host
    ssh_config_file: str | None = None
    #: round trips to measure each host's clock offset before its walk (0: not measured;
    #: a job run measures it to put every node's evidence on one time axis)
    clock_samples: int = 0


#: probe threads a sweep keeps in flight across all its hosts
PROBE_THREADS = 128


def probes_per_host(forks: int) -> int:
    """A stage's probes in flight per host: 8 when few hosts are in flight, down to 2 at high
    --forks, so forks x probes stays near PROBE_THREADS: with --forks 64, the hosts in flight
    already keep the connections busy, and 500 more threads would only queue for the
    interpreter lock."""
    return max(2, min(8, PROBE_THREADS // max(1, forks)))


def warm_templates(runbook: Runbook) -> int:
    """Compile every template and expression of `runbook` once, in this thread, before hosts
    start: templating caches what it compiles, but the first wave of --forks hosts would each
    miss the cache at once and compile all of them (at --forks 32 an eighth of a sweep's CPU went
    to Jinja's compiler). Returns how many sources it compiled."""
    from runbook import templating
    from runbook.errors import TemplateError

    expressions = [runbook.surfaced_as] if runbook.surfaced_as else []
    texts: list[str] = []
    commands: list[str] = []
    for stage in runbook.stages:
        expressions += [stage.when] if stage.when else []
        expressions += [d.expression for d in stage.derive if d.expression]
        commands += [c.command for c in stage.collect]
        for rule in stage.decide:
            expressions += [e for e in (rule.when, rule.evidence) if e]
            texts += [rule.finding] if rule.finding else []
            texts += [out.because for out in rule.rule_out]
    for remedy in runbook.remedies:
        texts += [remedy.summary, *remedy.params.values()]
    for group, kind in ((expressions, "expr"), (texts, "text"), (commands, "command")):
        for source in group:
            try:
                templating.prepare(kind, source)
            except TemplateError:
                pass  # its walk reports it
    return len(expressions) + len(texts) + len(commands)


def warm(runbook: Runbook) -> None:
    """Everything each host's walk needs first, made once in this thread before any host
    starts: the runbook's templates compiled (warm_templates), the modules of its parsers
    imported (their patterns compiled), the signature catalog built, the SSH transport (and
    paramiko) imported; otherwise the first wave of --forks hosts does it in its threads, one
    interpreter lock among them. run_sweep calls it; the sweep command calls it earlier too,
    while ansible-inventory, a process of its own on another core, reads the inventory (a
    second call finds everything made)."""
    from runbook import signatures
    from runbook.parsers import registry
    from runbook.transports import ssh  # noqa: F401  (imported for its import's sake)

    warm_templates(runbook)
    registry.preload(runbook.parsers)
    signatures.catalog()


def open_entry(entry: HostEntry, options: HostOptions, timeout: float) -> Transport:
    """Connect to one inventory host; TargetError when it cannot be used."""
    from runbook.transports.local import LocalTransport
    from runbook.transports.nsenter import (
        KubectlTransport,
        NsenterTransport,
        parse_kubectl_target,
    )
    from runbook.transports.ssh import SSHTransport

    transport: Transport
    if entry.scheme == "local":
        transport = LocalTransport()
    elif entry.scheme == "kubectl-debug":
        from runbook.transports import kube_debug

        debug = kube_debug.settings(options.debug_image, options.debug_namespace)
        return kube_debug.DebugPodTransport(
            entry.target.split("://", 1)[1],
            # the pod's wait shares the host's deadline with its walk
            debug=dataclasses.replace(debug, start_timeout=min(debug.start_timeout, timeout)),
            context=entry.kube_context or options.kube_context,
            kubectl=options.kubectl,
            nsenter_pid=options.nsenter or 1,
            check_timeout=timeout,
        )
    elif entry.scheme == "kubectl":
        namespace, pod = parse_kubectl_target(entry.target.split("://", 1)[1])
        return KubectlTransport(
            namespace,
            pod,
            container=entry.container,
            context=entry.kube_context or options.kube_context,
            kubectl=options.kubectl,
            nsenter_pid=options.nsenter or 1,
            check_timeout=timeout,
        )
    else:
        from runbook.transports import ssh_config
        from runbook.transports.address import split_address

        user, host, port = split_address(entry.target.split("://", 1)[1])
        # what the inventory left open (user, port) the ssh config may fill in, as it does
        # for `ssh NAME` (and so for Ansible's own ssh connection)
        request = (f"{user}@" if entry.user_given and user else "") + (
            f"[{host}]" if ":" in host else host
        ) + (f":{port}" if entry.port_given and port else "")
        address, ssh = ssh_config.resolve(
            request,
            options.ssh_config,
            ssh_config.Given(
                identities=tuple(Path(p).expanduser() for p in entry.identities)
                or options.identities,
                known_hosts=Path(entry.known_hosts or options.known_hosts or "").expanduser()
                if (entry.known_hosts or options.known_hosts)
                else None,
                jump=entry.jump,
                connect_timeout=timeout,
                accept_new_host_keys=options.accept_new_host_keys,
                default_user=user or "root",
            ),
        )
        names = [address.known_hosts_name]
        accepting = ssh.accept_new_host_keys
        hop: SSHOptions | None = ssh
        while hop is not None and hop.jump is not None:
            names.append(hop.jump.known_hosts_name)
            hop = hop.jump_options
            accepting = accepting or bool(hop and hop.accept_new_host_keys)
        own = ssh.known_hosts
        if options.known_hosts_cache is not None and not accepting:
            own = options.known_hosts_cache.for_host(ssh.known_hosts, names)
        try:
            transport = SSHTransport(address, _with_known_hosts(ssh, ssh.known_hosts, own))
        except HostKeyError as exc:
            if own == ssh.known_hosts:
                raise
            # name the user's file, not this sweep's private copy of its lines
            text = str(exc).replace(str(own), str(ssh.known_hosts))
            raise HostKeyError(text, host=exc.host, fingerprint=exc.fingerprint) from None
    if options.nsenter is not None:
        transport = NsenterTransport(transport, options.nsenter)
    return transport


def _with_known_hosts(options: SSHOptions, user_file: Path, own: Path) -> SSHOptions:
    """`options` (SSHOptions) with the sweep's private copy `own` wherever the chain of hops
    reads the user's file `user_file` (a hop whose config names another file keeps it)."""
    if own == user_file:
        return options
    hop = options.jump_options
    return dataclasses.replace(
        options,
        known_hosts=own if options.known_hosts == user_file else options.known_hosts,
        jump_options=_with_known_hosts(hop, user_file, own) if hop is not None else None,
    )


class _Phase:
    """Observer that keeps the slot's phase current (for the timeout message)."""

    def __init__(self, slot: Slot) -> None:
        self.slot = slot

    def stage_started(self, stage: Stage, index: int, total: int, probes: Sequence[Probe]) -> None:
        if self.slot.remaining() > 0:  # after the deadline the phase it was in stays
            self.slot.phase = f"stage {stage.id}"

    def probe_done(self, stage: Stage, result: CommandResult) -> None:
        pass

    def stage_done(self, stage: Stage, record: StageRecord) -> None:
        pass

    def run_done(self, verdict: Verdict) -> None:
        pass


def _result(entry: HostEntry, slot: Slot, status: HostStatus, **kw: Any) -> HostResult:
    return HostResult(
        host=entry.name,
        target=entry.target,
        status=status,
        duration_s=slot.elapsed(),
        groups=entry.groups,
        **kw,
    )


def timeout_result(
    entry: HostEntry, slot: Slot, options: HostOptions, guarded: DeadlineTransport | None = None
) -> HostResult:
    where = slot.phase
    if guarded is not None and guarded.cut:
        where += f": {', '.join(guarded.cut[:3])} stopped at the deadline"
    if guarded is not None and guarded.not_started:
        where += f"; {count(len(guarded.not_started), 'probe')} not started"
    return _result(
        entry,
        slot,
        HostStatus.TIMEOUT,
        error=f"did not finish within its {options.timeout_per_host:g}s deadline ({where})",
    )


def sweep_host(entry: HostEntry, options: HostOptions, slot: Slot) -> HostResult:
    """Walk the runbook over one host; never raises (everything is a HostResult)."""
    if entry.problem:
        return _result(entry, slot, HostStatus(entry.problem_status), error=entry.problem)
    slot.phase = "connecting"
    connect = entry.connect_timeout or options.connect_timeout
    try:
        transport = open_entry(entry, options, max(0.1, min(connect, slot.remaining())))
    except (HostKeyError, AuthenticationError) as exc:
        return _result(entry, slot, HostStatus.REFUSED, error=exc.one_line())
    except UnreachableError as exc:
        # out of time after the TCP connect (no banner, no answer to the key exchange): the
        # host accepted and hung; a connect that never got TCP through is unreachable
        if slot.remaining() <= 0 and not str(exc).endswith("connecting"):
            return timeout_result(entry, slot, options)
        return _result(entry, slot, HostStatus.UNREACHABLE, error=exc.one_line())
    except RunbookError as exc:
        return _result(entry, slot, HostStatus.ERROR, error=exc.one_line())
    except Exception as exc:  # a bug in a transport must not end the sweep
        return _result(entry, slot, HostStatus.ERROR, error=f"{type(exc).__name__}: {exc}")
    slot.on_cancel(transport.close)
    if slot.cancelled:
        return timeout_result(entry, slot, options)
    guarded = DeadlineTransport(transport, slot.deadline)
    run_dir = None
    if options.keep_dir is not None:
        run_dir = RunDirectory(options.keep_dir / _safe_name(entry.name))
    clock: dict[str, Any] | None = None
    try:
        if options.clock_samples:
            from runbook.job.clock import measure_offset

            slot.phase = "reading its clock"
            offset = measure_offset(guarded, options.clock_samples)
            clock = offset.as_dict() if offset is not None else None
        slot.phase = "walking"
        variables = {**entry.variables, **options.variables}
        result = execute(
            options.runbook,
            guarded,
            variables=variables,
            observer=_Phase(slot),
            run_dir=run_dir,
            max_parallel=options.max_parallel,
            # the inventory's name for the host, as its proposals and reports call it
            node=entry.name,
        )
    except Exception as exc:
        return _result(entry, slot, HostStatus.ERROR, error=f"{type(exc).__name__}: {exc}")
    finally:
        transport.close()
        if run_dir is not None:
            run_dir.close()
    if guarded.expired or slot.cancelled:
        return timeout_result(entry, slot, options, guarded)
    return _result(
        entry,
        slot,
        status_of(result.verdict),
        verdict=result.verdict,
        run_dir=str(run_dir.path) if run_dir else None,
        clock=clock,
    )


def _safe_name(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:200]
    return cleaned if cleaned not in ("", ".", "..") else "host"
