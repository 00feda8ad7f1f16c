"""The library under the command line: one entry point for each thing the tool does, called by
the CLI, and usable by any program that embeds the tool.

- `TargetSpec`: a node and how to reach it (what `--target` and its flags say, or a run's
  record of them); `open()` it, or `open_soon()` while the runbook loads;
- `start_run` → `NodeRun`: one node's guided run (`runbook run`, `demo`): the runbook loaded
  and hashed, the target opened, a run directory holding its record; `NodeRun.walk(observer)`;
- `walk`: the walk of a run, a resumed run and the demo, into its run directory;
- `queued_approvals`: a verdict's proposals queued once (approvals.json remembers) and those
  not decided yet, for the caller to ask about;
- `resume_point` → `ResumePoint`: an interrupted run found where it stopped, locked, with what
  it takes to go on (`restored`, `ResumePoint.walk`);
- `analyze`: a recorded bundle, offline; `diagnose`: one walk over a target, keeping nothing;
  `collect`: every stage's evidence, deciding nothing;
- `JobRequest` → `diagnose_job`: every node of a failed job at once, merged (runbook.job);
- `SweepRequest` → `sweep_fleet`: a read-only sweep of an inventory (runbook.sweep).

Nothing here prompts, prints or exits: what the walk does is told to an observer
(runbook.render.console for a terminal), a prompt is the caller's (runbook.cli.approvals),
and failures are `runbook.errors` exceptions the caller turns into one line and an exit code.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runbook.dburl import for_record
from runbook.errors import StateError, UsageError

if TYPE_CHECKING:
    from runbook.conductor import Conductor
    from runbook.config import Config
    from runbook.executor import Observer, RunResult
    from runbook.job.run import JobResult
    from runbook.remedies.approval import Desk, Queued
    from runbook.remedies.plans import Target
    from runbook.rundir import ApprovalLedger, RunDirectory, RunRecord
    from runbook.spec.models import Runbook
    from runbook.sweep.checkpoint import Checkpoint
    from runbook.sweep.host import HostOptions
    from runbook.sweep.inventory import HostEntry, PendingInventory
    from runbook.sweep.results import HostResult, SweepObserver, SweepResult
    from runbook.targets import TargetOptions
    from runbook.transports.base import Transport
    from runbook.verdict import Verdict


# -------------------------------------------------------------------------------- targets


@dataclass(frozen=True)
class TargetSpec:
    """A node and how to reach it: `local`, `ssh://[user@]host[:port]` (or an ssh config
    alias), `kubectl://NAMESPACE/POD`, `replay://BUNDLE`; key and known_hosts *paths*."""

    url: str
    identities: tuple[str, ...] = ()
    known_hosts: str | None = None
    accept_new_host_keys: bool = False
    jump: str | None = None
    #: seconds to connect; None: the ssh config's ConnectTimeout, else 10
    connect_timeout: float | None = None
    ssh_config: str | None = None
    nsenter: int | None = None
    kubectl: str = "kubectl"
    kube_context: str | None = None
    #: `kubectl://node/NAME`: where the node agent is looked for
    agent_namespace: str = "kube-system"
    agent_selector: str = "app=node-agent"
    #: `kubectl-debug://NODE`: the debug pod's image and namespace (None: configured/default)
    debug_image: str | None = None
    debug_namespace: str | None = None

    @classmethod
    def from_flags(cls, url: str, flags: Mapping[str, Any]) -> TargetSpec:
        """From the target flags as the CLI parsed them (runbook.cli.options.target_options)."""
        return cls(
            url=url,
            identities=tuple(str(p) for p in flags.get("identities") or ()),
            known_hosts=flags.get("known_hosts") or None,
            accept_new_host_keys=bool(flags.get("accept_new_host_keys")),
            jump=flags.get("jump") or None,
            connect_timeout=flags.get("connect_timeout"),
            ssh_config=flags.get("ssh_config"),
            nsenter=flags.get("nsenter"),
            kubectl=flags.get("kubectl") or "kubectl",
            kube_context=flags.get("kube_context"),
            agent_namespace=flags.get("agent_namespace") or "kube-system",
            agent_selector=flags.get("agent_selector") or "app=node-agent",
            debug_image=flags.get("debug_image"),
            debug_namespace=flags.get("debug_namespace"),
        )

    @classmethod
    def from_record(cls, record: RunRecord) -> TargetSpec:
        """The target a run recorded in run.json (an ssh:// alias resolves through the same
        ssh config file as the run did)."""
        target = record.target
        return cls(
            url=str(target["url"]),
            identities=tuple(str(p) for p in target.get("identities") or ()),
            known_hosts=target.get("known_hosts"),
            accept_new_host_keys=record.accept_new_host_keys,
            jump=target.get("jump"),
            connect_timeout=float(target.get("connect_timeout") or 10.0),
            ssh_config=target.get("ssh_config"),
            nsenter=target.get("nsenter"),
            kubectl=target.get("kubectl") or "kubectl",
            kube_context=target.get("kube_context"),
            agent_namespace=target.get("agent_namespace") or "kube-system",
            agent_selector=target.get("agent_selector") or "app=node-agent",
            debug_image=target.get("debug_image"),
            debug_namespace=target.get("debug_namespace"),
        )

    def options(self) -> TargetOptions:
        from runbook.targets import TargetOptions

        return TargetOptions(
            identities=tuple(Path(p) for p in self.identities),
            known_hosts=Path(self.known_hosts) if self.known_hosts else None,
            accept_new_host_keys=self.accept_new_host_keys,
            jump=self.jump,
            connect_timeout=self.connect_timeout,
            ssh_config=self.ssh_config,
            nsenter=self.nsenter,
            kubectl=self.kubectl,
            kube_context=self.kube_context,
            agent_namespace=self.agent_namespace,
            agent_selector=self.agent_selector,
            debug_image=self.debug_image,
            debug_namespace=self.debug_namespace,
        )

    def kube_settings(self) -> dict[str, str]:
        """What run.json keeps besides the target's record for a resumed run to reach the
        node the same way: the agent's namespace and selector, the debug pod's image and
        namespace, where they are not the defaults."""
        kept = {
            "agent_namespace": (self.agent_namespace, "kube-system"),
            "agent_selector": (self.agent_selector, "app=node-agent"),
            "debug_image": (self.debug_image, None),
            "debug_namespace": (self.debug_namespace, None),
        }
        return {key: value for key, (value, default) in kept.items() if value and value != default}

    def check_scheme(self) -> None:
        """An unknown scheme is a UsageError before anything starts."""
        from runbook.targets import scheme_of

        scheme_of(self.url)

    def open(self) -> Transport:
        from runbook.targets import open_target

        return open_target(self.url, self.options())

    def open_soon(self) -> Opening:
        return Opening(self)

    def record(self) -> Target:
        """The target as the approval store keeps it (to re-check the node, and for Ansible):
        absolute paths, never a key's contents."""
        from runbook.remedies.plans import Target
        from runbook.targets import effective_config_path

        return Target(
            url=self.url,
            ssh_config=effective_config_path(self.ssh_config),
            identities=tuple(str(Path(p).resolve()) for p in self.identities),
            known_hosts=str(Path(self.known_hosts).resolve()) if self.known_hosts else None,
            jump=self.jump,
            connect_timeout=float(self.connect_timeout or 10.0),
            nsenter=self.nsenter,
            kubectl=self.kubectl,
            kube_context=self.kube_context,
        )


