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
        return {n: t for n in names if (t := self.file(n)) is not None}

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
        return sorted({int(p) for p in text.split() if p.isdigit()})

    def children(self) -> list[str]:
        try:
            return sorted(e.name for e in os.scandir(self.path) if e.is_dir())
        except OSError:
            return []


class Peak:
    """v1: the kernel's max_usage, reset to the current usage; v2: an fd-local memory.peak."""

    def __init__(self, cg: Cgroup) -> None:
        self.cg = cg
        self.reset = False
        self.handle: IO[str] | None = None
        try:
            if cg.version == 1:
                with open(os.path.join(cg.path, "memory.max_usage_in_bytes"), "w") as h:
                    h.write("0")
                self.reset = True
            else:
                self.handle = open(os.path.join(cg.path, "memory.peak"), "r+")
                self.handle.write("reset\n")
                self.handle.flush()
                self.reset = True
        except OSError:
            self.reset = False

    def value(self) -> int | None:
        if self.cg.version == 1:
            return number(self.cg.file("memory.max_usage_in_bytes"))
        if self.handle is not None:
            try:
                self.handle.seek(0)
                return number(self.handle.read())
            except OSError:
                return None
        return number(self.cg.file("memory.peak"))

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()


def processes(cg: Cgroup) -> dict[str, dict[str, str]]:
    statuses: dict[str, str] = {}
    rollups: dict[str, str] = {}
    for pid in cg.pids():
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


