"""An SSH address, `[user@]host[:port]` (an IPv6 host in brackets): parsed without paramiko, so
a plan or a host file that only names a node does not load the SSH client.

Host names are checked here, by `is_host`, wherever they come from (a `--target` or `--jump`
and every other `ssh://` address through `split_address`; a hosts file's bare names, an
inventory's `ansible_host`, a Slurm node list where they are read) and before any ssh config
is read for them: a `Match exec "… %h …"` line hands the name to a shell, so a name must be
nothing a shell or a `%` token could expand. As OpenSSH 9.6 refuses user and host names with shell
metacharacters, only this is a host: an IPv4 or IPv6 address (no zone: `%` is a token), or
dot-separated labels of letters, digits, `-` and `_` (1 to 63 characters, not beginning or
ending with `-`; 253 in all, an optional final dot). `_` is allowed although RFC 1123 does not:
OpenSSH accepts it, and such names are often ssh config aliases or Ansible inventory names
(`gpu_node_01`) rather than DNS names; it is no shell metacharacter. User names are not
restricted here: paramiko's `Match exec` expands `%r` from the config's own `User`, never from
ours, and sshd receives the name as one word.
"""

from __future__ import annotations

import ipaddress
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


_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
HOST_RULE = "a host name (letters, digits, '-', '_' and dots) or an IP address"


def is_host(text: str) -> bool:
    """Whether `text` is a host name or an IPv4/IPv6 address (see the module docstring)."""
    if ":" in text:
        try:
            ipaddress.IPv6Address(text)
        except ValueError:
            return False
        return "%" not in text
    name = text[:-1] if text.endswith(".") else text
    return 0 < len(name) <= 253 and all(_LABEL.fullmatch(label) for label in name.split("."))


def _shown(text: str) -> str:
    """A name as an error shows it: quoted, control characters escaped, cut at 120."""
    shown = repr(text[:120])
    return shown if len(text) <= 120 else shown + "…"


def split_address(text: str) -> tuple[str | None, str, int | None]:
    """`[user@]host[:port]` → (user or None, host, port or None): what was given, no
    defaults filled in (an ssh config may supply them). UsageError when it is not an address,
    or its host is not a host (is_host): nothing a shell could expand reaches an ssh config
    lookup."""
    match = _SSH_URL.match(text.strip())
    if not match:
        # `user:password@host` is not an address, and the password is not repeated
        shown = re.sub(r"^([^@:/\s]*):[^@\s]*@", r"\1:<REDACTED>@", text.strip())
        raise UsageError(f"not an SSH address: {shown!r} (expected [user@]host[:port])")
    port = int(match.group("port")) if match.group("port") else None
    if port is not None and not 0 < port < 65536:
        raise UsageError(f"bad SSH port in {text!r}")
    user, host = match.group("user") or None, match.group("host").strip("[]")
    if not is_host(host):
        whole = text.strip() in (host, f"[{host}]")
        raise UsageError(
            f"SSH address {_shown(text.strip())}"
            + ("" if whole else f": {_shown(host)}")
            + f" is not {HOST_RULE}"
        )
    return user, host, port