class Opening:
    """A target being opened in a thread while the caller loads the runbook and its config:
    the SSH handshake (and paramiko's import) waits on the network while the runbook's
    templates are checked, instead of after them. `result()` is the transport or the error
    opening it raised; `discard()` (the caller failed first) returns at once, and whatever
    the thread opens is closed by it (a bad runbook is reported without waiting out a
    connect timeout)."""

    def __init__(self, spec: TargetSpec) -> None:
        self._lock = threading.Lock()
        self._discarded = False
        self._transport: Transport | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._open, args=(spec,), name="open-target", daemon=True
        )
        self._thread.start()

    def _open(self, spec: TargetSpec) -> None:
        try:
            transport = spec.open()
        except BaseException as exc:  # handed to the caller's thread by result()
            self._error = exc
            return
        with self._lock:
            if not self._discarded:
                self._transport = transport
                return
        transport.close()

    def result(self) -> Transport:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._transport is not None
        return self._transport

    def discard(self) -> None:
        with self._lock:
            self._discarded = True
            transport, self._transport = self._transport, None
        if transport is not None:
            transport.close()


def replay_context(
    transport: Transport, variables: Mapping[str, Any]
) -> tuple[str | None, dict[str, Any], dict[str, Any]]:
    """The node name, variables and parser context a walk over `transport` gets: a replayed
    bundle lends its node name, its context, and defaults for the variables the collector was
    told (runbook.bundle.replay_defaults); `variables` itself is left as it was."""
    from runbook.bundle import replay_defaults
    from runbook.transports.replay import ReplayTransport

    if isinstance(transport, ReplayTransport):
        meta = transport.bundle.meta
        return (meta.node, *replay_defaults(meta, variables))
    return None, dict(variables), {}


