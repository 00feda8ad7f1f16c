"""Refusals over SSH: each is one line on stderr and exit 3, never a traceback."""

from __future__ import annotations

import subprocess

import pytest

from tests.integration.conftest import RUNBOOKS

pytestmark = pytest.mark.ssh

RUNBOOK = str(RUNBOOKS / "ten-commands.yaml")


def _run_against(cli, address: str, known_hosts, identity, *extra: str):  # type: ignore[no-untyped-def]
    return cli(
        "run", RUNBOOK, "--target", f"ssh://root@{address}", "--known-hosts", str(known_hosts),
        "--identity", str(identity), *extra,
    )  # fmt: skip


def _one_line_error(result) -> str:  # type: ignore[no-untyped-def]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert lines[0].startswith("runbook: ")
    return lines[0]


def test_an_unknown_host_key_is_refused_with_its_fingerprint(
    ssh_host, client_key, cli, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    host = ssh_host("unknown")
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    args = ["--target", f"ssh://root@{host.address}", "--known-hosts", str(empty),
            "--identity", str(client_key.private_path)]  # fmt: skip
    refused = cli("run", RUNBOOK, *args)
    assert refused.rc == 3
    line = _one_line_error(refused)
    assert host.address in line and host.host_key_fingerprint() in line
    assert "--accept-new-host-keys" in line

    accepted = cli("run", RUNBOOK, *args, "--accept-new-host-keys", "--format", "json")
    assert accepted.rc == 0, accepted.stderr
    assert host.host_key_line().split()[2] in empty.read_text()
    again = cli("run", RUNBOOK, *args, "--format", "json")
    assert again.rc == 0, again.stderr


def test_a_changed_host_key_is_refused_even_with_accept_new(
    ssh_host, known_hosts, client_key, cli, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    host = ssh_host("changed")
    old = tmp_path / "known_hosts"
    old.write_text(known_hosts.read_text())
    host.regenerate_host_key()
    args = ["--target", f"ssh://root@{host.address}", "--known-hosts", str(old),
            "--identity", str(client_key.private_path), "--accept-new-host-keys"]  # fmt: skip
    result = cli("run", RUNBOOK, *args)
    assert result.rc == 3
    line = _one_line_error(result)
    assert "CHANGED" in line and host.host_key_fingerprint() in line


def test_a_key_the_host_does_not_accept_is_an_authentication_error(
    ssh_host, known_hosts, cli, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    host = ssh_host("auth")
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    result = _run_against(cli, host.address, known_hosts, stranger)
    assert result.rc == 3
    assert "authentication failed" in _one_line_error(result)


def test_an_address_nobody_answers_is_unreachable(
    host_network, known_hosts, client_key, cli
) -> None:  # type: ignore[no-untyped-def]
    # an unassigned address on the test bridge: nothing leaves this machine
    address = host_network.unused_address()
    result = _run_against(
        cli, address, known_hosts, client_key.private_path, "--connect-timeout", "1"
    )
    assert result.rc == 3
    line = _one_line_error(result)
    assert address in line


def test_a_stopped_sshd_is_a_refused_connection(ssh_host, known_hosts, client_key, cli) -> None:  # type: ignore[no-untyped-def]
    host = ssh_host("stopped")
    host.stop_sshd()
    result = _run_against(cli, host.address, known_hosts, client_key.private_path)
    assert result.rc == 3
    assert "refused" in _one_line_error(result).lower()
