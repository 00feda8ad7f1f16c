"""known_hosts read the way fleets write it: markers understood, a bad line never fatal.

paramiko's own reader raises `InvalidHostKey` on the first line it does not parse — and
`@cert-authority` lines, usual in fleets with an SSH CA, are such lines — so one of them made
every host an internal error. Here each line is read on its own:

- `@revoked PATTERN TYPE KEY`: the key is never accepted, for any host, not even with
  `--accept-new-host-keys` (OpenSSH's meaning);
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
        return (key.get_name(), key.get_base64()) in self.revoked

    def revoked_blobs(self) -> set[bytes]:
        out = set()
        for _, text in self.revoked:
            try:
                out.add(base64.b64decode(text, validate=True))
            except (binascii.Error, ValueError):
                continue
        return out

    def authorities_for(self, name: str) -> list[bytes]:
        """The CA keys trusted for host certificates of `name` (a known_hosts spelling)."""
        return [key for patterns, key in self.authorities if matches(patterns, name)]


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
    for entry in entries:
        if not result.is_revoked(entry.key):
            for name in entry.hostnames:
                keys.add(name, entry.key.get_name(), entry.key)
    for note in result.skipped:
        log.warning("known_hosts %s: %s", path, note)
    return result
