"""Scenario: one gloo job over two test hosts; host B's memory cgroup OOM-kills a rank.

Ranks 0-1 on host A (a cgroup with room), ranks 2-3 on host B (a cgroup too small for rank 2's
cache), rendezvous at rank 0's store on A across the test bridge (see
:mod:`tests.scenarios.multihost`). The kernel kills rank 2 on B; the ranks on A fail at init.
Then each host is diagnosed on its own, over SSH, with the single-node runbook: B's verdict is
host-memory-oom in B's cgroup; A, which reads the same kernel log (one kernel here, as a node's
shared dmesg would hold a neighbour's OOM), must not blame B's OOM on itself.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.hosts.harness import HostNetwork
from tests.scenarios.multihost import TwoHostOOM, two_host_oom_job

pytestmark = [pytest.mark.live, pytest.mark.ssh]


@pytest.fixture(scope="module")
def two_hosts(
    host_network: HostNetwork, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TwoHostOOM]:
    with two_host_oom_job(host_network, tmp_path_factory.mktemp("two-hosts")) as incident:
        yield incident


def _pid(log: str) -> int:
    match = re.search(r"starting \(pid (\d+)\)", log)
    assert match, log[-500:]
    return int(match[1])


def test_the_kernel_oom_kills_a_rank_on_b_and_the_ranks_on_a_fail_at_init(
    two_hosts: TwoHostOOM,
) -> None:
    a, b, job = two_hosts.a, two_hosts.b, two_hosts.job
    logs = job.logs
    assert set(job.exit_codes) == {0, 1, 2, 3}, job.exit_codes
    assert a.ranks == (0, 1) and b.ranks == (2, 3)
    assert b.exit_codes[two_hosts.oom_rank] == 137, {r: logs[r][-800:] for r in logs}
    assert b.exit_codes[3] == 1, logs[3][-1500:]
    assert "building data cache: 900 MiB" in logs[2] and "ERROR" not in logs[2]
    # the ranks on B reached rank 0's store on A over the bridge, not a store of their own
    assert all(f"init_method {two_hosts.init_method}" in logs[r] for r in logs)
    assert two_hosts.init_method == f"tcp://{a.address}:29500"
    for rank in a.ranks:
        assert a.exit_codes[rank] == 1, logs[rank][-1500:]
        assert f"init_process_group(gloo, {two_hosts.init_method})" in logs[rank]
        assert re.search(r"Dist(Store|Network)Error: ", logs[rank]), logs[rank][-1500:]
        assert "process group up" not in logs[rank]
    # 3 of 4 joined rank 0's store on A: 0, 1 and rank 3 from B, over the bridge
    assert re.search(
        r"DistStoreError: Timed out after \d+ seconds waiting for clients\. 3/4", logs[0]
    ), logs[0][-1500:]
    # each host's logs are in its own log dir, one rank-N.log per rank it ran
    for host in two_hosts.hosts:
        assert sorted(p.name for p in host.log_dir.iterdir()) == [
            f"rank-{r}.log" for r in host.ranks
        ]


def test_the_kernel_records_the_oom_in_bs_cgroup_and_none_in_as(two_hosts: TwoHostOOM) -> None:
    a, b = two_hosts.a, two_hosts.b
    assert b.cgroup.oom_kills() == 1 and b.cgroup.failcnt() > 0
    assert b.cgroup.peak_bytes() >= b.cgroup.limit_bytes - 1024 * 1024
    assert a.cgroup.oom_kills() == 0 and a.cgroup.failcnt() == 0
    assert a.cgroup.peak_bytes() < a.cgroup.limit_bytes // 2, a.cgroup.peak_bytes()


def test_the_kernel_log_names_bs_cgroup_and_rank_2_as_the_killed_process(
    two_hosts: TwoHostOOM,
) -> None:
    a, b = two_hosts.a, two_hosts.b
    dmesg = subprocess.run(["dmesg"], capture_output=True, text=True, check=True).stdout
    oom_lines = [line for line in dmesg.splitlines() if "oom_memcg=" in line]
    mine = [line for line in oom_lines if f"oom_memcg={b.cgroup.kernel_path}," in line]
    assert len(mine) == 1, oom_lines[-5:]
    killed = _pid(two_hosts.job.logs[two_hosts.oom_rank])
    assert f",pid={killed}," in mine[0], mine[0]
    assert re.search(rf"Memory cgroup out of memory: Killed process {killed} \(python", dmesg)
    assert not [line for line in oom_lines if a.cgroup.kernel_path in line]


def test_each_host_shows_its_own_ranks_logs_at_the_default_app_log_dir(
    two_hosts: TwoHostOOM,
) -> None:
    for host in two_hosts.hosts:
        seen = host.node.in_host(["ls", host.app_log_dir]).stdout.split()
        assert seen == [f"rank-{r}.log" for r in host.ranks], (host.name, seen)


def test_the_runbook_blames_host_memory_oom_on_b_in_bs_own_cgroup(
    two_hosts: TwoHostOOM, diagnose: Any
) -> None:
    b = two_hosts.b
    d = diagnose(b.host, b.variables())
    # named as the target was typed (ssh://root@ADDR:PORT), not by the host's hostname
    assert d.verdict["node"] == f"{b.host.address}:{b.host.port}"
    assert d.verdict["root_cause"] == "host-memory-oom", d.explain()
    assert d.statuses["cgroup-memory"] == "anomaly", d.explain()
    cgroup = d.facts("cgroup-memory", "cgroup")
    assert cgroup["limit_bytes"] == b.cgroup.limit_bytes and cgroup["oom_kills"] == 1
    oom = next(c for c in d.verdict["chain"] if c["stage"] == "kernel-logs")
    assert oom.get("cause") == "host-memory-oom" and b.cgroup.name in oom["finding"], oom
    app = d.facts("app-error", "applog")
    assert app["silent_ranks"] == [two_hosts.oom_rank], app


def test_the_runbook_does_not_blame_bs_oom_on_a(two_hosts: TwoHostOOM, diagnose: Any) -> None:
    a, b = two_hosts.a, two_hosts.b
    d = diagnose(a.host, a.variables())
    assert d.verdict["node"] == f"{a.host.address}:{a.host.port}"
    # A reads the same kernel log: B's OOM is in it, reported as another cgroup's
    ooms = d.facts("kernel-logs", "dmesg")["memcg_ooms"]
    assert b.cgroup.kernel_path in {o["memcg"] for o in ooms}
    # reported apart ("also seen"), never a link of A's causal chain
    assert not [c for c in d.verdict["chain"] if c["stage"] == "kernel-logs"], d.explain()
    kernel = [c for c in d.verdict["also_seen"] if c["stage"] == "kernel-logs"]
    assert kernel and all("cause" not in c for c in kernel), d.explain()
    assert d.statuses["cgroup-memory"] == "ok", d.explain()
    assert "host-memory-oom" not in d.causes, d.explain()
    assert d.verdict["root_cause"] != "host-memory-oom", d.explain()
    assert "host-memory-oom" in {r["cause"] for r in d.verdict["ruled_out"]}, d.explain()
    # A's own evidence: its two ranks failed at init, neither went silent
    app = d.facts("app-error", "applog")
    assert app["collected"] and app["silent_ranks"] == [], app