# ------------------------------------------------------------------------ one node's run


def walk(
    runbook: Runbook,
    transport: Transport,
    variables: Mapping[str, Any],
    directory: RunDirectory,
    observer: Observer,
    *,
    resume: Conductor | None = None,
) -> RunResult:
    """The walk of a guided run, a resumed one (`resume`: the restored conductor) and the
    demo, into `directory`; a replayed bundle lends its node name and context."""
    from runbook.executor import execute

    node, merged, context = replay_context(transport, variables)
    return execute(
        runbook,
        transport,
        variables=merged,
        context=context,
        observer=observer,
        run_dir=directory,
        node=node,
        resume=resume,
    )


@dataclass(frozen=True)
class RunOptions:
    """What run.json records of how a run was started, besides its runbook and target."""

    db: str | None = None
    config: str | None = None
    as_user: str | None = None
    no_input: bool = False


@dataclass
class NodeRun:
    """One node's guided run, started: its runbook, record, open transport and directory.
    `walk` closes the transport when it ends; `close` releases the run directory."""

    runbook: Runbook
    record: RunRecord
    directory: RunDirectory
    transport: Transport
    variables: dict[str, Any] = field(default_factory=dict)

    def walk(self, observer: Observer) -> RunResult:
        try:
            return walk(self.runbook, self.transport, self.variables, self.directory, observer)
        finally:
            self.transport.close()

    def close(self) -> None:
        self.transport.close()
        self.directory.close()


def start_run(
    runbook_ref: str,
    target: TargetSpec,
    variables: Mapping[str, Any],
    *,
    run_dir: Path | None = None,
    options: RunOptions | None = None,
) -> NodeRun:
    """Load RUNBOOK (hashing the very bytes loaded) while the target opens, then make the run
    directory (locked: a resume cannot write it at the same time) and write run.json."""
    from runbook.rundir import RECORD, RunDirectory, new_path, new_record, read_runbook
    from runbook.signatures import user_catalog_path

    options = options or RunOptions()
    target.check_scheme()
    opening = target.open_soon()
    try:
        runbook, runbook_file = read_runbook(runbook_ref)
        # what `runbook resume` needs to walk the same runbook over the same target (no secret)
        record = new_record(
            runbook_file,
            {**target.record().as_dict(), **target.kube_settings()},
            variables,
            accept_new_host_keys=target.accept_new_host_keys,
            db=for_record(options.db),  # a URL kept without its password
            config=str(Path(options.config).resolve()) if options.config else None,
            as_user=options.as_user,
            no_input=options.no_input,
            signatures=_absolute(user_catalog_path()),
        )
        # while the handshake waits on the network: the parsers the walk will call
        from runbook.parsers import registry

        registry.preload(runbook.parsers)
    except BaseException:
        opening.discard()
        raise
    transport = opening.result()
    try:
        directory = RunDirectory(run_dir or new_path("runs", runbook.id), exclusive=True)
    except BaseException:
        transport.close()
        raise
    try:
        directory.write_json(RECORD, record.as_dict())
    except BaseException:
        transport.close()
        directory.close()
        raise
    return NodeRun(runbook, record, directory, transport, dict(variables))


