"""A proposal's playbook reaches the node the diagnosis reached: the same host, port, user,
jump host, key and known_hosts, through OpenSSH as Ansible runs it.

The node is set up as on-call meets one: an alias in `$HOME/.ssh/config` on a non-default port,
the key named `~/.ssh/…`, reachable only through a bastion (itself an alias), and `$HOME`
unlike the passwd home (OpenSSH's `ssh` reads the passwd home's config and expands `~` there;
the run reads $HOME's). Real sshd test hosts; `ssh -G` is the oracle for what ssh would do;
the last test runs a real Ansible command through ansible-runner with the inventory a plan
gets."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from typing import Any

import pytest

from runbook.remedies import plans, reach
from runbook.session import TargetSpec

pytestmark = pytest.mark.ssh

NODE_PORT = 24510


@pytest.fixture
def field_node(ssh_host, known_hosts, client_key, tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """gpu-node-01 (port 24510, root logins only from the bastion) behind `bastion`, both
    aliases of $HOME/.ssh/config, with HOME a directory of the test's."""
    bastion = ssh_host("reach-bastion")
    node = ssh_host(
        "reach-node", port=NODE_PORT, extra_sshd_config=f"AllowUsers root@{bastion.address}"
    )
    home = tmp_path / "home"
    dot_ssh = home / ".ssh"
    dot_ssh.mkdir(parents=True)
    shutil.copy(client_key.private_path, dot_ssh / "id_ed25519")
    (dot_ssh / "id_ed25519").chmod(0o600)
    (dot_ssh / "known_hosts").write_text(known_hosts.read_text())
    (dot_ssh / "config").write_text(
        "Host gpu-node-01\n"
        f"    HostName {node.address}\n"
        f"    Port {NODE_PORT}\n"
        "    User root\n"
        "    IdentityFile ~/.ssh/id_ed25519\n"
        "    ProxyJump bastion\n"
        "\n"
        "Host bastion\n"
        f"    HostName {bastion.address}\n"
        "    User root\n"
        "    IdentityFile ~/.ssh/id_ed25519\n"
    )
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("RUNBOOK_SSH_CONFIG", raising=False)
    return {"node": node, "bastion": bastion, "home": home}


def _planned_host(url: str) -> dict[str, Any]:
    """The inventory host a plan gets for a run of `runbook run --target URL` (no flags)."""
    target = TargetSpec(url=url).record()
    inventory = plans.node_inventory("gpu-node-01", target)
    return dict(inventory["all"]["hosts"]["gpu-node-01"])


def _ssh_argv(host: dict[str, Any]) -> list[str]:
    """The ssh command line Ansible's ssh connection builds from these variables."""
    return [
        "ssh", *shlex.split(host["ansible_ssh_common_args"]),
        "-o", f"Port={host['ansible_port']}", "-o", f"User={host['ansible_user']}",
        "-o", "BatchMode=yes", "-o", f"ConnectTimeout={host['ansible_ssh_timeout']}",
        host["ansible_host"],
    ]  # fmt: skip


def _ssh_g(argv: list[str]) -> dict[str, str]:
    out = subprocess.run(
        [argv[0], "-G", *argv[1:]], capture_output=True, text=True, check=True, timeout=10
    ).stdout
    config: dict[str, str] = {}
    for line in out.splitlines():
        key, _, value = line.partition(" ")
        # repeated keys (identityfile): every value, one per line
        config[key] = f"{config[key]}\n{value}" if key in config else value
    return config


def test_the_recorded_target_names_the_config_file_the_run_read(field_node) -> None:  # type: ignore[no-untyped-def]
    """Not `None` ("look again later"): an approver in another shell, with another $HOME,
    must resolve the alias with the same file."""
    target = TargetSpec(url="ssh://gpu-node-01").record()
    assert target.ssh_config == str((field_node["home"] / ".ssh" / "config").resolve())


def test_ssh_resolves_the_alias_to_the_node_the_run_resolved(field_node) -> None:  # type: ignore[no-untyped-def]
    node = field_node["node"]
    home = field_node["home"]
    config = _ssh_g(_ssh_argv(_planned_host("ssh://gpu-node-01")))
    assert config["hostname"] == node.address
    assert config["port"] == str(NODE_PORT)  # not 22: the config's Port is kept
    assert config["user"] == "root"
    assert config["userknownhostsfile"] == str(home / ".ssh" / "known_hosts")
    assert config["stricthostkeychecking"] in ("true", "yes")
    # the key the run used ($HOME's), not the passwd home's ~/.ssh/id_ed25519
    assert str(home / ".ssh" / "id_ed25519") in config["identityfile"].splitlines()
    # the bastion is reached with the same trust and key, not ssh's defaults for it
    proxy = config["proxycommand"]
    assert field_node["bastion"].address in proxy and f"{node.address}:{NODE_PORT}" in proxy
    assert f"UserKnownHostsFile={home / '.ssh' / 'known_hosts'}" in proxy
    assert "StrictHostKeyChecking=yes" in proxy


