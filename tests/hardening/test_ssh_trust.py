"""SSH trust is kept: host keys verified, no agent forwarded, no private key logged.

Already proven elsewhere, and not repeated here: `runbook run` refuses an unknown host key with
its fingerprint and accepts it only with `--accept-new-host-keys`, and refuses a changed key
even then (tests/integration/test_ssh_refusals.py); a sweep refuses a changed key
(tests/sweep/test_fleet_sweep.py, the `rekeyed` host); a refused login with `--debug` leaves no
key line in any output (tests/hardening/test_secrets.py). Here:

* statically: no module of runbook/ uses paramiko's AutoAddPolicy or WarningPolicy (or any
  other policy than the transport's own, which refuses unless `--accept-new-host-keys`), none
  forwards an agent, none turns host-key checking off for OpenSSH or Ansible;
* on real test hosts: a sweep and a job run refuse an unknown key by default, and a changed key
  even with `--accept-new-host-keys`, without logging in; an unknown jump host is refused before
  the target is reached;
* agent forwarding is off: with a local ssh-agent holding the key (and the client logging in
  through it), a probe on the host sees no `SSH_AUTH_SOCK`, where `ssh -A` with the same agent
  does (the control);
* `--debug` over a whole successful walk (key from a file, and from the agent) never prints the
  key's base64 body.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from runbook.errors import HostKeyError
from runbook.transports.address import SSHAddress
from runbook.transports.ssh import SSHOptions, _HostKeyPolicy
from tests.hosts.harness import HostNetwork, TestHost
from tests.integration.conftest import cli_env

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "runbook"
PROBE = """\
id: trust-probe
stages:
  - id: probe
    collect:
      agent.txt: 'echo "agent=${SSH_AUTH_SOCK-unset}"; ssh-add -l 2>&1 | head -n 1; true'
      hostname.txt: hostname
    parse: text
"""


# -- static ------------------------------------------------------------------------------------


@cache
def _modules() -> list[tuple[Path, ast.Module]]:
    return [(p, ast.parse(p.read_text(), str(p))) for p in sorted(PACKAGE.rglob("*.py"))]


def test_no_module_uses_an_accepting_host_key_policy() -> None:
    """AutoAddPolicy and WarningPolicy accept any key; the only policy set anywhere is the SSH
    transport's own, which refuses an unknown key unless the user passed the flag."""
    setters = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
            assert name not in ("AutoAddPolicy", "WarningPolicy"), f"{path}:{node.lineno}"
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == (
                "set_missing_host_key_policy"
            ):
                argument = node.args[0]
                assert isinstance(argument, ast.Call), f"{path}:{node.lineno}"
                setters.append((path.relative_to(REPO).as_posix(), ast.unparse(argument.func)))
    assert setters == [("runbook/transports/ssh.py", "_HostKeyPolicy")]


def test_the_transports_policy_refuses_unless_the_user_opted_in(tmp_path: Path) -> None:
    import paramiko

    key = paramiko.Ed25519Key.from_private_key_file(
        str(_ed25519(tmp_path / "hostkey"))
    )  # a host key the client has never seen
    known = tmp_path / "known_hosts"
    address = SSHAddress("10.0.0.1")
    refusing = _HostKeyPolicy(SSHOptions(known_hosts=known), address)
    with pytest.raises(HostKeyError, match="--accept-new-host-keys"):
        refusing.missing_host_key(paramiko.SSHClient(), "10.0.0.1", key)
    assert not known.exists()
    assert SSHOptions().accept_new_host_keys is False
    accepting = _HostKeyPolicy(SSHOptions(known_hosts=known, accept_new_host_keys=True), address)
    accepting.missing_host_key(paramiko.SSHClient(), "10.0.0.1", key)
    assert known.read_text() == f"10.0.0.1 ssh-ed25519 {key.get_base64()}\n"


