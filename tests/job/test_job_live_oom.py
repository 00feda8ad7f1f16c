"""The live OOM scenario as one job across two SSH test hosts (tests/scenarios/multihost.py):
ranks 0–1 on mh-a with room to spare, ranks 2–3 on mh-b whose real cgroup-v1 limit is too
small, so the kernel OOM-kills rank 2 and every other rank fails at init. One kernel serves
both hosts here, so mh-a reads mh-b's OOM in dmesg too: the job verdict must blame mh-b's
cgroup, not mh-a's and not "both nodes". GPU tools are the scenario shims (no GPU here)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.hosts.harness import HostNetwork
from tests.integration.conftest import cli_env
from tests.scenarios.multihost import TwoHostOOM, two_host_oom_job
from tests.sweep.helpers import runbook

pytestmark = [pytest.mark.live, pytest.mark.ssh]


@pytest.fixture(scope="module")
def two_hosts(
    host_network: HostNetwork, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TwoHostOOM]:
    # names of their own: a cgroup is named after its host, and the scenario suite's own run
    # of this job (mh-a, mh-b) checks that the kernel logged exactly one OOM for its cgroup
    work = tmp_path_factory.mktemp("two-hosts")
    with two_host_oom_job(host_network, work, names=("jb-a", "jb-b")) as job:
        yield job


@pytest.fixture(scope="module")
def job_verdict(
    two_hosts: TwoHostOOM, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, Any], Path]:
    work = tmp_path_factory.mktemp("job-oom")
    lines = []
    for host in two_hosts.hosts:
        ranks = ",".join(str(r) for r in host.ranks)
        variables = " ".join(f"{k}={v}" for k, v in host.variables().items())
        lines.append(f"{host.target} ranks={ranks} {variables}")
    hosts_file = work / "job-hosts.txt"
    hosts_file.write_text("\n".join(lines) + "\n")
    run_dir = work / "run"
    run = runbook(
        [
            "run",
            "nccl-init-failure",
            "--hosts-from-file",
            str(hosts_file),
            "--identity",
            str(two_hosts.identity),
            "--known-hosts",
            str(two_hosts.known_hosts),
            "--no-input",
            "--format",
            "json",
            "--run-dir",
            str(run_dir),
        ],
        cli_env(work),
        timeout=180,
    )
    assert run.rc == 0, run.stderr[-3000:]
    verdict: dict[str, Any] = run.json()
    return verdict, run_dir


def test_the_job_verdict_blames_the_host_whose_cgroup_was_too_small(
    two_hosts: TwoHostOOM, job_verdict: tuple[dict[str, Any], Path]
) -> None:
    verdict, _ = job_verdict
    a, b = two_hosts.a, two_hosts.b
    nodes = {n["target"]: n for n in verdict["nodes"]}
    assert verdict["root_cause"] == "host-memory-oom", verdict["statement"]
    assert verdict["scope"] == "node"
    first = verdict["first_anomaly"]
    assert first["node"] == nodes[b.target]["node"], first
    assert first["source"] == "dmesg.txt"
    # b's own verdict blames its own cgroup; a's does not blame memory at all
    assert nodes[b.target]["root_cause"] == "host-memory-oom"
    assert nodes[a.target]["root_cause"] != "host-memory-oom"
    assert b.cgroup_dir.rstrip("/").rsplit("/", 1)[-1] in first["text"] or any(
        b.cgroup_dir.rstrip("/").rsplit("/", 1)[-1] in c["finding"]
        for c in verdict["chain"]
        if c["node"] == first["node"]
    ), verdict["chain"]
    # only b's memory was at its limit
    assert verdict["memory"]["at_limit"] == [nodes[b.target]["node"]], verdict["memory"]
    # both clocks read (one machine: offsets near zero)
    for node in verdict["nodes"]:
        assert node["clock"] is not None and abs(node["clock"]["offset_s"]) < 0.5


def test_the_rank_table_shows_the_killed_rank_and_the_survivors_errors(
    two_hosts: TwoHostOOM, job_verdict: tuple[dict[str, Any], Path]
) -> None:
    verdict, run_dir = job_verdict
    ranks = {r["rank"]: r for r in verdict["ranks"]}
    assert sorted(ranks) == [0, 1, 2, 3]
    killed = ranks[two_hosts.oom_rank]
    # rank 2 logged its pid; dmesg's `Killed process PID` names it: matched, not inferred
    assert killed["exit"]["oom_killed"] and not killed["exit"]["inferred"], killed
    assert killed["exit"]["signal"] == 9
    for rank in (0, 1):
        assert ranks[rank]["first_error"] is not None, ranks[rank]
        assert ranks[rank]["exit"] is None or not ranks[rank]["exit"]["oom_killed"]
    assert "rank 2 on" in verdict["statement"] and "was OOM-killed" in verdict["statement"]
    assert "before rank" in verdict["statement"]
    report = (run_dir / "job.md").read_text()
    assert "| 2 |" in report and "OOMKilled" in report