@dataclass
class PendingApprovals:
    """A run's proposals in the approval store: `queued` (those not decided yet, as the desk
    queued them) and the ledger that records each decision as it is taken."""

    desk: Desk
    queued: list[Queued]
    ledger: ApprovalLedger


def _absolute(path: str | None) -> str | None:
    """`path` resolved from the working directory now (a resumed run may start elsewhere)."""
    return None if path is None else str(Path(path).expanduser().resolve())


def _requeued(desk: Desk, pid: str) -> Queued:
    """A proposal this run queued earlier, from the store as it is now."""
    from runbook.remedies import plans
    from runbook.remedies.approval import Queued

    proposal = desk.store.get(pid)
    plan = (
        plans.Plan.from_dict(proposal.plan)
        if proposal.plan and "playbook" in proposal.plan
        else None
    )
    error = None if plan else str((proposal.plan or {}).get("error") or "no plan")
    return Queued(proposal, False, plan, error)


@contextmanager
def queued_approvals(
    cfg: Config,
    directory: RunDirectory,
    record: RunRecord,
    runbook: Runbook,
    verdict: Verdict,
) -> Iterator[PendingApprovals | None]:
    """Queue the verdict's proposals (once: approvals.json remembers), and yield those not
    decided yet with the open desk, for the caller to ask about or list; approvals.json says
    `done` when the block ends normally. None: nothing to queue, advise or ask — the store is
    not even opened (a healthy node's run creates no store and takes no lock on it)."""
    from runbook.rundir import ApprovalLedger

    ledger = ApprovalLedger.load(directory)
    if not verdict.proposals and ledger is None:
        ApprovalLedger(directory, []).finish()
        yield None
        return
    from runbook.remedies.approval import Desk, actor_name
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
                requested_by=actor_name(record.as_user),
            )
            ledger = ApprovalLedger(directory, [q.proposal.id for q in queued])
            ledger.save()
        else:
            queued = [_requeued(desk, pid) for pid in ledger.undecided()]
        yield PendingApprovals(desk, queued, ledger)
        ledger.finish()


# ----------------------------------------------------------------------------- resuming


@dataclass
class ResumePoint:
    """An interrupted run, found where it stopped and locked (`close` releases it):
    `finished` when its walk and approvals were both done (nothing to resume); `verdict`
    None while the walk was still going."""

    path: Path
    record: RunRecord
    directory: RunDirectory
    verdict: Verdict | None
    finished: bool
    queued_any: bool

    def runbook(self) -> Runbook:
        """The run's runbook, loaded again; a StateError when it changed or a variable
        that looked like a credential was never written (the run cannot go on)."""
        from runbook.rundir import reload_runbook

        runbook = reload_runbook(self.record)
        if self.record.redacted:
            raise StateError(
                f"{self.path}: variable(s) {', '.join(self.record.redacted)} looked like "
                "credentials and were never written; this run cannot be resumed: start a new one"
            )
        return runbook

    def repair(self) -> list[str]:
        from runbook.rundir import repair

        return repair(self.path)

    def restored(self, runbook: Runbook) -> tuple[Conductor, bool]:
        """The conductor as state.json left it (or a new one), and whether the walk had
        started (interrupted in the preamble, before its first event, there is nothing to
        continue: the walk starts over)."""
        from runbook.conductor import Conductor
        from runbook.rundir import events, read_state

        state = read_state(self.path)
        conductor = (
            Conductor.from_state(runbook, state)
            if state is not None
            else Conductor(runbook, self.record.variables)
        )
        started = state is not None or any(
            e.get("event") == "run-started" for e in events(self.path)
        )
        return conductor, started

    def walk(
        self, runbook: Runbook, conductor: Conductor, started: bool, observer: Observer
    ) -> Verdict:
        """Re-open the target, read its preamble again and walk what is left; the verdict."""
        transport = TargetSpec.from_record(self.record).open()
        try:
            result = walk(
                runbook,
                transport,
                dict(self.record.variables),
                self.directory,
                observer,
                resume=conductor if started else None,
            )
        finally:
            transport.close()
        return result.verdict

    def mark_done(self) -> None:
        """A walk that finished but was killed before its last event gets it now."""
        from runbook.rundir import events

        logged = events(self.path)
        if self.verdict is not None and logged and logged[-1].get("event") != "run-done":
            self.directory.event("run-done", root_cause=self.verdict.root_cause)

    def close(self) -> None:
        self.directory.close()


