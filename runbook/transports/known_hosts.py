"""known_hosts read the way fleets write it: markers understood, a bad line never fatal.

paramiko's own reader raises `InvalidHostKey` on the first line it does not parse — and
`@cert-authority` lines, usual in fleets with an SSH CA, are such lines — so one of them made
every host an internal error. Here each line is read on its own:

- `@revoked PATTERN TYPE KEY`: the key is never accepted, for any host, not even with
  `--accept-new-host-keys` (OpenSSH's meaning). As OpenSSH compares keys (`sshkey_equal_public`),
  a revoked *certificate* revokes the key it certifies — as a host key, certified or plain,
  and as a CA — and the certificate itself; a presented certificate is refused when it, the
  key it certifies or the CA that signed it is revoked;
- `@cert-authority PATTERN TYPE KEY`: a CA for host certificates; a host whose name matches
  PATTERN (comma-separated, `*`/`?` wildcards, `!` negation, hashed `|1|` names) may present a
  certificate it signed (checked in `host_cert`, since paramiko does not);
- a line that does not parse is skipped with one warning naming its number.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import logging
from dataclasses import dataclass, field
from pathlib import Path

import paramiko
from paramiko.hostkeys import HostKeyEntry, InvalidHostKey

from runbook.transports import host_cert

log = logging.getLogger(__name__)


@dataclass
class KnownHostsFile:
    keys: paramiko.HostKeys
    #: (key type, base64) of every revoked key
    revoked: set[tuple[str, str]] = field(default_factory=set)
    #: what was skipped, one line each (unreadable lines, unknown markers)
    skipped: list[str] = field(default_factory=list)
    #: `@cert-authority` lines: (host patterns, CA public key blob)
    authorities: list[tuple[tuple[str, ...], bytes]] = field(default_factory=list)

    def is_revoked(self, key: paramiko.PKey) -> bool:
        return self.revoked_part(key) is not None

    def revoked_part(self, key: paramiko.PKey) -> str | None:
        """What of a key a server presented (or a plain key listed for a host) is revoked:
        `the host key` itself, or when it came as a certificate, `the host certificate` or
        `the certificate's signing CA key`; None when nothing is."""
        blocked = self.revoked_blobs()
        if not blocked:
            return None
        if _blob(key) in blocked:
            return "the host key"
        cert = getattr(key, "public_blob", None)
        if cert is None or not host_cert.is_certificate_type(cert.key_type):
            return None
        raw = bytes(cert.key_blob)
        if raw in blocked:
            return "the host certificate"
        try:
            parsed = host_cert.parse(raw)
        except host_cert.CertificateError:
            return None
        if parsed.public_key in blocked:
            return "the host key"
        if parsed.signature_key in blocked:
            return "the certificate's signing CA key"
        return None

    def revoked_blobs(self) -> set[bytes]:
        """Every public key blob `@revoked` lines name: each line's own (a plain key or a
        certificate) and, for a certificate, the key it certifies (OpenSSH compares public
        keys, so revoking a certificate revokes that key)."""
        out = set()
        for _, text in self.revoked:
            try:
                blob = base64.b64decode(text, validate=True)
            except (binascii.Error, ValueError):
                continue
            out.add(blob)
            if _is_certificate_blob(blob):
                try:
                    out.add(host_cert.parse(blob).public_key)
                except host_cert.CertificateError:
                    continue
        return out

    def authorities_for(self, name: str) -> list[bytes]:
        """The CA keys trusted for host certificates of `name` (a known_hosts spelling)."""
        return [key for patterns, key in self.authorities if matches(patterns, name)]


def _blob(key: paramiko.PKey) -> bytes:
    """A key's plain public blob (for a certified key, paramiko gives the key's own)."""
    return bytes(key.asbytes())


def _is_certificate_blob(blob: bytes) -> bool:
    if len(blob) < 4:
        return False
    size = int.from_bytes(blob[:4], "big")
    name = blob[4 : 4 + size].decode("ascii", "replace") if size < 128 else ""
    return host_cert.is_certificate_type(name)


def matches(patterns: tuple[str, ...], name: str) -> bool:
    """OpenSSH's known_hosts host matching: any pattern matches and no negated one does."""
    hit = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        body = pattern[1:] if negated else pattern
        if body.startswith("|1|"):
            found = paramiko.HostKeys.hash_host(name, body) == body
        else:
            found = fnmatch.fnmatchcase(name.lower(), body.lower().replace("[", "[[]"))
        if found and negated:
            return False
        hit = hit or found
    return hit


def read(path: Path) -> KnownHostsFile:
    """The file's keys, revocations and skipped lines; OSError when it cannot be read."""
    keys = paramiko.HostKeys()
    result = KnownHostsFile(keys)
    entries: list[HostKeyEntry] = []
    text = path.read_text(encoding="utf-8", errors="replace")
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("@"):
            marker, _, rest = line.partition(" ")
            parts = rest.split()
            if marker == "@revoked" and len(parts) >= 3:
                result.revoked.add((parts[1], parts[2]))
            elif marker == "@cert-authority" and len(parts) >= 3:
                try:
                    blob = base64.b64decode(parts[2], validate=True)
                except (binascii.Error, ValueError):
                    result.skipped.append(f"line {number}: unreadable @cert-authority key")
                    continue
                result.authorities.append((tuple(parts[0].split(",")), blob))
            else:
                result.skipped.append(f"line {number}: unknown marker {marker[:40]!r}")
            continue
        try:
            entry = HostKeyEntry.from_line(line, lineno=number)
        except (paramiko.SSHException, InvalidHostKey, ValueError, TypeError) as exc:
            result.skipped.append(f"line {number}: unreadable ({type(exc).__name__})")
            continue
        if entry is None or entry.key is None:
            result.skipped.append(f"line {number}: unreadable")
            continue
        entries.append(entry)
    # a revoked key is not trusted whatever other line lists it, before or after it
    blocked = result.revoked_blobs()
    for entry in entries:
        if _blob(entry.key) not in blocked:
            for name in entry.hostnames:
                keys.add(name, entry.key.get_name(), entry.key)
    for note in result.skipped:
        log.warning("known_hosts %s: %s", path, note)
    return result
