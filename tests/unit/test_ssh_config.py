"""How an ssh config turns `ssh://NAME` into where to connect and how (transports/ssh_config):
real `paramiko.SSHConfig` parsing of config text, no network."""

from __future__ import annotations

from pathlib import Path

import paramiko
import pytest

from runbook.errors import UsageError
from runbook.transports import ssh_config
from runbook.transports.ssh_config import Given, resolve

CONFIG = """
Host gpu-* !gpu-skip
    HostName %h.cluster.example
    User trainer
    Port 2222
    IdentityFile {keys}/id_%r
    IdentitiesOnly yes
    UserKnownHostsFile {keys}/known_%h
    ProxyJump bastion
    ConnectTimeout 4
    StrictHostKeyChecking no

Host bastion
    HostName 192.0.2.10
    User jump
    ProxyJump outer

Host outer
    HostName 192.0.2.1
    Port 2200

Host chained
    HostName 192.0.2.50
    ProxyJump first,second:2022

Host first
    HostName 192.0.2.61

Host aliased
    HostName 192.0.2.70
    HostKeyAlias gpu-fleet-key

Host accepting
    StrictHostKeyChecking accept-new

Host strict
    StrictHostKeyChecking yes
"""


@pytest.fixture
def config(tmp_path: Path) -> paramiko.SSHConfig:
    (tmp_path / "id_trainer").write_text("not read here")
    path = tmp_path / "config"
    path.write_text(CONFIG.format(keys=tmp_path))
    loaded = ssh_config.load(str(path))
    assert loaded is not None
    return loaded


def test_an_alias_resolves_like_ssh_does(config, tmp_path) -> None:  # type: ignore[no-untyped-def]
    address, options = resolve("gpu-7", config, Given())
    assert (address.host, address.port, address.user) == ("gpu-7.cluster.example", 2222, "trainer")
    assert str(address) == "ssh://trainer@gpu-7"  # the name typed is the name shown
    assert address.known_hosts_name == "[gpu-7.cluster.example]:2222"
    assert options.identities == (tmp_path / "id_trainer",)
    assert options.allow_agent is False  # IdentitiesOnly
    assert options.known_hosts == tmp_path / "known_gpu-7.cluster.example"
    assert options.connect_timeout == 4
    # one jump host, itself reached through its own ProxyJump
    assert options.jump is not None and options.jump.host == "192.0.2.10"
    assert options.jump.user == "jump"
    assert options.jump_options is not None and options.jump_options.jump is not None
    assert (options.jump_options.jump.host, options.jump_options.jump.port) == ("192.0.2.1", 2200)


def test_a_negated_pattern_keeps_its_host_out(config) -> None:  # type: ignore[no-untyped-def]
    address, options = resolve("gpu-skip", config, Given())
    assert (address.host, address.port, address.user) == ("gpu-skip", 22, "root")
    assert options.jump is None and str(address) == "ssh://root@gpu-skip:22"


def test_the_command_line_wins_over_the_config(config, tmp_path) -> None:  # type: ignore[no-untyped-def]
    key = tmp_path / "mine"
    given = Given(
        identities=(key,),
        known_hosts=tmp_path / "kh",
        jump="root@192.0.2.99:2022",
        connect_timeout=9,
    )
    address, options = resolve("ops@gpu-1:23", config, given)
    assert (address.host, address.port, address.user) == ("gpu-1.cluster.example", 23, "ops")
    assert options.identities == (key,) and options.allow_agent is True
    assert options.known_hosts == tmp_path / "kh"
    assert options.connect_timeout == 9
    assert options.jump is not None
    assert (options.jump.host, options.jump.port, options.jump.user) == ("192.0.2.99", 2022, "root")


def test_a_proxyjump_chain_goes_through_each_hop_in_order(config) -> None:  # type: ignore[no-untyped-def]
    _, options = resolve("chained", config, Given())
    last = options.jump
    assert last is not None and (last.host, last.port) == ("second", 2022)
    assert options.jump_options is not None
    first = options.jump_options.jump
    assert first is not None and first.host == "192.0.2.61"  # resolved through the config
    assert options.jump_options.jump_options is not None
    assert options.jump_options.jump_options.jump is None


def test_host_key_alias_is_the_name_looked_up_and_certified(config) -> None:  # type: ignore[no-untyped-def]
    address, _ = resolve("aliased", config, Given())
    assert address.known_hosts_name == "gpu-fleet-key"
    assert address.principal == "gpu-fleet-key"


@pytest.mark.parametrize(
    ("name", "flag", "accepts"),
    [
        ("gpu-1", False, False),  # StrictHostKeyChecking no: verification stays on
        ("gpu-1", True, True),  # ... and the flag alone decides
        ("accepting", False, True),  # accept-new: as the flag
        ("strict", True, False),  # yes: the stricter setting wins over the flag
    ],
)
def test_strict_host_key_checking_is_never_weaker_than_without_a_config(
    config, name, flag, accepts
) -> None:  # type: ignore[no-untyped-def]
    _, options = resolve(name, config, Given(accept_new_host_keys=flag))
    assert options.accept_new_host_keys is accepts


def test_no_config_means_the_name_is_the_address(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ssh/config there
    assert ssh_config.load(None) is None
    assert ssh_config.load("none") is None
    address, _ = resolve("gpu-1", None, Given())
    assert (address.host, address.port, address.user, address.alias) == ("gpu-1", 22, "root", None)


def test_an_unreadable_or_bad_config_is_a_usage_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UsageError, match="cannot read ssh config"):
        ssh_config.load(str(tmp_path / "missing"))
    bad = tmp_path / "bad"
    bad.write_text("Host x\n    Port many\n")
    loaded = ssh_config.load(str(bad))
    with pytest.raises(UsageError, match="bad Port 'many'"):
        resolve("x", loaded, Given())


def test_a_swept_alias_is_queued_for_approval_without_freezing_the_configs_user_or_port(
    config,
) -> None:  # type: ignore[no-untyped-def]
    """An approval re-opens the target from the URL the sweep queued: a User/Port the config
    gave must be left to the config (the inventory's defaults would reach the wrong port)."""
    from types import SimpleNamespace

    from runbook.sweep.inventory import entries_from_inventory
    from runbook.sweep.run import ProposalQueue

    inventory = {
        "_meta": {"hostvars": {"gpu-1": {}, "plain": {}, "pinned": {"ansible_port": 2022}}},
        "all": {"hosts": ["gpu-1", "plain", "pinned"]},
    }
    entries = {e.name: e for e in entries_from_inventory(inventory, default_user="me")}
    queue = SimpleNamespace(options=SimpleNamespace(ssh_config=config))
    assert ProposalQueue._url(queue, entries["gpu-1"]) == "ssh://gpu-1"  # type: ignore[arg-type]
    assert ProposalQueue._url(queue, entries["plain"]) == "ssh://me@plain"  # type: ignore[arg-type]
    assert ProposalQueue._url(queue, entries["pinned"]) == "ssh://me@pinned:2022"  # type: ignore[arg-type]
