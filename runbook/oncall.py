"""The approval queue, published where on-call looks: its metrics file in node_exporter's
textfile directory (runbook.metrics) and its notices to a webhook (runbook.notify).

`publish` runs when a command that may have changed the queue lets go of it (the approval
desk closing: a run, a job run, a resume or a sweep that queued proposals; an approval, a
denial, a recovery, a verification; `runbook approvals publish` from a timer). It reads the
queue as it now is, so the file and the notices follow the store whichever command changed
it, and a notice missed once (webhook down) goes out at the next command.

Notices (runbook.notify, to every place the config names): `queued` once per pending
proposal; `expiring` once, when a pending proposal expires within the window (2 h by default);
`resolved` once where `queued` went, when the proposal is decided (runbook.notify.decided
sends it at once; here is the catch-up) or expires undecided (a proposal that expired before
it was announced is announced as expired instead). Each is recorded in the store when sent
and never sent again.

Publishing never fails the command that triggered it: a problem is one warning line on stderr
and the command's exit code is what it would have been. After one notice gives up, the rest
wait for the next command (a dead webhook costs one deadline, not one per proposal).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from runbook import metrics, notify
from runbook.config import Channel, Config
from runbook.errors import RunbookError
from runbook.redact import redact

if TYPE_CHECKING:
    from runbook.remedies.store import QueuedProposal, Store


def _stderr(line: str) -> None:
    print(f"runbook: warning: {redact(line)}", file=sys.stderr, flush=True)


def due_notices(
    pending: Sequence[QueuedProposal], sent: Iterable[tuple[str, str]], *, now: float, window: float
) -> list[tuple[QueuedProposal, str]]:
    """(proposal, notice) the one webhook is owed for the pending proposals, oldest first. Pure."""
    webhook = Channel("webhook", "json", "http://webhook")
    owed = notify.due(webhook, pending, (), sent, now=now, window=window)
    return [(p, event) for p, event in owed]  # type: ignore[misc]


@dataclass(frozen=True)
class Published:
    pending: int = 0
    #: the metrics file written, if any
    metrics_file: Path | None = None
    notices_sent: int = 0


def publish(
    config: Config,
    store: Store,
    *,
    warn: Callable[[str], None] = _stderr,
    now: float | None = None,
) -> Published:
    """Write the queue's metrics file and send the notices due (see the module docstring).
    Never raises: whatever goes wrong here (a store locked past its timeout included) is one
    warning line, and the command that changed the queue has done its work already."""
    if config.textfile_dir is None and not config.notify.enabled:
        return Published()
    try:
        return _publish(config, store, warn, time.time() if now is None else now)
    except Exception as exc:
        why = exc.one_line() if isinstance(exc, RunbookError) else f"{type(exc).__name__}: {exc}"
        warn(f"approval queue not published: {why}")
        return Published()


def _publish(
    config: Config, store: Store, warn: Callable[[str], None], moment: float
) -> Published:
    pending = store.list(states=("pending",))
    written = None
    if config.textfile_dir is not None:
        written = write_queue_metrics(config.textfile_dir, pending, moment, warn)
    sent = 0
    if config.notify.enabled:
        sent = notify.send_due(config, store, pending, moment, warn)
    return Published(len(pending), written, sent)


def write_queue_metrics(
    directory: Path, pending: Sequence[QueuedProposal], now: float, warn: Callable[[str], None]
) -> Path | None:
    text = metrics.render_approvals(pending, now=now)
    return write_metrics(directory, metrics.APPROVALS_FILE, text, warn)


def write_metrics(
    directory: Path, name: str, text: str, warn: Callable[[str], None] = _stderr
) -> Path | None:
    """`text` into the textfile directory, atomically; a failure is a warning."""
    try:
        return metrics.write_textfile(directory, name, text)
    except (OSError, RunbookError) as exc:
        why = exc.one_line() if isinstance(exc, RunbookError) else (exc.strerror or str(exc))
        warn(f"metrics not written to {directory}: {why}")
        return None
