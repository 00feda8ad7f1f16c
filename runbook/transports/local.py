"""`--target local`: probes as subprocesses of this machine, each in its own process group so a
timeout kills the whole command tree, not just the shell."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import threading
import time

from runbook.transports.base import CommandResult, Probe, decode
from runbook.transports.capture import BoundedBuffer

_KILL_GRACE_S = 0.5


def _group_alive(pgid: int) -> bool:
    """Whether a live (non-zombie) process is in the group. `killpg(pgid, 0)` is not enough:
    orphans reparented to an init that does not reap (containers) stay zombies forever."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        # fields after the parenthesised comm: state ppid pgrp ...
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """TERM, a short grace, then KILL for the leader's whole process group; a gone group is
    fine. The leader is reaped while we wait, or its zombie would keep the group alive."""
    pgid = proc.pid
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + _KILL_GRACE_S
        while time.monotonic() < deadline:
            proc.poll()
            if not _group_alive(pgid):
                return
            time.sleep(0.01)


class Running:
    """The process groups of a transport's probes in flight, so that closing the transport (a
    run stopped by ^C or SIGTERM) stops them at once instead of waiting out their timeouts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._procs: set[subprocess.Popen[bytes]] = set()
        self._closed = False

    def add(self, proc: subprocess.Popen[bytes]) -> bool:
        """Track `proc`; False when the transport is already closed (stop it yourself)."""
        with self._lock:
            if self._closed:
                return False
            self._procs.add(proc)
            return True

    def discard(self, proc: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._procs.discard(proc)

    def stop_all(self) -> None:
        """TERM to every group, one shared grace, then KILL to what is left."""
        with self._lock:
            self._closed = True
            procs = list(self._procs)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for proc in procs:
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + _KILL_GRACE_S
            while procs and time.monotonic() < deadline:
                procs = [p for p in procs if p.poll() is None or _group_alive(p.pid)]
                time.sleep(0.01)
            if not procs:
                return


def run_argv(
    argv: list[str],
    name: str,
    command: str,
    timeout: float,
    running: Running | None = None,
) -> CommandResult:
    """Run argv with bounded capture and a deadline that kills its process group; `running`
    tracks it while it runs (see Running)."""
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        return CommandResult(name, command, error=f"could not start: {exc.strerror}", exited=None)
    if running is not None and not running.add(proc):
        kill_group(proc)
    try:
        return _capture(proc, name, command, timeout, start)
    except BaseException:  # ^C while this thread waits on it: the command must not outlive us
        kill_group(proc)
        raise
    finally:
        if running is not None:
            running.discard(proc)


def _capture(
    proc: subprocess.Popen[bytes], name: str, command: str, timeout: float, start: float
) -> CommandResult:
    out, err = BoundedBuffer(), BoundedBuffer()
    timed_out = False
    assert proc.stdout is not None and proc.stderr is not None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ, out)
        selector.register(proc.stderr, selectors.EVENT_READ, err)
        while selector.get_map():
            remaining = timeout - (time.monotonic() - start)
            if remaining <= 0:
                timed_out = True
                break
            for key, _ in selector.select(remaining):
                chunk = os.read(key.fd, 65536)
                if chunk:
                    key.data.feed(chunk)
                else:
                    selector.unregister(key.fileobj)
    if timed_out:
        kill_group(proc)
    else:
        # outputs closed; the group may still hold children that closed them on purpose
        try:
            proc.wait(timeout=max(0.0, timeout - (time.monotonic() - start)))
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc)
    proc.stdout.close()
    proc.stderr.close()
    code = proc.wait()
    return CommandResult(
        name=name,
        command=command,
        stdout=decode(out.getvalue()),
        stderr=decode(err.getvalue()),
        exited=None if timed_out else code,
        duration=time.monotonic() - start,
        timed_out=timed_out,
        truncated=out.truncated or err.truncated,
    )


class LocalTransport:
    """Runs each probe with `/bin/sh -c` on this machine."""

    description = "local"

    def __init__(self, shell: str = "/bin/sh") -> None:
        self.shell = shell

        self._running = Running()

    def run(self, probe: Probe) -> CommandResult:
        argv = [self.shell, "-c", probe.command]
        return run_argv(argv, probe.name, probe.command, probe.timeout, self._running)

    def close(self) -> None:
        self._running.stop_all()