def resume_point(run_dir: Path) -> ResumePoint:
    """RUN_DIR's record and where it stopped; locked before anything is read (the run, or
    another resume, may still be going: a UsageError then)."""
    from runbook.rundir import RunDirectory, read_ledger, read_record, read_verdict

    path = run_dir.resolve()
    record = read_record(path)
    directory = RunDirectory(path, exclusive=True)
    try:
        ledger = read_ledger(path)
        verdict = read_verdict(path)
    except BaseException:
        directory.close()
        raise
    finished = verdict is not None and ledger is not None and bool(ledger.get("done"))
    queued_any = bool(ledger and ledger.get("queued"))
    return ResumePoint(path, record, directory, verdict, finished, queued_any)


# ------------------------------------------------------------------ bundles: read, written


def analyze(bundle: str | Path, runbook_ref: str, variables: Mapping[str, Any]) -> RunResult:
    """A recorded evidence bundle (a directory or .tar.gz), walked offline."""
    from runbook.executor import execute
    from runbook.spec import load_file, resolve
    from runbook.transports.replay import ReplayTransport

    runbook = load_file(resolve(runbook_ref))
    transport = ReplayTransport(bundle)
    try:
        node, merged, context = replay_context(transport, variables)
        return execute(runbook, transport, variables=merged, context=context, node=node)
    finally:
        transport.close()


def diagnose(target: TargetSpec, runbook_ref: str, variables: Mapping[str, Any]) -> RunResult:
    """One walk of RUNBOOK over TARGET, keeping nothing (`runbook npd`: a health check that
    runs every few minutes leaves no run directory behind)."""
    from runbook.executor import execute
    from runbook.spec import load_file, resolve

    runbook = load_file(resolve(runbook_ref))
    transport = target.open()
    try:
        node, merged, context = replay_context(transport, variables)
        return execute(runbook, transport, variables=merged, context=context, node=node)
    finally:
        transport.close()


def collect(target: TargetSpec, runbook_ref: str, variables: Mapping[str, Any]) -> RunResult:
    """Every stage's probes over TARGET, whatever the rules would say (what a bundle for
    later analysis needs); deciding nothing."""
    from runbook.executor import execute
    from runbook.spec import load_file, resolve

    runbook = load_file(resolve(runbook_ref))
    transport = target.open()
    try:
        return execute(runbook, transport, variables=dict(variables), collect_all=True)
    finally:
        transport.close()


# ---------------------------------------------------------------------- fleets and jobs


def ssh_config_options(given: str | None) -> dict[str, Any]:
    """HostOptions' ssh_config (read once for every host) and ssh_config_file (recorded with
    proposals)."""
    from runbook.targets import config_path, effective_config_path
    from runbook.transports import ssh_config as ssh_config_mod

    return {
        "ssh_config": ssh_config_mod.load(config_path(given)),
        "ssh_config_file": effective_config_path(given),
    }


