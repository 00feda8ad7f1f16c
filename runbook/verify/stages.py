"""The staged replay's stages, the command each runs, and what a stage's report means (pure).

A *stage* is a set of knobs (`workers=2,prefetch=4,batch=64`): the job's configuration, which
the job command template takes as `{workers}`, `{prefetch}`, `{batch}` (each value
shell-quoted) and the job's environment as `RUNBOOK_REPLAY_<KNOB>`. Given only the job's
original configuration, `ladder` restores it one knob at a time from a reduced start (workers
0, prefetch 1, a quarter of the batch): the first stage that comes within the headroom of the
limit is the knob that does not fit.

`judge` reads the watcher's report (runbook/verify/watcher.py) of one stage: the pod's peak
(kernel and sampled working set) and `memory.stat` anon/shmem/file at the peak, each
container's peak and stat (a sidecar sharing the pod cgroup shows up as its own container),
the ranks' and workers' memory at the peak (runbook.parsers.procmem over the replayed
container's processes at the peak, and over every process any snapshot saw for who ran; each
process's `VmHWM` for the per-rank peak), and the first collective's time.
"""

from __future__ import annotations

import re
import shlex
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runbook.errors import UsageError
from runbook.not_run import CANNOT_EXECUTE, NOT_FOUND
from runbook.parsers.cgroup import parse_cgroup
from runbook.parsers.procmem import parse_procmem
from runbook.units import human, parse_size

KNOB_ORDER = ("workers", "prefetch", "batch")
_KNOB = re.compile(r"^[a-z][a-z0-9_]*$")
#: what a stage starts from when only the original configuration is known
START = {"workers": 0, "prefetch": 1}
PASSING = ("completed", "held")


@dataclass(frozen=True)
class ReplayStage:
    index: int
    knobs: dict[str, str]

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.knobs.items())

    def env(self) -> dict[str, str]:
        out = {f"RUNBOOK_REPLAY_{k.upper()}": v for k, v in self.knobs.items()}
        out["RUNBOOK_REPLAY_STAGE"] = str(self.index)
        return out


def parse_knobs(text: str) -> dict[str, str]:
    """`workers=2,prefetch=4 batch=64` → {"workers": "2", ...} (commas or spaces)."""
    knobs: dict[str, str] = {}
    for item in re.split(r"[,\s]+", text.strip()):
        if not item:
            continue
        name, sep, value = item.partition("=")
        if not sep or not _KNOB.match(name) or not value:
            raise UsageError(f"stage {text!r}: expected NAME=VALUE[,NAME=VALUE…], not {item!r}")
        knobs[name] = value
    if not knobs:
        raise UsageError("a stage needs at least one NAME=VALUE")
    return knobs


def stages_from(texts: Sequence[str]) -> list[ReplayStage]:
    """Stages given one by one (`--stage …`, or one `;`-separated `replay_stages` variable)."""
    parts = [p for t in texts for p in t.split(";") if p.strip()]
    return [ReplayStage(i, parse_knobs(p)) for i, p in enumerate(parts, 1)]


