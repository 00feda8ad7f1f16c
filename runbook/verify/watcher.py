"""The staged replay's node-side program: run one stage of the job inside the pod's memory cgroup,
watch the pod's memory while it runs, and stop the stage before the kernel would OOM-kill it.

It is not imported by the tool: runbook.verify.replay ships this file's source to the node
(``python3 -c SOURCE ARGS-JSON``) over the run's transport, so it uses the standard library only
and runs on the node's own Python 3.8+. It prints one JSON report on standard output (exit 0),
or ``{"error": …}`` (exit 2) when it cannot set up.

One stage, in order:

1. the pod cgroup's version (v1 ``memory.limit_in_bytes`` / v2 ``memory.max``) and limit
   (no limit: error — there is nothing to stay under); the stop line is ``limit − headroom``;
2. the pod's counters before (v1 ``memory.failcnt`` and ``memory.oom_control`` ``oom_kill``,
   v2 ``memory.events`` ``max`` and ``oom_kill``), then the peaks reset where the kernel allows
   (v1: ``0`` written to ``memory.max_usage_in_bytes`` of the pod and every container;
   v2: ``reset`` written to an open ``memory.peak``, Linux 6.12+), so each stage has its own;
3. a container cgroup of its own under the pod (``runbook-replay``, a sibling of the pod's
   containers, sidecars included), bounded halfway into the headroom (the *guard*: v1 its own
   limit with ``oom_kill_disable`` for it alone, so at the bound its tasks wait, killable,
   instead of being OOM-killed; v2 ``memory.high``, above which the kernel throttles them), so
   a watcher starved of CPU on a busy node still gets there before the pod's limit; the
   stage's command is started in it (the child joins it before it execs, so nothing it ever
   touches is charged elsewhere);
4. every ``poll_s``: the pod's working set, ``usage − inactive_file`` (the part the kernel
   cannot reclaim, what an OOM is about); at each new peak 1 % of the limit above the last
   snapshot (or, for a smaller rise, within ``sample_s`` while still above it), a snapshot:
   each container's ``memory.stat`` and usage, and ``/proc/PID/status`` and ``smaps_rollup``
   of each process (never ``cmdline`` or ``environ``): the processes as they were at the peak;
5. the working set at or past the stop line, or the replay container at its guard (below):
   the stage's processes are stopped (SIGSTOP, so nothing grows while they are measured),
   snapshotted, and killed — ``stopped-at-headroom``;
   the command exiting: ``completed`` (0) or ``failed``; still running after ``duration_s``:
   ``held`` (SIGTERM, then SIGKILL);
6. the pod's files and counters after (a kernel OOM kill or failcnt step during the stage is
   reported: the watcher was outrun), every container's peak, and the container cgroup removed.

The command's output is read line by line; the first line matching ``collective_pattern``
dates the job's first collective (seconds since the stage started).
"""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from typing import IO, Any

V1_FILES = ("memory.limit_in_bytes", "memory.usage_in_bytes", "memory.max_usage_in_bytes",
            "memory.failcnt", "memory.oom_control", "memory.stat")
V2_FILES = ("memory.max", "memory.current", "memory.peak", "memory.events", "memory.stat")
UNLIMITED = 1 << 62


