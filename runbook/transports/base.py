"""What every transport is: one method, `run(probe) -> CommandResult`, plus `close()`.

A transport runs one shell command (already rendered and quoted by templating.py) and returns
what happened as data. A non-zero exit, a timeout or a dropped channel is a result, not an
exception; only a target that cannot be used at all (unreachable, refused key) raises a
TargetError, and that happens when the transport is opened.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from runbook.not_run import own_reason

#: Bound on what one command may return per stream; the rest is dropped and `truncated` set.
MAX_CAPTURE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Probe:
    """One command to run: `name` is its bundle file name (e.g. `dmesg.txt`)."""

    name: str
    command: str
    timeout: float = 30.0
    #: given to the command as the first line of its standard input (every transport does so;
    #: never in the command line, which `ps` shows every user of the node): a multi-file
    #: probe's frame token (transports/framing.py). Empty: the input is left as it was.
    secret: str = field(default="", repr=False, compare=False)


@dataclass(frozen=True)
class CommandResult:
    """What one probe produced. `exited` is None when no exit status came back."""

    name: str
    command: str
    stdout: str = ""
    stderr: str = ""
    exited: int | None = None
    duration: float = 0.0
    timed_out: bool = False
    truncated: bool = False
    #: a transport-level failure (channel dropped, could not start); None when it ran
    error: str | None = None
    #: False when the evidence is absent (a replayed bundle lacks the file)
    collected: bool = True
    extra: dict[str, str] = field(default_factory=dict, compare=False)
    #: a replayed file too large to hold in memory: `stdout` is empty and `lines()` streams it
    source_path: str | None = field(default=None, compare=False)
    #: where in `source_path` the evidence starts (a bound cut its head); a line's beginning
    source_offset: int = field(default=0, compare=False)

    def open_source(self) -> io.BufferedReader:
        """`source_path` opened at `source_offset` (never through a link: the bundle reader
        located it inside its bundle)."""
        assert self.source_path is not None
        flags = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        handle: io.BufferedReader = io.BufferedReader(
            io.FileIO(os.open(self.source_path, flags), "rb")
        )
        if self.source_offset:
            handle.seek(self.source_offset)
            while True:  # the cut line's rest is not a whole line
                rest = handle.readline(1 << 20)
                if not rest or rest.endswith(b"\n"):
                    break
        return handle

    def lines(self) -> Iterator[str]:
        """The output line by line (without line ends), streamed from `source_path` when the
        evidence is file-backed, so a 1 GiB log is never held whole."""
        if self.source_path is not None and not self.stdout:
            with io.TextIOWrapper(
                self.open_source(), encoding="utf-8", errors="replace", newline=""
            ) as text:
                for line in text:
                    yield line.rstrip("\r\n")
            return
        for line in io.StringIO(self.stdout):
            yield line.rstrip("\r\n")

    def text(self) -> str:
        """The whole output as text (read from `source_path` when file-backed)."""
        if self.source_path is not None and not self.stdout:
            with self.open_source() as raw:
                return raw.read().decode("utf-8", errors="replace")
        return self.stdout

    @property
    def ok(self) -> bool:
        return self.collected and self.error is None and not self.timed_out and self.exited == 0

    @property
    def not_found(self) -> bool:
        """The command does not exist on the target (shell exit 127): evidence of nothing."""
        return self.exited == 127

    @property
    def failure(self) -> str | None:
        """Why this is not evidence, or None. A non-zero exit alone is evidence, not failure."""
        if not self.collected:
            return "not collected"
        if self.timed_out:
            return f"timed out after {self.duration:.1f}s"
        if self.error:
            return self.error
        if self.exited == 127:
            # the reason a probe gave for not running, else the shell's own
            said = own_reason(self.stderr)
            return f"not run: {said}" if said else "command not found"
        if self.exited == 126 or (
            self.exited not in (0, None) and "Permission denied" in self.stderr
        ):
            return "permission denied"
        return None

    def tail(self, lines: int = 5) -> str:
        return "\n".join((self.stdout or self.stderr).splitlines()[-lines:])

    def __repr__(self) -> str:
        state = "timeout" if self.timed_out else self.error or f"exit {self.exited}"
        return f"<CommandResult {self.name} {state} {len(self.stdout)}B>"


@runtime_checkable
class Transport(Protocol):
    """Runs probes on one target; safe to call `run` from several threads at once."""

    #: a short description for reports, e.g. `ssh://root@10.0.0.2:22`
    description: str

    def run(self, probe: Probe) -> CommandResult: ...

    def close(self) -> None: ...


#: `deliver(i, result)`: probe i of a batch ended (or failed, or timed out) with `result`
Deliver = Callable[[int, CommandResult], None]
#: `spill(i)`: probes i and after were not run by this batch; the caller runs them elsewhere
Spill = Callable[[int], None]


@runtime_checkable
class BatchTransport(Transport, Protocol):
    """A transport that can also run several probes one after another in one remote shell
    (transports/batch.py): one channel instead of one a probe.

    Every probe of `probes` is accounted for exactly once: delivered (`deliver(i, result)`, in
    order, as each ends), or handed back in one `spill(i)` for probes[i:], which this call
    then does not report. A batch hands its tail back when a probe takes long enough that those
    after it should not wait for it, or when it cannot go on (the script ended early). `within`
    bounds the whole batch: no probe runs past that many seconds from the call."""

    def run_batch(
        self,
        probes: Sequence[Probe],
        deliver: Deliver,
        spill: Spill,
        *,
        within: float | None = None,
    ) -> None: ...


def fail_all(probes: Sequence[Probe], deliver: Deliver, error: str, duration: float = 0.0) -> None:
    """Every probe of a batch delivered as failed with `error` (nothing of it ran)."""
    for index, probe in enumerate(probes):
        deliver(index, CommandResult(probe.name, probe.command, error=error, duration=duration))


def batch_of(wrapper: object, inner: Transport) -> None:
    """Gives `wrapper` a `run_batch` (its `_run_batch`) when the transport it wraps has one, so
    a wrapper batches exactly when what it wraps does (base.BatchTransport is a runtime check
    for the attribute)."""
    if isinstance(inner, BatchTransport):
        wrapper.run_batch = wrapper._run_batch  # type: ignore[attr-defined]
        if hasattr(inner, "batch_size"):  # the probes it takes in one batch (executor)
            wrapper.batch_size = inner.batch_size  # type: ignore[attr-defined]
        if hasattr(inner, "expect_more"):  # told whether another burst may follow (executor)
            wrapper.expect_more = inner.expect_more  # type: ignore[attr-defined]


def decode(data: bytes | bytearray) -> str:
    """Evidence is mostly UTF-8 but kernel logs carry anything; never fail to decode."""
    return data.decode("utf-8", errors="replace")
