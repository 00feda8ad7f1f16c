"""The conductor: a pure, serialisable state machine that walks a runbook.

It does no I/O (orquesta's habit). The executor asks it which stage is next and what to run
(`probes`), runs the probes and parsers, and reports back (`record`); the conductor evaluates the
stage's `decide` rules, records findings, and routes. Its whole state is `to_state()`, JSON, so a
run directory can be resumed or audited.

Rule semantics (docs/runbook-format.md): matching rules record their finding, rule-outs and
proposals in order; the first matching rule with `next` or `conclude` routes and ends evaluation;
otherwise the walk falls through to the following stage; after the last stage it ends.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Container, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from runbook import derived as derived_facts
from runbook import templating
from runbook.errors import StateError, TemplateError
from runbook.spec.models import END, SKIPPED_BECAUSE, Derive, Rule, Runbook, Stage
from runbook.transports.base import CommandResult, Probe

#: a command template that reads what the walk found so far (an earlier stage's facts, this
#: stage's results) cannot be rendered before its stage
_READS_WALK = re.compile(r"\b(?:facts|results)\b")


class StageStatus(str, enum.Enum):
    OK = "ok"
    ANOMALY = "anomaly"
    NOT_COLLECTED = "not-collected"
    ERROR = "error"
    SKIPPED = "skipped"
    #: the stage's files were read but no line of them was understood: no rule-out drawn
    UNRECOGNIZED = "unrecognized-format"


@dataclass
class RuleFinding:
    stage: str
    text: str
    cause: str | None = None
    evidence: list[dict[str, Any]] = field(default_factory=list)
    rule: int = 0  # index of the rule in the stage's decide list
    #: the rule's `role:`, if it set one (the verdict otherwise takes it from the evidence)
    role: str | None = None


@dataclass
class ProbeRecord:
    name: str
    command: str
    exited: int | None
    duration: float
    failure: str | None
    truncated: bool = False

    @classmethod
    def of(cls, result: CommandResult) -> ProbeRecord:
        return cls(
            result.name,
            result.command,
            result.exited,
            round(result.duration, 4),
            result.failure,
            result.truncated,
        )


@dataclass
class StageRecord:
    id: str
    title: str
    status: StageStatus = StageStatus.SKIPPED
    facts: dict[str, Any] = field(default_factory=dict)
    findings: list[RuleFinding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    probes: list[ProbeRecord] = field(default_factory=list)
    next: str | None = None
    reason: str = ""
    ruled_out: list[dict[str, str]] = field(default_factory=list)
    proposals: list[str] = field(default_factory=list)  # remedy ids


#: failures that say the evidence is absent (not that reading it went wrong); a probe that
#: said why it did not run (exit 127, CommandResult.failure) is "not run: …"
ABSENT = ("not collected", "command not found")


def absent(failure: str) -> bool:
    """Whether a probe's failure says its evidence is absent (ABSENT, or "not run: …")."""
    return failure in ABSENT or failure.startswith("not run: ")


def _status_of(record: StageRecord, results: Mapping[str, CommandResult]) -> StageStatus:
    """anomaly (a finding) > error (a rule, parser or probe went wrong: timeout, permission,
    connection) > not-collected (no file at all) > ok. A stage that collected some of its
    files and lacks others (v1 files on a v2 host, a tool not installed) is ok: what is
    missing is listed, not an error."""
    if record.findings:
        return StageStatus.ANOMALY
    if record.errors:
        return StageStatus.ERROR
    failures = [r.failure for r in results.values()]
    if any(f is not None and not absent(f) for f in failures):
        return StageStatus.ERROR
    if results and all(f is not None for f in failures):
        return StageStatus.NOT_COLLECTED
    return StageStatus.OK


def _unrecognized(facts: Mapping[str, Any]) -> bool:
    """A parser read its file and understood none of it (`recognized: false`)."""
    return any(isinstance(f, Mapping) and f.get("recognized") is False for f in facts.values())


