"""`runbook analyze-dir DIR`: every evidence bundle under DIR analysed, as a sweep's result.

This is the other half of a sweep run by Ansible's own engine (AWX / Automation Controller
forks, slices and schedules; playbooks/collect.yml writes a bundle on each host and fetches
it): the bundles are replayed through the same executor and runbook as a live sweep, and the
same reports are written. Layouts found, one host each, named by the file or directory:

    DIR/HOST.tar.gz | DIR/HOST.tgz     what playbooks/collect.yml fetches
    DIR/HOST/bundle.yaml               a bundle directory (`runbook collect --output DIR/HOST`)
    DIR/HOST/bundle/bundle.yaml        a run directory (`sweep --keep-bundles` keeps these)

An unreadable bundle is that host's `error`, never the end of the analysis.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runbook.bundle import replay_defaults
from runbook.errors import BundleError, UsageError
from runbook.executor import execute
from runbook.spec.models import Runbook
from runbook.sweep.host import warm_templates
from runbook.sweep.pool import Slot, run_pool
from runbook.sweep.results import (
    HostResult,
    HostStatus,
    NullSweepObserver,
    SweepObserver,
    SweepResult,
    status_of,
)
from runbook.sweep.run import crashed_result
from runbook.timestamps import now_iso

#: the names a bundle archive may end in
_ARCHIVES = (".tar.gz", ".tgz")


def find_bundles(directory: Path) -> list[tuple[str, Path]]:
    """(host, bundle path) for every bundle directly under `directory`, sorted by host."""
    if not directory.is_dir():
        raise UsageError(f"{directory}: not a directory")
    if (directory / "bundle.yaml").is_file():
        return [(directory.name, directory)]
    found: dict[str, Path] = {}
    for path in sorted(directory.iterdir()):
        if path.is_file() and path.name.endswith(_ARCHIVES):
            host = path.name[: -len(next(s for s in _ARCHIVES if path.name.endswith(s)))]
            found.setdefault(host, path)
        elif path.is_dir() and (path / "bundle.yaml").is_file():
            found.setdefault(path.name, path)
        elif path.is_dir() and (path / "bundle" / "bundle.yaml").is_file():
            found.setdefault(path.name, path / "bundle")
    if not found:
        raise UsageError(f"{directory}: no evidence bundles (HOST.tar.gz or HOST/bundle.yaml)")
    return sorted(found.items())


def analyze_bundle(
    host: str, path: Path, runbook: Runbook, variables: Mapping[str, Any], slot: Slot
) -> HostResult:
    from runbook.transports.replay import ReplayTransport

    target = f"replay://{path}"
    try:
        transport = ReplayTransport(path)
    except BundleError as exc:
        return HostResult(host, target, HostStatus.ERROR, slot.elapsed(), error=exc.one_line())
    try:
        # as `runbook analyze`: the bundle's collector variables and context
        own, context = replay_defaults(transport.bundle.meta, variables)
        result = execute(
            runbook, transport, variables=own, context=context, node=transport.bundle.meta.node
        )
    finally:
        transport.close()
    return HostResult(
        host, target, status_of(result.verdict), slot.elapsed(), verdict=result.verdict
    )


def analyze_dir(
    directory: Path,
    runbook: Runbook,
    *,
    runbook_ref: str,
    variables: Mapping[str, Any] | None = None,
    forks: int = 4,
    observer: SweepObserver | None = None,
    timeout_per_bundle: float = 600.0,
) -> SweepResult:
    bundles = find_bundles(directory)
    observer = observer or NullSweepObserver()
    started_at, t0 = now_iso(), time.monotonic()
    warm_templates(runbook)
    observer.started(len(bundles))
    hosts = run_pool(
        bundles,
        lambda item, slot: analyze_bundle(item[0], item[1], runbook, variables or {}, slot),
        overdue=lambda item, slot: HostResult(
            item[0],
            f"replay://{item[1]}",
            HostStatus.TIMEOUT,
            slot.elapsed(),
            error=f"analysis did not finish within {timeout_per_bundle:g}s",
        ),
        crashed=lambda item, slot, exc: crashed_result(
            item[0], f"replay://{item[1]}", (), slot, exc
        ),
        forks=forks,
        deadline_s=timeout_per_bundle,
        on_result=observer.host_done,
    )
    sweep = SweepResult(
        runbook=runbook_ref,
        source=str(directory),
        hosts=hosts,
        started_at=started_at,
        finished_at=now_iso(),
        duration_s=time.monotonic() - t0,
        mode="analyze-dir",
        forks=forks,
        timeout_per_host_s=timeout_per_bundle,
        finished_ts=time.time(),
    )
    observer.finished(sweep)
    return sweep
