"""What scheduled sweeps rely on: a lock so two sweeps of one inventory never overlap, stable
shards (`--shard K/N`) that N CronJob pods split a fleet with, and `sweep-merge` joining the
shards' reports into one."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from runbook.sweep.lock import SweepLock
from runbook.sweep.shard import parse_shard, select, shard_of
from tests.sweep import fleet
from tests.sweep.helpers import HOSTNAME_RUNBOOK, REPO, parse_prom, runbook


@pytest.fixture
def silent_server() -> Iterator[tuple[str, int]]:
    """A TCP port that accepts connections and never says a word (a hung sshd)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield server.getsockname()


def test_a_second_sweep_of_the_same_inventory_exits_2_naming_the_holder(
    silent_server: tuple[str, int], tmp_path: Path, env: dict[str, str]
) -> None:
    address, port = silent_server
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        yaml.safe_dump(
            {"all": {"hosts": {"hung": {"ansible_host": address, "ansible_port": port}}}}
        )
    )
    first = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runbook",
            "sweep",
            str(HOSTNAME_RUNBOOK),
            "-i",
            str(inventory),
            "--timeout-per-host",
            "8",
            "--report",
            str(tmp_path / "r1"),
        ],
        env=env,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert first.stderr is not None
        # the first progress line comes once the inventory is read, under the lock
        assert first.stderr.readline().endswith(": 1 host\n")
        second = runbook(["sweep", str(HOSTNAME_RUNBOOK), "-i", str(inventory)], env)
        assert second.rc == 2
        (line,) = second.stderr.strip().splitlines()
        assert (
            f"another sweep of inventory {inventory.resolve()} is running (pid {first.pid}" in line
        )
        # the kernel drops the lock with its holder, even on SIGKILL
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        lock = SweepLock(
            f"inventory {inventory.resolve()}", Path(env["RUNBOOK_STATE_DIR"]) / "sweep-locks"
        )
        with lock:
            assert lock.path.read_text().split("\n")[0] == str(os.getpid())
    finally:
        if first.poll() is None:
            first.kill()
        first.wait(10)
        if first.stderr is not None:
            first.stderr.close()


def test_shards_are_stable_by_name_alone() -> None:
    names = [f"gpu-node-{i:04d}" for i in range(1000)]
    shards = {k: select(names, names, k, 8) for k in range(1, 9)}
    assert sorted(n for part in shards.values() for n in part) == sorted(names)  # each once
    assert all(90 <= len(part) <= 160 for part in shards.values()), {
        k: len(v) for k, v in shards.items()
    }
    # another order, and a host added, move no host to another shard
    reordered = [*reversed(names), "gpu-node-new"]
    for k in range(1, 9):
        assert set(shards[k]) <= set(select(reordered, reordered, k, 8))
    # sha256, not Python's per-process salted hash(): every pod computes the same split
    code = (
        "from runbook.sweep.shard import shard_of; print([shard_of(f'n{i}', 5) for i in range(50)])"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
            cwd=REPO,
        ).stdout
        for seed in ("1", "2")
    }
    assert outputs == {str([shard_of(f"n{i}", 5) for i in range(50)]) + "\n"}
    with pytest.raises(Exception, match="K must be between 1 and N"):
        parse_shard("0/4")


def test_shard_sweeps_split_the_fleet_and_merge_into_one_report(
    ssh_host: Any, host_network: Any, tmp_path: Path, env: dict[str, str]
) -> None:
    names = [f"s{i}" for i in range(6)]
    assert {shard_of(n, 2) for n in names} == {1, 2}  # both shards have hosts
    hosts = ssh_host.many(names)
    known = tmp_path / "known_hosts"
    known.write_text(Path(host_network.known_hosts_path).read_text())
    inventory = fleet.write_inventory(
        tmp_path / "inventory.yml",
        fleet.inventory(host_network, {h.name: (h, "healthy") for h in hosts}, known),
    )
    parts = {}
    for k in (1, 2):
        result = runbook(
            [
                "sweep",
                str(HOSTNAME_RUNBOOK),
                "-i",
                str(inventory),
                "--shard",
                f"{k}/2",
                "--report",
                str(tmp_path / f"shard{k}"),
                "--format",
                "json",
            ],
            env,
        )
        assert result.rc == 0, result.stderr
        data = result.json()
        assert data["shard"] == f"{k}/2"
        parts[k] = {h["host"] for h in data["hosts"]}
        assert parts[k] == {n for n in names if shard_of(n, 2) == k}
    assert parts[1].isdisjoint(parts[2]) and parts[1] | parts[2] == set(names)

    merged = runbook(
        [
            "sweep-merge",
            str(tmp_path / "shard1"),
            str(tmp_path / "shard2"),
            "--report",
            str(tmp_path / "merged"),
            "--format",
            "json",
        ],
        env,
    )
    assert merged.rc == 0, merged.stderr
    data = merged.json()
    assert data["mode"] == "merge" and data["shards"] == ["1/2", "2/2"]
    assert data["missing_shards"] == []
    assert [h["host"] for h in data["hosts"]] == sorted(names)
    assert data["counts"]["healthy"] == 6
    assert json.loads((tmp_path / "merged" / "sweep.json").read_text()) == data
    prom = parse_prom((tmp_path / "merged" / "runbook.prom").read_text())
    assert {labels["node"] for labels, _ in prom["runbook_root_cause"]} == set(names)
    for name in ("sweep.md", "junit.xml"):
        assert (tmp_path / "merged" / name).stat().st_size > 0

    half = runbook(
        ["sweep-merge", str(tmp_path / "shard1"), "--report", str(tmp_path / "half")], env
    )
    assert half.rc == 3  # healthy hosts, but shard 2/2 of the fleet is missing
    assert "missing shards: 2/2" in half.stdout
