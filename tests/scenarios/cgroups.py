"""Real memory cgroups for the scenarios: cgroup v1 (``/sys/fs/cgroup/memory``) or v2
(``/sys/fs/cgroup`` mounted as cgroup2), whichever this machine has.

A :class:`MemoryCgroup` is a directory the kernel enforces: write a limit, move a process in
(``cgroup.procs``), and a process that grows past the limit is OOM-killed by the kernel, which
prints the real ``memory: usage …kB, limit …kB`` and ``oom_memcg=/<name>`` lines to dmesg and
counts the kill in ``memory.oom_control`` (v1) or ``memory.events`` (v2).

Names are ``rbk-scn-<pid>-<label>``: the pid says which test run owns a cgroup, so a later run
can remove what a killed run left behind (:func:`sweep_stale`). :meth:`MemoryCgroup.remove`
kills every task in the cgroup first (a cgroup with tasks cannot be removed) and then
``rmdir``s it; it is idempotent and is what the fixtures' finalizers call, pass or fail.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from tests.hosts.harness import pid_alive

CGROUP_ROOT = Path("/sys/fs/cgroup")
V1_MEMORY = CGROUP_ROOT / "memory"
PREFIX = "rbk-scn-"
_NAME = re.compile(rf"^{PREFIX}(?P<pid>\d+)-[a-z0-9-]+$")
MIB = 1 << 20


class CgroupError(RuntimeError):
    """The machine's cgroups cannot do what a scenario needs."""


def cgroup_version() -> int:
    """2 when /sys/fs/cgroup is a cgroup2 mount, 1 when the v1 memory controller is mounted."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            fstype = fields[fields.index("-") + 1]
            if fields[4] == str(CGROUP_ROOT) and fstype == "cgroup2":
                return 2
    if (V1_MEMORY / "memory.limit_in_bytes").exists():
        return 1
    raise CgroupError("no memory cgroup controller: neither cgroup2 at /sys/fs/cgroup nor "
                      "cgroup v1 at /sys/fs/cgroup/memory")


def hierarchy_root(version: int | None = None) -> Path:
    """The mount point under which memory cgroups are made (and which dmesg names them from)."""
    return CGROUP_ROOT if (version or cgroup_version()) == 2 else V1_MEMORY


class MemoryCgroup:
    """One memory cgroup directly under the hierarchy root."""

    def __init__(self, label: str, limit_bytes: int, *, version: int | None = None) -> None:
        if not re.fullmatch(r"[a-z0-9-]{1,40}", label):
            raise ValueError(f"bad cgroup label {label!r}")
        self.version = version or cgroup_version()
        self.name = f"{PREFIX}{os.getpid()}-{label}"
        self.path = hierarchy_root(self.version) / self.name
        #: how the kernel names it in dmesg (`oom_memcg=/rbk-scn-…`) and in /proc/PID/cgroup
        self.kernel_path = "/" + self.name
        self.limit_bytes = limit_bytes
        if self.version == 2:
            controllers = (CGROUP_ROOT / "cgroup.subtree_control").read_text().split()
            if "memory" not in controllers:
                (CGROUP_ROOT / "cgroup.subtree_control").write_text("+memory")
        self.path.mkdir()
        try:
            if self.version == 2:
                self._write("memory.max", str(limit_bytes))
                self._write("memory.swap.max", "0") if (self.path / "memory.swap.max").exists() \
                    else None
            else:
                self._write("memory.limit_in_bytes", str(limit_bytes))
        except BaseException:
            self.path.rmdir()
            raise
        self._removed = False

    def __repr__(self) -> str:
        return f"MemoryCgroup({self.path}, limit {self.limit_bytes // MIB} MiB)"

    # ---- files

    def _write(self, name: str, value: str) -> None:
        (self.path / name).write_text(value)

    def read(self, name: str) -> str:
        return (self.path / name).read_text()

    @property
    def procs_file(self) -> Path:
        """Write a pid here to move that process (and its future children) in."""
        return self.path / "cgroup.procs"

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in self.procs_file.read_text().split()]
        except FileNotFoundError:
            return []

    def oom_kills(self) -> int:
        """OOM kills the kernel counted in this cgroup."""
        name, key = ("memory.events", "oom_kill") if self.version == 2 else \
            ("memory.oom_control", "oom_kill")
        for line in self.read(name).splitlines():
            k, _, v = line.partition(" ")
            if k == key:
                return int(v)
        return 0

    def peak_bytes(self) -> int:
        if self.version == 2:
            return int(self.read("memory.peak")) if (self.path / "memory.peak").exists() else 0
        return int(self.read("memory.max_usage_in_bytes"))

    def failcnt(self) -> int:
        if self.version == 2:
            for line in self.read("memory.events").splitlines():
                k, _, v = line.partition(" ")
                if k == "max":
                    return int(v)
            return 0
        return int(self.read("memory.failcnt"))

    # ---- lifetime

    def kill_all(self, timeout: float = 10.0) -> None:
        """SIGKILL every task until none is left (v2: cgroup.kill does it in one write)."""
        deadline = time.monotonic() + timeout
        while pids := self.pids():
            if self.version == 2 and (self.path / "cgroup.kill").exists():
                with contextlib.suppress(OSError):
                    self._write("cgroup.kill", "1")
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                raise CgroupError(f"tasks {pids} of {self.path} survive SIGKILL")
            time.sleep(0.02)

    def remove(self) -> None:
        """Kill the tasks, then rmdir (retried: a killed task leaves the cgroup asynchronously).
        Idempotent."""
        if self._removed:
            return
        self.kill_all()
        _rmdir(self.path)
        self._removed = True


def _rmdir(path: Path, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def sweep_stale() -> list[str]:
    """Remove scenario cgroups whose owning test run (the pid in the name) is gone."""
    try:
        root = hierarchy_root()
    except CgroupError:
        return []
    removed = []
    for entry in root.iterdir():
        m = _NAME.match(entry.name)
        if not m or not entry.is_dir() or pid_alive(int(m["pid"])):
            continue
        for pid in (entry / "cgroup.procs").read_text().split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        _rmdir(entry)
        removed.append(str(entry))
    return removed


_decoys = itertools.count(1)


def foreign_oom(label: str = "decoy") -> tuple[MemoryCgroup, str]:
    """A real OOM kill in a cgroup of its own (a neighbour's job on the same node): 32 MiB
    limit, a process asking for 128 MiB. Returns the (removed) cgroup and the kernel's name
    for it, as dmesg now prints in its ``oom_memcg=`` line.

    Scenarios that must not blame host memory make one first, so that the kernel log always
    holds an OOM that is *not* the job's, whatever this machine's log held before."""
    cg = MemoryCgroup(f"{label}-{next(_decoys)}", 32 * MIB)
    try:
        proc = subprocess.run(
            ["sh", "-c", f"echo $$ > {cg.procs_file} && exec python3 -c "
             "'b = bytearray(128 << 20)'"],
            capture_output=True, timeout=30, check=False,
        )
        if proc.returncode not in (-9, 137) or cg.oom_kills() != 1:
            raise CgroupError(f"decoy OOM did not happen: rc {proc.returncode}, "
                              f"oom_kills {cg.oom_kills()}, {proc.stderr.decode()[-200:]}")
        return cg, cg.kernel_path
    finally:
        cg.remove()
