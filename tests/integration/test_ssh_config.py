"""`ssh://ALIAS` reaches the host `ssh ALIAS` reaches: a real ssh config file written here,
real sshd test hosts, the target behind a bastion it alone may log in from."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration.conftest import RUNBOOKS

pytestmark = pytest.mark.ssh

HOSTNAME = "hostname.yaml"


@pytest.fixture
def behind_bastion(ssh_host, known_hosts, client_key, tmp_path):  # type: ignore[no-untyped-def]
    """A bastion and a target on port 2222 that refuses root logins from anywhere but the
    bastion; an ssh config naming the target `gpu-alias` (reached through `jump-alias`), the
    key under a `%r`-expanded path, and its own known_hosts copy."""
    bastion = ssh_host("cfg-bastion")
    target = ssh_host(
        "cfg-target", port=2222, extra_sshd_config=f"AllowUsers root@{bastion.address}"
    )
    keys = tmp_path / "keys"
    keys.mkdir()
    shutil.copy(client_key.private_path, keys / "id_root")
    (keys / "id_root").chmod(0o600)
    trusted = tmp_path / "known_hosts"
    trusted.write_text(known_hosts.read_text())
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host gpu-* !gpu-nothing\n"
        f"    HostName {target.address}\n"
        "    User root\n"
        f"    Port {target.port}\n"
        f"    IdentityFile {keys}/id_%r\n"
        f"    UserKnownHostsFile {trusted}\n"
        "    ProxyJump jump-alias\n"
        "    StrictHostKeyChecking no\n"
        "\n"
        "Host jump-alias\n"
        f"    HostName {bastion.address}\n"
        "    User root\n"
        f"    IdentityFile {keys}/id_%r\n"
        f"    UserKnownHostsFile {trusted}\n"
    )
    return {"bastion": bastion, "target": target, "config": config, "known": trusted}


def test_the_target_refuses_a_direct_login(behind_bastion, client_key, cli) -> None:  # type: ignore[no-untyped-def]
    """The premise of the tests below: only the ProxyJump route gets in."""
    target = behind_bastion["target"]
    direct = cli(
        "run", HOSTNAME, "--target", f"ssh://root@{target.address}:{target.port}",
        "--known-hosts", str(behind_bastion["known"]), "--identity", str(client_key.private_path),
        "--ssh-config", "none",
    )  # fmt: skip
    assert direct.rc == 3 and "authentication failed" in direct.stderr


def test_run_reaches_an_alias_through_its_config_and_bastion(behind_bastion, cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    run_dir = tmp_path / "run"
    result = cli(
        "run", HOSTNAME, "--target", "ssh://gpu-alias", "--ssh-config",
        str(behind_bastion["config"]), "--run-dir", str(run_dir), "--format", "json",
    )  # fmt: skip
    assert result.rc == 0, result.stderr
    assert "cfg-target" in (run_dir / "bundle" / "hostname-file.txt").read_text()
    record = json.loads((run_dir / "run.json").read_text())
    # the alias is what is recorded and shown; resume re-reads the same config file
    assert record["target"]["url"] == "ssh://gpu-alias"
    assert record["target"]["ssh_config"] == str(behind_bastion["config"].resolve())
    assert "BEGIN OPENSSH" not in (run_dir / "run.json").read_text()
    events = (run_dir / "events.jsonl").read_text()
    assert "ssh://root@gpu-alias" in events
    assert behind_bastion["target"].address not in json.loads(events.splitlines()[0])["target"]


def test_collect_reaches_an_alias_named_by_the_environment(behind_bastion, cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "bundle"
    result = cli(
        "collect", "--target", "ssh://gpu-alias", "--runbook", HOSTNAME, "-o", str(out),
        extra_env={"RUNBOOK_SSH_CONFIG": str(behind_bastion["config"])},
    )  # fmt: skip
    assert result.rc == 0, result.stderr
    assert "cfg-target" in (out / "hostname-file.txt").read_text()


def test_without_the_config_the_alias_does_not_resolve(behind_bastion, cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("collect", "--target", "ssh://gpu-alias", "--runbook", HOSTNAME, "-o", "x",
                 "--ssh-config", "none", "--connect-timeout", "3")  # fmt: skip
    assert result.rc == 3 and "cannot resolve gpu-alias" in result.stderr


def test_command_line_values_win_over_the_config(behind_bastion, client_key, cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`--jump` replaces the config's ProxyJump (here: straight from the bastion's own
    address is the only way in, so a wrong `--jump` fails), and `:port` replaces Port."""
    config = str(behind_bastion["config"])
    wrong_port = cli("run", HOSTNAME, "--target", "ssh://gpu-alias:2223", "--ssh-config", config,
                     "--connect-timeout", "3")  # fmt: skip
    assert wrong_port.rc == 3 and "cannot reach it" in wrong_port.stderr
    target = behind_bastion["target"]
    no_jump = cli("run", HOSTNAME, "--target", "ssh://gpu-alias", "--ssh-config", config,
                  "--jump", f"root@{target.address}:{target.port}",
                  "--known-hosts", str(behind_bastion["known"]),
                  "--identity", str(client_key.private_path))  # fmt: skip
    # the target as its own jump host: the login from outside is refused
    assert no_jump.rc == 3 and "authentication failed" in no_jump.stderr


