"""`runbook sweep-merge DIR...`: shard reports (each DIR holding a sweep.json) joined into one.

The shards must be of one runbook. A host in two reports (an overlap: two runs of one shard, or
reports of different inventories) keeps its latest result. The shards seen are listed; when
they name a shard count N, those of 1..N that are absent are `missing_shards` (exit 3 unless
there are findings: the fleet was not fully swept). Duration: from the first shard's start to
the last one's end; last success (runbook.prom): the oldest shard's finish, since the fleet is
only as fresh as its stalest shard.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from runbook import jsontext
from runbook.errors import UsageError
from runbook.sweep.results import HostResult, SweepResult
from runbook.sweep.shard import parse_shard
from runbook.verdict import VerdictError


def read_report(path: Path) -> SweepResult:
    file = path / "sweep.json" if path.is_dir() else path
    try:
        data = jsontext.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{file}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{file}: not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("kind") != "runbook-sweep":
        raise UsageError(f"{file}: not a sweep report (sweep.json of runbook sweep)")
    try:
        return SweepResult.from_dict(data)
    except (KeyError, TypeError, ValueError, VerdictError) as exc:
        raise UsageError(f"{file}: malformed sweep report: {exc}") from None
    except RecursionError:
        raise UsageError(f"{file}: malformed sweep report: nested too deeply") from None


def merge(reports: Sequence[SweepResult]) -> SweepResult:
    if not reports:
        raise UsageError("sweep-merge needs at least one report")
    runbooks = sorted({r.runbook for r in reports})
    if len(runbooks) > 1:
        raise UsageError(f"cannot merge sweeps of different runbooks: {', '.join(runbooks)}")
    ordered = sorted(reports, key=lambda r: r.finished_ts)
    hosts: dict[str, HostResult] = {}
    for report in ordered:  # later finishes overwrite earlier ones
        for host in report.hosts:
            hosts[host.host] = host
    shards = sorted({r.shard for r in reports if r.shard}, key=_shard_order)
    counts = {parse_shard(s)[1] for s in shards}
    missing: list[str] = []
    if len(counts) > 1:
        raise UsageError(f"cannot merge shards of different counts: {', '.join(shards)}")
    if counts:
        (n,) = counts
        missing = [f"{k}/{n}" for k in range(1, n + 1) if f"{k}/{n}" not in shards]
    sources = sorted({r.source for r in reports})
    starts = sorted(r.started_at for r in reports if r.started_at)
    ends = sorted(r.finished_at for r in reports if r.finished_at)
    span = max(r.finished_ts for r in reports) - min(r.finished_ts - r.duration_s for r in reports)
    return SweepResult(
        runbook=runbooks[0],
        source=", ".join(sources),
        hosts=sorted(hosts.values(), key=lambda h: h.host),
        started_at=starts[0] if starts else "",
        finished_at=ends[-1] if ends else "",
        duration_s=max(span, 0.0),
        mode="merge",
        forks=max(r.forks for r in reports),
        timeout_per_host_s=max(r.timeout_per_host_s for r in reports),
        shards=shards,
        missing_shards=missing,
        finished_ts=min(r.finished_ts for r in reports),
    )


def _shard_order(text: str) -> tuple[int, int]:
    k, n = parse_shard(text)
    return (n, k)
