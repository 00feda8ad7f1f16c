"""`--target local`: probes as subprocesses of this machine, each in its own process group so a
timeout kills the whole command tree, not just the shell.

A probe never outlives the command that started it, even one killed with SIGKILL (which
runs no handler): the first probe starts a small reaper process in a session of its own
(`_Reaper`), told over a pipe the process group of each probe as it starts and ends. When the
pipe closes, because the command exited or was killed, the reaper kills every group still
running and exits. PR_SET_PDEATHSIG would reach only the shell, never the `tail` or the
pipeline it started, and it fires when the starting thread ends, not the process."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import sys
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


#: the reaper: reads `+PGID` and `-PGID` lines until its input closes, then kills the groups
#: still listed. Run as `python -I -S -c`: no site, no user paths, nothing but os.
_REAPER = """
import os
groups = set()
pending = b""
while True:
    try:
        chunk = os.read(0, 4096)
    except InterruptedError:
        continue
    if not chunk:
        break
    *lines, pending = (pending + chunk).split(b"\\n")
    for line in lines:
        if line[:1] == b"+":
            groups.add(int(line[1:]))
        elif line[:1] == b"-":
            groups.discard(int(line[1:]))
for group in groups:
    try:
        os.killpg(group, 9)
    except OSError:
        pass
"""


class _Reaper:
    """The process that kills this command's probes if the command dies first (see the module
    docstring). One per process, started with the first probe; without it (it could not be
    started) probes run as before."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._owner = 0  # the pid that started it: a forked child starts its own
        self._proc: subprocess.Popen[bytes] | None = None

    def _pipe(self) -> int | None:
        if self._fd is not None and self._owner == os.getpid():
            return self._fd
        read, write = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _REAPER],
                stdin=read,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                # its own session: ^C at the terminal, or a kill of this command's process
                # group, does not stop it before it has done its work
                start_new_session=True,
            )
        except OSError:
            os.close(write)
            return None
        finally:
            os.close(read)
        self._fd, self._owner = write, os.getpid()
        return write

    def _send(self, line: str) -> None:
        with self._lock:
            fd = self._pipe()
            if fd is None:
                return
            try:
                os.write(fd, line.encode())
            except OSError:  # the reaper is gone: nothing more to tell it
                os.close(fd)
                self._fd = None

    def started(self, pgid: int) -> None:
        self._send(f"+{pgid}\n")

    def finished(self, pgid: int) -> None:
        # sent as soon as the group is done: a process group's number is not handed out
        # again while any process of it lives, and new ones are numbered in turn up to
        # pid_max, so it does not name another group in the moment before this line
        self._send(f"-{pgid}\n")


_reaper = _Reaper()


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
    *,
    secret: str = "",
) -> CommandResult:
    """Run argv with bounded capture and a deadline that kills its process group; `running`
    tracks it while it runs (see Running). `secret`: the first line of its input (Probe.secret),
    which then ends; without one the input is /dev/null."""
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if secret else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        return CommandResult(name, command, error=f"could not start: {exc.strerror}", exited=None)
    _reaper.started(proc.pid)
    if running is not None and not running.add(proc):
        kill_group(proc)
    try:
        _give(proc, secret)
        return _capture(proc, name, command, timeout, start)
    except BaseException:  # ^C while this thread waits on it: the command must not outlive us
        kill_group(proc)
        raise
    finally:
        _reaper.finished(proc.pid)
        if running is not None:
            running.discard(proc)


def _give(proc: subprocess.Popen[bytes], secret: str) -> None:
    """`secret` as the one line of the command's input (a pipe holds it without blocking)."""
    if proc.stdin is None:
        return
    with contextlib.suppress(BrokenPipeError):  # a command that ended without reading it
        proc.stdin.write(f"{secret}\n".encode("ascii"))
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.close()


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
        return run_argv(
            argv, probe.name, probe.command, probe.timeout, self._running, secret=probe.secret
        )

    def close(self) -> None:
        self._running.stop_all()