def test_accepting_new_keys_comes_only_from_the_flag() -> None:
    """Every options type defaults to refusing, and only the CLI's `--accept-new-host-keys`
    (and a resumed run's record of it) or the user's own ssh config (`StrictHostKeyChecking
    accept-new`, read in ssh_config.py) sets it."""
    from runbook.sweep.host import HostOptions
    from runbook.targets import TargetOptions

    assert TargetOptions().accept_new_host_keys is False
    assert HostOptions.__dataclass_fields__["accept_new_host_keys"].default is False
    setters = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg == "accept_new_host_keys":
                if not (isinstance(node.value, ast.Constant) and node.value.value is False):
                    setters.append((str(path.relative_to(PACKAGE)), ast.unparse(node.value)))
    allowed = {"cli/job.py", "cli/sweep.py", "session.py", "rundir.py", "targets.py",
               "sweep/host.py", "transports/ssh_config.py"}  # fmt: skip
    assert {name for name, _ in setters} <= allowed, setters
    sources = {value for _, value in setters}
    assert all(
        "accept_new_host_keys" in value for value in sources
    ), sources  # passed along from the flag (or its record), never a literal True


def test_no_module_forwards_an_agent_or_turns_host_key_checking_off() -> None:
    text = {p: p.read_text() for p in PACKAGE.rglob("*.py")}
    for path, source in text.items():
        for needle in ("AgentRequestHandler", "request_forward_agent", "ForwardAgent=yes",
                       "StrictHostKeyChecking=no", "StrictHostKeyChecking=accept-new",
                       "HOST_KEY_CHECKING\": \"False", "host_key_checking=False"):  # fmt: skip
            assert needle not in source, f"{path}: {needle}"
    playbook = (PACKAGE / "remedies" / "playbook.py").read_text()
    assert '"ANSIBLE_HOST_KEY_CHECKING": "True"' in playbook
    # the approved playbook's ssh: every hop verified, no agent (runbook/remedies/reach.py)
    reach = (PACKAGE / "remedies" / "reach.py").read_text()
    assert '"-o", "StrictHostKeyChecking=yes",\n        "-o", "ForwardAgent=no",' in reach


# -- live ------------------------------------------------------------------------------------------


