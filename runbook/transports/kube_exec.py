"""Probes through `kubectl exec` into one pod, in batches: a burst of probes is one exec running
the same script as an SSH batch (transports/batch.py), not one exec a probe.

Why: every `kubectl exec` is a process start here, an API request, an upgraded stream and a
process start in the pod; a guided run's first burst is thirty probes and a sweep walks each
node's bursts. One exec a burst makes that one request a burst.

What runs in the pod (through nsenter into the node's namespaces when the pod is a node agent
or a debug pod) is BOOTSTRAP, a fixed few lines: it reads the batch from kubectl's input and
runs it as ``setsid -w /bin/sh -c WRAPPED``, WRAPPED being the SSH transport's start wrapper
(transports/marks.py) around the batch script; then come the start token, the batch's end-mark
token and the frame token, each a line, and the input ends. None of it is in the exec's command
line, which the node's `ps` shows every user and the API server's audit log keeps. `setsid`
makes the shell lead a process group of its own (a container runtime's exec, or nsenter's
child, does not), so the pid in the start mark names everything the probes start.

An exec is started ahead of each batch (the spare: BOOTSTRAP waits for its input), so a burst
finds one already connected: its process start and API round trip overlap the batch before it.
The first one is the target's connection check (it says when it runs in the pod); a second is
started with it, for the walk's second burst. The walk says when no burst may follow the one
it sends (`expect_more`): that one starts no spare, so a walk sends one exec a burst.

A probe keeps its own timeout, counted from the end of the probe before it. One that runs past
BATCH_PATIENCE_S hands the probes after it back to the caller (who sends them as a new exec)
and the script is sent SIGUSR1 (it stops once that probe ends). A timeout, or a batch asked to
stop that goes on, is ended by a second exec that sends TERM, then KILL, to the process group:
through the same nsenter into the node's PID namespace, so it reaches the group on the host
(an ended `kubectl exec` does not signal what it started: without a TTY the kubelet leaves it
running). Closing the transport (^C, SIGTERM) does the same for every batch in flight.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import subprocess
import threading
import time
from collections.abc import Callable, Sequence

from runbook.transports.base import (
    CommandResult,
    Deliver,
    Probe,
    Spill,
    decode,
    fail_all,
)
from runbook.transports.batch_run import BATCH_PATIENCE_S as BATCH_PATIENCE_S
from runbook.transports.batch_run import BatchRun, launch
from runbook.transports.local import Running, _reaper, kill_group

log = logging.getLogger(__name__)

#: how long a batch asked to stop may take to end before its process group is stopped (the
#: request is itself an exec: a process start and an API round trip)
STOP_GRACE_S = 3.0
#: seconds a kill exec may take
KILL_TIMEOUT_S = 15.0
#: how long closing waits for the batches just sent to say their process groups
CLOSE_WAIT_S = 3.0
#: execs started by the connection: a walk sends its first two bursts (the preamble, then every
#: stage's independent probes) one right after the other
FIRST_SPARES = 2
#: the line an exec writes on stderr once it runs in the pod (BOOTSTRAP)
READY = "__RBK_READY"
#: what a pipe holds without its reader (Linux: 64 KiB), less a margin
_PIPE_HOLDS = 60 * 1024
#: how long kubectl may take to end after the batch's last probe
_END_GRACE_S = 2.0
#: what kubectl said last, kept for the error of an exec that never started the script
_KEEP_STDERR = 4096


#: what an exec runs in the pod until it is given a batch: it says it is ready (on stderr,
#: which the batch's reader drops before the script's start mark), reads the script's length
#: and the script from its input (`dd bs=1`: not a byte past it, the tokens follow), then runs
#: it in a shell that leads a process group of its own (in_session). Fixed text: what the exec
#: request's URL, the audit log and the node's `ps` show says nothing of the batch.
BOOTSTRAP = (
    f"printf '\\n{READY}\\n' >&2; "
    "IFS= read -r n || exit 0; "
    "case $n in ''|*[!0-9]*) exit 125;; esac; "
    's=$(dd bs=1 count="$n" 2>/dev/null); '
    "S=; command -v setsid >/dev/null 2>&1 && S='setsid -w'; "
    'exec $S /bin/sh -c "$s"'
)


def kill_group_command(pgid: int, signal_first: str = "TERM") -> str:
    """TERM (or `signal_first`) to the group, up to half a second for it to end, then KILL."""
    return (
        f"kill -s {signal_first} -- -{pgid} 2>/dev/null; i=0; "
        f"while kill -0 -- -{pgid} 2>/dev/null && [ $i -lt 10 ]; "
        "do sleep 0.05; i=$((i+1)); done; "
        f"kill -s KILL -- -{pgid} 2>/dev/null; true"
    )


#: argv of one exec into the pod: (command, whether kubectl passes its input on) -> argv
ArgvFor = Callable[[str, bool], list[str]]


class PodExec:
    """Runs probes in one pod through `kubectl exec`: `run` and `run_batch` (BatchTransport),
    every probe in a batch, so each is stopped on the node when it times out. Safe from
    several threads; `close` stops what is in flight, here and in the pod."""

    def __init__(self, argv_for: ArgvFor, description: str) -> None:
        self._argv_for = argv_for
        self.description = description
        self._running = Running()
        self._lock = threading.Lock()
        #: notified as a batch's exec says its process group, or ends without saying it
        self._said_group = threading.Condition(self._lock)
        #: batches whose script was sent and whose process group is not known yet
        self._unknown = 0
        #: process groups in the pod of the batches in flight
        self._groups: set[int] = set()
        #: execs started, kill and stop requests included
        self.exec_count = 0
        #: execs started ahead of the next batches, waiting in BOOTSTRAP for their script (a
        #: batch then costs no process start nor API round trip of its own)
        self._spares: list[subprocess.Popen[bytes]] = []
        #: whether the walk may send another burst after those it sent (expect_more)
        self._more = True
        self._closed = False

    def expect_more(self, more: bool) -> None:
        """The walk says whether another burst may follow the one it sends next: when none
        may, taking the last spare starts no new one (an exec nobody would use is an API
        request and a process in the pod for nothing). A hand-back still starts its exec."""
        with self._lock:
            self._more = more

    def connect(self, timeout: float) -> str | None:
        """Start the first execs (FIRST_SPARES: the walk's first two bursts) and wait until
        one runs in the pod (its ready line); None, or why it does not (kubectl's last
        words)."""
        proc = self._start(BOOTSTRAP, True)
        if isinstance(proc, str):
            return proc
        more = [p for p in (self._start(BOOTSTRAP, True) for _ in range(FIRST_SPARES - 1))
                if not isinstance(p, str)]  # fmt: skip
        said = bytearray()
        deadline = time.monotonic() + timeout
        assert proc.stderr is not None
        needle = f"\n{READY}\n".encode()
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stderr, selectors.EVENT_READ)
            while needle not in said:
                ready = selector.select(max(0.0, deadline - time.monotonic()))
                chunk = os.read(proc.stderr.fileno(), 65536) if ready else b""
                if not chunk:
                    for started in (proc, *more):
                        self._drop(started)
                    if not ready:
                        return f"no answer within {timeout:g}s"
                    lines = decode(said).strip().splitlines()
                    return lines[-1] if lines else f"kubectl exited {proc.returncode}"
                said += chunk
        with self._lock:
            self._spares = [proc, *more]
        return None

    def _drop(self, proc: subprocess.Popen[bytes]) -> None:
        """End an exec of ours that will not be used (kubectl here; its stream's end ends the
        bootstrap in the pod, which waits only for its input)."""
        if proc.poll() is None:
            kill_group(proc)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        proc.wait()
        _reaper.finished(proc.pid)
        self._running.discard(proc)

    def _take(self) -> subprocess.Popen[bytes] | str:
        """An exec for a batch: a spare that still runs, else a new one; when none is left, a
        new spare is started for the batch after (its process start and API round trip
        overlap this batch)."""
        with self._lock:
            spares, self._spares = self._spares, []
            ahead = self._more and not self._closed
        live = [p for p in spares if p.poll() is None]
        for gone in spares:
            if gone not in live:
                self._drop(gone)
        proc = live.pop(0) if live else self._start(BOOTSTRAP, True)
        if not live and ahead:
            nxt = self._start(BOOTSTRAP, True)
            if not isinstance(nxt, str):
                live.append(nxt)
        with self._lock:
            self._spares.extend(live)
        return proc

    # ---- one exec

    def _start(self, command: str, stdin: bool) -> subprocess.Popen[bytes] | str:
        """The exec started (a process), or why it could not start."""
        with self._lock:
            self.exec_count += 1
        try:
            proc = subprocess.Popen(
                self._argv_for(command, stdin),
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            return f"could not start: {exc.strerror or exc}"
        _reaper.started(proc.pid)
        if not self._running.add(proc):
            kill_group(proc)
        return proc

    def _quiet(self, command: str, what: str) -> None:
        """Run `command` in the pod and wait for it (a kill); a failure is logged."""
        proc = self._start(command, False)
        if isinstance(proc, str):
            log.warning("%s: could not %s: %s", self.description, what, proc)
            return
        try:
            _, err = proc.communicate(timeout=KILL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            _, err = proc.communicate()
        finally:
            _reaper.finished(proc.pid)
            self._running.discard(proc)
        if proc.returncode != 0:
            lines = decode(err).strip().splitlines() or [f"exit {proc.returncode}"]
            # stopped by close() (the run is over, or interrupted): nothing to say
            quiet = self._closed and proc.returncode < 0
            (log.debug if quiet else log.warning)(
                "%s: could not %s: %s", self.description, what, lines[-1]
            )

    def stop_group(self, pgid: int, signal_first: str = "TERM") -> None:
        """The process group `pgid` in the pod stopped, from a second exec."""
        self._quiet(kill_group_command(pgid, signal_first), f"stop process group {pgid}")

    # ---- the transport's methods

    def run(self, probe: Probe) -> CommandResult:
        results: list[CommandResult] = []
        self.run_batch([probe], lambda _, result: results.append(result), lambda _: None)
        return results[0]

    def run_batch(
        self,
        probes: Sequence[Probe],
        deliver: Deliver,
        spill: Spill,
        *,
        within: float | None = None,
    ) -> None:
        """`probes` one after another in one exec (base.BatchTransport's contract)."""
        if not probes:
            return
        sent = launch(probes, within)
        start, limit, mine = sent.start, sent.limit, sent.probes
        body = sent.command()
        proc = self._take()
        if isinstance(proc, str):
            fail_all(probes, deliver, proc, time.monotonic() - start)
            return
        given = b"%d\n" % len(body) + body + sent.input()
        if len(given) < _PIPE_HOLDS:
            _give(proc, given)
        else:  # more than the pipe holds: kubectl may be slow to read it, the reader is not
            threading.Thread(target=_give, args=(proc, given), name="exec-input").start()
        with self._lock:
            self._unknown += 1
        reader = _ExecReader(self, proc, mine, deliver, sent.mark, sent.begin)
        try:
            reader.read(start, limit, spill)
        except BaseException:  # ^C while this thread reads: nothing of it may outlive us
            reader.abandon()
            raise
        finally:
            reader.finish()
        if reader.handed_back is None and len(mine) < len(probes):
            spill(len(mine))

    def close(self) -> None:
        """Stop every exec in flight: their process groups in the pod first (a second exec
        each, at once), then the kubectl processes here."""
        with self._lock:
            # a batch just sent says its process group within a round trip: wait for it, or
            # its script would run on after kubectl here is stopped
            self._said_group.wait_for(lambda: self._unknown == 0, timeout=CLOSE_WAIT_S)
            groups = sorted(self._groups)
            spares, self._spares = self._spares, []
            self._closed = True
        for spare in spares:
            self._drop(spare)
        if groups:
            command = "; ".join(kill_group_command(g) for g in groups)
            self._quiet(command, f"stop process groups {groups}")
        self._running.stop_all()

    def _group(self, pgid: int | None, running: bool) -> None:
        """A batch's process group is known (`running`), or the batch is over; None: it ended
        without saying its group."""
        with self._lock:
            if pgid is not None:
                (self._groups.add if running else self._groups.discard)(pgid)
            if running or pgid is None:
                self._unknown -= 1
                self._said_group.notify_all()


def _give(proc: subprocess.Popen[bytes], data: bytes) -> None:
    """`data` as the exec's whole input, then its end."""
    assert proc.stdin is not None
    with contextlib.suppress(BrokenPipeError, ValueError, OSError):
        proc.stdin.write(data)
    with contextlib.suppress(BrokenPipeError, ValueError, OSError):
        proc.stdin.close()


class _ExecReader(BatchRun):
    """One batch's exec: each probe's output as its end marks arrive, its timeout, the
    hand-back of the probes after one that takes long, and the end of the exec."""

    #: a probe cut short stops the exec's group itself, or the exec is over
    ask_to_stop_after_cut = False

    def __init__(
        self,
        pod: PodExec,
        proc: subprocess.Popen[bytes],
        probes: Sequence[Probe],
        deliver: Deliver,
        mark: bytes,
        begin: str,
    ) -> None:
        super().__init__(probes, deliver, mark, begin)
        self.pod = pod
        self.proc = proc
        #: kubectl's own last words before the script started (an exec that failed)
        self._said = bytearray()
        self._selector = selectors.DefaultSelector()
        assert proc.stdout is not None and proc.stderr is not None
        self._selector.register(proc.stdout, selectors.EVENT_READ, self._out)
        self._selector.register(proc.stderr, selectors.EVENT_READ, self._err)
        self._pgid: int | None = None

    def _pump(self, timeout: float) -> bool:
        """Read what is there within `timeout`; whether anything came."""
        got = False
        for key, _ in self._selector.select(max(0.0, timeout)):
            chunk = os.read(key.fd, 65536)
            if not chunk:
                self._selector.unregister(key.fileobj)
                continue
            got = True
            if key.data is self._err and not self._err.opened:
                self._said += chunk
                del self._said[:-_KEEP_STDERR]
            key.data.feed(chunk)
        if self._pgid is None and self._err.pgid is not None:
            self._pgid = self._err.pgid
            self.pod._group(self._pgid, True)
        return got

    def read(self, start: float, limit: float, spill: Spill) -> None:
        self.began = start
        while self.current < self._end:
            now = time.monotonic()
            if not self._advance(now):
                break
            deadline = self._deadline(limit)
            if now >= deadline:
                self._cut_short(now, spill, timed_out=True, error=None)
                if self._pgid is not None:
                    self.pod.stop_group(self._pgid)
                return
            patience = self._patience_ends()
            if patience is not None and now >= patience:
                self._hand_back(self.current + 1, spill)
                continue
            if not self._selector.get_map():  # both streams ended: the exec is over
                self._ended(spill)
                return
            until = deadline if patience is None else min(deadline, patience)
            self._pump(until - now)
        if self.handed_back is not None:
            self._see_it_stop()

    def _ask_to_stop(self, pgid: int) -> None:
        threading.Thread(
            target=self.pod._quiet,
            args=(f"kill -s USR1 {pgid} 2>/dev/null; true", f"stop batch {pgid}"),
            name="exec-stop",
            daemon=True,
        ).start()

    def _see_it_stop(self) -> None:
        """The script was asked to stop after the probe it ran; if it went on (the request
        came late), its process group is stopped."""
        until = time.monotonic() + STOP_GRACE_S
        while self._selector.get_map():
            left = until - time.monotonic()
            if left <= 0:
                if self._pgid is not None:
                    self.pod.stop_group(self._pgid)
                return
            self._pump(left)

    def _ended(self, spill: Spill) -> None:
        """The exec ended with probes not done: before the script started (kubectl could not
        exec: every probe of the batch fails with what it said), or part way (the probe that
        ran fails, the rest are handed back)."""
        self.proc.wait()
        if not self._err.opened:
            said = [
                line for line in decode(self._said).strip().splitlines() if line.strip() != READY
            ]
            why = said[-1] if said else f"kubectl exited {self.proc.returncode}"
            error = f"kubectl exec failed: {why}"
            now = time.monotonic()
            for index in range(self.current, self._end):
                probe = self.probes[index]
                failed = CommandResult(
                    probe.name, probe.command, error=error, duration=now - self.began
                )
                self.deliver(index, failed)
            self.current = self._end
            return
        self._cut_short(
            time.monotonic(), spill, timed_out=False,
            error="the exec ended before the command finished",
        )  # fmt: skip

    def abandon(self) -> None:
        """Interrupted: stop the group in the pod (if it said which) and kubectl here."""
        if self._pgid is not None:
            self.pod.stop_group(self._pgid, "KILL")
        kill_group(self.proc)

    def finish(self) -> None:
        try:  # kubectl ends once the pod's stream does: the status comes after the marks
            self.proc.wait(timeout=_END_GRACE_S)
        except subprocess.TimeoutExpired:
            kill_group(self.proc)
        self._selector.close()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        self.proc.wait()
        _reaper.finished(self.proc.pid)
        self.pod._running.discard(self.proc)
        self.pod._group(self._pgid, False)
