"""`ssh://NAME` as `ssh NAME` would reach it: the user's OpenSSH client config, read with
`paramiko.SSHConfig`.

Which file: `--ssh-config FILE` (or RUNBOOK_SSH_CONFIG), else ~/.ssh/config when it exists;
`none` reads no file (ssh's `-F none`). Honoured per host (`Host` patterns with `!` negation,
and paramiko's `Match`): HostName (`%h`), User, Port, IdentityFile (`~`, `%d`, `%u`, `%h`,
`%r`), IdentitiesOnly, ProxyJump (one host or a chain, each hop looked up in the config too),
UserKnownHostsFile (the first file), HostKeyAlias, ConnectTimeout and StrictHostKeyChecking.

What the command line gives wins, as with ssh: `user@`, `:port`, `--identity`,
`--known-hosts`, `--jump`, `--connect-timeout`. The one exception is trust, where the stricter
setting wins: `StrictHostKeyChecking yes` refuses new host keys even with
`--accept-new-host-keys`; `accept-new` accepts (and records) a key seen for the first time;
`no`, `off` and `ask` change nothing (host keys are always verified; an unknown key is refused
unless `--accept-new-host-keys` was given). Nothing here makes verification weaker than
without a config.

The name the user typed stays the name shown (reports, approvals, errors); the HostName and
port it resolves to are what is connected to and looked up in known_hosts (HostKeyAlias,
when set, instead).
"""

from __future__ import annotations

import glob
import os
import re
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path

import paramiko

from runbook.errors import UsageError
from runbook.transports.address import SSHAddress, split_address
from runbook.transports.ssh import SSHOptions

#: default file, as ssh reads it
DEFAULT_PATH = Path("~/.ssh/config")
#: environment variable naming the file when --ssh-config is not given
ENV = "RUNBOOK_SSH_CONFIG"
_MAX_HOPS = 8


def _local_user() -> str:
    """The local user name as getpass.getuser() finds it (LOGNAME, USER, LNAME, USERNAME, then
    the password database), without importing getpass (termios and more: ~6 ms of a start)."""
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        if os.environ.get(name):
            return os.environ[name]
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def load(path: str | os.PathLike[str] | None) -> paramiko.SSHConfig | None:
    """The config to resolve names with: `path` (must exist), or ~/.ssh/config when `path`
    is None and that file exists; None for `none` or no file. UsageError when unreadable."""
    explicit = path is not None
    if path is not None and str(path).lower() == "none":
        return None
    where = Path(path).expanduser() if path is not None else DEFAULT_PATH.expanduser()
    if not explicit and not where.exists():
        return None
    try:
        text = _with_includes(where.read_text(encoding="utf-8"), where, depth=0)
        return paramiko.SSHConfig.from_text(text)
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read ssh config {where}: {exc}") from None
    except (paramiko.ssh_exception.ConfigParseError, ValueError, TypeError) as exc:
        raise UsageError(f"cannot parse ssh config {where}: {exc}") from None


#: OpenSSH's limit on nested Include (readconf.c READCONF_MAX_DEPTH)
MAX_INCLUDE_DEPTH = 16
_INCLUDE = re.compile(r"^\s*include(?:\s*=\s*|\s+)(.*?)\s*$", re.IGNORECASE)
_BLOCK = re.compile(r"^\s*(?:host|match)(?:\s*=\s*|\s+)", re.IGNORECASE)


def _with_includes(text: str, source: Path, *, depth: int) -> str:
    """The config with each top-level `Include` replaced by the files it names, as ssh reads
    them (paramiko ignores Include, which lost whatever the included files said, a
    `StrictHostKeyChecking yes` too): paths relative to ~/.ssh, glob patterns in sorted order,
    several per line, no file matching is no error, at most 16 deep. After an included file
    the outer file goes on for every host again (`Host *`), as its lines were before it.
    An Include inside a Host or Match block (conditional inclusion) is refused in one line:
    inlining cannot keep its condition."""
    out: list[str] = []
    in_block = False
    for line in text.splitlines():
        if _BLOCK.match(line):
            in_block = True
        found = _INCLUDE.match(line)
        if found is None:
            out.append(line)
            continue
        if in_block:
            raise UsageError(
                f"ssh config {source}: Include inside a Host or Match block is not supported "
                "here; move it above the first Host line"
            )
        if depth >= MAX_INCLUDE_DEPTH:
            raise UsageError(f"ssh config {source}: Include nested deeper than {MAX_INCLUDE_DEPTH}")
        try:
            patterns = shlex.split(found.group(1))
        except ValueError as exc:
            raise UsageError(f"ssh config {source}: bad Include line: {exc}") from None
        for pattern in patterns:
            path = os.path.expanduser(pattern)
            if not os.path.isabs(path):
                path = os.path.join(os.path.expanduser("~/.ssh"), path)
            for included in sorted(glob.glob(path)):
                if os.path.isdir(included):
                    continue
                inner = Path(included)
                text = inner.read_text(encoding="utf-8")
                out.append(_with_includes(text, inner, depth=depth + 1))
                out.append("Host *")
    return "\n".join(out) + "\n"


@dataclass(frozen=True)
class HostConfig:
    """What a config says about one name (None: it says nothing)."""

    hostname: str
    user: str | None = None
    port: int | None = None
    identities: tuple[Path, ...] = ()
    identities_only: bool = False
    #: ProxyJump hops, first hop first; () for none
    jumps: tuple[str, ...] = ()
    known_hosts: Path | None = None
    host_key_alias: str | None = None
    strict: str | None = None
    connect_timeout: float | None = None


