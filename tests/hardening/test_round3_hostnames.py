"""Host names from untrusted input never reach a shell through the ssh config.

A `Match exec "… %h …"` block in the user's ssh config (common for choosing a bastion) hands
the host name to a shell when the config is read for it. So every source of host names — a
`--target` or `--jump` URL, a hosts file (URL or bare word), an Ansible inventory, a Slurm node
list read from scontrol — is checked by one function (runbook/transports/address.py
`is_host`) before any ssh config lookup: a host name or an address, nothing a shell or a `%`
token could expand. Each hostile name below would run `touch pwned` in the command's working
directory; the test asserts that file never appears and the refusal is one line naming where
the name came from (exit 2). Ordinary names (gpu-node-01, an FQDN, 10.0.0.5, [fd00::5]) still
work, through the same config, on a real SSH test host."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runbook.job.resolve_hosts import parse_hosts_file
from runbook.sweep.inventory import entry_from_hostvars
from runbook.transports.address import is_host, split_address
from tests.hosts.harness import HostNetwork
from tests.integration.conftest import cli_env

REPO = Path(__file__).resolve().parents[2]
RUNBOOK = REPO / "tests" / "integration" / "runbooks" / "hostname.yaml"
HOSTILE = "n1;touch${IFS}pwned"

#: the config a user might have: every name goes through `Match exec`, which logs the name it
#: was given (`%n`) and tests the resolved one (`%h`)
MATCH_EXEC = 'Match exec "echo %n >> seen; test %h = never-matches"\n    User nobody-at-all\n'


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """Where the command runs (and where `touch pwned` would land)."""
    (tmp_path / "cwd").mkdir()
    return tmp_path / "cwd"


def _cli(tmp_path: Path, cwd: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "runbook", *args],
        env={**cli_env(tmp_path), **(env or {})}, cwd=cwd, capture_output=True, text=True,
        timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def _config(tmp_path: Path, before: str = "") -> Path:
    path = tmp_path / "ssh_config"
    path.write_text(before + MATCH_EXEC)
    return path


def _refused(done: Any, *where: str) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "is not a host name" in lines[0] or "not a host name" in lines[0], lines[0]
    for word in where:
        assert word in lines[0], lines[0]
    return lines[0]


def _no_shell(workdir: Path) -> None:
    assert not (workdir / "pwned").exists(), "a host name ran a command through Match exec"
    seen = (workdir / "seen").read_text().split() if (workdir / "seen").exists() else []
    assert set(seen) <= {"gpu-node-01"}, f"the ssh config was read for a hostile name: {seen}"


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--target", f"ssh://{HOSTILE}"), ("--target", f"ssh://root@{HOSTILE}:22"),
     ("--jump", HOSTILE)],
    ids=["target", "target-with-user-and-port", "jump"],
)  # fmt: skip
def test_a_hostile_name_in_a_url_given_on_the_command_line_is_refused(
    tmp_path: Path, workdir: Path, flag: str, value: str
) -> None:
    target = ["--target", value] if flag == "--target" else ["--target", "ssh://gpu-node-01"]
    jump = ["--jump", value] if flag == "--jump" else []
    done = _cli(tmp_path, workdir, "run", str(RUNBOOK), *target, *jump,
                "--ssh-config", str(_config(tmp_path)), "--no-input")  # fmt: skip
    _no_shell(workdir)
    _refused(done, HOSTILE)


@pytest.mark.parametrize(
    "line", [f"ssh://{HOSTILE}", f"ssh://root@{HOSTILE}:22 ranks=0-7", f"{HOSTILE} ranks=0"],
    ids=["url", "url-with-user-and-port", "bare-word"],
)  # fmt: skip
def test_a_hostile_name_in_a_hosts_file_is_refused(
    tmp_path: Path, workdir: Path, line: str
) -> None:
    hosts = tmp_path / "hosts.txt"
    hosts.write_text(f"ssh://gpu-node-01 ranks=8\n{line}\n")
    done = _cli(tmp_path, workdir, "run", str(RUNBOOK), "--hosts-from-file", str(hosts),
                "--ssh-config", str(_config(tmp_path)), "--no-input")  # fmt: skip
    _no_shell(workdir)
    _refused(done, f"{hosts}:2")


SCONTROL = """#!/bin/sh
# a Slurm controller whose job record names a hostile node list (a job's own name can
# imitate `NodeList=`; a compromised or hostile controller can print anything)
case "$1 $2" in
  "-d show") cat <<'JOB'
JobId=4242 JobName=x
   UserId=mallory(1002) GroupId=ml(1001) MCS_label=N/A
   JobState=FAILED Reason=NonZeroExitCode Dependency=(null)
   ExitCode=1:0
   StartTime=2025-03-11T09:00:01 EndTime=2025-03-11T09:41:37 Deadline=N/A
   Partition=h100 AllocNode:Sid=login-1:2201
   NodeList=NODELIST
   NumNodes=1 NumCPUs=16 NumTasks=8