def _start_value(name: str, value: str) -> str:
    if not value.isdigit():
        return value
    target = int(value)
    if name == "batch":
        return str(max(1, target // 4))
    return str(min(target, START.get(name, target)))


def ladder(original: Mapping[str, str], order: Sequence[str] = KNOB_ORDER) -> list[ReplayStage]:
    """From a reduced start back to `original`, restoring one knob per stage in `order`
    (knobs not in `order` are restored last, in their given order)."""
    knobs = {k: str(v) for k, v in original.items()}
    current = {k: _start_value(k, v) for k, v in knobs.items()}
    stages = [ReplayStage(1, dict(current))]
    for name in [*[k for k in order if k in knobs], *[k for k in knobs if k not in order]]:
        if current[name] != knobs[name]:
            current[name] = knobs[name]
            stages.append(ReplayStage(len(stages) + 1, dict(current)))
    return stages


def render_command(template: str, stage: ReplayStage) -> str:
    """The job command of a stage: `{knob}` placeholders filled, each value one shell word."""
    try:
        names = {f for _, f, _, _ in string.Formatter().parse(template) if f}
    except ValueError as exc:
        raise UsageError(f"job command {template!r}: {exc}") from None
    missing = sorted(n for n in names if n not in stage.knobs and n != "stage")
    if missing:
        raise UsageError(f"job command uses {{{missing[0]}}} but stage {stage.index} "
                         f"({stage.label}) sets no {missing[0]}")
    values = {k: shlex.quote(v) for k, v in stage.knobs.items()}
    values["stage"] = str(stage.index)
    return template.format_map(values)


@dataclass(frozen=True)
class Headroom:
    """How close to the limit a stage may come: a share of the limit or a size."""

    pct: float | None = None
    bytes: int | None = None

    def describe(self) -> str:
        return f"{self.pct:g} %" if self.pct is not None else human(self.bytes or 0)


def parse_headroom(text: str | int | float) -> Headroom:
    raw = str(text).strip()
    if raw.endswith("%"):
        try:
            pct = float(raw[:-1])
        except ValueError:
            raise UsageError(f"headroom {raw!r}: expected a percentage like 10%") from None
        if not 0 < pct < 100:
            raise UsageError(f"headroom {raw!r}: must be between 0 and 100 %")
        return Headroom(pct=pct)
    size = parse_size(raw, "headroom")
    if size <= 0:
        raise UsageError(f"headroom {raw!r}: must be positive")
    return Headroom(bytes=size)


@dataclass
class StageResult:
    stage: ReplayStage
    passed: bool
    reason: str
    report: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    #: False: the stage could not run (the watcher did not start, the job's command was not
    #: found or not executable): it measured nothing
    ran: bool = True

    def as_dict(self) -> dict[str, Any]:
        return {"index": self.stage.index, "knobs": self.stage.knobs, "passed": self.passed,
                "reason": self.reason, **({} if self.ran else {"ran": False}), **self.summary}


def _stat(text: str | None, version: int) -> dict[str, int | None]:
    facts = parse_cgroup({"memory.stat": text or "", **(
        {"memory.max": "max"} if version == 2 else {"memory.limit_in_bytes": str(1 << 62)})})
    return {"anon_bytes": facts.anon_bytes, "shmem_bytes": facts.shmem_bytes,
            "file_bytes": facts.file_bytes}


def _procmem(procs: Mapping[str, Any], hwm: Mapping[str, int]) -> dict[str, Any]:
    statuses = {int(k): v for k, v in (procs.get("statuses") or {}).items()}
    rollups = {int(k): v for k, v in (procs.get("rollups") or {}).items()}
    if not statuses:
        return {"ranks": 0, "workers": 0}
    facts = parse_procmem(statuses, rollups, statuses.keys())
    rank_hwm = [hwm[str(p)] for p in facts.rank_pids if str(p) in hwm]
    return {
        "processes": len(facts.processes),
        "ranks": facts.ranks,
        "workers": facts.workers,
        "per_rank_peak_rss_bytes": max(rank_hwm) if rank_hwm else None,
        "per_rank_anon_bytes": facts.per_rank["anon_bytes"].max,
        "per_rank_group_anon_bytes": facts.per_rank["group_anon_bytes"].max,
        "per_worker_own_anon_bytes": facts.per_worker["own_anon_bytes"].max,
        "total_anon_bytes": facts.total_anon_bytes,
    }


def summarize(report: Mapping[str, Any]) -> dict[str, Any]:
    """The figures of one stage's watcher report, as the verification records them."""
    version = int(report.get("cgroup_version") or 1)
    peak = report.get("peak") or {}
    snapshot = report.get("snapshot") or {}
    hwm = report.get("hwm_bytes") or {}
    containers = []
    for name, after in sorted((report.get("containers") or {}).items()):
        at_peak = (snapshot.get("containers") or {}).get(name) or {}
        entry: dict[str, Any] = {
            "name": name,
            "replayed": name == report.get("container"),
            "peak_bytes": after.get("peak_bytes"),
            "peak_since_stage_start": bool(after.get("peak_reset")),
            "usage_at_pod_peak_bytes": at_peak.get("usage_bytes"),
            **_stat(at_peak.get("stat"), version),
        }
        entry.update(_procmem(at_peak.get("processes") or {}, hwm))
        # who ran in the container during the stage (every process any snapshot saw): the
        # snapshot at the peak can miss a worker that was still starting on a busy node
        seen = (report.get("roster") or {}).get(name)
        if seen:
            during = _procmem({"statuses": seen}, hwm)
            entry.update(ranks=during["ranks"], workers=during["workers"],
                         processes=during.get("processes", 0),
                         per_rank_peak_rss_bytes=during.get("per_rank_peak_rss_bytes"))
        containers.append(entry)
    before = report.get("counters_before") or {}
    after_counters = report.get("counters_after") or {}
    first = report.get("first_collective") or {}
    replayed = next((c for c in containers if c["replayed"]), {})
    limit = report.get("limit_bytes")
    return {
        "outcome": report.get("outcome"),
        "exit_status": report.get("exit_status"),
        "elapsed_s": report.get("elapsed_s"),
        "cgroup_version": version,
        "limit_bytes": limit,
        "stop_at_bytes": report.get("stop_at_bytes"),
        "peak_bytes": peak.get("kernel_bytes"),
        "peak_since_stage_start": bool(peak.get("kernel_reset")),
        "peak_working_set_bytes": peak.get("working_set_bytes"),
        "peak_at_s": peak.get("at_s"),
        "headroom_left_bytes": (limit - peak["working_set_bytes"])
        if limit is not None and peak.get("working_set_bytes") is not None else None,
        **_stat(snapshot.get("stat"), version),
        "containers": containers,
        "per_rank_peak_rss_bytes": replayed.get("per_rank_peak_rss_bytes"),
        "per_rank_anon_bytes": replayed.get("per_rank_anon_bytes"),
        "ranks": replayed.get("ranks", 0),
        "workers": replayed.get("workers", 0),
        "first_collective_s": first.get("at_s"),
        "first_collective_line": first.get("line"),
        "guard_bytes": report.get("guard_bytes"),
        "guard_hit": bool(report.get("guard_hit")),
        "oom_kills": int(after_counters.get("oom_kill", 0)) - int(before.get("oom_kill", 0)),
        "failcnt": int(after_counters.get("failcnt", 0)) - int(before.get("failcnt", 0)),
        "output_tail": list(report.get("output_tail") or [])[-15:],
    }


def judge(stage: ReplayStage, report: Mapping[str, Any]) -> StageResult:
    """Did this stage fit? Only a stage that ran to its end (or for its whole duration) below
    the stop line, with no kernel OOM kill, passes."""
    if report.get("error"):
        return StageResult(stage, False, f"stage {stage.index} could not run: {report['error']}",
                           dict(report), {"outcome": "error"}, ran=False)
    s = summarize(report)
    peak = human(s["peak_working_set_bytes"] or 0)
    limit = human(s["limit_bytes"] or 0)
    if s["oom_kills"] > 0:
        reason = (f"stage {stage.index} ({stage.label}): the kernel OOM-killed {s['oom_kills']} "
                  "process(es) before the watcher could stop it: raise the headroom")
        return StageResult(stage, False, reason, dict(report), s)
    outcome = s["outcome"]
    if outcome == "stopped-at-headroom":
        guard = " (held at the replay's guard first)" if s["guard_hit"] else ""
        reason = (f"stage {stage.index} ({stage.label}) stopped: the pod's working set reached "
                  f"{peak}, within the headroom of its {limit} limit (stop line "
                  f"{human(s['stop_at_bytes'] or 0)}){guard}; it would have OOM-killed again")
        return StageResult(stage, False, reason, dict(report), s)
    if outcome == "failed" and s["exit_status"] in (NOT_FOUND, CANNOT_EXECUTE):
        # the shell's own statuses: the job's command never started
        last = s["output_tail"][-1] if s["output_tail"] else ""
        what = "not found" if s["exit_status"] == NOT_FOUND else "not executable"
        said = f": {last[:160]}" if last else ""
        reason = (f"stage {stage.index} ({stage.label}) could not run: the job's command was "
                  f"{what} on the node (exit {s['exit_status']}){said}")
        return StageResult(stage, False, reason, dict(report), s, ran=False)
    if outcome == "failed":
        last = s["output_tail"][-1] if s["output_tail"] else ""
        reason = (f"stage {stage.index} ({stage.label}): the job exited {s['exit_status']} on "
                  f"its own (peak {peak} of {limit}){': ' + last[:160] if last else ''}")
        return StageResult(stage, False, reason, dict(report), s)
    if outcome not in PASSING:
        return StageResult(stage, False, f"stage {stage.index}: outcome {outcome!r}",
                           dict(report), s)
    held = "ran to completion" if outcome == "completed" else f"held {s['elapsed_s']:.0f} s"
    reason = f"stage {stage.index} ({stage.label}) {held}: peak {peak} of {limit}"
    return StageResult(stage, True, reason, dict(report), s)
