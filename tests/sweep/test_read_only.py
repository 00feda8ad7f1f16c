"""A sweep is read-only: a remedy the runbook proposes is queued for approval, never run.

The proposed remedy here is the NCCL_IB_DISABLE A/B test, whose playbook runs all_reduce_perf
on the node itself; the node's all_reduce_perf is a shim that leaves a mark when it runs, so
"not executed" is checked on the host, not inferred from our own code."""

from __future__ import annotations

import ast
import time
from pathlib import Path
from typing import Any

from runbook.spec import load_file
from runbook.sweep.analyze import analyze_dir
from tests.sweep import fleet
from tests.sweep.helpers import REPO, RUNBOOKS, queued, runbook

MARKING_ALL_REDUCE = """#!/bin/sh
# test shim: all_reduce_perf that leaves a mark on the host when anything runs it
touch {mark}
echo '# nccl-tests shim'
"""


def test_a_proposed_remedy_is_queued_and_never_run_on_the_host(
    ssh_host: Any, host_network: Any, tmp_path: Path, env: dict[str, str]
) -> None:
    host = ssh_host("ib-less")
    mark = Path(host.dir) / "all_reduce_perf-ran"
    host.write_shim("all_reduce_perf", MARKING_ALL_REDUCE.format(mark=mark))
    known = tmp_path / "known_hosts"
    known.write_text(Path(host_network.known_hosts_path).read_text())
    inventory = fleet.write_inventory(
        tmp_path / "inventory.yml",
        fleet.inventory(host_network, {host.name: (host, "healthy")}, known),
    )
    result = runbook(
        [
            "sweep",
            str(RUNBOOKS / "ab-proposal.yaml"),
            "-i",
            str(inventory),
            "--report",
            str(tmp_path / "report"),
            "--format",
            "json",
            "--keep-bundles",
        ],
        env,
    )
    assert result.rc == 1, result.stderr  # a finding
    (swept,) = result.json()["hosts"]
    assert swept["verdict"]["root_cause"] == "rdma-misconfigured"
    assert [p["kind"] for p in swept["verdict"]["proposals"]] == ["nccl-ib-disable-ab"]

    (proposal,) = queued(env)
    assert (proposal.kind, proposal.state, proposal.source) == (
        "nccl-ib-disable-ab",
        "pending",
        "sweep",
    )
    assert proposal.node == host.name and swept["queued"] == [proposal.id]
    # planned against the node as the sweep reached it, for an approver to run later
    assert proposal.plan["playbook"] == "nccl-ib-disable-ab.yml"
    node_vars = proposal.plan["inventory"]["all"]["hosts"][host.name]
    assert node_vars["ansible_host"] == host.address
    assert f"UserKnownHostsFile={known}" in node_vars["ansible_ssh_common_args"]
    assert proposal.target["url"] == f"ssh://root@{host.address}:22"

    # --keep-bundles: the host's run directory, which the queued proposal points at and
    # analyze-dir reads again to the same verdict
    kept = tmp_path / "report" / "hosts" / host.name
    assert swept["run_dir"] == str(kept) == proposal.run_dir
    assert (kept / "bundle" / "bundle.yaml").is_file() and (kept / "events.jsonl").is_file()
    again = analyze_dir(
        tmp_path / "report" / "hosts",
        load_file(RUNBOOKS / "ab-proposal.yaml"),
        runbook_ref="ab-proposal",
    )
    assert [(h.host, h.root_cause) for h in again.hosts] == [(host.name, "rdma-misconfigured")]

    time.sleep(0.3)
    assert not mark.exists(), "the remedy's command ran on the host"
    # and nothing but the sweep's one connection logged in (a playbook run would be another)
    assert host.sshd_log_tail(500).count("Accepted publickey for root") == 1


def _calls_and_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.Attribute):
            names.add(f".{node.attr}")
    return names


def test_no_sweep_module_can_run_a_playbook_or_approve() -> None:
    # the sweep's package, its command, and the library entry point the command calls
    files = [
        *sorted((REPO / "runbook" / "sweep").glob("*.py")),
        REPO / "runbook" / "cli" / "sweep.py",
        REPO / "runbook" / "session.py",
    ]
    assert len(files) > 10
    for path in files:
        used = _calls_and_imports(path)
        forbidden = {
            "ansible_runner",
            "runbook.remedies.playbook",
            ".approve",
            ".run_playbook",
            ".preview",
            "runbook.remedies.live",
        } & used
        assert not forbidden, (path.name, forbidden)
