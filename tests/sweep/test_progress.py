"""Progress: a live bar on a terminal (done / findings / inconclusive / not swept, rate, ETA),
plain lines when the output is not a terminal (cron mail, CI logs); interrupted, the bar is
erased before the message."""

from __future__ import annotations

import io
import os

from rich.console import Console

from runbook.render.sweep_progress import BarProgress, LineProgress, progress_for
from runbook.sweep.results import HostResult, HostStatus, SweepResult
from runbook.verdict import Verdict

RESULTS = [
    HostResult("h1", "ssh://h1", HostStatus.HEALTHY, 0.5, verdict=Verdict("h1", "healthy", "high")),
    HostResult(
        "h2", "ssh://h2", HostStatus.FINDING, 0.7, verdict=Verdict("h2", "gpu-hardware", "high")
    ),
    HostResult("h3", "ssh://h3", HostStatus.UNREACHABLE, 3.0, error="cannot connect: No route"),
    HostResult(
        "h4", "ssh://h4", HostStatus.INCONCLUSIVE, 0.9, verdict=Verdict("h4", "inconclusive", "low")
    ),
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
    progress.started(4)
    for result in RESULTS:
        progress.host_done(result)
    progress.finished(DONE)
    lines = out.getvalue().splitlines()
    assert lines[0] == "sweep rb: 4 hosts"
    assert lines[1].startswith("[1/4] h1 healthy healthy")
    assert lines[2].startswith("[2/4] h2 finding gpu-hardware")
    assert lines[3].startswith("[3/4] h3 unreachable cannot connect: No route")
    assert lines[5].startswith("done: 4 hosts in 4.0s")
    # an inconclusive host is counted apart from the findings, and counts agree in number
    assert lines[5].endswith("1 ok, 1 finding, 1 inconclusive, 1 not swept"), lines[5]


def test_a_live_bar_with_counts_rate_and_eta_on_a_terminal() -> None:
    leader, follower = os.openpty()
    with os.fdopen(follower, "w") as tty:
        assert isinstance(progress_for("sweep rb", tty), BarProgress)
    os.close(leader)
    screen = io.StringIO()
    bar = BarProgress(
        Console(file=screen, force_terminal=True, width=160, color_system=None), "sweep rb"
    )
    bar.started(5)
    for result in RESULTS:
        bar.host_done(result)
    bar.progress.refresh()
    text = screen.getvalue()
    bar.finished(DONE)
    assert "4/5" in text and "1 ok" in text and "1 finding " in text
    assert "1 inconclusive" in text and "1 not swept" in text
    assert "hosts/s" in text and "ETA" in text
    # hosts that are not healthy are named above the bar as they finish
    assert "h2: finding — gpu-hardware" in text and "h3: unreachable" in text


def test_an_interrupted_bar_is_erased_before_the_message() -> None:
    screen = io.StringIO()
    bar = BarProgress(
        Console(file=screen, force_terminal=True, width=160, color_system=None), "sweep rb"
    )
    bar.started(4)
    bar.host_done(RESULTS[0])
    bar.progress.refresh()
    drawn = screen.getvalue()
    assert "sweep rb" in drawn and "1/4" in drawn
    bar.aborted()
    assert not bar.progress.live.is_started
    # rich erases a transient display on stop: the bar's line is cleared ("\x1b[2K", erase
    # line) after its last drawing, so the interrupt's message starts on an empty line
    tail = screen.getvalue()[len(drawn):]
    assert "\x1b[2K" in tail, repr(tail)
    assert "1/4" not in tail.rsplit("\x1b[2K", 1)[-1]
