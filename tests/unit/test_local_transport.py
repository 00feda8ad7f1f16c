"""The local transport: results as data, bounded capture, and timeouts that kill the tree."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from runbook.transports import base
from runbook.transports.base import Probe
from runbook.transports.local import LocalTransport


def test_a_nonzero_exit_is_a_result_with_stdout_and_stderr() -> None:
    result = LocalTransport().run(Probe("x.txt", "echo out; echo err >&2; exit 3"))
    assert (result.stdout, result.stderr, result.exited) == ("out\n", "err\n", 3)
    assert not result.ok and result.failure is None  # a non-zero exit is evidence


def test_a_missing_command_is_not_collected_evidence() -> None:
    result = LocalTransport().run(Probe("x.txt", "no-such-tool-here --x"))
    assert result.exited == 127 and result.failure == "command not found"


@pytest.mark.parametrize(
    ("command", "failure"),
    [
        # the runbook's own probe without its input: the reason it gave, not "not found"
        ("echo 'no pod given (--var pod=NAME)' >&2; exit 127",
         "not run: no pod given (--var pod=NAME)"),
        ("echo 'py-spy: not installed' >&2; exit 127", "not run: py-spy: not installed"),
        # a shell's or env's own "not found", also with kubectl's line after it
        ("env no-such-tool-here", "command not found"),
        ("sh -c 'no-such-tool-here' 2>&1 >/dev/null | cat >&2; "
         "echo 'command terminated with exit code 127' >&2; exit 127", "command not found"),
        ("echo 'command terminated with exit code 127' >&2; exit 127", "command not found"),
        ("exit 127", "command not found"),
        # a bundle's note about the read after the command's words (runbook.bundle)
        ("printf 'ncclras: not installed\\nrunbook: command not found\\n' >&2; exit 127",
         "not run: ncclras: not installed"),
    ],
)  # fmt: skip
def test_a_probe_that_did_not_run_says_why_when_it_said_so_itself(
    command: str, failure: str
) -> None:
    result = LocalTransport().run(Probe("x.txt", command))
    assert result.exited == 127 and result.failure == failure, result.stderr


@pytest.mark.live
def test_a_timeout_kills_the_whole_process_tree(tmp_path: Path) -> None:
    marker = tmp_path / "child.pid"
    start = time.monotonic()
    result = LocalTransport().run(
        Probe("x.txt", f"sleep 300 & echo $! > {marker}; wait", timeout=0.5)
    )
    assert result.timed_out and result.exited is None
    assert time.monotonic() - start < 3
    child = int(marker.read_text())
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{child}/stat") as handle:
                if handle.read().split(") ")[1].startswith("Z"):
                    break
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        os.kill(child, 9)
        pytest.fail("the background child survived the timeout")


def test_output_beyond_the_bound_is_dropped_and_flagged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "MAX_CAPTURE_BYTES", 1000)
    result = LocalTransport().run(Probe("x.txt", "head -c 5000000 /dev/zero | tr '\\0' a"))
    assert result.truncated and len(result.stdout) == 1000 and result.exited == 0


def test_never_ending_output_is_bounded_and_stopped_by_the_timeout() -> None:
    result = LocalTransport().run(Probe("x.txt", "yes", timeout=1.0))
    assert result.timed_out and result.truncated
    assert len(result.stdout) == base.MAX_CAPTURE_BYTES