@dataclass(frozen=True)
class HostAccess:
    """How a sweep or a job reaches hosts the inventory says too little about."""

    identities: tuple[str, ...] = ()
    known_hosts: str | None = None
    accept_new_host_keys: bool = False
    connect_timeout: float | None = None
    ssh_config: str | None = None
    nsenter: int | None = None
    kubectl: str = "kubectl"
    kube_context: str | None = None
    #: kubectl-debug:// nodes: the debug pod's image and namespace (None: configured/default)
    debug_image: str | None = None
    debug_namespace: str | None = None

    @classmethod
    def from_flags(cls, flags: Mapping[str, Any]) -> HostAccess:
        """From the CLI's host flags (--identity, --known-hosts, …, by their Python names)."""
        return cls(
            identities=tuple(str(p) for p in flags.get("identities") or ()),
            known_hosts=flags.get("known_hosts") or None,
            accept_new_host_keys=bool(flags.get("accept_new_host_keys")),
            connect_timeout=flags.get("connect_timeout"),
            ssh_config=flags.get("ssh_config"),
            nsenter=flags.get("nsenter"),
            kubectl=flags.get("kubectl") or "kubectl",
            kube_context=flags.get("kube_context"),
            debug_image=flags.get("debug_image"),
            debug_namespace=flags.get("debug_namespace"),
        )

    def host_options(
        self,
        runbook: Runbook,
        variables: Mapping[str, Any],
        *,
        timeout_per_host: float,
        keep_dir: Path | None = None,
        max_parallel: int | None = None,
    ) -> HostOptions:
        from runbook.sweep.host import HostOptions

        options = HostOptions(
            runbook=runbook,
            variables=dict(variables),
            timeout_per_host=timeout_per_host,
            connect_timeout=self.connect_timeout or 10.0,
            identities=tuple(Path(p) for p in self.identities),
            known_hosts=Path(self.known_hosts) if self.known_hosts else None,
            accept_new_host_keys=self.accept_new_host_keys,
            kubectl=self.kubectl,
            kube_context=self.kube_context,
            nsenter=self.nsenter,
            debug_image=self.debug_image,
            debug_namespace=self.debug_namespace,
            keep_dir=keep_dir,
            **ssh_config_options(self.ssh_config),
        )
        if max_parallel is not None:
            options = dataclasses.replace(options, max_parallel=max_parallel)
        return options


@dataclass(frozen=True)
class JobRequest:
    """`run --job REF` or `--hosts-from-file FILE`, and how to reach the job's nodes."""

    runbook_ref: str
    job: str | None = None
    hosts_from_file: str | None = None
    inventory: str | None = None
    slurm_via: str = "local"
    ssh_user: str = "root"
    agent_namespace: str = "kube-system"
    agent_selector: str = "app=node-agent"
    #: each Kubernetes node through a debug pod made for the run (kubectl-debug://NODE)
    kube_debug: bool = False
    forks: int = 32
    timeout_per_host: float = 120.0
    variables: Mapping[str, Any] = field(default_factory=dict)
    access: HostAccess = field(default_factory=HostAccess)
    run_dir: Path | None = None


def diagnose_job(
    request: JobRequest, cfg: Config, observer_for: Callable[[str], SweepObserver]
) -> JobResult:
    """Resolve the job to its nodes, walk every node at once (read-only; each node's
    proposals queued, never run) and merge their verdicts into one job verdict.
    `observer_for(job ref)`: what sees each node finish, made once the job is resolved."""
    from runbook.job.resolve import resolve_job
    from runbook.job.run import run_job
    from runbook.remedies.approval import Desk
    from runbook.rundir import new_path
    from runbook.spec import load_file, resolve
    from runbook.sweep.run import ProposalQueue

    access = request.access
    runbook = load_file(resolve(request.runbook_ref))
    target_options = TargetSpec(
        "local",
        identities=access.identities,
        known_hosts=access.known_hosts,
        accept_new_host_keys=access.accept_new_host_keys,
        connect_timeout=access.connect_timeout,
        ssh_config=access.ssh_config,
        kubectl=access.kubectl,
        kube_context=access.kube_context,
    ).options()
    spec = resolve_job(
        request.job,
        hosts_file=request.hosts_from_file,
        inventory=request.inventory,
        slurm_via=request.slurm_via,
        ssh_user=request.ssh_user,
        agent_namespace=request.agent_namespace,
        agent_selector=request.agent_selector,
        kubectl=access.kubectl,
        kube_context=access.kube_context,
        target_options=target_options,
        kube_debug=request.kube_debug,
    )
    # every node's own variables (its pod, its ranks) win over the job-wide --var
    options = access.host_options(runbook, {}, timeout_per_host=request.timeout_per_host)
    spec = dataclasses.replace(
        spec,
        nodes=tuple(
            dataclasses.replace(
                n,
                entry=dataclasses.replace(
                    n.entry, variables={**request.variables, **n.entry.variables}
                ),
            )
            for n in spec.nodes
        ),
    )
    directory = request.run_dir or new_path("jobs", runbook.id)
    with Desk(cfg) as desk:
        return run_job(
            spec,
            options,
            directory,
            forks=request.forks,
            runbook_ref=request.runbook_ref,
            observer=observer_for(spec.ref),
            queue=ProposalQueue(
                desk, runbook_ref=request.runbook_ref, variables={}, options=options
            ),
        )


