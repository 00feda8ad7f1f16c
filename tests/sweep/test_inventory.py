"""Inventories in Ansible's own formats, read by Ansible (`ansible-inventory`), become sweep
targets: YAML and INI files with groups and group/host vars, a directory with group_vars/ and
host_vars/, an executable dynamic inventory, `--limit` patterns as Ansible means them, and a
jump host that really carries the connection (a bastion test host)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from runbook.sweep.inventory import (
    HostEntry,
    InventoryError,
    entries_from_inventory,
    entry_from_hostvars,
    load_inventory,
)
from runbook.sweep.sshargs import parse_ssh_args
from tests.sweep import fleet
from tests.sweep.helpers import HOSTNAME_RUNBOOK, REPO, runbook
from tests.tools.ansible_env import ansible_dirs


def by_name(entries: list[HostEntry]) -> dict[str, HostEntry]:
    return {e.name: e for e in entries}


@pytest.fixture(autouse=True)
def _ansible_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ansible-inventory writes nothing outside the test's temp dir."""
    for name, value in ansible_dirs(tmp_path / "ansible").items():
        monkeypatch.setenv(name, value)


YAML_INVENTORY = """
all:
  vars:
    ansible_user: ops
    ansible_ssh_private_key_file: /keys/fleet
    ansible_ssh_common_args: >-
      -o ProxyJump=ops@bastion.example.org:2222
      -o UserKnownHostsFile=/etc/runbook/known_hosts -o StrictHostKeyChecking=yes
  children:
    gpu_nodes:
      children:
        h100:
          hosts:
            gpu-01: {ansible_host: 10.40.3.1}
            gpu-02: {ansible_host: 10.40.3.2, ansible_port: 2200, ansible_user: root}
        a100:
          hosts:
            gpu-03:
              ansible_host: 10.40.4.3
              runbook_vars: {app_log_dir: /data/logs}
    cpu_nodes:
      hosts:
        cpu-01: {ansible_host: 10.40.9.1, ansible_ssh_common_args: ""}
"""