def _evidence_items(value: Any) -> list[dict[str, Any]]:
    """An `evidence:` expression's value as a list of {source, line, time, text} dicts."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        value = [value]
    if not isinstance(value, list | tuple):
        return []
    items = []
    for item in value:
        if isinstance(item, Mapping) and ("source" in item or "line" in item or "text" in item):
            items.append(
                {
                    k: item[k]
                    for k in (
                        "source",
                        "line",
                        "time",
                        "text",
                        "role",
                        "signature",
                        "time_inferred",
                    )
                    if item.get(k) is not None
                }
            )
    return items


class Conductor:
    def __init__(
        self,
        runbook: Runbook,
        variables: Mapping[str, Any] | None = None,
        state: Mapping[str, Any] | None = None,
    ) -> None:
        self.runbook = runbook
        self.vars: dict[str, Any] = {**runbook.vars, **(variables or {})}
        self.records: dict[str, StageRecord] = {
            s.id: StageRecord(s.id, s.title) for s in runbook.stages
        }
        self.path: list[str] = []  # stage ids in the order walked
        self.current: str | None = runbook.stages[0].id if runbook.stages else None
        self.concluded: str | None = None
        #: each record as to_state() gave it, kept until the record changes (record, skip):
        #: a walk saves its state after every stage, and converting every record again each
        #: time made the saves grow with the square of the stages
        self._states: dict[str, dict[str, Any]] = {}
        if state is not None:
            self._load(state)

    # -- queries ----------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        return self.current is None

    def facts(self) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for stage_id in self.path:
            for parser, facts in self.records[stage_id].facts.items():
                if isinstance(facts, dict) and isinstance(merged.get(parser), dict):
                    merged[parser] = {**merged[parser], **facts}
                else:
                    merged[parser] = facts
        return merged

    def context(self, results: Mapping[str, CommandResult] | None = None) -> dict[str, Any]:
        """What templates and expressions see: the vars at top level, `vars`, `facts`, and
        the current stage's `results` by file name."""
        ctx: dict[str, Any] = dict(self.vars)
        ctx["vars"] = dict(self.vars)
        ctx["facts"] = self.facts()
        ctx["results"] = {
            name: {
                "rc": r.exited,
                "stdout": r.stdout,
                "stderr": r.stderr,
                "failure": r.failure,
                "collected": r.collected,
            }
            for name, r in (results or {}).items()
        }
        return ctx

    def next_stage(self) -> Stage | None:
        return None if self.current is None else self.runbook.stage(self.current)

    def ahead(self) -> dict[str, list[Probe]]:
        """Probes the walk may send before their stage comes, by stage id: those of every
        stage not walked yet that has no `when` of its own, whose command reads no stage's
        facts or results — rendered now, they are what their stage will render (the walk
        checks: a command that renders otherwise is run then, and the early one is not used)."""
        found: dict[str, list[Probe]] = {}
        for stage, name, command in self._unwalked_probes():
            if command is not None:
                found.setdefault(stage.id, []).append(Probe(name, command, stage.timeout))
        return found

    def _unwalked_probes(
        self, current: str | None = None
    ) -> Iterator[tuple[Stage, str, str | None]]:
        """(stage, probe name, command rendered now) of every stage not walked yet (nor
        `current`) without a `when` of its own; the command None when it reads the walk's
        facts or results (it is rendered when its stage comes). A template that does not
        render is left out: its stage reports it."""
        ctx = self.context()
        for stage in self.runbook.stages:
            if stage.id in self.path or stage.id == current or stage.when:
                continue
            for item in stage.collect:
                if _READS_WALK.search(item.command):
                    yield stage, item.name, None
                    continue
                try:
                    yield stage, item.name, templating.render_command(item.command, ctx)
                except TemplateError:
                    continue

    def may_send(self, sent: Container[tuple[str, str]], current: str | None = None) -> bool:
        """Whether a stage not walked yet (other than `current`, the one running) that runs
        whatever the evidence says (no `when` of its own) will need a probe the walk has not
        sent (`sent`: (name, command) of those sent ahead or already collected): a command
        that reads the walk's facts, or renders to a probe not sent. False: a transport that
        starts its next channel ahead (kubectl exec) starts none. A stage with a `when` runs
        on some evidence only (a DCGM diagnostic, seconds long): its channel is started when
        it runs, and none is started ahead to be thrown away when it is skipped."""
        return any(
            command is None or (name, command) not in sent
            for _stage, name, command in self._unwalked_probes(current)
        )

    def should_run(self, stage: Stage) -> tuple[bool, str]:
        """A stage's own `when`, and why it is skipped when it is false: its `skip_reason`, a
        sentence (never the expression). An expression error is reported and the stage runs."""
        if not stage.when:
            return True, ""
        try:
            run = bool(templating.evaluate(stage.when, self.context()))
        except TemplateError as exc:
            return True, exc.one_line()
        return run, stage.skip_reason or SKIPPED_BECAUSE

    def probes(self, stage: Stage) -> tuple[list[Probe], list[str]]:
        """The stage's rendered probes, and an error per template that would not render."""
        probes, errors = [], []
        ctx = self.context()
        for item in stage.collect:
            try:
                command = templating.render_command(item.command, ctx)
            except TemplateError as exc:
                errors.append(f"{item.name}: {exc.one_line()}")
                continue
            probes.append(Probe(item.name, command, stage.timeout))
        return probes, errors

    # -- transitions ------------------------------------------------------------------------

    def skip(self, stage_id: str, reason: str) -> StageRecord:
        self._states.pop(stage_id, None)
        record = self.records[stage_id]
        record.status, record.reason = StageStatus.SKIPPED, reason
        self.path.append(stage_id)
        self._advance(stage_id, None)
        record.next = self.current
        return record

    def record(
        self,
        stage_id: str,
        results: Mapping[str, CommandResult],
        facts: Mapping[str, Any],
        errors: list[str] | None = None,
    ) -> StageRecord:
        """Take a stage's results and parsed facts, decide, and move on."""
        stage = self.runbook.stage(stage_id)
        self._states.pop(stage_id, None)
        record = self.records[stage_id]
        record.facts = dict(facts)
        record.errors = list(errors or [])
        record.probes = [ProbeRecord.of(r) for r in results.values()]
        self.path.append(stage_id)
        ctx = self.context(results)
        if stage.derive:
            derived: dict[str, Any] = dict(ctx["facts"].get("derived") or {})
            for item in stage.derive:
                derived[item.name] = self._derive(item, ctx, record)
                ctx["facts"] = {**ctx["facts"], "derived": dict(derived)}
            record.facts["derived"] = {i.name: derived[i.name] for i in stage.derive}
        route: str | None = None
        concluded: str | None = None
        chain_matched = False
        for index, rule in enumerate(stage.decide):
            label = f"rule {index + 1}"
            if not rule.otherwise:
                chain_matched = False
            elif chain_matched:
                continue  # an `else` of a rule that matched
            if rule.when is not None:
                try:
                    matched = bool(templating.evaluate(rule.when, ctx))
                except TemplateError as exc:
                    record.errors.append(f"{label}: {exc.one_line()}")
                    continue
                if not matched:
                    continue
                label += f" ({rule.when})"
            chain_matched = True
            if rule.finding is not None:
                record.findings.append(self._finding(stage, index, rule, ctx, record))
            for out in rule.rule_out:
                because, problem = templating.render_message(out.because, ctx)
                if because is None:
                    record.errors.append(f"rule {index + 1} rule-out reason: {problem}")
                    because = (
                        f"the {stage.title} stage's evidence rules it out (details unavailable: "
                        f"{problem})"
                    )
                record.ruled_out.append({"cause": out.cause, "because": because})
            record.proposals.extend(p for p in rule.propose if p not in record.proposals)
            if rule.conclude is not None:
                concluded, record.reason = rule.conclude, f"{label} concludes {rule.conclude}"
                break
            if rule.next is not None:
                route, record.reason = rule.next, f"{label} routes to {rule.next}"
                break
            if stage.match == "first":
                break
        record.status = _status_of(record, results)
        if record.status is StageStatus.OK and _unrecognized(record.facts):
            # a file whose lines were not understood proves nothing absent
            record.status = StageStatus.UNRECOGNIZED
            record.ruled_out = []
        if concluded is not None:
            self.concluded = concluded
            self.current = None
        else:
            if route is None and not record.reason:
                record.reason = "no rule routes: next stage in order"
            self._advance(stage_id, route)
        record.next = self.current
        return record

    def _derive(self, item: Derive, ctx: dict[str, Any], record: StageRecord) -> Any:
        """One derived fact: its Python predicate (runbook.derived) or its expression; None,
        and an error on the stage, when it fails."""
        try:
            if item.expression is None:
                return derived_facts.compute(item.name, ctx["facts"], self.vars)
            return templating.evaluate(item.expression, ctx)
        except TemplateError as exc:
            record.errors.append(f"derive {item.name}: {exc.one_line()}")
        except Exception as exc:  # a predicate's bug is a stage error, never a crash of the run
            record.errors.append(f"derive {item.name} failed: {type(exc).__name__}: {exc}")
        return None

    def _finding(
        self, stage: Stage, index: int, rule: Rule, ctx: dict[str, Any], record: StageRecord
    ) -> RuleFinding:
        """The rule's finding rendered from the facts; when it cannot be, a plain sentence of
        the stage and the cause, and what was missing (never the template's text)."""
        text, problem = templating.render_message(rule.finding or "", ctx)
        if text is None:
            record.errors.append(f"rule {index + 1} finding: {problem}")
            what = f"evidence of {rule.cause}" if rule.cause else "an anomaly"
            text = f"{stage.title}: {what} (details unavailable: {problem})"
        evidence: list[dict[str, Any]] = []
        if rule.evidence:
            try:
                evidence = _evidence_items(templating.evaluate(rule.evidence, ctx))
            except TemplateError as exc:
                record.errors.append(f"rule {index + 1} evidence: {exc.one_line()}")
        return RuleFinding(stage.id, text.strip(), rule.cause, evidence, index, rule.role)

    def _advance(self, stage_id: str, route: str | None) -> None:
        if route == END:
            self.current = None
            return
        if route is not None:
            self.current = route
            return
        ids = [s.id for s in self.runbook.stages]
        position = ids.index(stage_id)
        self.current = ids[position + 1] if position + 1 < len(ids) else None

    # -- state ------------------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        """The whole state, JSON-ready. A record that has not changed since the last call is
        the same object as then (RunDirectory.save_state reuses its JSON): read it, never
        change it."""
        records = {}
        for stage_id, record in self.records.items():
            if stage_id not in self._states:
                self._states[stage_id] = _record_state(record)
            records[stage_id] = self._states[stage_id]
        return {
            "runbook": self.runbook.id,
            "vars": self.vars,
            "path": list(self.path),
            "current": self.current,
            "concluded": self.concluded,
            "records": records,
        }

    @classmethod
    def from_state(cls, runbook: Runbook, state: Mapping[str, Any]) -> Conductor:
        """The conductor `to_state()` described, over the same runbook: what `runbook resume`
        continues from. Pure; a state that does not fit `runbook` (another runbook, a stage it
        lacks, a malformed record) is a StateError naming what does not fit."""
        if not isinstance(state, Mapping):
            raise StateError("state: expected a JSON object")
        if state.get("runbook") != runbook.id:
            raise StateError(f"state is of runbook {state.get('runbook')!r}, not {runbook.id!r}")
        ids = {s.id for s in runbook.stages}
        path = state.get("path", [])
        records = state.get("records", {})
        if not isinstance(path, list) or not isinstance(records, Mapping):
            raise StateError("state: path must be a list and records an object")
        unknown = sorted({str(i) for i in [*path, *records] if i not in ids})
        current = state.get("current")
        if current is not None and current not in ids:
            unknown.append(str(current))
        if unknown:
            raise StateError(f"state names stages runbook {runbook.id!r} lacks: {unknown}")
        if not isinstance(state.get("vars", {}), Mapping):
            raise StateError("state: vars must be an object")
        try:
            return cls(runbook, state=state)
        except (KeyError, TypeError, ValueError) as exc:
            reason = f"{type(exc).__name__}: {exc}"
            raise StateError(f"state: malformed stage record: {reason}") from None

    def _load(self, state: Mapping[str, Any]) -> None:
        self._states.clear()
        self.vars = dict(state.get("vars", self.vars))
        self.path = list(state.get("path", []))
        self.current = state.get("current")
        self.concluded = state.get("concluded")
        for stage_id, data in state.get("records", {}).items():
            if stage_id in self.records:
                self.records[stage_id] = _record_from_state(data)


def _record_state(record: StageRecord) -> dict[str, Any]:
    """What asdict(record) gives (the same keys in the same order), without its deep copy of
    the facts: they are JSON-ready already (parsers return plain data), and a record is only
    changed by its own stage's record() or skip(), which drop this copy (Conductor._states)."""
    return {
        "id": record.id,
        "title": record.title,
        "status": record.status.value,
        "facts": record.facts,
        "findings": [asdict(finding) for finding in record.findings],
        "errors": list(record.errors),
        "probes": [asdict(probe) for probe in record.probes],
        "next": record.next,
        "reason": record.reason,
        "ruled_out": [dict(item) for item in record.ruled_out],
        "proposals": list(record.proposals),
    }


def _record_from_state(data: Mapping[str, Any]) -> StageRecord:
    return StageRecord(
        id=data["id"],
        title=data.get("title", data["id"]),
        status=StageStatus(data.get("status", "skipped")),
        facts=dict(data.get("facts", {})),
        findings=[RuleFinding(**f) for f in data.get("findings", [])],
        errors=list(data.get("errors", [])),
        probes=[ProbeRecord(**p) for p in data.get("probes", [])],
        next=data.get("next"),
        reason=data.get("reason", ""),
        ruled_out=list(data.get("ruled_out", [])),
        proposals=list(data.get("proposals", [])),
    )
