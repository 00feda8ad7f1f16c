"""Progress: a live bar on a terminal (done / failing / unreachable, rate, ETA), plain lines
when the output is not a terminal (cron mail, CI logs)."""

from __future__ import annotations

import io
import os

from rich.console import Console

from runbook.sweep.progress import BarProgress, LineProgress, progress_for
from runbook.sweep.results import HostResult, Status, SweepResult
from runbook.verdict import Verdict

RESULTS = [
    HostResult("h1", "ssh://h1", Status.HEALTHY, 0.5, verdict=Verdict("h1", "healthy", "high")),
    HostResult(
        "h2", "ssh://h2", Status.FINDING, 0.7, verdict=Verdict("h2", "gpu-hardware", "high")
    ),
    HostResult("h3", "ssh://h3", Status.UNREACHABLE, 3.0, error="cannot connect: No route"),
]
DONE = SweepResult("rb", "inv", RESULTS, "t0", "t1", 4.0)


def test_a_count_of_one_host_is_singular() -> None:
    out = io.StringIO()
    progress = progress_for("sweep rb", out)
    progress.started(1)
    progress.host_done(RESULTS[0])
    progress.finished(SweepResult("rb", "inv", RESULTS[:1], "t0", "t1", 1.0))
    lines = out.getvalue().splitlines()
    assert lines[0] == "sweep rb: 1 host"
    assert lines[-1].startswith("done: 1 host in 1.0s"), lines


def test_plain_lines_when_not_a_terminal() -> None:
    out = io.StringIO()
    progress = progress_for("sweep rb", out)
    assert isinstance(progress, LineProgress)
    progress.started(3)
    for result in RESULTS:
        progress.host_done(result)
    progress.finished(DONE)
    lines = out.getvalue().splitlines()
    assert lines[0] == "sweep rb: 3 hosts"
    assert lines[1].startswith("[1/3] h1 healthy healthy")
    assert lines[2].startswith("[2/3] h2 finding gpu-hardware")
    assert lines[3].startswith("[3/3] h3 unreachable cannot connect: No route")
    assert lines[4].startswith("done: 3 hosts in 4.0s")
    assert lines[4].endswith("1 ok, 1 failing, 1 unreachable")


def test_a_live_bar_with_counts_rate_and_eta_on_a_terminal() -> None:
    leader, follower = os.openpty()
    with os.fdopen(follower, "w") as tty:
        assert isinstance(progress_for("sweep rb", tty), BarProgress)
    os.close(leader)
    screen = io.StringIO()
    bar = BarProgress(
        Console(file=screen, force_terminal=True, width=160, color_system=None), "sweep rb"
    )
    bar.started(4)
    for result in RESULTS:
        bar.host_done(result)
    bar.progress.refresh()
    text = screen.getvalue()
    bar.finished(DONE)
    assert "3/4" in text and "1 ok" in text and "1 failing" in text
    assert "1 unreachable" in text and "hosts/s" in text and "ETA" in text
    # hosts that are not healthy are named above the bar as they finish
    assert "h2: finding — gpu-hardware" in text and "h3: unreachable" in text
