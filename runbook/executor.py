"""The one I/O loop: conductor ↔ transport ↔ parsers, leaving a run directory behind.

For each stage the conductor hands out, the executor renders its probes, runs them concurrently
over the target's one connection, runs the stage's parsers over what came back, and reports to
the conductor. A failing command, a parser bug or a template that does not render is recorded
on the stage; the walk goes on. Observers (the guided console, the event log) see every step.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from runbook import bundle as bundle_mod
from runbook import parsers
from runbook.conductor import Conductor, StageRecord
from runbook.diagnosis import build_verdict
from runbook.rundir import RunDirectory
from runbook.spec.models import Runbook, Stage
from runbook.timestamps import now_iso
from runbook.transports import framing
from runbook.transports.base import BatchTransport, CommandResult, Probe, Transport, fail_all
from runbook.verdict import Verdict

log = logging.getLogger(__name__)

#: a burst of probes goes as batches of about this many (one channel each, the probes of one
#: run one after another: transports/batch.py) on a transport that can batch them. Measured
#: (20-host sweep, 5 alternating runs each): 8 a batch 1.69 s, 16 1.61 s, 32 1.60 s; a
#: guided run the same within noise from 4 to 32, and a little slower with one batch
BATCH_SIZE = 16

#: probes every run records first: the node's name and its clocks (DESIGN §4 clock.txt)
PREAMBLE = (
    Probe("hostname.txt", "hostname", 10.0),
    Probe("clock.txt", "date +%s.%N; cat /proc/uptime", 10.0),
    Probe("timezone.txt", "date +%z", 10.0),
)


class Observer(Protocol):
    def stage_started(
        self, stage: Stage, index: int, total: int, probes: Sequence[Probe]
    ) -> None: ...
    def probe_done(self, stage: Stage, result: CommandResult) -> None: ...
    def stage_done(self, stage: Stage, record: StageRecord) -> None: ...
    def run_done(self, verdict: Verdict) -> None: ...


class NullObserver:
    def stage_started(self, stage: Stage, index: int, total: int, probes: Sequence[Probe]) -> None:
        pass

    def probe_done(self, stage: Stage, result: CommandResult) -> None:
        pass

    def stage_done(self, stage: Stage, record: StageRecord) -> None:
        pass

    def run_done(self, verdict: Verdict) -> None:
        pass


@dataclass
class RunResult:
    verdict: Verdict
    conductor: Conductor
    results: dict[str, CommandResult] = field(default_factory=dict)
    node: str = ""
    run_dir: Path | None = None


def _guarded(transport: Transport) -> Callable[[Probe], CommandResult]:
    """transport.run, with any exception a transport lets escape turned into a failed result:
    one broken probe is evidence of a broken probe, not the end of the walk."""

    def run(probe: Probe) -> CommandResult:
        try:
            return transport.run(probe)
        except Exception as exc:
            log.debug("%s: %s raised", transport.description, probe.name, exc_info=True)
            return CommandResult(
                probe.name, probe.command, error=f"transport failed: {type(exc).__name__}: {exc}"
            )

    return run


class _Prober:
    """The walk's probes over one transport, at most `max_parallel` channels in flight (an SSH
    server allows ten sessions on a connection by default). `send_ahead` starts probes before
    their stage comes (Conductor.ahead): every stage's independent probes go in the first
    burst, so the walk waits for one round trip, not one a stage; `run` takes a stage's
    probes, using those sent ahead with the same name and command and sending the rest,
    results in order. A lone probe with nothing sent ahead runs in the caller's thread (no
    pool is made).

    On a transport that batches (base.BatchTransport: SSH), a burst goes as batches of about
    BATCH_SIZE probes, dealt out in the walk's order so every batch starts with the earliest
    stages' probes; each probe's future is set as its batch reaches it, and probes a batch
    hands back (one before them took long) go out as a new batch.

    A multi-file probe goes out framed with the walk's token (transports/framing.py: the
    command reads it from its input), so no file it reads can pass for another."""

    def __init__(self, transport: Transport, max_parallel: int) -> None:
        self.token = framing.new_token()
        self._run = _guarded(transport)
        self._batch = transport if isinstance(transport, BatchTransport) else None
        #: a transport may take larger batches (kubectl exec: a burst is one exec)
        self._batch_size = int(getattr(transport, "batch_size", BATCH_SIZE))
        self._max = max(1, max_parallel)
        self._pool: ThreadPoolExecutor | None = None
        self._ahead: dict[tuple[str, str], Future[CommandResult]] = {}
        #: a transport that starts its next channel ahead (kubectl exec) is told whether
        #: another burst may follow the one it is sent, so it starts none after the last
        self._expect: Callable[[bool], None] | None = getattr(transport, "expect_more", None)

    @property
    def asks_ahead(self) -> bool:
        """Whether the transport wants to know if another burst may follow (expect_more)."""
        return self._expect is not None

    def sent(self) -> set[tuple[str, str]]:
        """(name, command) of the probes sent ahead and not yet taken by their stage."""
        return set(self._ahead)

    def _tell(self, more: bool) -> None:
        if self._expect is not None:
            self._expect(more)

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self._max)
        return self._pool

    def _submit(self, probe: Probe) -> Future[CommandResult]:
        return self._executor().submit(self._run, probe)

    def _send(self, probes: Sequence[Probe]) -> list[Future[CommandResult]]:
        probes = [framing.prepare(probe, self.token) for probe in probes]
        if self._batch is None or len(probes) < 2:
            return [self._submit(probe) for probe in probes]
        futures: list[Future[CommandResult]] = [Future() for _ in probes]
        lanes = min(self._max, math.ceil(len(probes) / self._batch_size))
        for lane in range(lanes):
            self._send_batch(list(probes[lane::lanes]), futures[lane::lanes])
        return futures

    def _send_batch(self, probes: list[Probe], futures: list[Future[CommandResult]]) -> None:
        try:
            if len(probes) == 1:
                single = self._submit(probes[0])
                single.add_done_callback(lambda done: _settle(futures[0], done))
                return
            self._executor().submit(self._run_batch, probes, futures)
        except RuntimeError:  # the walk is over (the pool shut down): nobody waits for these
            for future in futures:
                future.cancel()

    def _run_batch(self, probes: list[Probe], futures: list[Future[CommandResult]]) -> None:
        assert self._batch is not None

        def deliver(index: int, result: CommandResult) -> None:
            if not futures[index].done():  # cancelled: the walk ended without it
                futures[index].set_result(result)

        def spill(index: int) -> None:
            self._send_batch(probes[index:], futures[index:])

        try:
            self._batch.run_batch(probes, deliver, spill)
        except Exception as exc:
            log.debug("%s: batch raised", self._batch.description, exc_info=True)
            # those it delivered keep their results (deliver skips a future already set)
            fail_all(probes, deliver, f"transport failed: {type(exc).__name__}: {exc}")

    def send_ahead(self, probes: Sequence[Probe], *, more: bool = True) -> None:
        """`more`: whether another burst may follow this one (see `_tell`)."""
        self._tell(more)
        fresh: dict[tuple[str, str], Probe] = {}
        for probe in probes:
            key = (probe.name, probe.command)
            if key not in self._ahead:
                fresh.setdefault(key, probe)
        for key, future in zip(fresh, self._send(list(fresh.values())), strict=True):
            self._ahead[key] = future

    def run(self, probes: Sequence[Probe], *, more: bool = True) -> list[CommandResult]:
        self._tell(more)
        if len(probes) == 1 and not self._ahead:
            return [self._run(framing.prepare(probes[0], self.token))]
        futures: list[Future[CommandResult] | None] = []
        fresh = []
        for probe in probes:
            early = self._ahead.pop((probe.name, probe.command), None)
            futures.append(early)
            if early is None:
                fresh.append(probe)
        sent = iter(self._send(fresh))
        return [(future or next(sent)).result() for future in futures]

    def __enter__(self) -> _Prober:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        """Probes not started are cancelled (one sent ahead for a stage the walk never reached);
        those in flight are waited for, so no thread outlives the walk — unless the walk was
        interrupted (an exception: ^C must not wait out a `sleep 300`; the caller closes the
        transport, which ends them)."""
        if self._pool is not None:
            self._pool.shutdown(wait=kind is None, cancel_futures=True)


def _settle(future: Future[CommandResult], done: Future[CommandResult]) -> None:
    """`future` gets what `done` ended with (a probe a batch handed back, run on its own)."""
    if done.cancelled():
        future.cancel()
    elif done.exception() is not None:
        future.set_exception(done.exception())
    else:
        future.set_result(done.result())


def _parse(
    stage: Stage, results: Mapping[str, CommandResult], context: Mapping[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    facts: dict[str, Any] = {}
    errors: list[str] = []
    for name in stage.parse:
        try:
            entry = parsers.get(name)
        except KeyError:
            errors.append(f"unknown parser {name!r}")
            continue
        try:
            facts[name] = entry.func(results, context)
        except Exception as exc:  # a parser bug is a stage error, never a crash of the run
            log.debug("parser %s failed", name, exc_info=True)
            errors.append(f"parser {name} failed: {type(exc).__name__}: {exc}")
            continue
        # lines a parser skipped (and said so) are the stage's errors too
        skipped = facts[name].get("parse_errors") if isinstance(facts[name], dict) else None
        if isinstance(skipped, list):
            errors.extend(f"parser {name}: {message}" for message in skipped[:20])
    return facts, errors


def _clock_context(results: Mapping[str, CommandResult]) -> dict[str, Any]:
    """What the preamble says about the node's clocks: `now` and `uptime_s` (kernel monotonic
    seconds to wall time), `collected_at` (the year of year-less log times), `utc_offset`."""
    from runbook.parsers.clock import parse_clock

    ctx: dict[str, Any] = {}
    clock = results.get("clock.txt")
    if clock is not None and clock.ok:
        facts = parse_clock(clock.lines())
        if facts.now is not None:
            ctx["now"] = ctx["collected_at"] = facts.now
        if facts.uptime_s is not None:
            ctx["uptime_s"] = facts.uptime_s
    zone = results.get("timezone.txt")
    if zone is not None and zone.ok and zone.stdout.strip():
        ctx["utc_offset"] = zone.stdout.strip()
    return ctx


def node_name(results: Mapping[str, CommandResult], default: str) -> str:
    result = results.get("hostname.txt")
    if result is not None and result.ok and result.stdout.strip():
        return result.stdout.strip().splitlines()[0][:253]
    return default


def execute(
    runbook: Runbook,
    transport: Transport,
    *,
    variables: Mapping[str, Any] | None = None,
    context: Mapping[str, Any] | None = None,
    observer: Observer | None = None,
    run_dir: RunDirectory | None = None,
    collect_all: bool = False,
    max_parallel: int = 8,
    node: str | None = None,
    resume: Conductor | None = None,
) -> RunResult:
    """Walk `runbook` over `transport`. With `collect_all`, every stage's probes run and no rule
    routes (what `runbook collect` does, so a bundle holds everything any walk could read).

    `resume`: a conductor restored from an interrupted run's state.json
    (`Conductor.from_state`); the preamble runs again (the node's clocks now), then the walk
    goes on from its current stage, appending to the same run directory.

    Order of the writes after each stage, so an interruption anywhere leaves a consistent
    directory: state.json (atomically), then the `stage` event, then the observer (the
    console). A stage in events.jsonl is always in state.json; state.json may be one stage
    ahead of the events when the process died between the two."""
    conductor = resume if resume is not None else Conductor(runbook, variables)
    with _Prober(transport, max_parallel) as prober:
        walk = _Walk(
            runbook, conductor, prober, transport.description, observer or NullObserver(),
            run_dir, collect_all=collect_all, named=getattr(transport, "node_name", None),
        )  # fmt: skip
        walk.preamble(node, context, resumed=resume is not None)
        while not conductor.done:
            stage = conductor.next_stage()
            assert stage is not None
            walk.stage(stage)
        return walk.finish()


class _Walk:
    """One walk's state between its steps: every result so far, what each probe collected
    (a stage that asks for the same file with the same command gets it without a round
    trip), the parsers' context, and where the results go (run directory, observer)."""

    def __init__(
        self,
        runbook: Runbook,
        conductor: Conductor,
        prober: _Prober,
        target: str,
        observer: Observer,
        run_dir: RunDirectory | None,
        *,
        collect_all: bool,
        named: str | None = None,
    ) -> None:
        self.runbook = runbook
        #: the node's name as the user typed it, when the target names one (an ssh host)
        self.named = named
        self.conductor = conductor
        self.prober = prober
        self.target = target
        self.observer = observer
        self.run_dir = run_dir
        self.collect_all = collect_all
        self.started = time.monotonic()
        self.all_results: dict[str, CommandResult] = {}
        #: (probe name, command) -> the files it contributed, for stages that collect it again
        self.collected: dict[tuple[str, str], dict[str, CommandResult]] = {}
        self.node = ""
        self.ctx: dict[str, Any] = {}
        self.stage_ids = [s.id for s in runbook.stages]

    def preamble(
        self, node: str | None, context: Mapping[str, Any] | None, *, resumed: bool
    ) -> None:
        """The node's name and clocks, then every probe that needs no earlier stage's facts
        in one burst, then the run's first event."""
        for result in self.prober.run(PREAMBLE, more=self._more_after(None, preamble=True)):
            self.all_results[result.name] = result
        # the name the user typed wins over the node's own hostname: two targets are never one
        # node in reports, proposals and output directories (three hosts all called `vm`)
        self.node = node or self.named or node_name(self.all_results, self.target)
        conductor = self.conductor
        conductor.vars.setdefault("node", self.node)  # templates may name the node
        self.ctx = {
            "node": self.node,
            "page_size": 4096,
            **_clock_context(self.all_results),
            **(context or {}),
            "vars": conductor.vars,
        }
        # more than the next stage's probes (those it sends itself) go ahead now
        ahead = conductor.ahead()
        if len(ahead) > 1:
            early = [probe for probes in ahead.values() for probe in probes]
            sent = {(p.name, p.command) for p in early}
            self.prober.send_ahead(early, more=self._more_after(None, also=sent))
        if self.run_dir and resumed:
            self.run_dir.event(
                "run-resumed",
                runbook=self.runbook.id,
                target=self.target,
                node=self.node,
                at=conductor.current,
                walked=list(conductor.path),
            )
        elif self.run_dir:
            self.run_dir.event(
                "run-started", runbook=self.runbook.id, target=self.target, node=self.node
            )

    def stage(self, stage: Stage) -> None:
        """One stage: skipped when its `when` is false, else its probes, parsers and rules;
        recorded (state.json, then the event) before the observer is told."""
        conductor = self.conductor
        index = self.stage_ids.index(stage.id) + 1
        run_it, why = conductor.should_run(stage)
        if not run_it and not self.collect_all:
            record = conductor.skip(stage.id, f"skipped: {why}")
            if self.run_dir:
                self.run_dir.save_state(conductor.to_state())
            # a skipped stage keeps its number in the walk: it starts, runs nothing, is done
            self.observer.stage_started(stage, index, len(self.stage_ids), [])
            self.observer.stage_done(stage, record)
            return
        probes, template_errors = conductor.probes(stage)
        self.observer.stage_started(stage, index, len(self.stage_ids), probes)
        results = self._results(stage, probes)
        facts, parse_errors = _parse(stage, results, self.ctx)
        record = conductor.record(stage.id, results, facts, template_errors + parse_errors)
        if self.collect_all:
            # collection walks every stage in order whatever the rules said
            ids = self.stage_ids
            conductor.current = ids[index] if index < len(ids) else None
        if self.run_dir:
            self.run_dir.save_state(conductor.to_state())
            self.run_dir.event(
                "stage",
                stage=stage.id,
                status=record.status.value,
                next=record.next,
                reason=record.reason,
                findings=[f.text for f in record.findings],
                errors=record.errors,
            )
        self.observer.stage_done(stage, record)

    def _results(self, stage: Stage, probes: Sequence[Probe]) -> dict[str, CommandResult]:
        """The stage's files: a file an earlier stage already collected with the same command
        (NCCL's logs are read by three stages) is not fetched again — one round trip, and
        every parser sees the content the bundle holds; the rest are run now."""
        results: dict[str, CommandResult] = {}
        fresh = []
        for probe in probes:
            earlier = self.collected.get((probe.name, probe.command))
            if earlier is None:
                fresh.append(probe)
                continue
            results.update(earlier)
            self.observer.probe_done(stage, next(iter(earlier.values())))
        commands = {p.name: p.command for p in fresh}
        for result in self.prober.run(fresh, more=self._more_after(stage.id)):
            self._take(stage, result, commands.get(result.name, result.command), results)
        return results

    def _more_after(
        self,
        current: str | None,
        *,
        preamble: bool = False,
        also: set[tuple[str, str]] | frozenset[tuple[str, str]] = frozenset(),
    ) -> bool:
        """Whether the walk may send another burst after the one it sends now (for a
        transport that starts its next channel ahead: none is started after the last).
        After the preamble, any stage with a probe may; later, a stage not walked yet, with
        no `when` of its own, with a probe neither sent ahead (`also`: those going now) nor
        collected (Conductor.may_send)."""
        if not self.prober.asks_ahead:
            return True
        if preamble:
            return any(stage.collect for stage in self.runbook.stages)
        sent = self.prober.sent() | set(self.collected) | also
        return self.conductor.may_send(sent, current)

    def _take(
        self,
        stage: Stage,
        result: CommandResult,
        command: str,
        results: dict[str, CommandResult],
    ) -> None:
        """One probe's result: split into its files (a multi-file probe), kept in the bundle,
        remembered for later stages, logged as an event."""
        if result.command != command:  # a multi-file probe's framing is the walk's business
            result = replace(result, command=command)
        results[result.name] = result
        self.observer.probe_done(stage, result)
        multi = bundle_mod.is_multi(result.name)
        pieces = bundle_mod.split_multi(result, self.prober.token) if multi else [result]
        if not pieces and result.failure is None:
            # a multi-file probe that found no file at all collected nothing
            results[result.name] = result = replace(result, collected=False)
        if pieces and pieces[0] is not result:
            # parsers see the files, not the joined multi-file output they came in
            del results[result.name]
        for piece in pieces:
            results.setdefault(piece.name, piece)
            self.all_results[piece.name] = piece
            if self.run_dir:
                # whole whatever kills the process (renamed into place), but not fsynced one
                # by one: ~3 files a probe, the walk's largest cost in system calls;
                # state.json and verdict.json are (runbook/atomic.py)
                bundle_mod.write_result(self.run_dir.bundle, piece, durable=False)
        self.collected[(result.name, command)] = {
            piece.name: results[piece.name] for piece in pieces
        } or {result.name: results[result.name]}
        if self.run_dir:
            self.run_dir.event(
                "probe",
                stage=stage.id,
                name=result.name,
                command=result.command,
                exited=result.exited,
                duration=round(result.duration, 4),
                failure=result.failure,
                truncated=result.truncated,
            )

    def finish(self) -> RunResult:
        """The verdict; with a run directory, the bundle's meta, verdict.json, `run-done`."""
        conductor = self.conductor
        verdict = build_verdict(
            conductor,
            node=self.node,
            target=self.target,
            local_utc_offset=self.ctx.get("utc_offset"),
        )
        verdict = verdict.annotated(duration_s=round(time.monotonic() - self.started, 3))
        run_dir = self.run_dir
        if run_dir:
            meta = bundle_mod.BundleMeta(
                node=self.node,
                collected_at=now_iso(),
                pod=_str_or_none(conductor.vars.get("pod")),
                namespace=_str_or_none(conductor.vars.get("namespace")),
            )
            bundle_mod.write_bundle(run_dir.bundle, meta, ())
            run_dir.save_verdict(verdict)
            run_dir.event("run-done", root_cause=verdict.root_cause)
        self.observer.run_done(verdict)
        return RunResult(
            verdict, conductor, self.all_results, self.node, run_dir.path if run_dir else None
        )


def _str_or_none(value: Any) -> str | None:
    return None if value in (None, "") else str(value)
