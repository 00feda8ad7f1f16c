"""An SSH address, `[user@]host[:port]` (an IPv6 host in brackets): parsed without paramiko, so
a plan or a host file that only names a node does not load the SSH client."""

from __future__ import annotations

import re
from dataclasses import dataclass

from runbook.errors import UsageError

_SSH_URL = re.compile(
    r"^(?:(?P<user>[^@/:\s]+)@)?(?P<host>\[[^\]]+\]|[^@/:\s\[\]]+)(?::(?P<port>\d+))?$"
)


@dataclass(frozen=True)
class SSHAddress:
    host: str
    port: int = 22
    user: str = "root"
    #: the name the user gave when an ssh config entry turned it into `host` (reports and
    #: errors show it, as ssh shows the alias)
    alias: str | None = None
    #: ssh config `HostKeyAlias`: the name looked up in known_hosts instead of host[:port]
    key_alias: str | None = None

    @classmethod
    def parse(cls, text: str, *, default_user: str = "root") -> SSHAddress:
        """`[user@]host[:port]` (an IPv6 host in brackets)."""
        user, host, port = split_address(text)
        return cls(host=host, port=port or 22, user=user or default_user)

    def __str__(self) -> str:
        if self.alias:
            return f"ssh://{self.user}@{self.alias}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"ssh://{self.user}@{host}:{self.port}"

    @property
    def known_hosts_name(self) -> str:
        if self.key_alias:
            return self.key_alias
        return self.host if self.port == 22 else f"[{self.host}]:{self.port}"

    @property
    def principal(self) -> str:
        """The name a host certificate must list: HostKeyAlias, else the host (no port)."""
        return self.key_alias or self.host


def typed_name(text: str) -> str:
    """The node's name as `[user@]host[:port]` typed it: the host (an ssh config alias or an
    address), with the port when one was typed (`10.0.0.5:2222`, `[fd00::5]:2222`): two
    targets that differ only by port are two nodes, and show as two."""
    _, host, port = split_address(text)
    if port is None:
        return host
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def split_address(text: str) -> tuple[str | None, str, int | None]:
    """`[user@]host[:port]` → (user or None, host, port or None): what was given, no
    defaults filled in (an ssh config may supply them)."""
    match = _SSH_URL.match(text.strip())
    if not match:
        # `user:password@host` is not an address, and the password is not repeated
        shown = re.sub(r"^([^@:/\s]*):[^@\s]*@", r"\1:<REDACTED>@", text.strip())
        raise UsageError(f"not an SSH address: {shown!r} (expected [user@]host[:port])")
    port = int(match.group("port")) if match.group("port") else None
    if port is not None and not 0 < port < 65536:
        raise UsageError(f"bad SSH port in {text!r}")
    return match.group("user") or None, match.group("host").strip("[]"), port
