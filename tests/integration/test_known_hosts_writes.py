"""A key accepted as new (`--accept-new-host-keys`) is recorded only into a regular file reached
without a link: `UserKnownHostsFile /dev/null` stays a device (a private copy of the null device
here, so a failing run cannot break the machine's), and a known_hosts that is a symbolic link is
neither written through nor its target chmodded. Either way the run goes on, trusting the key
for this connection only. Real sshd test hosts."""

from __future__ import annotations

import os
import stat

import pytest

from tests.integration.conftest import RUNBOOKS

pytestmark = pytest.mark.ssh

RUNBOOK = str(RUNBOOKS / "ten-commands.yaml")


def _accepting(cli, host, known, identity):  # type: ignore[no-untyped-def]
    return cli("run", RUNBOOK, "--target", f"ssh://root@{host.address}:{host.port}",
               "--known-hosts", str(known), "--identity", str(identity),
               "--accept-new-host-keys", "--format", "json")  # fmt: skip


def test_a_null_device_known_hosts_stays_a_device_with_its_mode(
    ssh_host, client_key, cli, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    host = ssh_host("kh-null")
    null = tmp_path / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    null.chmod(0o666)
    result = _accepting(cli, host, null, client_key.private_path)
    assert result.rc == 0, result.stderr
    st = os.stat(null)
    assert stat.S_ISCHR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o666


def test_a_symlinked_known_hosts_is_not_written_through(
    ssh_host, client_key, cli, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    host = ssh_host("kh-link")
    target = tmp_path / "someone-elses-file"
    target.write_text("precious\n")
    target.chmod(0o644)
    link = tmp_path / "known_hosts"
    link.symlink_to(target)
    result = _accepting(cli, host, link, client_key.private_path)
    assert result.rc == 0, result.stderr
    assert target.read_text() == "precious\n"
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o644


def test_a_regular_known_hosts_still_records_the_key(ssh_host, client_key, cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    host = ssh_host("kh-file")
    known = tmp_path / "known_hosts"
    result = _accepting(cli, host, known, client_key.private_path)
    assert result.rc == 0, result.stderr
    assert host.host_key_line().split()[2] in known.read_text()
    assert stat.S_IMODE(os.stat(known).st_mode) == 0o600
