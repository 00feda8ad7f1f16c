"""`@revoked` as OpenSSH reads it, against real sshd test hosts presenting a host certificate:
a revoked certificate, the key it certifies or the CA that signed it is refused, whichever
the known_hosts line names (OpenSSH compares public keys: a revoked certificate revokes the key
it certifies). The real `ssh` client, given the same known_hosts, is the oracle: it connects
where runbook must, and refuses ("REVOKED HOST KEY DETECTED") where runbook must refuse."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.hosts.harness import HostNetwork, make_key
from tests.integration.conftest import cli_env

pytestmark = pytest.mark.ssh

REPO = Path(__file__).resolve().parents[2]
RUNBOOK = REPO / "tests" / "integration" / "runbooks" / "hostname.yaml"


def _line(path: Path) -> str:
    """`TYPE BASE64` of a public key or certificate file."""
    return " ".join(path.read_text().split()[:2])


def _runbook(tmp_path: Path, host: Any, known: Path, key: Path, *extra: str) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "runbook", "run", str(RUNBOOK),
         "--target", f"ssh://root@{host.address}:{host.port}", "--known-hosts", str(known),
         "--identity", str(key), "--ssh-config", "none", "--no-input", *extra],
        env=cli_env(tmp_path), capture_output=True, text=True, timeout=90, cwd=REPO,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def _openssh(network: HostNetwork, host: Any, known: Path) -> Any:
    """The real client, trusting only `known` (its options come first, so they win)."""
    argv = network.ssh_argv(host, "true", options=["-o", f"UserKnownHostsFile={known}"])
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    "revoke",
    ["the certificate", "the certified key", "the CA", "the certificate, host known by its key"],
)
def test_a_revoked_certificate_its_key_or_its_ca_is_refused_as_openssh_refuses_it(
    ssh_host: Any, host_network: HostNetwork, tmp_path: Path, revoke: str
) -> None:
    host = ssh_host("revoked-cert")
    ca = make_key(tmp_path / "ca", "rbk-round3-ca")
    cert = host.certify_host_key(ca, [host.address])
    known = tmp_path / "known_hosts"
    trust = f"@cert-authority * {_line(ca.with_name(ca.name + '.pub'))}\n"
    if revoke == "the certificate, host known by its key":
        trust = host.host_key_line() + "\n"  # no CA: the host is trusted by its plain key
    key = host_network.client_key.private_path

    # the control: trusted as written, both clients connect
    known.write_text(trust)
    assert _openssh(host_network, host, known).returncode == 0
    trusted = _runbook(tmp_path, host, known, key)
    assert trusted.returncode == 0, trusted.stderr

    revoked = {
        "the certificate": cert,
        "the certified key": host.host_key_pub_path,
        "the CA": ca.with_name(ca.name + ".pub"),
        "the certificate, host known by its key": cert,
    }[revoke]
    known.write_text(trust + f"@revoked * {_line(revoked)}\n")
    oracle = _openssh(host_network, host, known)
    assert oracle.returncode == 255 and "REVOKED HOST KEY DETECTED" in oracle.stderr, oracle
    for extra in ((), ("--accept-new-host-keys",)):
        refused = _runbook(tmp_path, host, known, key, *extra)
        assert refused.returncode == 3, refused.stderr
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in refused.stderr, refused.stderr
        assert "@revoked" in lines[0] and host.address in lines[0], lines[0]
    assert known.read_text() == trust + f"@revoked * {_line(revoked)}\n"  # nothing added