def test_strict_host_key_checking_no_does_not_let_an_unknown_key_through(
    behind_bastion, cli
) -> None:  # type: ignore[no-untyped-def]
    behind_bastion["known"].write_text(behind_bastion["bastion"].host_key_line() + "\n")
    refused = cli("run", HOSTNAME, "--target", "ssh://gpu-alias",
                  "--ssh-config", str(behind_bastion["config"]))  # fmt: skip
    assert refused.rc == 3
    assert behind_bastion["target"].host_key_fingerprint() in refused.stderr
    assert "--accept-new-host-keys" in refused.stderr
    assert behind_bastion["target"].address not in behind_bastion["known"].read_text()


def test_accept_new_in_the_config_records_the_key_under_the_resolved_name(
    behind_bastion, cli
) -> None:  # type: ignore[no-untyped-def]
    target = behind_bastion["target"]
    behind_bastion["known"].write_text(behind_bastion["bastion"].host_key_line() + "\n")
    config = behind_bastion["config"]
    text = config.read_text()
    config.write_text(text.replace("StrictHostKeyChecking no", "StrictHostKeyChecking accept-new"))
    result = cli("run", HOSTNAME, "--target", "ssh://gpu-alias", "--ssh-config", str(config))
    assert result.rc == 0, result.stderr
    assert f"[{target.address}]:2222 ssh-ed25519" in behind_bastion["known"].read_text()


def test_hashed_known_hosts_entries_are_honoured(behind_bastion, cli) -> None:  # type: ignore[no-untyped-def]
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(behind_bastion["known"])], check=True,
                   capture_output=True)  # fmt: skip
    text = behind_bastion["known"].read_text()
    assert behind_bastion["target"].address not in text and "|1|" in text
    result = cli("run", HOSTNAME, "--target", "ssh://gpu-alias",
                 "--ssh-config", str(behind_bastion["config"]))  # fmt: skip
    assert result.rc == 0, result.stderr


