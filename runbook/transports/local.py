"""`--target local`: probes as subprocesses of this machine, each in its own process group so a
timeout kills the whole command tree, not just the shell."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
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


def run_argv(argv: list[str], name: str, command: str, timeout: float) -> CommandResult:
    """Run argv with bounded capture and a deadline that kills its process group."""
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

    def run(self, probe: Probe) -> CommandResult:
        return run_argv([self.shell, "-c", probe.command], probe.name, probe.command, probe.timeout)

    def close(self) -> None:
        pass
