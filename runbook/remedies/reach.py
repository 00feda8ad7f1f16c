"""Where a proposal's playbook will run, resolved exactly as the run reached the node.

A run reaches `ssh://NAME` through paramiko and the user's ssh config (runbook/transports/
ssh_config.py); the approved playbook reaches it through Ansible, which runs OpenSSH's `ssh`.
The two must land on the same host, port and user, through the same jump hosts, trusting the
same known_hosts. Handing Ansible only the typed name is not enough: `ssh` reads the config of
the *passwd* home (not $HOME), a ProxyJump hop is verified with the hop's own defaults (not the
run's known_hosts), and an inventory's `ansible_port` default overrides the config's `Port`.

So the name is resolved once, here, with the run's own resolver, and everything it decided is
handed to `ssh` explicitly: `-F` the very config file the run read (or `none`), `HostName`,
`Port`, `User`, the keys, `UserKnownHostsFile` and `HostKeyAlias`, and each jump hop as a
`ProxyCommand` carrying the same settings for that hop (`-J` would verify the hop against the
passwd home's known_hosts). The host itself stays the typed name, so whatever else the user's
config says for it (ciphers, environment) still applies. `ssh -G` agrees with it
(tests/integration/test_reach.py).

Pure but for reading the ssh config file; the display line (`runs on: …`) is built here too, so
the approver reads what Ansible will be given.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runbook.remedies.plans import Target
    from runbook.transports.address import SSHAddress
    from runbook.transports.ssh import SSHOptions


@dataclass(frozen=True)
class Hop:
    """One SSH endpoint as the run reached it."""

    host: str
    port: int
    user: str
    known_hosts: str
    identities: tuple[str, ...] = ()
    key_alias: str | None = None
    #: how this hop itself is reached (None: directly)
    via: Hop | None = None

    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.user}@{host}:{self.port}"

    def chain(self) -> list[Hop]:
        """This hop's jump hosts, first hop first."""
        hops: list[Hop] = []
        via = self.via
        while via is not None:
            hops.insert(0, via)
            via = via.via
        return hops


@dataclass(frozen=True)
class Reach:
    """A node: the name the user typed (host, and port when one was typed), and the
    endpoint it resolved to."""

    typed_host: str
    typed_port: int | None
    endpoint: Hop
    #: the ssh config file read (absolute), or "none"
    config: str
    connect_timeout: float = 10.0

    @property
    def name(self) -> str:
        """The node's name as typed: `gpu-node-01`, `10.0.0.5:2222`, `[fd00::5]:2222`."""
        from runbook.transports.address import typed_name

        host = f"[{self.typed_host}]" if ":" in self.typed_host else self.typed_host
        return typed_name(host if self.typed_port is None else f"{host}:{self.typed_port}")

    def describe(self) -> str:
        """`NAME = user@host:port`, ` via user@hop:port` per jump host: what the approver
        reads before approving."""
        text = f"{self.name} = {self.endpoint.address()}"
        hops = self.endpoint.chain()
        if hops:
            text += " via " + ", ".join(h.address() for h in hops)
        return text


#: the keys paramiko tries when none is named (`look_for_keys`), in $HOME/.ssh: ssh would look
#: in the passwd home's instead, so the ones the run could use are named to it
_DEFAULT_KEYS = ("id_rsa", "id_ecdsa", "id_ed25519", "id_dsa")


def _default_keys() -> tuple[Path, ...]:
    home = Path.home() / ".ssh"
    return tuple(home / name for name in _DEFAULT_KEYS if (home / name).is_file())


def _hop(address: SSHAddress, options: SSHOptions) -> Hop:
    via = None
    if options.jump is not None:
        via = _hop(options.jump, options.jump_options or options)
    keys = options.identities or _default_keys()
    return Hop(
        host=address.host,
        port=address.port,
        user=address.user,
        known_hosts=str(Path(options.known_hosts).expanduser().resolve()),
        identities=tuple(str(Path(p).expanduser().resolve()) for p in keys),
        key_alias=address.key_alias,
        via=via,
    )


def resolve(target: Target) -> Reach:
    """The `ssh://` target as the run resolved it (same config file, keys, known_hosts and
    jump flags). UsageError when the name or the config is bad."""
    from runbook.targets import effective_config_path
    from runbook.transports import ssh_config
    from runbook.transports.address import split_address

    rest = target.url.split("://", 1)[1]
    config_file = effective_config_path(target.ssh_config)
    address, options = ssh_config.resolve(
        rest,
        ssh_config.load(config_file),
        ssh_config.Given(
            identities=tuple(Path(p) for p in target.identities),
            known_hosts=Path(target.known_hosts) if target.known_hosts else None,
            jump=target.jump,
            connect_timeout=target.connect_timeout,
        ),
    )
    _, typed, typed_port = split_address(rest)
    return Reach(
        typed_host=typed,
        typed_port=typed_port,
        endpoint=_hop(address, options),
        config=config_file,
        connect_timeout=options.connect_timeout,
    )


def _pct(text: str, level: int) -> str:
    """`text` as ssh reads it after `level` rounds of %-token expansion (each nested
    ProxyCommand is expanded once more)."""
    return text.replace("%", "%" * (2**level))


def _hop_options(hop: Hop, config: str, level: int) -> list[str]:
    """The `-o` settings that make `ssh` reach `hop` as the run did; `level` counts the
    ProxyCommands this text sits inside (their %-expansion)."""
    args = [
        "-F", _pct(config, level),
        "-o", "StrictHostKeyChecking=yes",
        "-o", "ForwardAgent=no",
        "-o", "GlobalKnownHostsFile=/dev/null",
        "-o", f"UserKnownHostsFile={_pct(hop.known_hosts, level)}",
    ]  # fmt: skip
    if hop.key_alias:
        args += ["-o", f"HostKeyAlias={_pct(hop.key_alias, level)}"]
    for identity in hop.identities:
        args += ["-i", _pct(identity, level)]
    if hop.via is None:
        # whatever a config says (ProxyJump, ProxyCommand, possibly under a Match paramiko
        # does not evaluate), the run went straight there
        args += ["-o", "ProxyCommand=none"]
    else:
        args += ["-o", "ProxyCommand=" + _proxy_command(hop.via, hop, config, level + 1)]
    return args


def _proxy_command(hop: Hop, dest: Hop, config: str, level: int) -> str:
    """`ssh … -W dest:port hop`: the jump through `hop` to `dest`, as a ProxyCommand at
    nesting `level` (1: the node's own)."""
    command = ["ssh", *_hop_options(hop, config, level)]
    command += ["-o", "BatchMode=yes", "-p", str(hop.port), "-l", _pct(hop.user, level)]
    dest_host = f"[{dest.host}]" if ":" in dest.host else dest.host
    command += ["-W", f"{_pct(dest_host, level)}:{dest.port}", _pct(hop.host, level)]
    return shlex.join(command)


def ansible_host_vars(reach: Reach) -> dict[str, Any]:
    """The inventory variables for the node: the typed name as the host (the user's config
    still applies to it), every resolved setting handed to ssh explicitly."""
    endpoint = reach.endpoint
    args = ["-o", f"HostName={_pct(endpoint.host, 0)}", *_hop_options(endpoint, reach.config, 0)]
    return {
        "ansible_host": reach.typed_host,
        "ansible_port": endpoint.port,
        "ansible_user": endpoint.user,
        "ansible_ssh_common_args": shlex.join(args),
        "ansible_ssh_timeout": int(reach.connect_timeout),
    }