@dataclass(frozen=True)
class SweepRequest:
    """`runbook sweep`: which hosts (an Ansible inventory, or Kubernetes nodes by label), how
    many at once, for how long each, and where the reports go."""

    runbook_ref: str
    inventory: str | None = None
    limit: str | None = None
    kube_selector: str | None = None
    kube_namespace: str = "kube-system"
    agent_selector: str = "app=node-agent"
    agent_container: str | None = None
    #: each node through a debug pod made for the sweep (kubectl-debug://NODE), no agent
    kube_debug: bool = False
    forks: int = 16
    timeout_per_host: float = 120.0
    report_dir: Path | None = None
    keep_bundles: bool = False
    shard: tuple[int, int] | None = None
    variables: Mapping[str, Any] = field(default_factory=dict)
    access: HostAccess = field(default_factory=HostAccess)
    inventory_timeout: float = 120.0
    resume: bool = False

    def check(self) -> None:
        """A request that cannot run is a UsageError before anything starts."""
        if bool(self.inventory) == bool(self.kube_selector):
            raise UsageError("give one host source: --inventory/-i or --kube-selector")
        if self.kube_debug and not self.kube_selector:
            raise UsageError("--kube-debug reaches the nodes --kube-selector selects: give it")
        if self.limit and not self.inventory:
            raise UsageError(
                "--limit selects from an Ansible inventory; with --kube-selector, "
                "narrow the label selector instead"
            )
        if self.resume and not self.report_dir:
            raise UsageError(
                "--resume needs --report DIR: the directory the interrupted sweep wrote"
            )

    @property
    def source(self) -> str:
        if self.inventory:
            return str(Path(self.inventory).resolve())
        return f"kube:{self.kube_selector}"

    @property
    def key(self) -> str:
        """What the sweep lock and the checkpoint name this sweep by."""
        key = (
            f"inventory {self.source}"
            if self.inventory
            else f"kubernetes {self.access.kube_context or '(current context)'} "
            f"{self.kube_selector}"
        )
        if self.shard:
            key += f" shard {self.shard[0]}/{self.shard[1]}"
        return key

    @property
    def shard_label(self) -> str | None:
        return f"{self.shard[0]}/{self.shard[1]}" if self.shard else None


@dataclass
class SweepSession:
    """A sweep under way: where its reports go, its checkpoint (progress.jsonl), and the
    results of an interrupted sweep it reuses (`resumed_from`: when that one started)."""

    request: SweepRequest
    runbook: Runbook
    entries: list[HostEntry]
    report_dir: Path
    options: HostOptions
    checkpoint: Checkpoint
    reused: dict[str, HostResult]
    resumed_from: str | None


