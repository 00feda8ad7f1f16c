"""OpenSSH host certificates, parsed and checked by hand. Pure: bytes and keys in, a verdict out.

Why by hand: paramiko negotiates the `*-cert-v01@openssh.com` host key types and reads the
certified key out of the certificate, but never checks the certificate itself (who signed it,
for which host, until when), and no maintained library verifies OpenSSH host certificates for
a paramiko client. Trusting the certified key because it came wrapped in a certificate would
trust anyone's self-signed certificate, so the checks OpenSSH's `sshkey_cert_check_authority`
makes are made here, following PROTOCOL.certkeys:

    string  "<type>-cert-v01@openssh.com"   string nonce   <the public key's fields>
    uint64  serial   uint32 type (1 user, 2 host)   string key id
    string  valid principals (packed strings)   uint64 valid after   uint64 valid before
    string  critical options   string extensions   string reserved
    string  signature key   string signature (over every byte before it)

A certificate is accepted for a host when it is a *host* certificate, lists the host name among
its principals (a certificate that lists none is refused: OpenSSH would take it for any host),
is valid now, has no critical option (none is defined for host certificates, and an unknown
critical option must be refused), is signed by a CA key that a `@cert-authority` line whose
pattern matches the host lists, that signature verifies, and neither the CA key nor the
certified key nor the certificate itself is `@revoked` (a revoked certificate also revokes the
key it certifies, as OpenSSH compares public keys).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass

import paramiko

_CERT_SUFFIX = "-cert-v01@openssh.com"
#: how many length-prefixed fields each certified key type has after the nonce
_KEY_FIELDS = {
    "ssh-ed25519": 1,  # string pk
    "ssh-rsa": 2,  # mpint e, mpint n
    "ecdsa-sha2-nistp256": 2,  # string curve, string Q
    "ecdsa-sha2-nistp384": 2,
    "ecdsa-sha2-nistp521": 2,
}
HOST_CERT = 2
USER_CERT = 1


class CertificateError(ValueError):
    """Why a host certificate is not acceptable, in words fit for a one-line error."""


@dataclass(frozen=True)
class HostCertificate:
    key_type: str
    #: the certified key as a plain public key blob (`ssh-ed25519 AAAA…` material)
    public_key: bytes
    serial: int
    cert_type: int
    key_id: str
    principals: tuple[str, ...]
    valid_after: int
    valid_before: int
    critical_options: tuple[str, ...]
    #: the CA's public key blob
    signature_key: bytes
    signature: bytes
    #: the bytes the signature covers
    signed: bytes
    #: the whole certificate as the server sent it
    blob: bytes = b""

    def __repr__(self) -> str:
        return f"HostCertificate({self.key_type}, id={self.key_id!r}, serial={self.serial})"


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, size: int) -> bytes:
        if self.at + size > len(self.data):
            raise CertificateError("the certificate is truncated")
        chunk = self.data[self.at : self.at + size]
        self.at += size
        return chunk

    def string(self) -> bytes:
        (size,) = struct.unpack(">I", self.take(4))
        return self.take(size)

    def uint64(self) -> int:
        value: int = struct.unpack(">Q", self.take(8))[0]
        return value

    def uint32(self) -> int:
        value: int = struct.unpack(">I", self.take(4))[0]
        return value


def _strings(data: bytes) -> list[bytes]:
    reader = _Reader(data)
    out = []
    while reader.at < len(data):
        out.append(reader.string())
    return out


def _pack(*chunks: bytes) -> bytes:
    return b"".join(struct.pack(">I", len(c)) + c for c in chunks)


def is_certificate_type(name: str) -> bool:
    return name.endswith(_CERT_SUFFIX)


def parse(blob: bytes) -> HostCertificate:
    """An OpenSSH certificate's wire form → its fields; CertificateError when malformed."""
    reader = _Reader(blob)
    try:
        cert_type_name = reader.string().decode("ascii")
    except UnicodeDecodeError:
        raise CertificateError("the certificate type is not text") from None
    if not is_certificate_type(cert_type_name):
        raise CertificateError(f"{cert_type_name[:60]!r} is not a certificate type")
    key_type = cert_type_name[: -len(_CERT_SUFFIX)]
    if key_type not in _KEY_FIELDS:
        raise CertificateError(f"certificates of {key_type[:40]!r} keys are not supported")
    reader.string()  # nonce
    fields = [reader.string() for _ in range(_KEY_FIELDS[key_type])]
    serial = reader.uint64()
    cert_type = reader.uint32()
    key_id = reader.string().decode("utf-8", "replace")
    principals = tuple(p.decode("utf-8", "replace") for p in _strings(reader.string()))
    valid_after = reader.uint64()
    valid_before = reader.uint64()
    critical = _strings(reader.string())
    critical_names = tuple(n.decode("utf-8", "replace") for n in critical[::2])
    reader.string()  # extensions: none is defined for host certificates; ignored, as OpenSSH
    reader.string()  # reserved
    signature_key = reader.string()
    signed = blob[: reader.at]
    signature = reader.string()
    if reader.at != len(blob):
        raise CertificateError("the certificate has trailing bytes")
    return HostCertificate(
        key_type=key_type,
        public_key=_pack(key_type.encode(), *fields),
        serial=serial,
        cert_type=cert_type,
        key_id=key_id,
        principals=principals,
        valid_after=valid_after,
        valid_before=valid_before,
        critical_options=critical_names,
        signature_key=signature_key,
        signature=signature,
        signed=signed,
        blob=blob,
    )