def test_a_port_typed_in_the_target_wins_over_the_config(field_node) -> None:  # type: ignore[no-untyped-def]
    config = _ssh_g(_ssh_argv(_planned_host("ssh://gpu-node-01:2299")))
    assert config["port"] == "2299"


def test_ssh_with_the_planned_settings_logs_in_on_the_node_through_the_bastion(field_node) -> None:  # type: ignore[no-untyped-def]
    """For real: the node refuses root from anywhere but the bastion, and its port is not 22."""
    argv = [*_ssh_argv(_planned_host("ssh://gpu-node-01")), "hostname"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "reach-node"


def test_an_unknown_bastion_key_is_refused_as_the_run_would(field_node) -> None:  # type: ignore[no-untyped-def]
    """known_hosts without the bastion's key: OpenSSH may not accept it for the jump."""
    known = field_node["home"] / ".ssh" / "known_hosts"
    known.write_text(field_node["node"].host_key_line() + "\n")
    argv = [*_ssh_argv(_planned_host("ssh://gpu-node-01")), "true"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert done.returncode == 255
    assert "Host key verification failed" in done.stderr


def test_ansible_runs_on_the_node_the_run_reached(field_node, ansible_env, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """An ad-hoc command through ansible-runner with exactly the plan's inventory."""
    import ansible_runner

    inventory = plans.node_inventory("gpu-node-01", TargetSpec(url="ssh://gpu-node-01").record())
    (tmp_path / "adhoc").mkdir()
    runner = ansible_runner.run(
        private_data_dir=str(tmp_path / "adhoc"),
        inventory=inventory,
        host_pattern="all",
        module="ansible.builtin.command",
        module_args="hostname",
        envvars={**ansible_env, "HOME": str(field_node["home"])},
        quiet=True,
        timeout=120,
    )
    results = [
        e["event_data"]["res"]
        for e in runner.events
        if e.get("event") == "runner_on_ok" and "res" in e.get("event_data", {})
    ]
    assert runner.rc == 0, [e.get("stdout") for e in runner.events]
    assert [r["stdout"] for r in results] == ["reach-node"]


def test_the_approver_reads_where_it_will_run(field_node) -> None:  # type: ignore[no-untyped-def]
    node, bastion = field_node["node"], field_node["bastion"]
    where = reach.resolve(TargetSpec(url="ssh://gpu-node-01").record()).describe()
    assert where == (
        f"gpu-node-01 = root@{node.address}:{NODE_PORT} via root@{bastion.address}:22"
    )



def test_approvals_show_names_the_node_its_address_and_the_inventory(
    field_node, cli, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """A/B proposal queued from a verdict for `ssh://gpu-node-01`: `approvals show` says where
    it runs before anyone approves it (the prompt shows the same line)."""
    from runbook import config as config_mod
    from runbook.remedies.approval import Desk
    from runbook.session import analyze
    from tests.tools import bundles

    verdict = analyze(bundles.path("rdma-misconfigured-multinode"), "nccl-init-failure", {}).verdict
    db = tmp_path / "approvals.db"
    with Desk(config_mod.load(None, db=str(db))) as desk:
        queued = desk.queue_verdict(
            verdict, node="gpu-node-01", target=TargetSpec(url="ssh://gpu-node-01").record(),
            runbook_id="nccl-init-failure", variables={}, run_dir=None,
        )  # fmt: skip
    [ab] = [q.proposal for q in queued if q.proposal.kind == "nccl-ib-disable-ab"]
    shown = cli("approvals", "show", ab.id, "--db", str(db),
                extra_env={"HOME": str(field_node["home"])})  # fmt: skip
    assert shown.rc == 0, shown.stderr
    node, bastion = field_node["node"], field_node["bastion"]
    assert (
        f"runs on: gpu-node-01 = root@{node.address}:{NODE_PORT} via root@{bastion.address}:22"
        in shown.stdout
    )
    assert "inventory:" in shown.stdout and f"ansible_port = {NODE_PORT}" in shown.stdout


def test_a_default_key_in_home_is_the_key_ssh_is_given(field_node) -> None:  # type: ignore[no-untyped-def]
    """No IdentityFile, no --identity: the run used $HOME/.ssh/id_ed25519 (paramiko looks
    there); ssh would look in the passwd home's, so the plan names the key."""
    config = field_node["home"] / ".ssh" / "config"
    config.write_text(
        "\n".join(ln for ln in config.read_text().splitlines() if "IdentityFile" not in ln) + "\n"
    )
    host = _planned_host("ssh://gpu-node-01")
    assert str(field_node["home"] / ".ssh" / "id_ed25519") in host["ansible_ssh_common_args"]
    done = subprocess.run([*_ssh_argv(host), "hostname"], capture_output=True, text=True,
                          timeout=30)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "reach-node"
