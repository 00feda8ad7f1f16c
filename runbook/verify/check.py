"""The recovery check of an approved proposal: both layers, and the verdict recorded against it.

1. the nccl-recovery-check runbook walked on the node (the collective test);
2. for a memory remedy (`memory-limit`, `reduce-loader-memory`), or whenever a job command is
   given, the staged replay of the job under the pod's limit (runbook.verify.replay).

`verified` when the collective test is healthy and the replay (when it applies) fitted every
stage; `failed-verification` with the first reason when a layer that ran found the fix did not
hold; `not-run` with the reason when a layer could not run at all — the collective test's
all_reduce_perf not found or not executable on the node, no GPU it can use, no run came back;
a memory remedy's replay without its job command, stages or cgroup, or whose job command was
not found — so a tool's absence is never read as a fix that held, nor as one that failed.
`--no-replay` skips the second layer on purpose, and the reason says so.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runbook import atomic, not_run
from runbook.redact import redact_data
from runbook.remedies import kinds
from runbook.remedies.approval import Desk, Refused
from runbook.remedies.kinds import memory_limit
from runbook.remedies.store import QueuedProposal
from runbook.transports.base import Transport
from runbook.verdict import Verdict
from runbook.verify.record import FAILED, NOT_RUN, VERIFIED, record, verifiable
from runbook.verify.replay import (
    DEFAULT_PATTERN,
    ReplayOutcome,
    ReplaySpec,
    run_replay,
    validate,
)
from runbook.verify.stages import ReplayStage, StageResult, ladder, parse_headroom, stages_from

if TYPE_CHECKING:
    from runbook.executor import Observer

RUNBOOK = "nccl-recovery-check"
#: the recovery runbook's own variables, taken from the proposal's run when it set them
RUNBOOK_VARS = ("gpus", "repeats", "nodes", "hosts", "nics", "socket_ifname", "ib_gid_index",
                "nccl_version", "min_busbw", "max_spread_pct", "run_timeout")


@dataclass
class ReplayRequest:
    command: str | None = None
    stages: Sequence[str] = ()
    pod_cgroup: str | None = None
    headroom: str = "10%"
    duration_s: float = 300.0
    python: str = "python3"
    collective_pattern: str | None = None
    skip: bool = False


@dataclass
class VerifyResult:
    proposal: QueuedProposal
    verified: bool
    reason: str
    verdict: Verdict
    replay: ReplayOutcome | None
    replay_note: str | None
    run_dir: Path | None = None
    details: dict[str, Any] = field(default_factory=dict)
    #: False: a layer could not run at all (status `not-run`), so nothing was verified
    ran: bool = True


def new_run_dir() -> Path:
    """`<state dir>/runs/<UTC stamp>-nccl-recovery-check-<hex>`, as `runbook run` names runs."""
    from runbook.rundir import new_path

    return new_path("runs", RUNBOOK)


def _expected_limit(proposal: QueuedProposal) -> int | None:
    """The limit a memory-limit proposal set, computed as its plan computed it."""
    if proposal.kind != memory_limit.NAME:
        return None
    return memory_limit.planned_limit(proposal.params)


def _original_config(proposal: QueuedProposal) -> dict[str, str]:
    knobs = {k: str(proposal.vars[k]) for k in ("workers", "prefetch", "batch")
             if proposal.vars.get(k) not in (None, "")}
    measured = proposal.params.get("workers_per_rank")
    if "workers" not in knobs and str(measured or "").isdigit():
        knobs["workers"] = str(measured)
    return knobs


def replay_spec_for(
    proposal: QueuedProposal, request: ReplayRequest
) -> tuple[ReplaySpec | None, str]:
    """The replay to run for this proposal, or None and why not."""
    if request.skip:
        return None, "skipped (--no-replay)"
    command = request.command or proposal.vars.get("job_command")
    if not command:
        return None, "no job command (--command CMD, or --var job_command=CMD on the run)"
    stages: list[ReplayStage]
    if request.stages:
        stages = stages_from(request.stages)
    elif proposal.vars.get("replay_stages"):
        stages = stages_from([str(proposal.vars["replay_stages"])])
    elif knobs := _original_config(proposal):
        stages = ladder(knobs)
    else:
        return None, "no stages (--stage K=V,…, or the job's workers/prefetch/batch)"
    pod = request.pod_cgroup or proposal.vars.get("cgroup_dir")
    if not pod:
        return None, "no pod cgroup (--cgroup DIR, or --var cgroup_dir=DIR on the run)"
    spec = ReplaySpec(
        pod_cgroup=str(pod),
        command=str(command),
        stages=stages,
        headroom=parse_headroom(request.headroom),
        duration_s=request.duration_s,
        python=request.python,
        collective_pattern=request.collective_pattern or DEFAULT_PATTERN,
        expected_limit_bytes=_expected_limit(proposal),
    )
    validate(spec)
    return spec, ""


def runbook_variables(proposal: QueuedProposal, given: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: proposal.vars[k] for k in RUNBOOK_VARS if proposal.vars.get(k) not in (None, "")}
    out.update(given)
    return out


def collective_summary(verdict: Verdict) -> dict[str, Any]:
    stage = verdict.stage("collective-test")
    facts = (stage.facts.get("nccl_recovery") if stage else None) or {}
    chain = verdict.chain
    return {
        "root_cause": verdict.root_cause,
        "confidence": verdict.confidence,
        "failed": facts.get("failed") or [],
        "criteria": facts.get("criteria") or {},
        "summary": facts.get("summary") or (chain[0].finding if chain else ""),
        "threshold": facts.get("threshold"),
        "transport": facts.get("transport"),
        "bandwidth": facts.get("bandwidth"),
        "fixed_set": facts.get("fixed_set"),
        "gpu": facts.get("gpu"),
    }


def collective_not_run(
    verdict: Verdict, variables: Mapping[str, Any], *, node: str | None = None
) -> str | None:
    """Why the collective test measured nothing on the node, or None when its runs ran: no
    run came back (no GPU listed, the loop failed), or every run's all_reduce_perf was not
    found, could not be executed or found no GPU. A run stopped by `run_timeout` did run: the
    runbook judges that as a hang."""
    where = node or verdict.node
    stage = verdict.stage("collective-test")
    if stage is None or stage.status == "skipped":
        return f"the collective test did not run on {where}"
    facts = stage.facts.get("nccl_recovery") or {}
    if not facts.get("collected"):
        said = "; ".join(stage.findings) or stage.reason or "no all_reduce_perf run came back"
        missing = [f"{name.removesuffix('.txt')}: {why}"
                   for name, why in stage.not_collected.items() if name.startswith("nvidia-smi")]
        return f"the collective test did not run on {where}: {said}" + (
            f" ({'; '.join(missing[:1])})" if missing else "")
    program = not_run.program_of(str(variables.get("all_reduce_perf") or ""), "all_reduce_perf")
    reasons = []
    for run in facts.get("runs") or []:
        said = "\n".join(str(f.get("text") or "") for f in run.get("failures") or [])
        why = not_run.reason(said, run.get("exit_status"), node=where, program=program,
                             timeouts=False, empty=False)
        if why is None:
            return None
        reasons.append(why)
    if not reasons:
        return f"the collective test did not run on {where}: no all_reduce_perf run came back"
    return "the collective test could not run: " + "; ".join(dict.fromkeys(reasons))


def replay_not_run(outcome: ReplayOutcome) -> str | None:
    """Why the staged replay could not run at all (the pod's limit unreadable, its first stage
    not started or its job command not found), or None when it ran."""
    if outcome.limit_bytes is None and not outcome.results:
        return outcome.reason
    first = outcome.results[0] if outcome.results else None
    if first is not None and not first.ran:
        return first.reason
    return None


def verify(
    desk: Desk,
    pid: str,
    transport: Transport,
    *,
    variables: Mapping[str, Any],
    request: ReplayRequest,
    node: str | None = None,
    observer: Observer | None = None,
    run_dir: Path | None = None,
    actor: str | None = None,
    on_stage: Callable[[ReplayStage], None] | None = None,
    on_result: Callable[[StageResult], None] | None = None,
) -> VerifyResult:
    from runbook.executor import execute
    from runbook.rundir import RunDirectory
    from runbook.spec import load_file, resolve

    proposal = desk.store.get(pid)
    why = verifiable(proposal)
    if why:
        raise Refused(why)
    spec, note = replay_spec_for(proposal, request)
    runbook = load_file(resolve(RUNBOOK))
    directory = RunDirectory(run_dir) if run_dir else None
    try:
        walked = execute(runbook, transport, variables=runbook_variables(proposal, variables),
                         observer=observer, run_dir=directory, node=node)
    finally:
        if directory:
            directory.close()
    verdict = walked.verdict
    collective = collective_summary(verdict)
    outcome = run_replay(transport, spec, on_stage=on_stage, on_result=on_result) \
        if spec is not None else None
    healthy = verdict.root_cause == "healthy"
    replay_needed = kinds.is_memory_remedy(proposal.kind) and not request.skip
    missed = collective_not_run(verdict, runbook_variables(proposal, variables), node=node)
    missed_replay = replay_not_run(outcome) if outcome is not None else None
    ran = True
    if missed is not None:
        # nothing was measured: not a fix that held, nor one that failed
        ran, reason = False, missed
    elif not healthy:
        reason = f"collective test: {verdict.root_cause}: {collective['summary']}"
    elif missed_replay is not None:
        ran, reason = False, f"staged replay could not run: {missed_replay}"
    elif outcome is not None and not outcome.passed:
        reason = f"staged replay: {outcome.reason}"
    elif outcome is None and replay_needed:
        ran, reason = False, f"staged replay not run: {note}"
    else:
        tail = f"staged replay: {outcome.reason}" if outcome is not None else (
            f"staged replay {note}" if request.skip else f"no staged replay ({note})")
        reason = f"collective test healthy; {tail}"
    ok = ran and healthy and (outcome.passed if outcome is not None else not replay_needed)
    details: dict[str, Any] = {
        "runbook": RUNBOOK,
        "target": transport.description,
        "node": verdict.node,
        "run_dir": str(walked.run_dir) if walked.run_dir else None,
        "root_cause": verdict.root_cause,
        "layers": {
            "collective": collective,
            "replay": outcome.as_dict() if outcome is not None else {"skipped": note},
        },
    }
    if walked.run_dir:
        for judged in outcome.results if outcome is not None else []:
            raw = Path(walked.run_dir) / "replay" / f"stage-{judged.stage.index}.json"
            text = json.dumps(redact_data(judged.report), indent=1, default=str)
            atomic.write_text(raw, text, within=Path(walked.run_dir))
        status = VERIFIED if ok else (FAILED if ran else NOT_RUN)
        summary = redact_data({"verified": ok, "status": status, "reason": reason, **details})
        atomic.write_text(Path(walked.run_dir) / "verification.json",
                          json.dumps(summary, indent=2, default=str), within=Path(walked.run_dir))
    updated = record(desk, pid, verified=ok, reason=reason, details=details, actor=actor,
                     ran=ran)
    return VerifyResult(updated, ok, reason, verdict, outcome, note or None,
                        Path(walked.run_dir) if walked.run_dir else None, details, ran=ran)
