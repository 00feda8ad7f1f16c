"""A training node and a training job on it, for real: the pieces the scenario fixtures use.

:class:`Node` turns a test host (a network namespace with its own sshd, from
:mod:`tests.hosts.harness`) into what the runbook expects of a GPU node, *inside that host's
private mount namespace only* (the one its sshd and every SSH session live in; the machine's own
mounts are never touched):

* the memory cgroup hierarchy is mounted where a node has it (``ip netns exec`` gives the host a
  fresh sysfs without ``/sys/fs/cgroup``), so ``--var cgroup_dir=/sys/fs/cgroup/memory/<name>``
  reads the job's real cgroup over SSH;
* a tmpfs of the job's size is mounted at ``/dev/shm``: the ranks' shm dir, and what the
  runbook's ``df -B1 /dev/shm`` sees;
* optionally (``log_dir=``), the job's log dir appears at ``/var/log/training``, the runbook's
  default ``app_log_dir``, so each node shows its own ranks' logs at the same path.

:class:`TrainingJob` starts the ranks of :mod:`tests.scenarios.rank` concurrently, each moved
into the job's :class:`~tests.scenarios.cgroups.MemoryCgroup` *before* it execs (so every page
it ever touches is charged there), then entered into the host's mount and network namespaces
(``nsenter --target <sshd>``): the ranks rendezvous over TCP on the host's own address, inside
its namespace, and nothing leaves it. Each rank's log (and its stderr) goes to
``<log_dir>/rank-N.log``. :meth:`TrainingJob.wait` returns every rank's exit status (137 is a
SIGKILL: the kernel's OOM killer).

:class:`MultiHostJob` spreads one job over several nodes: a :class:`TrainingJob` per node (its
ranks in that node's cgroup, logging to that node's log dir), every rank meeting at rank 0's
store on rank 0's node (``tcp://<its bridge address>:MASTER_PORT``) across the test bridge.

Cleanup: :meth:`Node.close` unmounts what it mounted; the cgroup's own removal kills any rank
left; the test host's removal kills whatever else is left in its namespace.
"""

from __future__ import annotations

import contextlib
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.hosts.harness import TestHost
from tests.scenarios.cgroups import CGROUP_ROOT, MemoryCgroup, cgroup_version

RANK_SCRIPT = Path(__file__).with_name("rank.py")
#: the rendezvous port inside each test host's own network namespace (no clash between hosts)
MASTER_PORT = 29500
#: where a node's (or a container's) training logs appear: the runbook's default app_log_dir
NODE_LOG_DIR = "/var/log/training"


class ScenarioError(RuntimeError):
    """A scenario's machinery (not the code under test) failed."""