@contextmanager
def sweep_fleet(
    request: SweepRequest,
    earlier: Callable[..., tuple[dict[str, HostResult], str | None]],
    *,
    on_close: Callable[[Callable[[], None]], object] | None = None,
) -> Iterator[SweepSession]:
    """Take the sweep's lock, list its hosts (ansible-inventory starts before the runbook
    loads and is read once it is needed) and open its checkpoint; `run_sweep_session` then
    sweeps them. `earlier(report_dir, key, runbook_ref, entries, resume=)` decides what an
    interrupted sweep's progress in the report directory means (the CLI says it on stderr);
    `on_close(callable)` registers the inventory's clean-up with the caller."""
    from runbook.config import state_dir
    from runbook.rundir import new_path
    from runbook.spec import load_file, resolve
    from runbook.sweep import shard as shard_mod
    from runbook.sweep.checkpoint import Checkpoint
    from runbook.sweep.host import probes_per_host, warm
    from runbook.sweep.lock import SweepLock
    from runbook.timestamps import now_iso

    request.check()
    pending = None
    if request.inventory:
        from runbook.sweep.inventory import PendingInventory

        # Ansible reads the inventory (a process of its own) while the runbook loads here;
        # killed when the command ends if it was never read (the runbook failed to load)
        pending = PendingInventory(
            request.inventory, limit=request.limit, timeout=request.inventory_timeout
        )
        if on_close is not None:
            on_close(pending.close)
    runbook = load_file(resolve(request.runbook_ref))
    warm(runbook)  # while Ansible reads the inventory
    with SweepLock(request.key, state_dir() / "sweep-locks"):
        entries = _sweep_entries(request, pending)
        if request.shard:
            entries = shard_mod.select(entries, [e.name for e in entries], *request.shard)
        out = request.report_dir or new_path("sweeps", "sweep", runbook.id)
        options = request.access.host_options(
            runbook,
            request.variables,
            timeout_per_host=request.timeout_per_host,
            keep_dir=out / "hosts" if request.keep_bundles else None,
            max_parallel=probes_per_host(request.forks),
        )
        reused, resumed_from = earlier(
            out, request.key, request.runbook_ref, entries, resume=request.resume
        )
        checkpoint = Checkpoint(
            out,
            {
                "key": request.key,
                "runbook": request.runbook_ref,
                "source": request.source,
                "shard": request.shard_label,
                "total": len(entries),
                "started_at": now_iso(),
                "resumed_from": resumed_from,
            },
            reused.values(),
        )
        try:
            yield SweepSession(
                request, runbook, entries, out, options, checkpoint, reused, resumed_from
            )
        finally:
            checkpoint.close()


def _sweep_entries(
    request: SweepRequest, pending: PendingInventory | None
) -> list[HostEntry]:
    if pending is not None:
        entries: list[HostEntry] = pending.entries(request.limit)
        return entries
    from runbook.sweep.kube import kube_entries

    assert request.kube_selector is not None
    return kube_entries(
        request.kube_selector,
        namespace=request.kube_namespace,
        agent_selector=request.agent_selector,
        container=request.agent_container,
        kubectl=request.access.kubectl,
        context=request.access.kube_context,
        timeout=request.inventory_timeout,
        debug=request.kube_debug,
    )


def run_sweep_session(
    session: SweepSession, cfg: Config, observer: SweepObserver
) -> SweepResult:
    """Sweep the session's hosts, read-only; each host's proposals go to the approval queue
    and each host's result to the checkpoint as it completes."""
    from runbook.remedies.approval import Desk
    from runbook.sweep.run import ProposalQueue, run_sweep

    request = session.request
    with Desk(cfg) as desk:
        return run_sweep(
            session.entries,
            session.options,
            forks=request.forks,
            runbook_ref=request.runbook_ref,
            source=request.source if request.inventory else f"nodes {request.kube_selector}",
            shard=request.shard_label,
            observer=observer,
            queue=ProposalQueue(
                desk,
                runbook_ref=request.runbook_ref,
                variables=dict(request.variables),
                options=session.options,
            ),
            reused=session.reused,
            on_host=session.checkpoint.host_done,
            resumed_from=session.resumed_from,
        )


__all__: Sequence[str] = (
    "HostAccess",
    "JobRequest",
    "NodeRun",
    "Opening",
    "PendingApprovals",
    "ResumePoint",
    "RunOptions",
    "SweepRequest",
    "SweepSession",
    "TargetSpec",
    "analyze",
    "collect",
    "diagnose",
    "diagnose_job",
    "queued_approvals",
    "replay_context",
    "resume_point",
    "run_sweep_session",
    "start_run",
    "sweep_fleet",
    "walk",
)
