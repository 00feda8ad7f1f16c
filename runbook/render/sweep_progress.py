"""Progress of a sweep: a live bar on a terminal (hosts done / with findings / inconclusive /
not swept, rate, ETA), one plain line per host otherwise (cron mail, CI logs, `kubectl logs`).
Both on stderr, so `--format json` keeps stdout for the result. Interrupted, the bar is erased
before the one-line message, not left half-drawn above it."""

from __future__ import annotations

import sys
import time
from typing import IO, TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from runbook.output import PrintableConsole, count
from runbook.printable import printable
from runbook.sweep.results import NOT_SWEPT, HostResult, HostStatus, SweepResult

if TYPE_CHECKING:
    from runbook.sweep.results import NullSweepObserver


class _Tally:
    def __init__(self) -> None:
        self.done = self.findings = self.inconclusive = self.unreachable = 0
        self.started = time.monotonic()

    def add(self, result: HostResult) -> None:
        self.done += 1
        if result.status is HostStatus.FINDING:
            self.findings += 1
        elif result.status is HostStatus.INCONCLUSIVE:
            self.inconclusive += 1
        elif result.status in NOT_SWEPT:
            self.unreachable += 1

    @property
    def ok(self) -> int:
        return self.done - self.findings - self.inconclusive - self.unreachable

    def summary(self) -> str:
        """`5 ok, 2 findings, 1 inconclusive, 0 not swept`: counts in number."""
        return (
            f"{self.ok} ok, {count(self.findings, 'finding')}, {self.inconclusive} inconclusive, "
            f"{self.unreachable} not swept"
        )

    def rate(self) -> float:
        elapsed = time.monotonic() - self.started
        return self.done / elapsed if elapsed > 0 else 0.0


class _RateColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        elapsed = task.elapsed or 0.0
        rate = task.completed / elapsed if elapsed > 0 else 0.0
        return Text(f"{rate:.1f} hosts/s", style="progress.data.speed")


class _TallyColumn(ProgressColumn):
    def __init__(self, tally: _Tally) -> None:
        super().__init__()
        self.tally = tally

    def render(self, task: Task) -> Text:
        t = self.tally
        text = Text()
        text.append(f"{t.ok} ok", style="green")
        text.append("  ")
        text.append(count(t.findings, "finding"), style="bold red" if t.findings else "dim")
        text.append("  ")
        text.append(f"{t.inconclusive} inconclusive", style="magenta" if t.inconclusive else "dim")
        text.append("  ")
        text.append(f"{t.unreachable} not swept", style="yellow" if t.unreachable else "dim")
        return text


class BarProgress:
    """rich's live progress bar (a terminal)."""

    def __init__(self, console: Console, title: str) -> None:
        self.tally = _Tally()
        self.title = printable(title)
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            _TallyColumn(self.tally),
            _RateColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self._task: Any = None

    def started(self, total: int) -> None:
        self.progress.start()
        self._task = self.progress.add_task(self.title, total=total)

    def host_done(self, result: HostResult) -> None:
        self.tally.add(result)
        self.progress.advance(self._task)
        if result.status is not HostStatus.HEALTHY:
            what = result.root_cause if result.verdict is not None else result.error
            self.progress.console.print(
                f"  {result.host}: {result.status.value}"
                + (f" — {' '.join(str(what).split())[:160]}" if what else ""),
                highlight=False,
                markup=False,
            )

    def finished(self, result: SweepResult) -> None:
        self.progress.stop()

    def aborted(self) -> None:
        # erased, not stopped in place: the interrupt's one line follows on a clean line
        self.progress.live.transient = True
        self.progress.stop()


class LineProgress:
    """One line per host and a summary line (not a terminal)."""

    def __init__(self, stream: IO[str], title: str) -> None:
        self.stream = stream
        self.title = title
        self.tally = _Tally()
        self.total = 0

    def _write(self, line: str) -> None:
        self.stream.write(line + "\n")
        self.stream.flush()

    def started(self, total: int) -> None:
        self.total = total
        self._write(f"{self.title}: {count(total, 'host')}")

    def host_done(self, result: HostResult) -> None:
        self.tally.add(result)
        what = result.root_cause if result.verdict is not None else result.error
        detail = f" {' '.join(str(what).split())[:200]}" if what else ""
        self._write(
            f"[{self.tally.done}/{self.total}] {result.host} {result.status.value}{detail} "
            f"({result.duration_s:.1f}s)"
        )

    def finished(self, result: SweepResult) -> None:
        t = self.tally
        self._write(
            f"done: {count(t.done, 'host')} in {result.duration_s:.1f}s ({t.rate():.1f} hosts/s): "
            + t.summary()
        )

    def aborted(self) -> None:
        pass  # every line written is whole


def progress_for(
    title: str, stream: IO[str] | None = None
) -> BarProgress | LineProgress | NullSweepObserver:
    """The bar on a terminal, lines otherwise, nothing with -q (the result is printed when
    the sweep ends)."""
    from runbook.output import quiet
    from runbook.sweep.results import NullSweepObserver

    if quiet():
        return NullSweepObserver()
    stream = stream or sys.stderr
    if stream.isatty():
        return BarProgress(PrintableConsole(file=stream, highlight=False), title)
    return LineProgress(stream, title)