def _key_from_blob(blob: bytes) -> paramiko.PKey:
    try:
        key_type = _Reader(blob).string().decode("ascii")
        return paramiko.PKey.from_type_string(key_type, blob)
    except (CertificateError, UnicodeDecodeError, paramiko.SSHException, ValueError) as exc:
        raise CertificateError(f"the signing key cannot be read ({exc})") from None


def _when(stamp: int) -> str:
    if stamp >= 2**63:
        return "forever"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(min(stamp, 253402300799)))


def check(
    cert: HostCertificate,
    *,
    principal: str,
    authorities: Iterable[bytes],
    revoked: Iterable[bytes] = (),
    now: float | None = None,
) -> None:
    """Raise CertificateError unless `cert` vouches for `principal` now, signed by one of
    `authorities` (CA public key blobs whose `@cert-authority` pattern matches the host).
    `revoked`: the blobs `@revoked` lines name (KnownHostsFile.revoked_blobs: a revoked
    certificate's certified key among them); the certificate is refused when it, the key it
    certifies or its CA is one of them, as OpenSSH's `check_key_not_revoked`."""
    revoked_set = set(revoked)
    moment = int(time.time() if now is None else now)
    if cert.signature_key not in set(authorities):
        raise CertificateError(
            "the certificate is signed by a CA that no @cert-authority line trusts for this host"
        )
    # the signature first: no other field of a forged certificate is worth reading
    ca_key = _key_from_blob(cert.signature_key)
    try:
        good = ca_key.verify_ssh_sig(cert.signed, paramiko.Message(cert.signature))
    except Exception:  # a malformed signature blob is a bad signature, whatever paramiko raises
        good = False
    if not good:
        raise CertificateError("the certificate's signature does not verify with its CA key")
    if cert.blob and cert.blob in revoked_set:
        raise CertificateError("the host certificate is marked @revoked")
    if cert.signature_key in revoked_set:
        raise CertificateError("the certificate's signing CA key is marked @revoked")
    if cert.public_key in revoked_set:
        raise CertificateError("the certified host key is marked @revoked")
    if cert.cert_type != HOST_CERT:
        kind = "a user certificate" if cert.cert_type == USER_CERT else f"type {cert.cert_type}"
        raise CertificateError(f"the server presented {kind}, not a host certificate")
    if not cert.principals:
        raise CertificateError("the certificate lists no principals")
    if principal not in cert.principals:
        shown = ", ".join(cert.principals[:5])
        raise CertificateError(f"the certificate is for {shown}, not {principal}")
    if moment < cert.valid_after:
        raise CertificateError(f"the certificate is not valid before {_when(cert.valid_after)}")
    if moment >= cert.valid_before:
        raise CertificateError(f"the certificate expired at {_when(cert.valid_before)}")
    if cert.critical_options:
        raise CertificateError(
            f"the certificate has unknown critical option(s) {', '.join(cert.critical_options)}"
        )
