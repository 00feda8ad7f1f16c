"""Hosts whose sshd presents a CA-signed host certificate (`HostCertificate`), trusted through a
known_hosts `@cert-authority` line only: a good certificate lets the run in, each kind of bad
one is refused with one line naming why and exit 3, `--accept-new-host-keys` or not."""

from __future__ import annotations

import pytest

from tests.hosts.harness import make_key
from tests.integration.conftest import RUNBOOKS

pytestmark = pytest.mark.ssh

RUNBOOK = str(RUNBOOKS / "hostname.yaml")


def _ca_line(pattern: str, ca_key) -> str:  # type: ignore[no-untyped-def]
    keytype, blob = ca_key.with_name(ca_key.name + ".pub").read_text().split()[:2]
    return f"@cert-authority {pattern} {keytype} {blob}\n"


@pytest.fixture
def ca(tmp_path):  # type: ignore[no-untyped-def]
    """A fresh CA key for this test (removed with the test's tmp_path)."""
    return make_key(tmp_path / "ca", "rbk-test-ca")


def _run(cli, host, known, client_key, *extra: str):  # type: ignore[no-untyped-def]
    return cli(
        "run", RUNBOOK, "--target", f"ssh://root@{host.address}", "--known-hosts", str(known),
        "--identity", str(client_key.private_path), "--ssh-config", "none", *extra,
    )  # fmt: skip


def _refusal(result) -> str:  # type: ignore[no-untyped-def]
    assert result.rc == 3, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "host certificate refused" in lines[0]
    return lines[0]


def test_a_host_only_a_ca_vouches_for_is_trusted(ssh_host, ca, client_key, cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    host = ssh_host("cert-ok")
    host.certify_host_key(ca, [host.address, "cert-ok.example"])
    known = tmp_path / "known_hosts"
    known.write_text(_ca_line("10.213.*", ca))  # no plain key for the host at all
    result = _run(cli, host, known, client_key)
    assert result.rc == 0, result.stderr
    assert known.read_text() == _ca_line("10.213.*", ca)  # nothing was added


def test_a_certified_host_named_by_its_ssh_config_alias_is_trusted(
    ssh_host, ca, client_key, cli, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """The principal checked is the HostKeyAlias when the config sets one."""
    host = ssh_host("cert-alias")
    host.certify_host_key(ca, ["gpu-17.fleet"])
    known = tmp_path / "known_hosts"
    known.write_text(_ca_line("*.fleet", ca))
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host gpu-17\n    HostName {host.address}\n    HostKeyAlias gpu-17.fleet\n"
        f"    UserKnownHostsFile {known}\n    IdentityFile {client_key.private_path}\n"
    )
    result = cli("run", RUNBOOK, "--target", "ssh://gpu-17", "--ssh-config", str(config))
    assert result.rc == 0, result.stderr


@pytest.mark.parametrize(
    ("sign", "reason"),
    [
        ({"validity": "20200101:20200102"}, "expired at 2020-01-02"),
        ({"principals": ["someone-else"]}, "is for someone-else, not"),
        ({"host_certificate": False}, "a user certificate, not a host certificate"),
    ],
    ids=["expired", "wrong-principal", "user-certificate"],
)
def test_a_bad_certificate_is_refused_even_with_accept_new(
    ssh_host, ca, client_key, cli, tmp_path, sign, reason
) -> None:  # type: ignore[no-untyped-def]
    host = ssh_host("cert-bad")
    principals = sign.pop("principals", [host.address])
    host.certify_host_key(ca, principals, **sign)
    known = tmp_path / "known_hosts"
    known.write_text(_ca_line("*", ca))
    for extra in ((), ("--accept-new-host-keys",)):
        line = _refusal(_run(cli, host, known, client_key, *extra))
        assert reason in line and host.address in line
    assert known.read_text() == _ca_line("*", ca)  # --accept-new-host-keys recorded nothing


def test_a_certificate_from_another_ca_or_a_revoked_one_is_refused(
    ssh_host, ca, client_key, cli, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    host = ssh_host("cert-ca")
    other = make_key(tmp_path / "other-ca", "rbk-other-ca")
    host.certify_host_key(other, [host.address])
    known = tmp_path / "known_hosts"
    known.write_text(_ca_line("*", ca) + _ca_line("*", other).replace("@cert-authority", "#"))
    # the only CA trusted for the host is not the signer
    assert "no @cert-authority line trusts" in _refusal(_run(cli, host, known, client_key))
    # the signer trusted, but revoked
    known.write_text(_ca_line("*", other) + _ca_line("*", other).replace(
        "@cert-authority *", "@revoked *"))  # fmt: skip
    assert "@revoked" in _refusal(_run(cli, host, known, client_key, "--accept-new-host-keys"))


def test_with_no_ca_for_the_host_the_certified_key_is_judged_as_a_plain_key(
    ssh_host, ca, client_key, cli, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    host = ssh_host("cert-plain")
    host.certify_host_key(ca, [host.address])
    known = tmp_path / "known_hosts"
    known.write_text(_ca_line("elsewhere.example", ca))
    refused = _run(cli, host, known, client_key)
    assert refused.rc == 3 and host.host_key_fingerprint() in refused.stderr
    assert "--accept-new-host-keys" in refused.stderr
    known.write_text(_ca_line("elsewhere.example", ca) + host.host_key_line() + "\n")
    assert _run(cli, host, known, client_key).rc == 0


def test_a_sweep_trusts_a_certified_host_through_its_private_known_hosts_copy(
    ssh_host, ca, client_key, cli, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """A sweep hands each host a copy of only its own known_hosts lines: the CA lines that
    match the host must be in it, or a certificate-only host would be unknown."""
    host = ssh_host("cert-sweep")
    host.certify_host_key(ca, [host.address])
    known = tmp_path / "known_hosts"
    known.write_text(_ca_line("10.213.*", ca))
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(
        "all:\n  hosts:\n    certified:\n"
        f"      ansible_host: {host.address}\n      ansible_user: root\n"
        f"      ansible_ssh_private_key_file: {client_key.private_path}\n"
    )
    report = tmp_path / "report"
    result = cli("sweep", RUNBOOK, "-i", str(inventory), "--known-hosts", str(known),
                 "--ssh-config", "none", "--report", str(report), timeout=120)  # fmt: skip
    assert result.rc == 0, result.stderr
    assert "certified healthy" in result.stderr