def test_a_sweep_reaches_an_inventory_host_named_by_its_alias(
    behind_bastion, cli, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    inventory = tmp_path / "inventory.yml"
    inventory.write_text("all:\n  hosts:\n    gpu-alias: {}\n")
    report = tmp_path / "report"
    result = cli(
        "sweep", HOSTNAME, "-i", str(inventory), "--ssh-config", str(behind_bastion["config"]),
        "--report", str(report), "--keep-bundles", timeout=120,
    )  # fmt: skip
    assert result.rc == 0, result.stderr
    data = json.loads((report / "sweep.json").read_text())
    (host,) = data["hosts"]
    assert host["host"] == "gpu-alias" and host["status"] == "healthy", host
    bundle = report / "hosts" / "gpu-alias" / "bundle" / "hostname-file.txt"
    assert "cfg-target" in bundle.read_text()


def test_a_job_hosts_file_naming_the_alias_is_reached(behind_bastion, cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    hosts = tmp_path / "hosts"
    hosts.write_text("gpu-alias ranks=0-1\n")
    result = cli(
        "run", HOSTNAME, "--hosts-from-file", str(hosts),
        "--ssh-config", str(behind_bastion["config"]), "--format", "json", timeout=120,
    )  # fmt: skip
    assert result.rc == 0, result.stderr
    assert "gpu-alias healthy" in result.stderr


@pytest.fixture(autouse=True)
def _runbook_here(monkeypatch, tmp_path: Path) -> None:
    """`hostname.yaml` in the test's directory: the shipped test runbook reading the host's
    name from the `hostname` command (a test host's own UTS name; /etc/hostname is the
    machine's file), and the test's cwd, so relative paths land in tmp_path."""
    text = (RUNBOOKS / "hostname.yaml").read_text().replace("cat /etc/hostname", "hostname")
    (tmp_path / HOSTNAME).write_text(text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RUNBOOK_SSH_CONFIG", raising=False)


def test_resume_reopens_an_alias_through_the_config_the_run_used(
    behind_bastion, cli, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """A run killed right after it started (only run.json and its first events on disk) is
    resumed without --ssh-config: run.json names the file the alias was resolved with."""
    run_dir = tmp_path / "run"
    first = cli("run", HOSTNAME, "--target", "ssh://gpu-alias", "--run-dir", str(run_dir),
                "--ssh-config", str(behind_bastion["config"]))  # fmt: skip
    assert first.rc == 0, first.stderr
    for done in ("state.json", "verdict.json", "approvals.json"):
        (run_dir / done).unlink(missing_ok=True)
    shutil.rmtree(run_dir / "bundle", ignore_errors=True)
    events = (run_dir / "events.jsonl").read_text().splitlines()
    (run_dir / "events.jsonl").write_text(events[0] + "\n")
    resumed = cli("resume", str(run_dir), "--format", "json")
    assert resumed.rc == 0, resumed.stderr
    assert "cfg-target" in (run_dir / "bundle" / "hostname-file.txt").read_text()


def test_a_proxyjump_chain_is_walked_hop_by_hop(
    ssh_host, known_hosts, client_key, cli, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """`ProxyJump outer,inner`: the inner bastion takes logins only from the outer one and the
    target only from the inner one, so nothing but the whole chain, in order, gets in."""
    outer = ssh_host("chain-outer")
    inner = ssh_host("chain-inner", extra_sshd_config=f"AllowUsers root@{outer.address}")
    target = ssh_host("chain-target", extra_sshd_config=f"AllowUsers root@{inner.address}")
    config = tmp_path / "ssh_config"
    config.write_text(
        "Host *\n"
        "    User root\n"
        f"    IdentityFile {client_key.private_path}\n"
        f"    UserKnownHostsFile {known_hosts}\n"
        f"Host gpu-deep\n    HostName {target.address}\n    ProxyJump outer,inner\n"
        f"Host outer\n    HostName {outer.address}\n"
        f"Host inner\n    HostName {inner.address}\n"
    )
    result = cli("run", HOSTNAME, "--target", "ssh://gpu-deep", "--ssh-config", str(config),
                 "--run-dir", str(tmp_path / "run"))  # fmt: skip
    assert result.rc == 0, result.stderr
    assert "chain-target" in (tmp_path / "run" / "bundle" / "hostname-file.txt").read_text()
    backwards = config.read_text().replace("ProxyJump outer,inner", "ProxyJump inner,outer")
    config.write_text(backwards)
    refused = cli("run", HOSTNAME, "--target", "ssh://gpu-deep", "--ssh-config", str(config))
    assert refused.rc == 3 and "authentication failed" in refused.stderr