def _run(argv: Sequence[str], *, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise ScenarioError(f"{shlex.join(argv)}: rc {proc.returncode}: {proc.stderr.strip()}")
    return proc


def _log_dir_mounts(log_dir: Path) -> list[list[str]]:
    """Show ``log_dir`` at NODE_LOG_DIR in the current mount namespace: a tmpfs over /var/log
    first, so NODE_LOG_DIR is made there and never on the machine's own /var/log."""
    return [
        ["mount", "-t", "tmpfs", "-o", "mode=755,size=1m", "rbk-varlog", "/var/log"],
        ["mkdir", "-p", NODE_LOG_DIR],
        ["mount", "--bind", str(log_dir), NODE_LOG_DIR],
    ]


class Node:
    """A test host dressed as a training node (see the module docstring)."""

    def __init__(
        self, host: TestHost, *, shm_bytes: int | None = None, log_dir: Path | None = None
    ) -> None:
        if host.sshd_pid is None:
            raise ScenarioError(f"{host.name}: sshd is not running")
        self.host = host
        #: every process in the host's namespaces descends from its sshd, or enters through it
        self.ns_pid = host.sshd_pid
        self.cgroup_version = cgroup_version()
        self.shm_bytes = shm_bytes
        self._mounted: list[str] = []
        try:
            self._resolve_locally()
            self._mount_cgroupfs()
            if shm_bytes is not None:
                self.in_host(["mount", "-t", "tmpfs", "-o", f"size={shm_bytes},mode=1777",
                              "rbk-job-shm", "/dev/shm"])
                self._mounted.append("/dev/shm")
            if log_dir is not None:
                for argv in _log_dir_mounts(log_dir):
                    self.in_host(argv)
                    if argv[0] == "mount":
                        self._mounted.append(argv[-1])
        except BaseException:
            self.close()
            raise

    def in_host(
        self, argv: Sequence[str], *, timeout: float = 30.0
    ) -> subprocess.CompletedProcess[str]:
        """Run argv in the host's mount and network namespaces (what an SSH session sees)."""
        return _run(["nsenter", "--target", str(self.ns_pid), "--mount", "--net", "--uts", "--",
                     *argv], timeout=timeout)

    def _resolve_locally(self) -> None:
        """The node resolves its own name and address from /etc/hosts, and DNS goes to its own
        loopback (refused at once): c10d looks up peers' names, and a lookup sent towards the
        machine's resolver would leave the namespace and hang until it times out."""
        host = self.host
        hosts = Path(host.dir) / "etc-hosts"
        hosts.write_text(f"127.0.0.1\tlocalhost\n::1\tlocalhost\n{host.address}\t{host.name}\n")
        resolv = Path(host.dir) / "etc-resolv.conf"
        resolv.write_text("# test node: no DNS outside the namespace\nnameserver 127.0.0.1\n"
                          "options timeout:1 attempts:1\n")
        for source, target in ((hosts, "/etc/hosts"), (resolv, "/etc/resolv.conf")):
            self.in_host(["mount", "--bind", str(source), target])
            self._mounted.append(target)

    def _mount_cgroupfs(self) -> None:
        if self.cgroup_version == 2:
            self.in_host(["mount", "-t", "cgroup2", "rbk-cgroup2", str(CGROUP_ROOT)])
            self._mounted.append(str(CGROUP_ROOT))
            return
        self.in_host(["mount", "-t", "tmpfs", "-o", "mode=755,size=64k", "rbk-cgroup",
                      str(CGROUP_ROOT)])
        self._mounted.append(str(CGROUP_ROOT))
        self.in_host(["mkdir", str(CGROUP_ROOT / "memory")])
        self.in_host(["mount", "-t", "cgroup", "-o", "memory", "rbk-memcg",
                      str(CGROUP_ROOT / "memory")])
        self._mounted.append(str(CGROUP_ROOT / "memory"))

    def close(self) -> None:
        """Unmount in reverse order; a host already gone took its mounts with it."""
        while self._mounted:
            target = self._mounted.pop()
            if self.host.sshd_pid is None:
                continue
            with contextlib.suppress(ScenarioError, subprocess.TimeoutExpired):
                self.in_host(["umount", "-l", target])


@dataclass
class RankSpec:
    """What one rank does (the flags of tests/scenarios/rank.py)."""

    cache_mib: int = 0
    prefetch_mib: int = 0
    locked_mib: int = 0
    shm_mib: int = 0
    shm_segment_mib: int = 0
    fail: str = "none"
    #: overrides the job's rendezvous address for this rank (a misconfigured MASTER_ADDR/PORT)
    init_method: str | None = None
    linger: float = 0.0

    def argv(self) -> list[str]:
        out = [
            "--cache-mib", str(self.cache_mib), "--prefetch-mib", str(self.prefetch_mib),
            "--locked-mib", str(self.locked_mib), "--shm-mib", str(self.shm_mib),
            "--shm-segment-mib", str(self.shm_segment_mib), "--fail", self.fail,
            "--linger", str(self.linger),
        ]  # fmt: skip
        return out


@dataclass
class JobResult:
    exit_codes: dict[int, int]
    started: float
    finished: float
    logs: dict[int, str] = field(default_factory=dict)

    @property
    def wall_s(self) -> float:
        return self.finished - self.started


class TrainingJob:
    """The ranks of one job on one node, all in one memory cgroup (the pod's)."""

    def __init__(
        self,
        node: Node,
        cgroup: MemoryCgroup,
        ranks: Sequence[RankSpec | None],
        *,
        log_dir: Path,
        timeout_s: float = 10.0,
        init_method: str | None = None,
    ) -> None:
        self.node = node
        self.cgroup = cgroup
        self.ranks = list(ranks)
        self.log_dir = log_dir
        self.timeout_s = timeout_s
        self.init_method = init_method or f"tcp://{node.host.address}:{MASTER_PORT}"
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self.started = 0.0

    @property
    def local_ranks(self) -> list[int]:
        """The ranks this node runs (a None in ``ranks`` is a rank on another node)."""
        return [r for r, spec in enumerate(self.ranks) if spec is not None]

    def rank_argv(self, rank: int) -> list[str]:
        spec = self.ranks[rank]
        assert spec is not None
        return [
            sys.executable, str(RANK_SCRIPT),
            "--rank", str(rank), "--world-size", str(len(self.ranks)),
            "--init-method", (spec.init_method or self.init_method).format(
                address=self.node.host.address),
            "--timeout", str(self.timeout_s), "--log-dir", str(self.log_dir),
            "--shm-dir", "/dev/shm", *spec.argv(),
        ]  # fmt: skip

    def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.started = time.time()
        for rank in self.local_ranks:
            log = self.log_dir / f"rank-{rank}.log"
            enter = ["nsenter", "--target", str(self.node.ns_pid), "--mount", "--net", "--uts",
                     "--", *self.rank_argv(rank)]
            # join the cgroup first, then exec: nothing of the rank is ever charged elsewhere
            script = f"echo $$ > {shlex.quote(str(self.cgroup.procs_file))} && exec " + \
                shlex.join(enter) + f" 2>>{shlex.quote(str(log))}"
            self._procs[rank] = subprocess.Popen(
                ["sh", "-c", script], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True,
            )

    def wait(self, timeout: float = 120.0) -> JobResult:
        deadline = time.monotonic() + timeout
        codes: dict[int, int] = {}
        try:
            for rank, proc in self._procs.items():
                left = max(0.1, deadline - time.monotonic())
                rc = proc.wait(left)
                codes[rank] = 128 - rc if rc < 0 else rc  # -9 (signal) reads as 137
        finally:
            self.kill()
        logs = {}
        for rank in self.local_ranks:
            path = self.log_dir / f"rank-{rank}.log"
            logs[rank] = path.read_text(errors="replace") if path.exists() else ""
        return JobResult(codes, self.started, time.time(), logs)

    def run(self, timeout: float = 120.0) -> JobResult:
        self.start()
        return self.wait(timeout)

    def kill(self) -> None:
        """Kill every rank still running (the cgroup's removal would too) and reap them."""
        self.cgroup.kill_all()
        for proc in self._procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)


