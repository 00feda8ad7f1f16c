"""Sweep shards queue into one approval queue: two shards of a fleet of real SSH test hosts
(`--shard 1/2`, `--shard 2/2`, each its own process and database connection, as the shipped
Indexed Job's pods are) sweep with `RUNBOOK_DB` naming one PostgreSQL database (the private
server of tests/pg); every Xid node's drain lands in that one queue, read by one
`approvals list`, and the audit chain the shards wrote together verifies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.hosts.harness import HostNetwork
from tests.integration.conftest import cli_env
from tests.sweep import fleet
from tests.sweep.helpers import runbook

pytestmark = [pytest.mark.ssh, pytest.mark.live]


def test_two_sweep_shards_queue_the_fleets_drains_into_one_postgresql_queue(
    module_hosts: Any, host_network: HostNetwork, tmp_path: Path, pg_url: str
) -> None:
    kinds = ["xid", "healthy", "xid", "healthy", "xid", "healthy"]
    hosts, known = fleet.build(module_hosts, host_network, kinds, tmp_path, prefix="q")
    inventory = fleet.write_inventory(
        tmp_path / "fleet.yml", fleet.inventory(host_network, hosts, known)
    )
    env = {**cli_env(tmp_path), "RUNBOOK_DB": pg_url}
    swept: dict[str, set[str]] = {}
    try:
        for shard in ("1/2", "2/2"):
            done = runbook(
                ["sweep", "nccl-init-failure", "-i", str(inventory), "--shard", shard,
                 "--timeout-per-host", "30", "--report", str(tmp_path / f"shard-{shard[0]}"),
                 "--format", "json"],
                env, timeout=300,
            )  # fmt: skip
            assert done.rc in (0, 1), done.stderr[-3000:]  # 1: the shard found something
            swept[shard] = {h["host"] for h in done.json()["hosts"]}
    finally:
        fleet.resume(hosts.values())
    assert not swept["1/2"] & swept["2/2"] and swept["1/2"] | swept["2/2"] == set(hosts)
    listed = runbook(["approvals", "list", "--format", "json"], env)
    assert listed.rc == 0, listed.stderr
    drains = {p["node"] for p in json.loads(listed.stdout) if p["kind"] == "node-drain"}
    xid_nodes = {name for name, (_, kind) in hosts.items() if kind == "xid"}
    assert all(swept[shard] & xid_nodes for shard in swept)  # each shard swept an Xid node
    assert drains == xid_nodes  # from both shards, in one queue
    verified = runbook(["audit", "verify"], env)
    assert verified.rc == 0 and "chain intact" in verified.stdout, verified.stderr
    assert not (tmp_path / "state" / "approvals.db").exists()  # no queue of a shard's own
