"""The sweep's metrics as on-call's alerts read them, from real sweeps of real SSH test hosts
into a textfile-collector directory: every file passes Prometheus' own `promtool check
metrics`; a host not swept has its own series; the proposals a sweep queues are counted in
runbook-approvals.prom; and a later sweep that reaches none of its hosts moves the last-run
timestamp but not the last-success one, so a staleness alert fires."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.hosts.harness import HostNetwork
from tests.integration.conftest import cli_env
from tests.sweep import fleet
from tests.sweep.helpers import parse_prom, promtool_check, queued, runbook

pytestmark = [pytest.mark.ssh, pytest.mark.live]


def one(samples: dict[str, Any], name: str) -> float:
    ((_, value),) = samples[name]
    return float(value)


def test_a_sweep_that_reaches_no_host_keeps_the_last_success_and_names_each_host(
    module_hosts: Any, host_network: HostNetwork, tmp_path: Path
) -> None:
    hosts, known = fleet.build(module_hosts, host_network, ["healthy", "xid"], tmp_path)
    first = next(iter(hosts.values()))[0]
    closed = {"ansible_host": first.address, "ansible_port": 1}  # refused at once
    reachable = fleet.write_inventory(
        tmp_path / "fleet.yml",
        fleet.inventory(host_network, hosts, known, extra={"closed": closed}),
    )
    env = cli_env(tmp_path)
    textfile = tmp_path / "textfile"

    swept = runbook(["sweep", "nccl-init-failure", "-i", str(reachable), "--timeout-per-host",
                     "20", "--report", str(tmp_path / "r1"), "--textfile-dir", str(textfile)],
                    env)
    assert swept.rc == 1, swept.stderr[-3000:]  # the Xid 79 is a finding
    assert sorted(p.name for p in textfile.iterdir()) == ["runbook-approvals.prom",
                                                           "runbook.prom"]
    for path in textfile.iterdir():
        promtool_check(path)
    prom = textfile / "runbook.prom"
    assert prom.read_text() == (tmp_path / "r1" / "runbook.prom").read_text()
    samples = parse_prom(prom.read_text())
    assert [lb for lb, _ in samples["runbook_sweep_host_not_swept"]] == [
        {"node": "closed", "status": "unreachable"}
    ]
    causes = {lb["node"]: lb["cause"] for lb, _ in samples["runbook_root_cause"]}
    assert sorted(causes.values()) == ["gpu-hardware", "healthy"]
    assert one(samples, "runbook_sweep_last_run_reached_hosts") == 1
    success = one(samples, "runbook_sweep_last_success_timestamp_seconds")
    assert success == one(samples, "runbook_sweep_last_run_timestamp_seconds")

    queue = parse_prom((textfile / "runbook-approvals.prom").read_text())
    pending = {(lb["kind"], lb["severity"]): v for lb, v in queue["runbook_approvals_pending"]}
    # the Xid node's drain, critical (hardware evidence), and whatever else the store holds
    assert pending[("node-drain", "critical")] == 1, pending
    assert sum(pending.values()) == len([p for p in queued(env) if p.state == "pending"])

    unreachable = fleet.write_inventory(
        tmp_path / "gone.yml",
        fleet.inventory(host_network, {}, known, extra={"closed": closed, "closed-2": closed}),
    )
    failed = runbook(["sweep", "nccl-init-failure", "-i", str(unreachable), "--timeout-per-host",
                      "20", "--report", str(tmp_path / "r2"), "--textfile-dir", str(textfile)],
                     env)
    assert failed.rc == 3, failed.stderr[-3000:]
    promtool_check(prom)
    samples = parse_prom(prom.read_text())
    assert one(samples, "runbook_sweep_last_run_reached_hosts") == 0
    assert one(samples, "runbook_sweep_last_run_timestamp_seconds") > success
    assert one(samples, "runbook_sweep_last_success_timestamp_seconds") == success  # kept
    assert sorted(lb["node"] for lb, _ in samples["runbook_sweep_host_not_swept"]) == [
        "closed", "closed-2"
    ]
    assert "runbook_root_cause" not in samples
    # the new report directory knew no earlier success: the textfile directory's file did
    fresh = parse_prom((tmp_path / "r2" / "runbook.prom").read_text())
    assert one(fresh, "runbook_sweep_last_success_timestamp_seconds") == success
