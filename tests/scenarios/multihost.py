"""A real distributed job over two test hosts, one of which OOM-kills a rank: the machinery.

Two test hosts, A and B, on the harness bridge, each dressed as a node (:class:`Node`: its own
cgroupfs, /dev/shm tmpfs, name resolution, healthy 8-GPU shims, and its ranks' log dir shown at
``/var/log/training``, the runbook's default ``app_log_dir``). One 4-rank gloo job
(:class:`~tests.scenarios.job.MultiHostJob`), ``init_method=tcp://<A's bridge address>:29500``:

* ranks 0 and 1 on A, in a memory cgroup with room to spare (:data:`A_LIMIT`);
* ranks 2 and 3 on B, in a memory cgroup too small for rank 2's 900 MiB data cache
  (:data:`B_LIMIT`): the kernel OOM-kills rank 2 (exit 137; dmesg names B's cgroup), rank 3
  and the ranks on A fail at init about the process-group timeout (10 s) later
  (``DistStoreError`` / ``DistNetworkError``). A's cgroup sees no OOM; the kernel log every
  node reads (one kernel here) holds B's OOM, which A must not take for its own.

The job takes ~14 s (the 10 s timeout, plus importing torch). Use it from any test module::

    from tests.scenarios.multihost import TwoHostOOM, two_host_oom_job

    @pytest.fixture(scope="module")
    def two_hosts(host_network, tmp_path_factory) -> Iterator[TwoHostOOM]:
        with two_host_oom_job(host_network, tmp_path_factory.mktemp("two-hosts")) as job:
            yield job

API:

* ``two_host_oom_job(network, workdir, *, names=("mh-a", "mh-b"), timeout_s=10.0)`` -- a
  context manager: builds both nodes, runs the job to its end, yields a :class:`TwoHostOOM`,
  and on exit (pass or fail) removes the cgroups (killing what is left in them), the nodes'
  mounts and the hosts (and every process in their namespaces). Host names must be free on
  ``network`` while it runs.
* :class:`TwoHostOOM`: ``a``, ``b`` (:class:`JobHost`), ``hosts`` (``(a, b)``), ``job`` (the
  :class:`~tests.scenarios.job.JobResult` of all four ranks: ``exit_codes``, ``logs`` by global
  rank), ``oom_rank`` (2), ``init_method``, ``known_hosts`` and ``identity`` (the paths
  ``runbook run --known-hosts/--identity`` take).
* :class:`JobHost`: ``name`` (its hostname: the verdict's ``node``), ``host``
  (:class:`~tests.hosts.harness.TestHost`), ``node``, ``cgroup``
  (:class:`~tests.scenarios.cgroups.MemoryCgroup`; live until the context exits), ``ranks``
  (its global ranks), ``exit_codes`` (its ranks' only), ``log_dir`` (the ranks' logs, on this
  machine: ``rank-N.log``), ``address``, ``port``, ``target`` (``ssh://root@ADDR:PORT``),
  ``cgroup_dir`` (the ``--var cgroup_dir=`` value), ``app_log_dir`` (``/var/log/training``:
  where an SSH session on that host sees ``log_dir``; the runbook's default), and
  ``variables()`` (the ``--var`` values a diagnosis of that host needs: ``cgroup_dir``,
  ``nccl_log_dir``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.hosts.fixtures import HostFactory
from tests.hosts.harness import HostNetwork, TestHost
from tests.scenarios import shims
from tests.scenarios.cgroups import MIB, MemoryCgroup
from tests.scenarios.job import (
    NODE_LOG_DIR,
    JobResult,
    MultiHostJob,
    Node,
    Placement,
    RankSpec,
)

#: two ranks (torch, 100 MiB caches) peak at ~560 MiB in one cgroup (measured): room to spare
A_LIMIT = 2048 * MIB
#: B's two ranks fit (~560 MiB) without rank 2's 900 MiB cache, never with it (~1.4 GiB)
B_LIMIT = 1000 * MIB
OOM_RANK = 2
SHM_SIZE = 256 * MIB
RANKS_ON = {"a": (0, 1), "b": (2, 3)}


def _rank(rank: int) -> RankSpec:
    return RankSpec(
        cache_mib=900 if rank == OOM_RANK else 100, prefetch_mib=16, locked_mib=8, shm_mib=8
    )


@dataclass(frozen=True)
class JobHost:
    """One host of the job after it ran (see the module docstring)."""

    host: TestHost
    node: Node
    cgroup: MemoryCgroup
    log_dir: Path
    ranks: tuple[int, ...]
    exit_codes: dict[int, int] = field(default_factory=dict)
    app_log_dir: str = NODE_LOG_DIR

    @property
    def name(self) -> str:
        return self.host.name

    @property
    def address(self) -> str:
        return self.host.address

    @property
    def port(self) -> int:
        return self.host.port

    @property
    def target(self) -> str:
        return f"ssh://root@{self.address}:{self.port}"

    @property
    def cgroup_dir(self) -> str:
        return str(self.cgroup.path)

    def variables(self) -> dict[str, str]:
        """``--var`` values for diagnosing this host (app_log_dir: the default finds the logs)."""
        return {"cgroup_dir": self.cgroup_dir, "nccl_log_dir": self.app_log_dir}


@dataclass(frozen=True)
class TwoHostOOM:
    """The job over hosts A and B, after it ran (see the module docstring)."""

    a: JobHost
    b: JobHost
    job: JobResult
    init_method: str
    known_hosts: Path
    identity: Path
    oom_rank: int = OOM_RANK

    @property
    def hosts(self) -> tuple[JobHost, JobHost]:
        return (self.a, self.b)


@contextlib.contextmanager
def two_host_oom_job(
    network: HostNetwork,
    workdir: Path,
    *,
    names: tuple[str, str] = ("mh-a", "mh-b"),
    timeout_s: float = 10.0,
) -> Iterator[TwoHostOOM]:
    """Run the job once; everything it made is removed when the block exits, pass or fail."""
    with contextlib.ExitStack() as cleanup:
        factory = HostFactory(network)
        cleanup.callback(factory.remove_all)  # last: kills whatever is left in the namespaces
        hosts = factory.many(names)
        placements = []
        for host, (role, limit) in zip(hosts, (("a", A_LIMIT), ("b", B_LIMIT)), strict=True):
            shims.install(host, shims.load_profile("healthy-8gpu"))
            log_dir = workdir / f"{host.name}-logs"
            log_dir.mkdir(parents=True)
            node = Node(host, shm_bytes=SHM_SIZE, log_dir=log_dir)
            cleanup.callback(node.close)
            cgroup = MemoryCgroup(f"job-{host.name}", limit)
            cleanup.callback(cgroup.remove)  # first: kills any rank left before unmounting
            placements.append(
                Placement(node, cgroup, log_dir, {r: _rank(r) for r in RANKS_ON[role]})
            )
        job = MultiHostJob(placements, timeout_s=timeout_s)
        result = job.run()
        a, b = (
            JobHost(p.node.host, p.node, p.cgroup, p.log_dir, tuple(p.ranks),
                    {r: result.exit_codes[r] for r in p.ranks})
            for p in placements
        )  # fmt: skip
        yield TwoHostOOM(
            a, b, result, job.init_method, network.known_hosts_path, network.client_key.private_path
        )
