"""What an inventory's `ansible_ssh_common_args` / `ansible_ssh_extra_args` say about how to
reach a host, read the way OpenSSH reads a command line. Pure.

Understood: `-o ProxyJump=[USER@]HOST[:PORT]` and `-J …` (one jump host; `none` means none),
`-o ProxyCommand='ssh … -W %h:%p [USER@]BASTION'` (the classic form of the same thing),
`-o UserKnownHostsFile=FILE` (the first file), `-o ConnectTimeout=S`, `-o Port=`, `-o User=`,
`-o IdentityFile=`, `-p PORT`, `-l USER`, `-i KEY`. Everything else is left alone (compression,
control sockets, `-F /dev/null`, verbosity); `StrictHostKeyChecking` is not honoured on purpose:
runbook always verifies host keys against known_hosts (see the SSH transport).

OpenSSH keeps the first value it sees for an option; so does this parser.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

#: ssh(1) options that take an argument (their next word is not a destination or option)
_WITH_ARGUMENT = frozenset("BbcDEeFIiJLlmOoPpQRSWw")


@dataclass(frozen=True)
class SshArgs:
    jump: str | None = None
    known_hosts: str | None = None
    identity: str | None = None
    port: int | None = None
    user: str | None = None
    connect_timeout: float | None = None
    #: why these arguments cannot be honoured (the host is then recorded as an error)
    problems: tuple[str, ...] = field(default_factory=tuple)


def _proxy_command_jump(command: str) -> str | None:
    """`ssh [opts] -W %h:%p [user@]bastion` → `[user@]bastion[:port]`; None for anything else
    (a ProxyCommand through nc, a script, a cloud CLI cannot be reproduced safely)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if not words or words[0].rsplit("/", 1)[-1] != "ssh" or "-W" not in words:
        return None
    port = user = host = None
    index = 1
    while index < len(words):
        word = words[index]
        if word == "-W":
            if index + 1 >= len(words) or words[index + 1] not in ("%h:%p", "[%h]:%p"):
                return None
            index += 2
            continue
        if word.startswith("-") and len(word) >= 2:
            letter, rest = word[1], word[2:]
            if letter in _WITH_ARGUMENT:
                value = rest if rest else (words[index + 1] if index + 1 < len(words) else "")
                index += 1 if rest else 2
                if letter == "p":
                    port = value
                elif letter == "l":
                    user = value
                elif letter == "o" and value.lower().startswith("port="):
                    port = value.split("=", 1)[1]
                continue
            index += 1
            continue
        if host is not None:
            return None  # a remote command after the destination: not a plain -W relay
        host = word
        index += 1
    if host is None:
        return None
    if user and "@" not in host:
        host = f"{user}@{host}"
    return f"{host}:{port}" if port and ":" not in host.rsplit("@", 1)[-1] else host


def parse_ssh_args(*texts: str | None) -> SshArgs:
    """Read `ansible_ssh_common_args` then `ansible_ssh_extra_args` (either may be None)."""
    words: list[str] = []
    problems: list[str] = []
    for text in texts:
        if not text:
            continue
        try:
            words += shlex.split(str(text))
        except ValueError as exc:
            problems.append(f"cannot parse ssh arguments {text!r}: {exc}")
    found: dict[str, str] = {}

    def keep(key: str, value: str) -> None:
        found.setdefault(key, value)

    index = 0
    while index < len(words):
        word = words[index]
        if not word.startswith("-") or len(word) < 2 or word == "--":
            index += 1
            continue
        letter, rest = word[1], word[2:]
        if letter not in _WITH_ARGUMENT:
            index += 1
            continue
        value = rest if rest else (words[index + 1] if index + 1 < len(words) else "")
        index += 1 if rest else 2
        if letter == "o":
            key, sep, opt_value = value.partition("=")
            if not sep:
                key, _, opt_value = value.partition(" ")
            keep(key.strip().lower(), opt_value.strip())
        elif letter == "J":
            keep("proxyjump", value)
        elif letter == "p":
            keep("port", value)
        elif letter == "l":
            keep("user", value)
        elif letter == "i":
            keep("identityfile", value)

    jump = None
    if "proxyjump" in found and found["proxyjump"].lower() != "none":
        jump = found["proxyjump"]
        if "," in jump:
            problems.append(f"ProxyJump {jump!r}: a chain of jump hosts is not supported")
            jump = None
    elif "proxycommand" in found and found["proxycommand"].lower() != "none":
        jump = _proxy_command_jump(found["proxycommand"])
        if jump is None:
            problems.append(
                f"ProxyCommand {found['proxycommand']!r} is not supported "
                "(only `ssh -W %h:%p BASTION`; use ProxyJump)"
            )
    if jump and jump.startswith("ssh://"):
        jump = jump[len("ssh://") :]
    port = None
    if "port" in found:
        try:
            port = int(found["port"])
        except ValueError:
            problems.append(f"bad ssh port {found['port']!r}")
    timeout = None
    if "connecttimeout" in found:
        try:
            timeout = float(found["connecttimeout"])
        except ValueError:
            problems.append(f"bad ConnectTimeout {found['connecttimeout']!r}")
    known = found.get("userknownhostsfile", "").split()
    return SshArgs(
        jump=jump or None,
        known_hosts=known[0] if known and known[0].lower() != "none" else None,
        identity=found.get("identityfile") or None,
        port=port,
        user=found.get("user") or None,
        connect_timeout=timeout if timeout and timeout > 0 else None,
        problems=tuple(problems),
    )