def test_a_yaml_inventory_maps_hosts_groups_and_connection_vars(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yml"
    path.write_text(YAML_INVENTORY)
    hosts = by_name(load_inventory(str(path)))
    assert list(hosts) == ["cpu-01", "gpu-01", "gpu-02", "gpu-03"]  # sorted, as Ansible lists
    one, two, three, cpu = (hosts[n] for n in ("gpu-01", "gpu-02", "gpu-03", "cpu-01"))
    assert one.target == "ssh://ops@10.40.3.1:22"
    assert two.target == "ssh://root@10.40.3.2:2200"  # host vars beat group vars
    assert one.groups == ("gpu_nodes", "h100") and three.groups == ("a100", "gpu_nodes")
    assert one.jump == "ops@bastion.example.org:2222"
    assert one.known_hosts == "/etc/runbook/known_hosts"
    assert one.identities == ("/keys/fleet",)
    assert three.variables == {"app_log_dir": "/data/logs"}
    assert cpu.jump is None and cpu.known_hosts is None  # its own empty args win
    assert all(h.problem is None for h in hosts.values())


def test_limit_patterns_mean_what_they_mean_to_ansible(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yml"
    path.write_text(YAML_INVENTORY)
    # union, a regex, intersection and exclusion: Ansible's pattern language, evaluated by
    # Ansible: (h100 ∪ ~cpu-0[1-9] ∪ gpu-03) ∩ all ∖ gpu-02
    limited = load_inventory(str(path), limit="h100:~cpu-0[1-9]:gpu-03:&all:!gpu-02")
    assert [e.name for e in limited] == ["cpu-01", "gpu-01", "gpu-03"]
    with pytest.raises(InventoryError, match="no hosts match --limit 'nomatch'"):
        load_inventory(str(path), limit="nomatch")


def test_a_directory_inventory_with_group_vars_and_host_vars(tmp_path: Path) -> None:
    inv = tmp_path / "inventory"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "host_vars").mkdir()
    (inv / "hosts.ini").write_text(
        "[rack1]\nn1 ansible_host=10.0.1.1\nn2 ansible_host=10.0.1.2\n"
        "[rack2]\nn3 ansible_host=10.0.2.3\n[gpu:children]\nrack1\nrack2\n"
    )
    (inv / "group_vars" / "gpu.yml").write_text(
        "ansible_user: root\nansible_ssh_common_args: '-J admin@jump.internal -p 2022'\n"
    )
    (inv / "group_vars" / "rack2.yml").write_text("ansible_ssh_timeout: 4\n")
    (inv / "host_vars" / "n2.yml").write_text("ansible_ssh_private_key_file: ~/.ssh/n2\n")
    (inv / "README.md").write_text("not an inventory source: Ansible skips it\n")
    hosts = by_name(load_inventory(str(inv)))
    assert set(hosts) == {"n1", "n2", "n3"}
    assert hosts["n1"].target == "ssh://root@10.0.1.1:2022"  # -p in the ssh args
    assert hosts["n1"].jump == "admin@jump.internal"
    assert hosts["n2"].identities == ("~/.ssh/n2",)
    assert hosts["n3"].connect_timeout == 4.0 and hosts["n1"].connect_timeout is None
    assert hosts["n3"].groups == ("gpu", "rack2")


def test_an_executable_dynamic_inventory(tmp_path: Path) -> None:
    script = tmp_path / "cmdb.py"
    data = {
        "gpu": {"hosts": ["dyn-1", "dyn-2"], "vars": {"ansible_user": "svc"}},
        "_meta": {
            "hostvars": {
                "dyn-1": {"ansible_host": "10.9.0.1"},
                "dyn-2": {"ansible_host": "10.9.0.2", "ansible_port": 22022},
            }
        },
    }
    script.write_text(
        "#!/usr/bin/env python3\nimport json, sys\n"
        f"data = {data!r}\n"
        "print(json.dumps(data if sys.argv[1:] == ['--list'] else {}))\n"
    )
    script.chmod(0o755)
    hosts = by_name(load_inventory(str(script)))
    assert hosts["dyn-1"].target == "ssh://svc@10.9.0.1:22"
    assert hosts["dyn-2"].target == "ssh://svc@10.9.0.2:22022"
    assert hosts["dyn-2"].groups == ("gpu",)


def test_the_shipped_example_inventories_work_unchanged() -> None:
    yml = by_name(load_inventory(str(REPO / "inventory" / "example.yml")))
    assert yml["gpu-node-07"].target == "ssh://root@10.40.3.17:22"
    assert yml["gpu-node-07"].jump == "ops@bastion.example.org"
    assert yml["gpu-node-07"].groups == ("gpu_nodes",)
    kube = by_name(load_inventory(str(REPO / "inventory" / "k8s-gpu-nodes.yml")))
    assert kube["gpu-node-07"].target == "kubectl://kube-system/node-agent-x7k2p"
    assert kube["gpu-node-07"].container == "node-agent"


def test_an_inventory_ansible_cannot_parse_is_refused_in_one_line(
    tmp_path: Path, env: dict[str, str]
) -> None:
    bad = tmp_path / "broken.yml"
    bad.write_text("all:\n  hosts: [\n")
    result = runbook(["sweep", "nccl-init-failure", "-i", str(bad)], env)
    assert result.rc == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("runbook: inventory ") and "parse" in lines[-1], lines
    assert "Traceback" not in result.stderr
    with pytest.raises(InventoryError, match="no such file or directory"):
        load_inventory(str(tmp_path / "nope"))


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ("-o ProxyJump=ops@bastion:2222", {"jump": "ops@bastion:2222"}),
        ("-J admin@jump -o ProxyJump=other", {"jump": "admin@jump"}),  # ssh keeps the first
        ("-oProxyJump=none -o UserKnownHostsFile=/k1 /k2", {"jump": None, "known_hosts": "/k1"}),
        ("-o 'ProxyCommand=ssh -W %h:%p -p 2200 ops@bastion'", {"jump": "ops@bastion:2200"}),
        ("-o ProxyCommand='ssh -q -l ops -W %h:%p bastion'", {"jump": "ops@bastion"}),
        (
            "-o ConnectTimeout=7 -o Port=2022 -l svc -i /k",
            {"connect_timeout": 7.0, "port": 2022, "user": "svc", "identity": "/k"},
        ),
        ("-C -o ControlMaster=auto -o ControlPersist=60s -F /dev/null", {"jump": None}),
        ("-o StrictHostKeyChecking=no", {"jump": None, "known_hosts": None}),
    ],
)
def test_ssh_arguments_are_read_as_openssh_reads_them(args: str, expected: dict[str, Any]) -> None:
    parsed = parse_ssh_args(args)
    assert parsed.problems == ()
    for key, value in expected.items():
        assert getattr(parsed, key) == value, key


@pytest.mark.parametrize(
    ("hostvars", "problem"),
    [
        ({"ansible_ssh_common_args": "-J a@b,c@d"}, "chain of jump hosts"),
        ({"ansible_ssh_common_args": "-o 'ProxyCommand=nc -X 5 -x proxy %h %p'"}, "ProxyCommand"),
        ({"ansible_host": "{{ inventory_hostname }}.lab"}, "is a template"),
        ({"ansible_ssh_pass": "hunter2"}, "password logins"),
        ({"ansible_connection": "winrm"}, "'winrm' is not supported"),
        ({"ansible_port": "twenty-two"}, "bad ansible_port"),
    ],
)
def test_what_a_sweep_cannot_honour_is_that_hosts_error_not_a_guess(
    hostvars: dict[str, Any], problem: str
) -> None:
    entry = entry_from_hostvars("h1", hostvars, default_user="root")
    assert entry.problem is not None and problem in entry.problem
    assert "hunter2" not in entry.problem


