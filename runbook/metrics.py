"""The approval queue in the Prometheus text exposition format, for node_exporter's textfile
collector, and the one writer of files into that collector's directory.

    runbook_approvals_pending{kind,severity}                    pending proposals (every queued
                                                                kind × severity, 0s too)
    runbook_approvals_pending_expired{kind}                     of those, past their expiry
    runbook_approvals_oldest_pending_created_timestamp_seconds  unix time the oldest pending one
                                                                was queued (absent: none pending)
    runbook_approvals_next_expiry_timestamp_seconds             the soonest expiry of a pending
                                                                one (in the past: expired,
                                                                nobody decided)
    runbook_approvals_written_timestamp_seconds                 when this file was written

Ages are exported as timestamps, not as seconds counted when the file was written: the file
is rewritten only when a command touches the queue, and a queue nobody touches is exactly the
one to alert on; `time() - …created_timestamp_seconds` in PromQL keeps counting between
writes (the shipped rules record it as `runbook:approvals_oldest_pending_age_seconds`).

Severity is the root cause's weight, not the remedy's: `critical` takes a node out of service
(hardware evidence: gpu-hardware, pcie-error), `warning` is any other named cause, `info` an
inconclusive or unknown one. Rendering is pure; `write_textfile` is the I/O edge.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Protocol

from runbook import atomic
from runbook.remedies import kinds

#: the kinds that can be queued (advice is never queued: it has nothing to approve)
QUEUED_KINDS = kinds.queued_names()
#: the root causes a node may be drained on: a proposal for one is critical
CRITICAL_CAUSES = kinds.drain_root_causes()
SEVERITIES = ("critical", "warning", "info")
#: the file the approval queue's metrics go to in the textfile directory
APPROVALS_FILE = "runbook-approvals.prom"
#: the file a sweep's metrics go to there (the same text as REPORT/runbook.prom)
SWEEP_FILE = "runbook.prom"


class PendingProposal(Protocol):
    """What the metrics read of a proposal (runbook.remedies.store.Proposal)."""

    @property
    def kind(self) -> str: ...
    @property
    def root_cause(self) -> str | None: ...
    @property
    def created_at(self) -> float: ...
    @property
    def expires_at(self) -> float: ...


def severity(root_cause: str | None) -> str:
    if root_cause in CRITICAL_CAUSES:
        return "critical"
    if root_cause in (None, "", "inconclusive", "healthy"):
        return "info"
    return "warning"


def label_value(text: str) -> str:
    """Escaped as the exposition format requires: backslash, double quote, newline."""
    return str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def number(value: float) -> str:
    return repr(float(value)) if value != int(value) else str(int(value))


def render_approvals(pending: Sequence[PendingProposal], *, now: float) -> str:
    """The queue's metrics from its pending proposals, as of `now`."""
    kinds = list(QUEUED_KINDS) + sorted({p.kind for p in pending} - set(QUEUED_KINDS))
    counts = {(k, s): 0 for k in kinds for s in SEVERITIES}
    expired = dict.fromkeys(kinds, 0)
    for p in pending:
        counts[(p.kind, severity(p.root_cause))] += 1
        if p.expires_at < now:
            expired[p.kind] += 1
    lines = [
        "# HELP runbook_approvals_pending Proposals waiting for a human decision, by kind and "
        "severity.",
        "# TYPE runbook_approvals_pending gauge",
        *(
            f'runbook_approvals_pending{{kind="{label_value(k)}",severity="{s}"}} {n}'
            for (k, s), n in counts.items()
        ),
        "# HELP runbook_approvals_pending_expired Pending proposals already past their expiry "
        "(an approval would be refused).",
        "# TYPE runbook_approvals_pending_expired gauge",
        *(
            f'runbook_approvals_pending_expired{{kind="{label_value(k)}"}} {n}'
            for k, n in expired.items()
        ),
    ]
    if pending:
        oldest = min(p.created_at for p in pending)
        soonest = min(p.expires_at for p in pending)
        lines += [
            "# HELP runbook_approvals_oldest_pending_created_timestamp_seconds Unix time the "
            "oldest pending proposal was queued.",
            "# TYPE runbook_approvals_oldest_pending_created_timestamp_seconds gauge",
            f"runbook_approvals_oldest_pending_created_timestamp_seconds "
            f"{number(round(oldest, 3))}",
            "# HELP runbook_approvals_next_expiry_timestamp_seconds Unix time the soonest "
            "pending proposal expires.",
            "# TYPE runbook_approvals_next_expiry_timestamp_seconds gauge",
            f"runbook_approvals_next_expiry_timestamp_seconds {number(round(soonest, 3))}",
        ]
    lines += [
        "# HELP runbook_approvals_written_timestamp_seconds Unix time the approval queue's "
        "metrics were written.",
        "# TYPE runbook_approvals_written_timestamp_seconds gauge",
        f"runbook_approvals_written_timestamp_seconds {number(round(now, 3))}",
    ]
    return "\n".join(lines) + "\n"


_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s+(?P<value>\S+)")


def sample(text: str, name: str) -> float | None:
    """The value of the unlabelled series `name` in an exposition text, or None."""
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match and match.group("name") == name and "{" not in line.split(" ", 1)[0]:
            try:
                return float(match.group("value"))
            except ValueError:
                return None
    return None


def metric_names(text: str) -> set[str]:
    """Every metric name an exposition text declares (its `# TYPE` lines)."""
    return {
        line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")
    }


def read_previous(paths: Iterable[Path], *, limit: int = 1 << 20) -> list[str]:
    """The texts of the metrics files at `paths` that exist and can be read, each opened
    without following a link (a link placed at the name is not ours to read) and read up to
    `limit` bytes. An unreadable one is as good as absent: it only loses what it would have
    carried over."""
    texts = []
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
            with os.fdopen(fd, "rb") as handle:
                texts.append(handle.read(limit).decode("utf-8"))
        except (OSError, UnicodeDecodeError):
            continue
    return texts


def write_textfile(directory: Path, name: str, text: str) -> Path:
    """`directory/name` replaced whole: a temporary in the same directory (named `.name.*.tmp`:
    the collector reads only `*.prom`), fsynced, renamed over it. A scrape reads the old file
    or the new one, never half of one. Readable by the node exporter (0644)."""
    path = directory / name
    atomic.write_text(path, text, suffix=".tmp", mode=0o644)
    return path