@dataclass(frozen=True)
class Placement:
    """One node's share of a multi-node job: its ranks (global rank -> what it does), the memory
    cgroup they run in and the dir they log to."""

    node: Node
    cgroup: MemoryCgroup
    log_dir: Path
    ranks: Mapping[int, RankSpec]


class MultiHostJob:
    """One job's ranks over several nodes (see the module docstring); ``run()`` returns every
    rank's exit status and log, whichever node it ran on."""

    def __init__(
        self, placements: Sequence[Placement], *, timeout_s: float = 10.0, port: int = MASTER_PORT
    ) -> None:
        world = sorted(rank for p in placements for rank in p.ranks)
        if world != list(range(len(world))):
            raise ValueError(f"ranks {world} are not 0..N-1, each on one node")
        master = next(p.node for p in placements if 0 in p.ranks)
        #: rank 0's store, on its node's bridge address: the other nodes reach it over the bridge
        self.init_method = f"tcp://{master.host.address}:{port}"
        self.jobs = [
            TrainingJob(p.node, p.cgroup, [p.ranks.get(rank) for rank in world],
                        log_dir=p.log_dir, timeout_s=timeout_s, init_method=self.init_method)
            for p in placements
        ]  # fmt: skip

    def run(self, timeout: float = 120.0) -> JobResult:
        deadline = time.monotonic() + timeout
        try:
            for job in self.jobs:
                job.start()
            results = [job.wait(max(0.1, deadline - time.monotonic())) for job in self.jobs]
        finally:
            for job in self.jobs:  # a node whose wait never came (another's raised) too
                job.kill()
        return JobResult(
            exit_codes=dict(sorted(kv for res in results for kv in res.exit_codes.items())),
            started=min(res.started for res in results),
            finished=max(res.finished for res in results),
            logs=dict(sorted(kv for res in results for kv in res.logs.items())),
        )


class Container:
    """A process in a mount namespace of its own inside the node (a pod's container), where the
    job's log dir appears at ``/var/log/training`` (a tmpfs over ``/var/log`` hides the node's;
    only this namespace sees it). Its pid is what ``runbook --nsenter=PID`` targets."""

    LOG_DIR = NODE_LOG_DIR

    def __init__(self, node: Node, log_dir: Path) -> None:
        script = "; ".join([
            "set -e",
            *map(shlex.join, _log_dir_mounts(log_dir)),
            "echo ready",
            "exec sleep 3600",
        ])
        argv = ["nsenter", "--target", str(node.ns_pid), "--mount", "--net", "--uts", "--",
                "unshare", "--mount", "--propagation", "private", "sh", "-c", script]
        self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, start_new_session=True)
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().strip()
        if line != "ready":
            self.close()
            raise ScenarioError(f"container did not start: {self._proc.stderr.read()[-300:]}")
        # nsenter and unshare exec (no --fork): the pid we started is the container's process
        self.pid = self._proc.pid

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait(5)
        for stream in (self._proc.stdout, self._proc.stderr):
            if stream is not None:
                stream.close()