def read(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def keyed(text: str | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


def number(text: str | None) -> int | None:
    value = (text or "").strip()
    if value == "max":
        return None
    try:
        parsed = int(value)
    except ValueError:
        return None
    return None if parsed >= UNLIMITED else parsed


class Cgroup:
    def __init__(self, path: str, version: int) -> None:
        self.path = path
        self.version = version

    def file(self, name: str) -> str | None:
        return read(os.path.join(self.path, name))

    def files(self) -> dict[str, str]:
        names = V2_FILES if self.version == 2 else V1_FILES
        return {name: text for name in names if (text := self.file(name)) is not None}

    def limit(self) -> int | None:
        return number(self.file("memory.max" if self.version == 2 else "memory.limit_in_bytes"))

    def usage(self) -> int:
        name = "memory.current" if self.version == 2 else "memory.usage_in_bytes"
        return number(self.file(name)) or 0

    def stat(self) -> tuple[str, dict[str, int]]:
        text = self.file("memory.stat") or ""
        return text, keyed(text)

    def working_set(self) -> tuple[int, int, str]:
        usage = self.usage()
        text, stat = self.stat()
        inactive = stat.get("inactive_file" if self.version == 2 else "total_inactive_file", 0)
        return max(0, usage - inactive), usage, text

    def counters(self) -> dict[str, int]:
        if self.version == 2:
            events = keyed(self.file("memory.events"))
            return {"failcnt": events.get("max", 0), "oom_kill": events.get("oom_kill", 0)}
        control = keyed(self.file("memory.oom_control"))
        return {"failcnt": number(self.file("memory.failcnt")) or 0,
                "oom_kill": control.get("oom_kill", 0)}

    def pids(self) -> list[int]:
        text = self.file("cgroup.procs") or ""
        return sorted({int(pid) for pid in text.split() if pid.isdigit()})

    def children(self) -> list[str]:
        try:
            return sorted(entry.name for entry in os.scandir(self.path) if entry.is_dir())
        except OSError:
            return []


class Peak:
    """v1: the kernel's max_usage, reset to the current usage; v2: an fd-local memory.peak."""

    def __init__(self, cgroup: Cgroup) -> None:
        self.cgroup = cgroup
        self.reset = False
        self.handle: IO[str] | None = None
        try:
            if cgroup.version == 1:
                with open(os.path.join(cgroup.path, "memory.max_usage_in_bytes"), "w") as out:
                    out.write("0")
                self.reset = True
            else:
                self.handle = open(os.path.join(cgroup.path, "memory.peak"), "r+")
                self.handle.write("reset\n")
                self.handle.flush()
                self.reset = True
        except OSError:
            self.reset = False

    def value(self) -> int | None:
        if self.cgroup.version == 1:
            return number(self.cgroup.file("memory.max_usage_in_bytes"))
        if self.handle is not None:
            try:
                self.handle.seek(0)
                return number(self.handle.read())
            except OSError:
                return None
        return number(self.cgroup.file("memory.peak"))

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()


def processes(cgroup: Cgroup) -> dict[str, dict[str, str]]:
    statuses: dict[str, str] = {}
    rollups: dict[str, str] = {}
    for pid in cgroup.pids():
        status = read(f"/proc/{pid}/status")
        if status is None:
            continue
        statuses[str(pid)] = status
        rollup = read(f"/proc/{pid}/smaps_rollup")
        if rollup is not None:
            rollups[str(pid)] = rollup
    return {"statuses": statuses, "rollups": rollups}


def rss_of(status: str) -> int:
    match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    return int(match.group(1)) * 1024 if match else 0


def hwm_of(status: str) -> int | None:
    match = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    return int(match.group(1)) * 1024 if match else None


def signal_all(cgroup: Cgroup, sig: int) -> None:
    for pid in cgroup.pids():
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def kill_all(cgroup: Cgroup, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while cgroup.pids():
        if cgroup.version == 2 and os.path.exists(os.path.join(cgroup.path, "cgroup.kill")):
            try:
                with open(os.path.join(cgroup.path, "cgroup.kill"), "w") as handle:
                    handle.write("1")
            except OSError:
                pass
        signal_all(cgroup, signal.SIGKILL)
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def rmdir(path: str, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)


def fail(message: str) -> int:
    print(json.dumps({"error": message}))
    return 2


def run(args: dict[str, Any]) -> int:
    pod_path = str(args["pod_cgroup"])
    if os.path.exists(os.path.join(pod_path, "memory.limit_in_bytes")):
        version = 1
    elif os.path.exists(os.path.join(pod_path, "memory.max")):
        version = 2
    else:
        return fail(f"{pod_path} is not a memory cgroup (no memory.max or memory.limit_in_bytes)")
    pod = Cgroup(pod_path, version)
    limit = pod.limit()
    if limit is None:
        return fail(f"{pod_path} has no memory limit: there is nothing to stay under")
    headroom = int(args.get("headroom_bytes") or 0) or int(
        limit * float(args["headroom_pct"]) / 100)
    name = str(args.get("container") or "runbook-replay")
    replay = Cgroup(os.path.join(pod_path, name), version)
    if os.path.isdir(replay.path) and not rmdir(replay.path, 0.5):
        return fail(f"{replay.path} exists and is busy: is another replay running?")
    before = pod.files()
    counters_before = pod.counters()
    os.mkdir(replay.path)
    try:
        return _stage(args, pod, replay, name, limit, headroom, before, counters_before)
    finally:
        kill_all(replay)
        rmdir(replay.path)


def set_guard(cgroup: Cgroup, guard: int) -> bool:
    """The replay container's own bound, halfway into the headroom: v1 a limit with the OOM
    killer disabled for this cgroup only (at the bound its tasks wait, killable, instead of
    being killed), v2 memory.high (above it the kernel throttles their allocations). Either
    way growth stalls there until the watcher kills the stage, even if it is starved of CPU."""
    try:
        if cgroup.version == 1:
            with open(os.path.join(cgroup.path, "memory.limit_in_bytes"), "w") as handle:
                handle.write(str(guard))
            with open(os.path.join(cgroup.path, "memory.oom_control"), "w") as handle:
                handle.write("1")
        else:
            with open(os.path.join(cgroup.path, "memory.high"), "w") as handle:
                handle.write(str(guard))
        return True
    except OSError:
        return False


def at_guard(cgroup: Cgroup, high_before: int) -> bool:
    if cgroup.version == 1:
        return keyed(cgroup.file("memory.oom_control")).get("under_oom", 0) > 0
    return keyed(cgroup.file("memory.events")).get("high", 0) > high_before


def reset_peaks(pod: Cgroup) -> dict[str, Peak]:
    """The peaks of the pod (under ``""``) and of each of its containers, reset where the
    kernel allows, so the stage has its own."""
    peaks = {"": Peak(pod)}
    for child in pod.children():
        peaks[child] = Peak(Cgroup(os.path.join(pod.path, child), pod.version))
    return peaks


def command_env(args: dict[str, Any]) -> dict[str, str]:
    """The watcher's environment with the stage's own variables on top."""
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in (args.get("env") or {}).items()})
    return env


class Output:
    """The stage command's output, read line by line on a thread of its own: the last
    ``output_lines`` lines, and the first line matching ``collective_pattern``, dated in
    seconds since the stage started."""

    def __init__(self, args: dict[str, Any]) -> None:
        self.pattern = re.compile(str(args.get("collective_pattern") or r"(?!)"))
        self.tail: collections.deque[str] = collections.deque(
            maxlen=int(args.get("output_lines") or 40))
        self.first: dict[str, Any] = {}
        self.thread: threading.Thread | None = None

    def follow(self, stream: IO[bytes], started: float) -> None:
        self.thread = threading.Thread(target=self._read, args=(stream, started), daemon=True)
        self.thread.start()

    def _read(self, stream: IO[bytes], started: float) -> None:
        for raw in stream:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.tail.append(line)
            if not self.first and self.pattern.search(line):
                self.first.update(at_s=round(time.monotonic() - started, 3), line=line[:300])

    def join(self, timeout: float) -> None:
        if self.thread is not None:
            self.thread.join(timeout)


def start_command(args: dict[str, Any], replay: Cgroup,
                  env: dict[str, str]) -> subprocess.Popen[bytes]:
    """The stage's command, started in the replay container: the child joins it before it
    execs, so nothing it ever touches is charged elsewhere."""
    procs_file = os.path.join(replay.path, "cgroup.procs")

    def join_cgroup() -> None:
        with open(procs_file, "w") as handle:
            handle.write(str(os.getpid()))

    return subprocess.Popen(
        ["sh", "-c", str(args["command"])], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, env=env, preexec_fn=join_cgroup, start_new_session=True,
    )


def end_command(replay: Cgroup, proc: subprocess.Popen[bytes], output: Output) -> None:
    """Whatever is left of the stage killed and reaped, and its output read to the end."""
    kill_all(replay)
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    output.join(2)
    if proc.stdout is not None:
        proc.stdout.close()


def hold_stopped(replay: Cgroup, proc: subprocess.Popen[bytes]) -> int | None:
    """A stage still running at ``duration_s``: SIGTERM, and its exit status within 5 s."""
    signal_all(replay, signal.SIGTERM)
    try:
        return proc.wait(5)
    except subprocess.TimeoutExpired:
        return None


class Highs:
    """The stage's highest working set and usage so far, and when the processes are due a
    snapshot at the latest peak: at once when the working set grew by a step (1 % of the limit,
    at least 4 MiB) since the last snapshot, else within ``sample_s`` while still above it."""

    def __init__(self, limit: int, sample_every: float) -> None:
        self.working_set, self.usage, self.at = 0, 0, 0.0
        self.sample_every = sample_every
        self.step = max(4 << 20, limit // 100)
        #: a new peak not snapshotted yet, and the working set at the last snapshot
        self.pending = False
        self.snapshot_working_set = 0

    def observe(self, now: float, working_set: int, usage: int) -> None:
        if usage > self.usage:
            self.usage = usage
        if working_set > self.working_set:
            self.working_set, self.at = working_set, now
            self.pending = True

    def include(self, working_set: int, usage: int) -> None:
        """Figures read after the stage was stopped: they raise the highs, not their time."""
        self.working_set, self.usage = max(self.working_set, working_set), max(self.usage, usage)

    def snapshot_due(self, now: float, working_set: int, last_snapshot: float) -> bool:
        return self.pending and (working_set >= self.snapshot_working_set + self.step or (
            now - last_snapshot >= self.sample_every
            and working_set > self.snapshot_working_set))

    def snapshotted(self, working_set: int) -> None:
        self.snapshot_working_set, self.pending = working_set, False


class Snapshots:
    """The pod's processes as they were at the stage's peaks: the latest snapshot (each
    container's ``memory.stat`` and usage, each process's status and ``smaps_rollup``), each
    process's high-water mark, and the roster."""

    def __init__(self, pod: Cgroup) -> None:
        self.pod = pod
        self.latest: dict[str, Any] = {}
        self.taken_at = -1.0
        #: pid → the largest VmHWM seen
        self.hwm: dict[str, int] = {}
        #: container → pid → of every process seen during the stage, its status at its largest
        self.roster: dict[str, dict[str, str]] = {}

    def take(self, now: float, working_set: int, usage: int, stat_text: str) -> None:
        containers: dict[str, Any] = {}
        for child in self.pod.children():
            container = Cgroup(os.path.join(self.pod.path, child), self.pod.version)
            container_stat, _ = container.stat()
            containers[child] = {"usage_bytes": container.usage(), "stat": container_stat,
                                 "processes": processes(container)}
            self._remember(child, containers[child]["processes"]["statuses"])
        self.latest = {"at_s": round(now, 3), "working_set_bytes": working_set,
                       "usage_bytes": usage, "stat": stat_text, "containers": containers}
        self.taken_at = now

    def _remember(self, child: str, statuses: dict[str, str]) -> None:
        """Each process's high-water mark, and its status in the roster if it is its largest."""
        for pid, status in statuses.items():
            value = hwm_of(status)
            if value is not None:
                self.hwm[pid] = max(self.hwm.get(pid, 0), value)
            seen = self.roster.setdefault(child, {})
            if pid not in seen or rss_of(status) >= rss_of(seen[pid]):
                seen[pid] = status


class Watch:
    """The pod watched every ``poll_s`` while the stage's command runs, until it ends one of
    four ways: stopped at the headroom (the working set at the stop line, or the replay
    container at its guard), completed, failed, or held past ``duration_s``."""

    def __init__(self, args: dict[str, Any], pod: Cgroup, replay: Cgroup, limit: int,
                 stop_at: int, guarded: bool, high_before: int, started: float) -> None:
        self.pod, self.replay = pod, replay
        self.stop_at, self.guarded, self.high_before = stop_at, guarded, high_before
        self.started = started
        self.poll = float(args.get("poll_s") or 0.02)
        self.highs = Highs(limit, float(args.get("sample_s") or 0.1))
        self.duration = float(args.get("duration_s") or 300)
        self.snapshots = Snapshots(pod)
        self.guard_hit = False

    def until_done(self, proc: subprocess.Popen[bytes]) -> tuple[str, int | None]:
        """The stage's outcome and exit status."""
        while True:
            now = time.monotonic() - self.started
            working_set, usage, stat_text = self.pod.working_set()
            self.highs.observe(now, working_set, usage)
            # the processes as they are at the latest peak: at once when it grew by a step
            # since the last snapshot, else within sample_s while the working set is still at
            # the peak
            if self.highs.snapshot_due(now, working_set, self.snapshots.taken_at):
                self.snapshots.take(now, working_set, usage, stat_text)
                self.highs.snapshotted(working_set)
            hit_guard = self.guarded and at_guard(self.replay, self.high_before)
            if working_set >= self.stop_at or hit_guard:
                self.stop_at_headroom()
                self.guard_hit = hit_guard
                return "stopped-at-headroom", None
            code = proc.poll()
            if code is not None:
                return ("completed" if code == 0 else "failed"), code
            if now >= self.duration:
                self.snapshots.take(now, working_set, usage, stat_text)
                return "held", hold_stopped(self.replay, proc)
            time.sleep(self.poll)

    def stop_at_headroom(self) -> None:
        """The stage's processes stopped (SIGSTOP, so nothing grows while they are measured),
        snapshotted, and killed."""
        signal_all(self.replay, signal.SIGSTOP)
        working_set, usage, stat_text = self.pod.working_set()
        self.highs.include(working_set, usage)
        self.snapshots.take(time.monotonic() - self.started, working_set, usage, stat_text)
        kill_all(self.replay)


def container_peaks(pod: Cgroup, peaks: dict[str, Peak], name: str) -> dict[str, Any]:
    """Every container's peak during the stage (the kernel's own for one that appeared
    meanwhile) and files; the replay container's peak is its own from the start."""
    containers: dict[str, Any] = {}
    for child in pod.children():
        container = Cgroup(os.path.join(pod.path, child), pod.version)
        peak = peaks.get(child)
        fresh = number(container.file(
            "memory.peak" if pod.version == 2 else "memory.max_usage_in_bytes"))
        containers[child] = {
            "peak_bytes": peak.value() if peak is not None else fresh,
            "peak_reset": bool(peak and peak.reset) or child == name,
            "files": container.files(),
        }
    return containers


def _stage(args: dict[str, Any], pod: Cgroup, replay: Cgroup, name: str, limit: int,
           headroom: int, before: dict[str, str], counters_before: dict[str, int]) -> int:
    stop_at = limit - headroom
    outside = pod.usage()
    guard = limit - headroom // 2 - outside
    if guard <= 0:
        return fail(f"the pod already uses {outside} of its {limit} bytes: nothing is left "
                    "for the replay under the headroom")
    guarded = set_guard(replay, guard)
    high_before = keyed(replay.file("memory.events")).get("high", 0) if pod.version == 2 else 0
    peaks = reset_peaks(pod)
    env = command_env(args)
    output = Output(args)
    started = time.monotonic()
    started_at = time.time()
    proc = start_command(args, replay, env)
    assert proc.stdout is not None
    output.follow(proc.stdout, started)
    watch = Watch(args, pod, replay, limit, stop_at, guarded, high_before, started)
    outcome, exit_status = watch.until_done(proc)
    elapsed = time.monotonic() - started
    end_command(replay, proc, output)
    containers_after = container_peaks(pod, peaks, name)
    pod_peak = peaks[""].value()
    for peak in peaks.values():
        peak.close()
    removed = rmdir(replay.path)
    highs, snapshots = watch.highs, watch.snapshots
    report = {
        "format": 1,
        "cgroup_version": pod.version,
        "pod_cgroup": pod.path,
        "container": name,
        "limit_bytes": limit,
        "headroom_bytes": headroom,
        "stop_at_bytes": stop_at,
        "started_at": started_at,
        "elapsed_s": round(elapsed, 3),
        "outcome": outcome,
        "exit_status": exit_status,
        "peak": {"kernel_bytes": pod_peak, "kernel_reset": peaks[""].reset,
                 "working_set_bytes": highs.working_set, "usage_bytes": highs.usage,
                 "at_s": round(highs.at, 3)},
        "snapshot": snapshots.latest,
        "hwm_bytes": snapshots.hwm,
        "roster": snapshots.roster,
        "containers": containers_after,
        "files_before": before,
        "files_after": pod.files(),
        "counters_before": counters_before,
        "counters_after": pod.counters(),
        "first_collective": output.first or None,
        "output_tail": list(output.tail),
        "container_removed": removed,
        "guard_bytes": guard if guarded else None,
        "guard_hit": watch.guard_hit,
    }
    print(json.dumps(report))
    return 0


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        return fail("usage: watcher ARGS-JSON")
    try:
        args = json.loads(argv[1])
        return run(args)
    except (OSError, ValueError, KeyError, subprocess.SubprocessError) as exc:
        return fail(f"{type(exc).__name__}: {exc}")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