def test_hosts_without_variables_and_legacy_names_are_read() -> None:
    data = {
        "_meta": {
            "hostvars": {
                "old": {
                    "ansible_ssh_host": "10.1.1.1",
                    "ansible_ssh_port": 2,
                    "ansible_ssh_user": "legacy",
                }
            }
        },
        "all": {"children": ["ungrouped", "g"]},
        "g": {"hosts": ["old", "bare"]},
    }
    hosts = by_name(entries_from_inventory(data, default_user="me"))
    assert hosts["old"].target == "ssh://legacy@10.1.1.1:2"
    assert hosts["bare"].target == "ssh://me@bare:22" and hosts["bare"].groups == ("g",)
    local = entry_from_hostvars("ctl", {"ansible_connection": "local"}, default_user="me")
    assert local.target == "local"


def test_a_jump_host_from_group_vars_carries_every_connection(
    ssh_host: Any, host_network: Any, tmp_path: Path, env: dict[str, str]
) -> None:
    bastion, *inner = ssh_host.many(["bastion", "inner1", "inner2"])
    for host in inner:
        fleet.dress(host, "healthy")
    known = tmp_path / "known_hosts"
    known.write_text(Path(host_network.known_hosts_path).read_text())
    (tmp_path / "inv" / "group_vars").mkdir(parents=True)
    (tmp_path / "inv" / "hosts.yml").write_text(
        yaml.safe_dump(
            {
                "gpu": {"hosts": {h.name: {"ansible_host": h.address} for h in inner}},
            }
        )
    )
    common = fleet.group_vars(host_network, known)
    common["ansible_ssh_common_args"] += f" -o ProxyJump=root@{bastion.address}:{bastion.port}"
    (tmp_path / "inv" / "group_vars" / "gpu.yml").write_text(yaml.safe_dump(common))
    result = runbook(
        [
            "sweep",
            str(HOSTNAME_RUNBOOK),
            "-i",
            str(tmp_path / "inv"),
            "--report",
            str(tmp_path / "report"),
            "--format",
            "json",
        ],
        env,
    )
    assert result.rc == 0, result.stderr
    swept = {h["host"]: h for h in result.json()["hosts"]}
    assert {h: s["status"] for h, s in swept.items()} == {"inner1": "healthy", "inner2": "healthy"}
    time.sleep(0.2)
    for host in inner:
        log = host.sshd_log_tail(200)
        # the bastion's address, not the bridge's: the connection came through the jump host
        # (" port" ends the address: the gateway .1 is a prefix of a bastion at .110)
        assert f"Accepted publickey for root from {bastion.address} port" in log, log
        assert f"Accepted publickey for root from {host_network.gateway} port" not in log
    assert json.loads((tmp_path / "report" / "sweep.json").read_text())["exit_code"] == 0


def _slow_inventory(tmp_path: Path) -> tuple[Path, Path]:
    """A dynamic inventory script that records its pid, then takes its time."""
    pidfile = tmp_path / "inventory.pid"
    script = tmp_path / "slow_inventory.py"
    script.write_text(
        "#!/usr/bin/env python3\nimport json, os, sys, time\n"
        f"open({str(pidfile)!r}, 'w').write(str(os.getpid()))\n"
        "time.sleep(60)\n"
        "print(json.dumps({'_meta': {'hostvars': {}}, 'all': {'hosts': []}}))\n"
    )
    script.chmod(0o755)
    return script, pidfile


def _gone(pid: int, within: float = 10.0) -> bool:
    import os

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def _started(pidfile: Path) -> int:
    deadline = time.monotonic() + 30
    while not pidfile.exists() or not pidfile.read_text():
        assert time.monotonic() < deadline, "ansible-inventory never ran the script"
        time.sleep(0.05)
    return int(pidfile.read_text())


def test_an_inventory_not_read_is_stopped_with_the_script_it_runs(tmp_path: Path) -> None:
    """A sweep starts ansible-inventory before its runbook loads; when it ends without reading
    it (the runbook failed to load), the inventory and the script it runs are stopped."""
    from runbook.sweep.inventory import PendingInventory

    script, pidfile = _slow_inventory(tmp_path)
    pending = PendingInventory(str(script), timeout=60)
    pid = _started(pidfile)
    pending.close()
    assert _gone(pid), f"the inventory script {pid} outlived its ansible-inventory"


def test_an_inventory_past_its_timeout_is_one_line_and_leaves_nothing_running(
    tmp_path: Path,
) -> None:
    from runbook.sweep.inventory import PendingInventory

    script, pidfile = _slow_inventory(tmp_path)
    with PendingInventory(str(script), timeout=3) as pending:
        pid = _started(pidfile)
        with pytest.raises(InventoryError, match="did not finish within 3s"):
            pending.entries()
    assert _gone(pid)


def test_a_sweep_whose_runbook_fails_to_load_leaves_no_inventory_running(
    tmp_path: Path, env: dict[str, str]
) -> None:
    script, pidfile = _slow_inventory(tmp_path)
    broken = tmp_path / "broken.yaml"
    broken.write_text("id: broken\nstages: [\n")
    result = runbook(["sweep", str(broken), "-i", str(script)], env)
    assert result.rc == 2 and "Traceback" not in result.stderr, result.stderr
    time.sleep(2)  # time enough for a surviving ansible-inventory to start the script
    if pidfile.exists():
        assert _gone(int(pidfile.read_text())), "the inventory script outlived the sweep"
