"""A real hang of one job across two SSH test hosts, diagnosed with `runbook run nccl-hang
--hosts-from-file` while it hangs.

Four gloo ranks (tests/hang/hangjob.py): ranks 0 and 1 on hang-a, ranks 2 and 3 on hang-b, each
rank started inside its node's namespaces (its hostname, its address on the harness bridge) as
torchrun would start it (RANK, WORLD_SIZE, GROUP_RANK = the node's index). Rank 2 sleeps before
the fourth all_reduce; the three others enter it and wait. hang-a alone sees only ranks that wait
(for ranks not on it), hang-b sees its rank 2 behind its rank 3; the job verdict lines all four
up and must name rank 2, on hang-b, with its stack. The two hosts share this machine's process
table, so each node's ranks are told apart by GROUP_RANK (`--var job_env`), as a node's own
ranks would be. GPU tools are absent (no GPU here): those stages are not collected.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.hang.realjob import PY_SPY, HangingJob, Placement, hanging_job
from tests.hosts.fixtures import HostFactory
from tests.hosts.harness import HostNetwork, TestHost
from tests.integration.conftest import cli_env
from tests.scenarios.job import Node
from tests.sweep.helpers import runbook

pytestmark = [pytest.mark.live, pytest.mark.ssh]


@pytest.fixture(scope="module")
def two_nodes(host_network: HostNetwork) -> Iterator[list[tuple[TestHost, Node]]]:
    factory = HostFactory(host_network)
    nodes: list[Node] = []
    try:
        hosts = factory.many(["hang-a", "hang-b"])
        for host in hosts:
            nodes.append(Node(host))
        yield list(zip(hosts, nodes, strict=True))
    finally:
        for node in nodes:
            node.close()
        factory.remove_all()


@pytest.fixture(scope="module")
def job_verdict(
    host_network: HostNetwork,
    two_nodes: list[tuple[TestHost, Node]],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[dict[str, Any], HangingJob]]:
    work = tmp_path_factory.mktemp("job-hang")
    placements = {}
    for index, (host, node) in enumerate(two_nodes):
        enter = ("nsenter", "--target", str(node.ns_pid), "--mount", "--net", "--uts", "--")
        for rank in (2 * index, 2 * index + 1):
            placements[rank] = Placement(enter, work / host.name, index)
    master = two_nodes[0][0].address
    with hanging_job(
        work, world=4, mode="sleep", bad_rank=2, placements=placements, master_addr=master
    ) as job:
        job.wait_for_dumps()
        lines = []
        for index, (host, _) in enumerate(two_nodes):
            words = [
                f"ssh://root@{host.address}:{host.port}",
                f"ranks={2 * index},{2 * index + 1}",
                f"app_log_dir={work / host.name}",
                f"'job_env=HANG_JOB={job.token} GROUP_RANK={index}'",
                f"fr_dump_prefix={work / 'nowhere' / 'prefix_'}",
                f"py_spy={PY_SPY}",
                f"nccl_log_dir={work / 'no-nccl-logs'}",
            ]
            lines.append(" ".join(words))
        hosts_file = work / "job-hosts.txt"
        hosts_file.write_text("\n".join(lines) + "\n")
        run = runbook(
            [
                "run",
                "nccl-hang",
                "--hosts-from-file",
                str(hosts_file),
                "--identity",
                str(host_network.client_key.private_path),
                "--known-hosts",
                str(host_network.known_hosts_path),
                "--no-input",
                "--format",
                "json",
                "--run-dir",
                str(work / "run"),
            ],
            cli_env(work),
            timeout=240,
        )
        assert run.rc == 0, run.stderr[-3000:]
        verdict: dict[str, Any] = json.loads(run.stdout)
        (work / "job-verdict.json").write_text(json.dumps(verdict, indent=2))
        yield verdict, job


def node_named(verdict: dict[str, Any], host: TestHost) -> str:
    """The job verdict's name for a host (the hostname it reported, else its address)."""
    return next(
        str(n["node"])
        for n in verdict["nodes"]
        if n["target"].endswith(f"@{host.address}:{host.port}")
    )


def test_the_job_verdict_names_the_stalled_rank_its_node_and_its_stack(
    two_nodes: list[tuple[TestHost, Node]], job_verdict: tuple[dict[str, Any], HangingJob]
) -> None:
    verdict, _ = job_verdict
    b = node_named(verdict, two_nodes[1][0])
    print("JOB VERDICT:", verdict["statement"])
    assert verdict["root_cause"] == "rank-stalled", verdict["statement"]
    assert verdict["scope"] == "node" and verdict["node"] == b
    stalled = verdict["stalled_ranks"]
    assert [(s["rank"], s["node"]) for s in stalled] == [(2, b)]
    assert stalled[0]["stack"][-1].startswith("wait_for_data (")
    statement = verdict["statement"]
    assert statement.startswith(f"rank 2 ({b}) never entered all_reduce #4 of pg 0")
    assert "→ wait_for_data (" in statement
    assert "ranks 0, 1, 3 wait in all_reduce #4" in statement
    assert verdict["hang"]["waiting"] == [0, 1, 3] and verdict["hang"]["behind"] == [2]
    # the first anomaly is rank 2's own last collective, on hang-b
    first = verdict["first_anomaly"]
    assert first["node"] == b and first["source"] == "fr/nccl_trace_rank_2.b64"


def test_each_node_read_only_its_own_ranks(
    two_nodes: list[tuple[TestHost, Node]], job_verdict: tuple[dict[str, Any], HangingJob]
) -> None:
    verdict, job = job_verdict
    a, b = (node_named(verdict, host) for host, _ in two_nodes)
    nodes = {n["node"]: n for n in verdict["nodes"]}
    # hang-a's ranks only wait (for ranks not on it): no cause of its own
    assert nodes[a]["root_cause"] == "inconclusive"
    assert nodes[b]["root_cause"] == "rank-stalled"
    for name, ranks in ((a, [0, 1]), (b, [2, 3])):
        node_verdict = json.loads((job.dir / "run" / "nodes" / name / "verdict.json").read_text())
        state = next(s for s in node_verdict["stages"] if s["id"] == "collective-state")
        hang = state["facts"]["hang"]
        assert [v["rank"] for v in hang["views"]] == ranks, name
        assert hang["pyspy"]["ranks"] == ranks and hang["fr"]["ranks"] == ranks
