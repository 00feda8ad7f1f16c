"""Host certificates made by the real `ssh-keygen` in a temp dir, checked by host_cert: each
way a certificate can be bad is refused with its own reason."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import pytest

from runbook.transports import host_cert
from runbook.transports.known_hosts import matches


def _keygen(path: Path, kind: str = "ed25519") -> bytes:
    argv = ["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", path.name, "-f", str(path)]
    if kind == "rsa":
        argv[4:4] = ["-b", "2048"]
    subprocess.run(argv, check=True, capture_output=True)
    return base64.b64decode(path.with_name(path.name + ".pub").read_text().split()[1])


def _sign(
    tmp: Path, ca: Path, host_key: Path, principals: str, *extra: str, user: bool = False
) -> bytes:
    argv = ["ssh-keygen", "-q", "-s", str(ca), "-I", "test-host", "-z", "7"]
    argv += [] if user else ["-h"]
    argv += ["-n", principals, *extra, str(host_key.with_name(host_key.name + ".pub"))]
    subprocess.run(argv, check=True, capture_output=True)
    cert = host_key.with_name(host_key.name + "-cert.pub")
    blob = base64.b64decode(cert.read_text().split()[1])
    cert.unlink()
    return blob


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, object]:
    ca = tmp_path / "ca"
    other_ca = tmp_path / "other-ca"
    host = tmp_path / "host"
    return {
        "ca": ca,
        "ca_blob": _keygen(ca),
        "other_blob": _keygen(other_ca),
        "other_ca": other_ca,
        "host": host,
        "host_blob": _keygen(host),
    }


def test_a_host_certificate_from_a_trusted_ca_is_accepted_and_read_in_full(
    keys, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    blob = _sign(tmp_path, keys["ca"], keys["host"], "gpu-1.example,10.0.0.5")
    cert = host_cert.parse(blob)
    assert cert.cert_type == host_cert.HOST_CERT
    assert cert.principals == ("gpu-1.example", "10.0.0.5")
    assert cert.key_id == "test-host" and cert.serial == 7
    assert cert.public_key == keys["host_blob"]
    assert cert.signature_key == keys["ca_blob"]
    host_cert.check(cert, principal="10.0.0.5", authorities=[keys["ca_blob"]])


def test_an_rsa_ca_signature_is_verified_too(keys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    rsa_ca = tmp_path / "rsa-ca"
    rsa_blob = _keygen(rsa_ca, "rsa")
    cert = host_cert.parse(_sign(tmp_path, rsa_ca, keys["host"], "gpu-1"))
    host_cert.check(cert, principal="gpu-1", authorities=[rsa_blob])
    with pytest.raises(host_cert.CertificateError, match="no @cert-authority"):
        host_cert.check(cert, principal="gpu-1", authorities=[keys["ca_blob"]])


@pytest.mark.parametrize(
    ("principals", "extra", "user", "asked", "reason"),
    [
        ("gpu-1", ("-V", "20200101:20200102"), False, "gpu-1", "expired at 2020-01-02"),
        ("gpu-1", ("-V", "+3650d:+3660d"), False, "gpu-1", "not valid before"),
        ("gpu-1,gpu-2", (), False, "gpu-3", "is for gpu-1, gpu-2, not gpu-3"),
        ("gpu-1", (), True, "gpu-1", "a user certificate, not a host certificate"),
    ],
    ids=["expired", "not-yet-valid", "wrong-principal", "user-certificate"],
)
def test_a_bad_certificate_is_refused_naming_why(
    keys, tmp_path, principals, extra, user, asked, reason
) -> None:  # type: ignore[no-untyped-def]
    cert = host_cert.parse(_sign(tmp_path, keys["ca"], keys["host"], principals, *extra, user=user))
    with pytest.raises(host_cert.CertificateError) as refused:
        host_cert.check(cert, principal=asked, authorities=[keys["ca_blob"]])
    assert reason in str(refused.value)


def test_a_certificate_signed_by_another_ca_is_refused(keys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    cert = host_cert.parse(_sign(tmp_path, keys["other_ca"], keys["host"], "gpu-1"))
    with pytest.raises(host_cert.CertificateError, match="no @cert-authority line trusts"):
        host_cert.check(cert, principal="gpu-1", authorities=[keys["ca_blob"]])


def test_a_tampered_certificate_fails_its_signature(keys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    blob = bytearray(_sign(tmp_path, keys["ca"], keys["host"], "gpu-1"))
    at = bytes(blob).index(b"gpu-1")
    blob[at : at + 5] = b"gpu-9"  # a forger claims another host
    cert = host_cert.parse(bytes(blob))
    with pytest.raises(host_cert.CertificateError, match="signature does not verify"):
        host_cert.check(cert, principal="gpu-9", authorities=[keys["ca_blob"]])


def test_a_revoked_ca_or_revoked_host_key_is_refused(keys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    cert = host_cert.parse(_sign(tmp_path, keys["ca"], keys["host"], "gpu-1"))
    with pytest.raises(host_cert.CertificateError, match="CA key is marked @revoked"):
        host_cert.check(
            cert, principal="gpu-1", authorities=[keys["ca_blob"]], revoked=[keys["ca_blob"]]
        )
    with pytest.raises(host_cert.CertificateError, match="certified host key is marked @revoked"):
        host_cert.check(
            cert, principal="gpu-1", authorities=[keys["ca_blob"]], revoked=[keys["host_blob"]]
        )


def test_malformed_certificates_are_errors_not_crashes(keys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    blob = _sign(tmp_path, keys["ca"], keys["host"], "gpu-1")
    with pytest.raises(host_cert.CertificateError, match="truncated"):
        host_cert.parse(blob[:-10])
    with pytest.raises(host_cert.CertificateError, match="trailing bytes"):
        host_cert.parse(blob + b"\0")
    with pytest.raises(host_cert.CertificateError, match="not a certificate type"):
        host_cert.parse(keys["host_blob"])


@pytest.mark.parametrize(
    ("patterns", "name", "expected"),
    [
        (("*.example",), "gpu-1.example", True),
        (("gpu-?",), "gpu-1", True),
        (("*", "!gpu-bad"), "gpu-bad", False),
        (("[10.0.0.5]:2222",), "[10.0.0.5]:2222", True),
        (("10.0.0.5",), "[10.0.0.5]:2222", False),
        (("other",), "gpu-1", False),
    ],
)
def test_cert_authority_patterns_match_as_openssh_does(patterns, name, expected) -> None:  # type: ignore[no-untyped-def]
    assert matches(patterns, name) is expected


def test_a_hashed_cert_authority_pattern_matches_its_host() -> None:
    import paramiko

    hashed = paramiko.HostKeys.hash_host("gpu-1.example")
    assert matches((hashed,), "gpu-1.example")
    assert not matches((hashed,), "gpu-2.example")


def test_a_host_certificate_with_a_critical_option_is_refused(keys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """ssh-keygen puts no critical option in a host certificate, so this one is re-made from
    one of its certificates with a `force-command` option and signed again by the same CA
    (paramiko signs): a valid signature, an option no host certificate may carry."""
    import struct

    import paramiko

    def string(data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + data

    blob = _sign(tmp_path, keys["ca"], keys["host"], "gpu-1")
    cert = host_cert.parse(blob)
    empty = string(b"")  # critical options, extensions, reserved: all empty in a host cert
    at = cert.signed.index(empty * 3 + string(cert.signature_key))
    option = string(string(b"force-command") + string(string(b"/bin/true")))
    signed = cert.signed[:at] + option + cert.signed[at + 4 :]
    ca = paramiko.Ed25519Key.from_private_key_file(str(keys["ca"]))
    forged = host_cert.parse(signed + string(ca.sign_ssh_data(signed).asbytes()))
    assert forged.critical_options == ("force-command",)
    with pytest.raises(host_cert.CertificateError, match="unknown critical option"):
        host_cert.check(forged, principal="gpu-1", authorities=[keys["ca_blob"]])
