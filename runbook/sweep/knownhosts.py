"""known_hosts for a fleet: each file parsed once per sweep, each host given only its lines.

paramiko's SSHClient parses the whole known_hosts file (every key, base64 and all) on each
connect: 0.3 s of CPU for a 1000-line file here, so a 1000-host sweep would spend five minutes
of its one interpreter parsing the same file a thousand times. A sweep instead parses each file
once and hands every host a small private file holding the entries for its own name (and its
jump host's), hashed names included, and the `@cert-authority` keys trusted for those names —
the same trust, decided by the same lookups.

Not used with --accept-new-host-keys, which must append to the user's own file.
"""

from __future__ import annotations

import base64
import hashlib
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import paramiko

from runbook.errors import UsageError
from runbook.transports import known_hosts


class KnownHosts:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._lock = threading.Lock()
        self._parsed: dict[tuple[str, int, int], known_hosts.KnownHostsFile] = {}
        #: files written this sweep, by what they were written from: aliases sharing an
        #: address (same names, same file) share one file, written once
        self._written: dict[Path, tuple[str, int, int]] = {}

    def _load(
        self, path: Path
    ) -> tuple[tuple[str, int, int], known_hosts.KnownHostsFile] | None:
        try:
            stat = path.stat()
        except FileNotFoundError:
            return None
        key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
        with self._lock:
            if key not in self._parsed:
                try:
                    self._parsed[key] = known_hosts.read(path)
                except OSError as exc:
                    raise UsageError(f"cannot read known_hosts {path}: {exc}") from exc
            return key, self._parsed[key]

    def for_host(self, path: Path, names: Sequence[str]) -> Path:
        """A file with `path`'s entries for `names` (known_hosts spellings: `host` or
        `[host]:port`); `path` itself when it does not exist (paramiko then knows no key, and
        the host is refused as unknown, as it would be)."""
        loaded = self._load(path)
        if loaded is None:
            return path
        source, known = loaded
        mine = paramiko.HostKeys()
        for name in names:
            found = known.keys.lookup(name)
            if found is not None:
                for keytype in found:
                    mine.add(name, keytype, found[keytype])
        digest = hashlib.sha256("\0".join([str(path.resolve()), *names]).encode()).hexdigest()
        out = self.directory / f"{digest[:24]}.known_hosts"
        with self._lock:
            if self._written.get(out) != source:
                # another thread may be reading this very file (an alias of the same host):
                # a new one appears whole, by rename, never truncated under a reader
                tmp = out.with_name(f".{out.name}.{threading.get_ident()}")
                mine.save(str(tmp))
                with tmp.open("a", encoding="ascii") as handle:  # revoked for every host
                    for keytype, key in sorted(known.revoked):
                        handle.write(f"@revoked * {keytype} {key}\n")
                    # the CAs trusted for these names (host certificates), under those names
                    for name in names:
                        for blob in known.authorities_for(name):
                            keytype = blob[4 : 4 + int.from_bytes(blob[:4], "big")].decode()
                            encoded = base64.b64encode(blob).decode()
                            handle.write(f"@cert-authority {name} {keytype} {encoded}\n")
                os.replace(tmp, out)
                self._written[out] = source
        return out