JOB
  ;;
  "show hostnames") printf '%s\\n' "$3" ;;
  *) echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1 ;;
esac
"""


def test_a_hostile_name_in_a_slurm_node_list_is_refused(tmp_path: Path, workdir: Path) -> None:
    shims = tmp_path / "bin"
    shims.mkdir()
    (shims / "scontrol").write_text(SCONTROL.replace("NODELIST", HOSTILE))
    (shims / "scontrol").chmod(0o755)
    env = {"PATH": f"{shims}:{cli_env(tmp_path)['PATH']}"}
    done = _cli(tmp_path, workdir, "run", str(RUNBOOK), "--job", "slurm:4242",
                "--ssh-config", str(_config(tmp_path)), "--no-input", env=env)  # fmt: skip
    _no_shell(workdir)
    _refused(done, "slurm:4242", "NodeList", HOSTILE)


@pytest.mark.parametrize(
    "hostvars",
    [{"ansible_host": HOSTILE}, {}],
    ids=["ansible_host", "inventory-name"],
)
def test_a_hostile_name_in_an_inventory_is_never_looked_up(
    tmp_path: Path, workdir: Path, hostvars: dict[str, str]
) -> None:
    """A sweep records the host as an error with the reason, in one line, and sweeps the
    others (an inventory's bad value never stops a sweep); nothing reads the ssh config for
    that name."""
    name = "evil" if hostvars else f'"{HOSTILE}"'
    inventory = tmp_path / "inventory.yml"
    body = "".join(f"\n        {k}: '{v}'" for k, v in hostvars.items()) or " {}"
    inventory.write_text(f"all:\n  hosts:\n    {name}:{body}\n")
    report = tmp_path / "report"
    done = _cli(tmp_path, workdir, "sweep", str(RUNBOOK), "-i", str(inventory),
                "--ssh-config", str(_config(tmp_path)), "--report", str(report))  # fmt: skip
    _no_shell(workdir)
    errors = [line for line in done.stderr.splitlines() if "is not a host name" in line]
    assert len(errors) == 1, done.stderr
    what = "ansible_host" if hostvars else "the inventory name"
    assert f"{what} '{HOSTILE}' is not a host name" in errors[0], errors[0]


@pytest.mark.parametrize(
    ("text", "host"),
    [("gpu-node-01", "gpu-node-01"), ("root@10.0.0.5:2222", "10.0.0.5"),
     ("[fd00::5]", "fd00::5"), ("alice@[fd00::5]:22", "fd00::5"),
     ("gpu-node-01.cluster.example.com", "gpu-node-01.cluster.example.com"),
     ("gpu_node_01", "gpu_node_01"), ("GPU-Node-01.", "GPU-Node-01.")],
)  # fmt: skip
def test_ordinary_names_and_addresses_are_hosts(text: str, host: str) -> None:
    assert split_address(text)[1] == host and is_host(host)
    assert entry_from_hostvars("n", {"ansible_host": host}, default_user="root").problem is None
    spec = parse_hosts_file(f"ssh://{text}\n", source="hosts.txt", ssh_user="root")
    assert spec.nodes[0].entry.target.startswith("ssh://")


@pytest.mark.parametrize(
    "text",
    ["n;id", "$(id)", "`id`", "a|b", "a&b", "a>b", "a b", "a\tb", "a\nb", "%h", "a%d",
     "-oProxyCommand=id", "a..b", ".a", "a-.b", "fe80::1%eth0", "a'b", 'a"b', "a\\b", "a{b}",
     "a(b)", "*", "a?b", "x" * 64, ("a." * 127) + "b", ""],
)  # fmt: skip
def test_names_a_shell_or_a_token_could_expand_are_not_hosts(text: str) -> None:
    assert not is_host(text)


def test_ordinary_names_still_reach_a_real_host_through_the_same_config(
    ssh_host: Any, host_network: HostNetwork, tmp_path: Path, workdir: Path
) -> None:
    """gpu-node-01 and its FQDN (ssh config aliases) and the bare address connect, each read
    through the config's `Match exec` (its log shows the names it was given)."""
    host = ssh_host("names")
    config = _config(
        tmp_path,
        f"Host gpu-node-01 gpu-node-01.cluster.example.com\n"
        f"    HostName {host.address}\n    Port {host.port}\n    User root\n",
    )
    key = str(host_network.client_key.private_path)
    known = str(host_network.known_hosts_path)
    for target in ("gpu-node-01", "gpu-node-01.cluster.example.com", f"root@{host.address}"):
        done = _cli(tmp_path, workdir, "run", str(RUNBOOK), "--target", f"ssh://{target}",
                    "--ssh-config", str(config), "--identity", key, "--known-hosts", known,
                    "--no-input")  # fmt: skip
        assert done.returncode == 0, (target, done.stderr)
    seen = (workdir / "seen").read_text().split()
    assert {"gpu-node-01", "gpu-node-01.cluster.example.com", host.address} <= set(seen)
    assert not (workdir / "pwned").exists()