def _ed25519(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


def _key_body(key: Path) -> list[str]:
    """The base64 lines of a private key file (its secret), each long enough to be unique."""
    return [line for line in key.read_text().splitlines() if "-----" not in line and line]


def _cli(
    env: dict[str, str], *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "runbook", *args],
        capture_output=True, text=True, env=env, timeout=timeout, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def _logins(host: TestHost) -> int:
    return host.sshd_log_tail(10_000).count("Accepted publickey")


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A local ssh-agent of our own (its socket under tmp_path), killed afterwards."""
    sock = tmp_path / "agent.sock"
    out = subprocess.run(["ssh-agent", "-s", "-a", str(sock)], capture_output=True, text=True,
                         check=True)  # fmt: skip
    pid = int(out.stdout.split("SSH_AGENT_PID=")[1].split(";")[0])
    try:
        yield {"SSH_AUTH_SOCK": str(sock), "SSH_AGENT_PID": str(pid)}
    finally:
        os.kill(pid, signal.SIGTERM)


def test_agent_forwarding_is_off_while_the_client_uses_the_agent(
    ssh_host: Any, host_network: HostNetwork, agent: dict[str, str], tmp_path: Path
) -> None:
    host = ssh_host("agent")
    key = host_network.client_key.private_path
    subprocess.run(["ssh-add", str(key)], env={**os.environ, **agent}, check=True,
                   capture_output=True)  # fmt: skip
    # the control: OpenSSH with -A forwards this agent, and the probe sees it
    forwarded = subprocess.run(
        [*host_network.ssh_argv(host, "echo agent=${SSH_AUTH_SOCK-unset}", options=["-A"])],
        env={**os.environ, **agent}, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert forwarded.stdout.startswith("agent=/"), forwarded
    runbook = tmp_path / "probe.yaml"
    runbook.write_text(PROBE)
    env = {**cli_env(tmp_path), **agent}
    before = _logins(host)
    # no --identity and no key in ~/.ssh: the agent is what logs in
    home = tmp_path / "home"
    home.mkdir()
    run = _cli({**env, "HOME": str(home)}, "run", str(runbook), "--target",
               f"ssh://root@{host.address}:{host.port}", "--known-hosts",
               str(host_network.known_hosts_path), "--format", "json", "--no-input")  # fmt: skip
    assert run.returncode == 0, run.stderr
    (stage,) = json.loads(run.stdout)["stages"]
    said = stage["facts"]["text"]["agent.txt"]["stdout"]
    assert said.splitlines()[0] == "agent=unset", said
    assert "Could not open a connection to your authentication agent" in said, said
    assert _logins(host) == before + 1  # logged in, through the agent


@pytest.mark.parametrize("how", ["identity-file", "agent"])
def test_debug_output_of_a_whole_walk_never_holds_the_private_key(
    ssh_host: Any, host_network: HostNetwork, agent: dict[str, str], tmp_path: Path, how: str
) -> None:
    host = ssh_host("debugkey")
    key = tmp_path / "id_ed25519"
    shutil.copyfile(host_network.client_key.private_path, key)
    key.chmod(0o600)
    body = _key_body(key)
    assert body and all(len(line) >= 20 for line in body)
    env = {**cli_env(tmp_path), **agent, "HOME": str(tmp_path / "home")}
    (tmp_path / "home").mkdir()
    if how == "agent":
        subprocess.run(["ssh-add", str(key)], env=env, check=True, capture_output=True)
    runbook = tmp_path / "probe.yaml"
    runbook.write_text(PROBE)
    run_dir = tmp_path / "run"
    run = _cli(env, "--debug", "run", str(runbook), "--target",
               f"ssh://root@{host.address}:{host.port}", "--known-hosts",
               str(host_network.known_hosts_path), "--run-dir", str(run_dir), "--no-input",
               *(["--identity", str(key)] if how == "identity-file" else []))  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    said = run.stdout + run.stderr
    assert "DEBUG" in run.stderr or "debug" in run.stderr.lower()  # it did log at debug
    assert "Authentication (publickey) successful" in run.stderr, run.stderr[-3000:]
    written = "".join(p.read_text(errors="replace") for p in run_dir.rglob("*") if p.is_file())
    for line in body:
        assert line not in said and line not in written
    assert "PRIVATE KEY" not in said


def _sweep_inventory(path: Path, hosts: dict[str, TestHost], network: HostNetwork,
                     known: Path) -> Path:  # fmt: skip
    inventory = {"all": {
        "vars": {"ansible_user": "root",
                 "ansible_ssh_private_key_file": str(network.client_key.private_path),
                 "ansible_ssh_common_args": f"-o UserKnownHostsFile={known}"},
        "hosts": {name: {"ansible_host": h.address, "ansible_port": h.port}
                  for name, h in hosts.items()},
    }}  # fmt: skip
    path.write_text(yaml.safe_dump(inventory))
    return path


def test_a_sweep_refuses_unknown_keys_by_default_and_changed_ones_even_when_accepting_new(
    ssh_host: Any, host_network: HostNetwork, tmp_path: Path
) -> None:
    known_one, rekeyed = ssh_host("known-one"), ssh_host("rekeyed")
    unknown = ssh_host("unknown")
    known = tmp_path / "known_hosts"
    known.write_text(known_one.host_key_line() + "\n" + rekeyed.host_key_line() + "\n")
    rekeyed.regenerate_host_key()
    recorded = known.read_text()
    hosts = {"known-one": known_one, "rekeyed": rekeyed, "unknown": unknown}
    inventory = _sweep_inventory(tmp_path / "inv.yml", hosts, host_network, known)
    runbook = tmp_path / "probe.yaml"
    runbook.write_text(PROBE)
    env = cli_env(tmp_path)
    logins = {name: _logins(h) for name, h in hosts.items()}

    default = _cli(env, "sweep", str(runbook), "-i", str(inventory), "--format", "json",
                   "--report", str(tmp_path / "r1"))  # fmt: skip
    statuses = {h["host"]: h for h in json.loads(default.stdout)["hosts"]}
    assert statuses["known-one"]["status"] == "healthy", statuses
    assert statuses["unknown"]["status"] == "refused"
    assert unknown.host_key_fingerprint() in statuses["unknown"]["error"]
    assert statuses["rekeyed"]["status"] == "refused"
    assert "CHANGED" in statuses["rekeyed"]["error"]
    assert known.read_text() == recorded

    accepting = _cli(env, "sweep", str(runbook), "-i", str(inventory), "--format", "json",
                     "--report", str(tmp_path / "r2"), "--accept-new-host-keys")  # fmt: skip
    statuses = {h["host"]: h for h in json.loads(accepting.stdout)["hosts"]}
    assert statuses["rekeyed"]["status"] == "refused" and "CHANGED" in statuses["rekeyed"]["error"]
    assert statuses["unknown"]["status"] == "healthy"  # the user opted in: recorded, then used
    assert unknown.host_key_line().split()[2] in known.read_text()
    # the refused hosts were never logged in to
    assert _logins(rekeyed) == logins["rekeyed"]
    assert _logins(known_one) == logins["known-one"] + 2


def test_cert_authority_and_revoked_lines_are_understood_not_an_internal_error(
    ssh_host: Any, host_network: HostNetwork, tmp_path: Path
) -> None:
    """A known_hosts with an SSH CA's `@cert-authority` line (usual in fleets) still trusts
    its plain lines; a key marked `@revoked` is refused even where another line lists it and
    even with --accept-new-host-keys, before any login; an unreadable line is skipped."""
    listed, revoked = ssh_host("ca-fleet"), ssh_host("revoked")
    ca_key = _ed25519(tmp_path / "ca")
    ca_line = " ".join(ca_key.with_name("ca.pub").read_text().split()[:2])
    bad_type, bad_blob = revoked.host_key_line().split()[1:3]
    known = tmp_path / "known_hosts"
    known.write_text(
        f"@cert-authority *.example.com {ca_line}\n"
        "this line is not a known_hosts entry\n"
        f"{listed.host_key_line()}\n{revoked.host_key_line()}\n"
        f"@revoked * {bad_type} {bad_blob}\n"
    )
    hosts = {"ca-fleet": listed, "revoked": revoked}
    inventory = _sweep_inventory(tmp_path / "inv.yml", hosts, host_network, known)
    runbook = tmp_path / "probe.yaml"
    runbook.write_text(PROBE)
    env = cli_env(tmp_path)
    logins = _logins(revoked)
    for n, extra in enumerate(((), ("--accept-new-host-keys",))):
        swept = _cli(env, "sweep", str(runbook), "-i", str(inventory), "--format", "json",
                     "--report", str(tmp_path / f"r{n}"), *extra)  # fmt: skip
        statuses = {h["host"]: h for h in json.loads(swept.stdout)["hosts"]}
        errors = [h.get("error") for h in statuses.values()]
        assert statuses["ca-fleet"]["status"] == "healthy", errors
        assert statuses["revoked"]["status"] == "refused", statuses
        assert "@revoked" in statuses["revoked"]["error"]
    ran = _cli(env, "run", str(runbook), "--target", f"ssh://root@{listed.address}:{listed.port}",
               "--known-hosts", str(known), "--identity", str(host_network.client_key.private_path),
               "--no-input", "--run-dir", str(tmp_path / "run"))  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert _logins(revoked) == logins


def test_a_job_and_a_jump_host_refuse_unknown_keys(
    ssh_host: Any, host_network: HostNetwork, tmp_path: Path
) -> None:
    bastion, inner = ssh_host("bastion"), ssh_host("inner")
    known = tmp_path / "known_hosts"
    known.write_text(inner.host_key_line() + "\n")  # the bastion's key is unknown
    runbook = tmp_path / "probe.yaml"
    runbook.write_text(PROBE)
    env = cli_env(tmp_path)
    key = str(host_network.client_key.private_path)
    before = _logins(inner)
    jumped = _cli(env, "run", str(runbook), "--target", f"ssh://root@{inner.address}",
                  "--jump", f"root@{bastion.address}", "--known-hosts", str(known),
                  "--identity", key, "--no-input")  # fmt: skip
    assert jumped.returncode == 3, jumped.stderr
    assert bastion.host_key_fingerprint() in jumped.stderr.strip().splitlines()[-1]
    assert _logins(inner) == before and _logins(bastion) == 0

    hosts_file = tmp_path / "job.hosts"
    hosts_file.write_text(f"ssh://root@{bastion.address}:22 node=b\n")
    job = _cli(env, "run", str(runbook), "--hosts-from-file", str(hosts_file), "--known-hosts",
               str(known), "--identity", key, "--no-input", "--format", "json",
               "--run-dir", str(tmp_path / "job"))  # fmt: skip
    (node,) = json.loads(job.stdout)["nodes"]
    assert node["status"] == "refused", node
    assert bastion.host_key_fingerprint() in node["error"]
    assert known.read_text() == inner.host_key_line() + "\n"
    assert _logins(bastion) == 0