def signal_all(cg: Cgroup, sig: int) -> None:
    for pid in cg.pids():
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def kill_all(cg: Cgroup, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while cg.pids():
        if cg.version == 2 and os.path.exists(os.path.join(cg.path, "cgroup.kill")):
            try:
                with open(os.path.join(cg.path, "cgroup.kill"), "w") as h:
                    h.write("1")
            except OSError:
                pass
        signal_all(cg, signal.SIGKILL)
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
    cg = Cgroup(os.path.join(pod_path, name), version)
    if os.path.isdir(cg.path) and not rmdir(cg.path, 0.5):
        return fail(f"{cg.path} exists and is busy: is another replay running?")
    before = pod.files()
    counters_before = pod.counters()
    os.mkdir(cg.path)
    try:
        return _stage(args, pod, cg, name, limit, headroom, before, counters_before)
    finally:
        kill_all(cg)
        rmdir(cg.path)


def set_guard(cg: Cgroup, guard: int) -> bool:
    """The replay container's own bound, halfway into the headroom: v1 a limit with the OOM
    killer disabled for this cgroup only (at the bound its tasks wait, killable, instead of
    being killed), v2 memory.high (above it the kernel throttles their allocations). Either
    way growth stalls there until the watcher kills the stage, even if it is starved of CPU."""
    try:
        if cg.version == 1:
            with open(os.path.join(cg.path, "memory.limit_in_bytes"), "w") as h:
                h.write(str(guard))
            with open(os.path.join(cg.path, "memory.oom_control"), "w") as h:
                h.write("1")
        else:
            with open(os.path.join(cg.path, "memory.high"), "w") as h:
                h.write(str(guard))
        return True
    except OSError:
        return False


def at_guard(cg: Cgroup, high_before: int) -> bool:
    if cg.version == 1:
        return keyed(cg.file("memory.oom_control")).get("under_oom", 0) > 0
    return keyed(cg.file("memory.events")).get("high", 0) > high_before


def _stage(args: dict[str, Any], pod: Cgroup, cg: Cgroup, name: str, limit: int, headroom: int,
           before: dict[str, str], counters_before: dict[str, int]) -> int:
    pod_path, version = pod.path, pod.version
    stop_at = limit - headroom
    outside = pod.usage()
    guard = limit - headroom // 2 - outside
    if guard <= 0:
        return fail(f"the pod already uses {outside} of its {limit} bytes: nothing is left "
                    "for the replay under the headroom")
    guarded = set_guard(cg, guard)
    high_before = keyed(cg.file("memory.events")).get("high", 0) if version == 2 else 0
    peaks = {"": Peak(pod)}
    for child in pod.children():
        peaks[child] = Peak(Cgroup(os.path.join(pod_path, child), version))
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in (args.get("env") or {}).items()})
    pattern = re.compile(str(args.get("collective_pattern") or r"(?!)"))
    tail: collections.deque[str] = collections.deque(maxlen=int(args.get("output_lines") or 40))
    first: dict[str, Any] = {}
    procs_file = os.path.join(cg.path, "cgroup.procs")

    def join_cgroup() -> None:
        with open(procs_file, "w") as h:
            h.write(str(os.getpid()))

    started = time.monotonic()
    started_at = time.time()
    proc = subprocess.Popen(
        ["sh", "-c", str(args["command"])], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, env=env, preexec_fn=join_cgroup, start_new_session=True,
    )

    def reader() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            tail.append(line)
            if not first and pattern.search(line):
                first.update(at_s=round(time.monotonic() - started, 3), line=line[:300])

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    poll = float(args.get("poll_s") or 0.02)
    sample_every = float(args.get("sample_s") or 0.1)
    duration = float(args.get("duration_s") or 300)
    peak_ws, peak_usage, peak_at = 0, 0, 0.0
    snapshot: dict[str, Any] = {}
    last_snapshot = -1.0
    hwm: dict[str, int] = {}
    #: container → pid → of every process seen during the stage, its status at its largest
    roster: dict[str, dict[str, str]] = {}
    outcome, exit_status = "", None
    guard_hit = False
    pending = False
    snapshot_ws, step = 0, max(4 << 20, limit // 100)

    def take(now: float, ws: int, usage: int, stat_text: str) -> None:
        nonlocal last_snapshot
        containers: dict[str, Any] = {}
        for child in pod.children():
            ccg = Cgroup(os.path.join(pod_path, child), version)
            ctext, _ = ccg.stat()
            containers[child] = {"usage_bytes": ccg.usage(), "stat": ctext,
                                 "processes": processes(ccg)}
            for pid, status in containers[child]["processes"]["statuses"].items():
                value = hwm_of(status)
                if value is not None:
                    hwm[pid] = max(hwm.get(pid, 0), value)
                seen = roster.setdefault(child, {})
                if pid not in seen or rss_of(status) >= rss_of(seen[pid]):
                    seen[pid] = status
        snapshot.clear()
        snapshot.update(at_s=round(now, 3), working_set_bytes=ws, usage_bytes=usage,
                        stat=stat_text, containers=containers)
        last_snapshot = now

    while True:
        now = time.monotonic() - started
        ws, usage, stat_text = pod.working_set()
        if usage > peak_usage:
            peak_usage = usage
        if ws > peak_ws:
            peak_ws, peak_at = ws, now
            pending = True
        # the processes as they are at the latest peak: at once when it grew by a step since
        # the last snapshot, else within sample_s while the working set is still at the peak
        if pending and (ws >= snapshot_ws + step or (
                now - last_snapshot >= sample_every and ws > snapshot_ws)):
            take(now, ws, usage, stat_text)
            snapshot_ws, pending = ws, False
        hit_guard = guarded and at_guard(cg, high_before)
        if ws >= stop_at or hit_guard:
            signal_all(cg, signal.SIGSTOP)
            ws, usage, stat_text = pod.working_set()
            peak_ws, peak_usage = max(peak_ws, ws), max(peak_usage, usage)
            take(time.monotonic() - started, ws, usage, stat_text)
            kill_all(cg)
            outcome = "stopped-at-headroom"
            guard_hit = hit_guard
            break
        code = proc.poll()
        if code is not None:
            outcome, exit_status = ("completed" if code == 0 else "failed"), code
            break
        if now >= duration:
            take(now, ws, usage, stat_text)
            signal_all(cg, signal.SIGTERM)
            try:
                exit_status = proc.wait(5)
            except subprocess.TimeoutExpired:
                exit_status = None
            outcome = "held"
            break
        time.sleep(poll)
    elapsed = time.monotonic() - started
    kill_all(cg)
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    thread.join(2)
    if proc.stdout is not None:
        proc.stdout.close()
    containers_after: dict[str, Any] = {}
    for child in pod.children():
        ccg = Cgroup(os.path.join(pod_path, child), version)
        peak = peaks.get(child)
        fresh = number(ccg.file("memory.peak" if version == 2 else "memory.max_usage_in_bytes"))
        containers_after[child] = {
            "peak_bytes": peak.value() if peak is not None else fresh,
            "peak_reset": bool(peak and peak.reset) or child == name,
            "files": ccg.files(),
        }
    pod_peak = peaks[""].value()
    for peak in peaks.values():
        peak.close()
    removed = rmdir(cg.path)
    report = {
        "format": 1,
        "cgroup_version": version,
        "pod_cgroup": pod_path,
        "container": name,
        "limit_bytes": limit,
        "headroom_bytes": headroom,
        "stop_at_bytes": stop_at,
        "started_at": started_at,
        "elapsed_s": round(elapsed, 3),
        "outcome": outcome,
        "exit_status": exit_status,
        "peak": {"kernel_bytes": pod_peak, "kernel_reset": peaks[""].reset,
                 "working_set_bytes": peak_ws, "usage_bytes": peak_usage,
                 "at_s": round(peak_at, 3)},
        "snapshot": snapshot,
        "hwm_bytes": hwm,
        "roster": roster,
        "containers": containers_after,
        "files_before": before,
        "files_after": pod.files(),
        "counters_before": counters_before,
        "counters_after": pod.counters(),
        "first_collective": first or None,
        "output_tail": list(tail),
        "container_removed": removed,
        "guard_bytes": guard if guarded else None,
        "guard_hit": guard_hit,
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
