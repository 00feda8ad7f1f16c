"""The staged replay driver: run the job's stages on the node, one at a time, over the run's
transport, and stop at the first stage that does not fit.

Each stage is one probe: the node's `python3` runs runbook/verify/watcher.py (its source is
sent with the command; nothing is installed on the node) with the stage's rendered command,
environment and stop line. The driver reads the stage's report, judges it
(runbook.verify.stages.judge) and goes on only while stages pass.

Before the first stage the pod cgroup's limit is read: when the approved remedy's limit is
known and the kernel still enforces a smaller one, the replay does not start (the pod has not
restarted with the new limit, and the replay would prove nothing about it).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from runbook.errors import UsageError
from runbook.templating import shell_quote
from runbook.transports.base import Probe, Transport
from runbook.units import human
from runbook.verify.stages import Headroom, ReplayStage, StageResult, judge, render_command

log = logging.getLogger(__name__)

DEFAULT_PATTERN = r"(?i)Init COMPLETE|all_?reduce"
_LIMIT_FILES = ("memory.max", "memory.limit_in_bytes")


@dataclass(frozen=True)
class ReplaySpec:
    pod_cgroup: str
    command: str
    stages: Sequence[ReplayStage]
    headroom: Headroom = field(default_factory=lambda: Headroom(pct=10.0))
    #: a stage still running after this long has held: it is stopped and passes
    duration_s: float = 300.0
    poll_s: float = 0.02
    sample_s: float = 0.1
    collective_pattern: str = DEFAULT_PATTERN
    python: str = "python3"
    container: str = "runbook-replay"
    #: the limit the approved remedy set (None: whatever the pod cgroup has)
    expected_limit_bytes: int | None = None
    env: dict[str, str] = field(default_factory=dict)


def watcher_source() -> str:
    return resources.files("runbook.verify").joinpath("watcher.py").read_text(encoding="utf-8")


def stage_probe(spec: ReplaySpec, stage: ReplayStage) -> Probe:
    args: dict[str, Any] = {
        "pod_cgroup": spec.pod_cgroup,
        "container": spec.container,
        "command": render_command(spec.command, stage),
        "env": {**spec.env, **stage.env()},
        "headroom_pct": spec.headroom.pct,
        "headroom_bytes": spec.headroom.bytes,
        "duration_s": spec.duration_s,
        "poll_s": spec.poll_s,
        "sample_s": spec.sample_s,
        "collective_pattern": spec.collective_pattern,
    }
    command = " ".join(
        [shell_quote(spec.python), "-c", shell_quote(watcher_source()),
         shell_quote(json.dumps(args))]
    )
    return Probe(f"replay/stage-{stage.index}.json", command, spec.duration_s + 60.0)


def limit_probe(pod_cgroup: str) -> Probe:
    paths = " ".join(shell_quote(f"{pod_cgroup}/{name}") for name in _LIMIT_FILES)
    return Probe("replay/limit.txt", f"for f in {paths}; do [ -r \"$f\" ] && exec cat \"$f\"; "
                 "done; echo 'not a memory cgroup' >&2; exit 2", 15.0)


def read_limit(transport: Transport, pod_cgroup: str) -> tuple[int | None, str]:
    """The pod cgroup's limit (None: unlimited or unreadable) and what was read."""
    result = transport.run(limit_probe(pod_cgroup))
    text = result.stdout.strip()
    if not result.ok:
        return None, (result.stderr.strip() or result.failure or f"exit {result.exited}")
    if text == "max" or not text.isdigit() or int(text) >= 1 << 62:
        return None, f"no limit ({text})"
    return int(text), text


@dataclass
class ReplayOutcome:
    spec: ReplaySpec
    results: list[StageResult]
    passed: bool
    reason: str
    limit_bytes: int | None = None

    @property
    def stopped_at(self) -> int | None:
        failed = next((r for r in self.results if not r.passed), None)
        return failed.stage.index if failed else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "reason": self.reason,
            "pod_cgroup": self.spec.pod_cgroup,
            "command": self.spec.command,
            "headroom": self.spec.headroom.describe(),
            "limit_bytes": self.limit_bytes,
            "expected_limit_bytes": self.spec.expected_limit_bytes,
            "stages_planned": [s.knobs for s in self.spec.stages],
            "stopped_at": self.stopped_at,
            "stages": [r.as_dict() for r in self.results],
        }


def validate(spec: ReplaySpec) -> None:
    """Every stage's command renders (UsageError naming the first that does not), before
    anything runs on the node."""
    if not spec.stages:
        raise UsageError("the replay has no stage")
    for stage in spec.stages:
        render_command(spec.command, stage)


def run_replay(
    transport: Transport,
    spec: ReplaySpec,
    *,
    on_stage: Callable[[ReplayStage], None] | None = None,
    on_result: Callable[[StageResult], None] | None = None,
) -> ReplayOutcome:
    """Run the stages in order; stop at the first that does not pass."""
    validate(spec)
    limit, seen = read_limit(transport, spec.pod_cgroup)
    if limit is None:
        return ReplayOutcome(spec, [], False, f"{spec.pod_cgroup}: {seen}: the replay needs the "
                             "pod's memory limit to stay under", None)
    if spec.expected_limit_bytes is not None and limit < spec.expected_limit_bytes:
        return ReplayOutcome(
            spec, [], False,
            f"the pod cgroup's limit is {human(limit)}, not the approved "
            f"{human(spec.expected_limit_bytes)}: has the pod restarted with the new limit?",
            limit,
        )
    results: list[StageResult] = []
    for stage in spec.stages:
        if on_stage:
            on_stage(stage)
        result = transport.run(stage_probe(spec, stage))
        report: dict[str, Any]
        try:
            report = json.loads(result.stdout.strip().splitlines()[-1]) if result.stdout.strip() \
                else {"error": result.failure or result.stderr.strip()[-300:] or
                      f"exit {result.exited}"}
        except ValueError:
            report = {"error": f"unreadable report: {result.stdout.strip()[-200:]}"}
        if not isinstance(report, dict):
            report = {"error": "unreadable report"}
        judged = judge(stage, report)
        results.append(judged)
        if on_result:
            on_result(judged)
        if not judged.passed:
            return ReplayOutcome(spec, results, False, judged.reason, limit)
    last = results[-1].reason if results else "no stage"
    return ReplayOutcome(spec, results, bool(results),
                         f"all {len(results)} stage(s) fit under {human(limit)}: {last}", limit)