def _expand_path(text: str, *, host: str, user: str) -> Path:
    """Tokens paramiko leaves alone in UserKnownHostsFile: `~`, `%d`, `%u`, `%h`, `%%`."""
    home = os.path.expanduser("~")
    out = text.replace("%%", "\0").replace("%d", home).replace("%u", _local_user())
    out = out.replace("%h", host).replace("%r", user).replace("\0", "%")
    return Path(out).expanduser()


def host_config(config: paramiko.SSHConfig | None, name: str) -> HostConfig:
    """The settings `config` gives `name`; UsageError for a value ssh would reject too."""
    if config is None:
        return HostConfig(hostname=name)
    try:
        found = config.lookup(name)
    except (paramiko.ssh_exception.ConfigParseError, ValueError, KeyError) as exc:
        raise UsageError(f"ssh config for {name!r}: {exc}") from None
    hostname = str(found.get("hostname") or name)
    user = found.get("user")
    port = None
    if found.get("port"):
        try:
            port = int(found["port"])
            if not 0 < port < 65536:
                raise ValueError
        except ValueError:
            raise UsageError(f"ssh config for {name!r}: bad Port {found['port']!r}") from None
    timeout = None
    if found.get("connecttimeout"):
        try:
            timeout = float(found["connecttimeout"])
        except ValueError:
            raise UsageError(
                f"ssh config for {name!r}: bad ConnectTimeout {found['connecttimeout']!r}"
            ) from None
    jump = str(found.get("proxyjump") or "")
    jumps = () if not jump or jump.lower() == "none" else tuple(
        h.strip().removeprefix("ssh://") for h in jump.split(",") if h.strip()
    )
    known = str(found.get("userknownhostsfile") or "").split()
    return HostConfig(
        hostname=hostname,
        user=str(user) if user else None,
        port=port,
        identities=tuple(Path(p).expanduser() for p in found.get("identityfile") or ()),
        identities_only=str(found.get("identitiesonly", "")).lower() == "yes",
        jumps=jumps,
        known_hosts=_expand_path(known[0], host=hostname, user=str(user or ""))
        if known and known[0].lower() != "none"
        else None,
        host_key_alias=str(found["hostkeyalias"]) if found.get("hostkeyalias") else None,
        strict=_strictness(found.get("stricthostkeychecking")),
        connect_timeout=timeout if timeout and timeout > 0 else None,
    )


def _strictness(value: object) -> str | None:
    """StrictHostKeyChecking as ssh reads it: `true`/`false` are `yes`/`no`."""
    if not value:
        return None
    text = str(value).lower()
    return {"true": "yes", "false": "no"}.get(text, text)


@dataclass(frozen=True)
class Given:
    """What the command line (or an inventory) said; None/empty: not said, so the config
    may say it."""

    identities: tuple[Path, ...] = ()
    known_hosts: Path | None = None
    jump: str | None = None
    connect_timeout: float | None = None
    accept_new_host_keys: bool = False
    #: the user when neither the target nor the config names one
    default_user: str = "root"
    #: options the result starts from (max_channels, allow_agent)
    base: SSHOptions = field(default_factory=SSHOptions)


def resolve(
    target: str, config: paramiko.SSHConfig | None, given: Given
) -> tuple[SSHAddress, SSHOptions]:
    """`[user@]name[:port]` → where to connect and how, the config filling in what the
    target and `given` leave open (see the module docstring)."""
    user, name, port = split_address(target)
    return _resolve(name, user, port, config, given, depth=0)


def _resolve(
    name: str,
    user: str | None,
    port: int | None,
    config: paramiko.SSHConfig | None,
    given: Given,
    *,
    depth: int,
    jump_override: tuple[str, ...] | None = None,
) -> tuple[SSHAddress, SSHOptions]:
    if depth > _MAX_HOPS:
        raise UsageError(f"more than {_MAX_HOPS} jump hosts reaching {name!r} (a ProxyJump loop?)")
    found = host_config(config, name)
    address = SSHAddress(
        host=found.hostname,
        port=port or found.port or 22,
        user=user or found.user or given.default_user,
        alias=name if found.hostname != name else None,
        key_alias=found.host_key_alias,
    )
    identities = given.identities or tuple(p for p in found.identities if p.exists())
    options = replace(
        given.base,
        identities=identities,
        allow_agent=given.base.allow_agent
        and not (found.identities_only and bool(identities) and not given.identities),
        accept_new_host_keys=found.strict != "yes"
        and (given.accept_new_host_keys or found.strict == "accept-new"),
        connect_timeout=given.connect_timeout or found.connect_timeout or 10.0,
        jump=None,
        jump_options=None,
    )
    known = given.known_hosts or found.known_hosts
    if known is not None:
        options = replace(options, known_hosts=known)
    if jump_override is not None:
        hops = jump_override
    elif given.jump and depth == 0:
        hops = tuple(h.strip() for h in given.jump.split(",") if h.strip())
    else:
        hops = found.jumps
    if hops:
        # the last hop is the one that opens the channel to this host; the hops before it
        # are its own way in (ssh -J a,b: b reached with -J a; a with its own config)
        hop_user, hop_name, hop_port = split_address(hops[-1])
        hop_given = replace(given, jump=None)
        hop_address, hop_options = _resolve(
            hop_name,
            hop_user,
            hop_port,
            config,
            hop_given,
            depth=depth + 1,
            jump_override=hops[:-1] if len(hops) > 1 else None,
        )
        options = replace(options, jump=hop_address, jump_options=hop_options)
    return address, options
