"""Hosts from an Ansible inventory, read by Ansible itself: `ansible-inventory --list`.

Any inventory Ansible reads works unchanged — YAML, INI, a directory with `group_vars/` and
`host_vars/`, an executable dynamic inventory, inventory plugins — and `--limit` means what it
means to Ansible (groups, globs, `~regex`, `a:&b`, `a:!b`, `@retry-file`), because Ansible
evaluates it. Why a subprocess and not ansible's InventoryManager in this process: the inventory
is read once per sweep, a dynamic inventory script can hang (the subprocess has a timeout and is
killed; the in-process loader has none), and ansible's global state (config, display, plugin
loaders) stays out of ours. It costs about 0.6 s more per sweep (see docs/sweep.md).

How host variables become a target (pure, `entries_from_inventory`):

    ansible_connection   ssh (default, also paramiko/smart) → ssh://; local → local;
                         kubectl / kubernetes.core.kubectl → kubectl://NAMESPACE/POD
    ansible_host         address (default: the inventory name, which the user's ssh config
                         may resolve: HostName, User, Port, IdentityFile, ProxyJump, …)
                                                                   [ansible_ssh_host]
    ansible_port         port (default 22, or -p / -o Port= in the ssh args)  [ansible_ssh_port]
    ansible_user         user (default: -l / -o User=, else the ssh config's, else the local
                         user, as ssh does)
    ansible_ssh_private_key_file   the key (else --identity, the agent, ~/.ssh)
    ansible_ssh_common_args / ansible_ssh_extra_args   ProxyJump / -J / ProxyCommand `ssh -W`
                         → the jump host; UserKnownHostsFile → known_hosts; ConnectTimeout
    ansible_ssh_timeout  connect timeout
    ansible_kubectl_namespace / _pod / _container / _context   for kubectl hosts
    runbook_vars         a mapping of runbook variables for this host (`--var` wins)

A value we cannot honour (a templated `{{ … }}`, a chain of jumps, a password) makes that host
an `error` result, with the reason; it never stops the sweep of the others.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runbook.errors import UsageError
from runbook.sweep.sshargs import parse_ssh_args
from runbook.transports.address import HOST_RULE, is_host

log = logging.getLogger(__name__)

SSH_CONNECTIONS = frozenset(
    {"ssh", "paramiko", "smart", "ansible.builtin.ssh", "ansible.builtin.paramiko_ssh"}
)
LOCAL_CONNECTIONS = frozenset({"local", "ansible.builtin.local"})
KUBECTL_CONNECTIONS = frozenset(
    {"kubectl", "kubernetes.core.kubectl", "community.kubernetes.kubectl"}
)


class InventoryError(UsageError):
    """An inventory Ansible cannot read, or that selects no host (exit 2)."""


@dataclass(frozen=True)
class HostEntry:
    """One host to sweep and how to reach it."""

    name: str
    #: `ssh://user@host:port`, `kubectl://NS/POD` or `local`
    target: str
    groups: tuple[str, ...] = ()
    identities: tuple[str, ...] = ()
    known_hosts: str | None = None
    jump: str | None = None
    connect_timeout: float | None = None
    container: str | None = None
    kube_context: str | None = None
    variables: dict[str, Any] = field(default_factory=dict)
    #: why the host cannot be swept; it is then recorded with `problem_status`
    problem: str | None = None
    problem_status: str = "error"
    #: whether the target's user / port were set (else the ssh config may set them, as it
    #: does for `ssh NAME`)
    user_given: bool = True
    port_given: bool = True

    @property
    def scheme(self) -> str:
        return self.target.split("://", 1)[0] if "://" in self.target else self.target


def _format_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _group_map(data: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """host → every group it belongs to, directly or through children (not `all`,
    `ungrouped`), as Ansible's `group_names`."""
    parents: dict[str, set[str]] = {}
    for group, body in data.items():
        if group == "_meta" or not isinstance(body, Mapping):
            continue
        for child in body.get("children") or ():
            parents.setdefault(str(child), set()).add(group)
    direct: dict[str, set[str]] = {}
    for group, body in data.items():
        if group == "_meta" or not isinstance(body, Mapping):
            continue
        for host in body.get("hosts") or ():
            direct.setdefault(str(host), set()).add(group)

    def ancestors(group: str, seen: set[str]) -> set[str]:
        out = {group}
        for parent in parents.get(group, ()):
            if parent not in seen:
                out |= ancestors(parent, seen | {parent})
        return out

    groups: dict[str, tuple[str, ...]] = {}
    for host, own in direct.items():
        every: set[str] = set()
        for group in own:
            every |= ancestors(group, {group})
        groups[host] = tuple(sorted(every - {"all", "ungrouped"}))
    return groups


def _text(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def entry_from_hostvars(
    name: str, hostvars: Mapping[str, Any], *, groups: tuple[str, ...] = (), default_user: str
) -> HostEntry:
    """One inventory host as a sweep target (see the module docstring)."""
    problems: list[str] = []
    for key, value in hostvars.items():
        if key.startswith("ansible_") and isinstance(value, str) and "{{" in value:
            problems.append(
                f"{key} is a template ({value!r}); runbook reads the inventory as "
                "ansible-inventory prints it, unrendered: set the value itself"
            )
    variables = hostvars.get("runbook_vars") or {}
    if not isinstance(variables, Mapping):
        problems.append("runbook_vars must be a mapping of runbook variables")
        variables = {}
    connection = str(hostvars.get("ansible_connection") or "ssh")
    common: dict[str, Any] = {"groups": groups, "variables": dict(variables)}
    if connection in LOCAL_CONNECTIONS:
        return HostEntry(name, "local", problem="; ".join(problems) or None, **common)
    if connection in KUBECTL_CONNECTIONS:
        namespace = _text(hostvars.get("ansible_kubectl_namespace")) or "default"
        pod = _text(hostvars.get("ansible_kubectl_pod")) or name
        if hostvars.get("ansible_kubectl_kubeconfig"):
            problems.append("ansible_kubectl_kubeconfig is not supported: set KUBECONFIG")
        return HostEntry(
            name,
            f"kubectl://{namespace}/{pod}",
            container=_text(hostvars.get("ansible_kubectl_container")),
            kube_context=_text(hostvars.get("ansible_kubectl_context")),
            problem="; ".join(problems) or None,
            **common,
        )
    if connection not in SSH_CONNECTIONS:
        problems.append(
            f"ansible_connection {connection!r} is not supported (ssh, local or kubectl)"
        )
    if hostvars.get("ansible_password") or hostvars.get("ansible_ssh_pass"):
        problems.append("password logins are not supported: use a key or the agent")
    args = parse_ssh_args(
        _text(hostvars.get("ansible_ssh_common_args")),
        _text(hostvars.get("ansible_ssh_extra_args")),
    )
    problems += args.problems
    address = _text(hostvars.get("ansible_host") or hostvars.get("ansible_ssh_host")) or name
    if not is_host(address.strip("[]")):
        # never looked up in an ssh config: a `Match exec` line would hand it to a shell
        what = "ansible_host" if address != name else "the inventory name"
        problems.append(f"{what} {address[:120]!r} is not {HOST_RULE}")
    port_value = hostvars.get("ansible_port") or hostvars.get("ansible_ssh_port") or args.port
    port = 22
    try:
        port = int(port_value) if port_value else 22
        if not 0 < port < 65536:
            raise ValueError
    except (TypeError, ValueError):
        problems.append(f"bad ansible_port {port_value!r}")
        port = 22
    given_user = (
        _text(hostvars.get("ansible_user") or hostvars.get("ansible_ssh_user")) or args.user
    )
    user = given_user or default_user
    key_file = (
        _text(hostvars.get("ansible_ssh_private_key_file"))
        or _text(hostvars.get("ansible_private_key_file"))
        or args.identity
    )
    timeout = args.connect_timeout
    if hostvars.get("ansible_ssh_timeout") or hostvars.get("ansible_timeout"):
        try:
            timeout = float(hostvars.get("ansible_ssh_timeout") or hostvars["ansible_timeout"])
        except (TypeError, ValueError):
            problems.append("bad ansible_ssh_timeout")
    return HostEntry(
        name,
        f"ssh://{user}@{_format_host(address)}:{port}",
        identities=(key_file,) if key_file else (),
        known_hosts=args.known_hosts,
        jump=args.jump,
        connect_timeout=timeout,
        problem="; ".join(problems) or None,
        user_given=bool(given_user),
        port_given=bool(port_value),
        **common,
    )


def entries_from_inventory(
    data: Mapping[str, Any], *, default_user: str | None = None
) -> list[HostEntry]:
    """`ansible-inventory --list` output → one entry per host, sorted by name (the order
    ansible-inventory prints them in)."""
    meta = data.get("_meta") if isinstance(data, Mapping) else None
    hostvars = meta.get("hostvars") if isinstance(meta, Mapping) else None
    if not isinstance(hostvars, Mapping):
        raise InventoryError("ansible-inventory printed no _meta.hostvars")
    groups = _group_map(data)
    # a host without variables is listed in its groups but not in hostvars
    names = sorted({*hostvars, *groups})
    user = default_user or _local_user()
    return [
        entry_from_hostvars(
            name, hostvars.get(name) or {}, groups=groups.get(name, ()), default_user=user
        )
        for name in names
    ]


def _local_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "root"


def ansible_inventory_binary() -> str:
    """The ansible-inventory of the ansible-core runbook depends on (next to this Python),
    else the one on PATH."""
    beside = Path(sys.executable).parent / "ansible-inventory"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("ansible-inventory")
    if found is None:
        raise InventoryError("ansible-inventory not found (install ansible-core)")
    return found


class PendingInventory:
    """ansible-inventory started now and read later: a sweep starts it first, then loads and
    compiles its runbook (a few tenths of a second of CPU) while Ansible, a Python process of
    its own, reads the inventory. Killed on close if it is still running (a runbook that fails
    to load ends the sweep before the inventory is read)."""

    def __init__(
        self,
        source: str,
        *,
        limit: str | None = None,
        timeout: float = 120.0,
        binary: str | None = None,
    ) -> None:
        if not Path(source).exists() and "," not in source:
            raise InventoryError(f"inventory {source}: no such file or directory")
        self.source, self.timeout = source, timeout
        self.deadline = time.monotonic() + timeout
        argv = [binary or ansible_inventory_binary(), "-i", source, "--list"]
        if limit:
            argv += ["--limit", limit]
        env = {
            **os.environ,
            "ANSIBLE_INVENTORY_UNPARSED_FAILED": "True",
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_FORCE_COLOR": "0",
        }
        try:
            self.proc: subprocess.Popen[str] | None = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                text=True,
                env=env,
                # its own process group: a dynamic inventory script it runs is stopped with it
                start_new_session=True,
            )
        except OSError as exc:
            raise InventoryError(f"cannot run ansible-inventory: {exc.strerror or exc}") from None

    def data(self) -> dict[str, Any]:
        """Wait for it (within the timeout counted from the start) and parse what it printed."""
        proc, source = self.proc, self.source
        assert proc is not None, "read once"
        try:
            stdout, stderr = proc.communicate(timeout=max(0.0, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.close()
            raise InventoryError(
                f"inventory {source}: ansible-inventory did not finish within {self.timeout:g}s"
            ) from None
        self.proc = None
        messages = [line.strip() for line in stderr.splitlines() if line.strip()]
        if proc.returncode != 0:
            errors = [m for m in messages if m.startswith("[ERROR]")] or messages[-1:]
            why = (
                errors[-1].removeprefix("[ERROR]:").strip() if errors else f"exit {proc.returncode}"
            )
            raise InventoryError(f"inventory {source}: {why}")
        for message in messages:
            if message.startswith("[WARNING]"):
                log.warning("ansible-inventory: %s", message.removeprefix("[WARNING]:").strip())
        try:
            data = json.loads(stdout)
        except json.JSONDecodeError as exc:
            raise InventoryError(
                f"inventory {source}: ansible-inventory printed no JSON: {exc}"
            ) from None
        if not isinstance(data, dict):
            raise InventoryError(f"inventory {source}: ansible-inventory printed no mapping")
        return data

    def entries(self, limit: str | None = None) -> list[HostEntry]:
        """The hosts, ready to sweep (`limit`: only to word the error when none is left)."""
        found = entries_from_inventory(self.data())
        if not found:
            what = f" match --limit {limit!r}" if limit else ""
            raise InventoryError(f"inventory {self.source}: no hosts{what}")
        return found

    def close(self) -> None:
        """Stop it if it still runs: the whole group (a script it started included)."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.communicate()
            self.proc = None

    def __enter__(self) -> PendingInventory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load_inventory(
    source: str, *, limit: str | None = None, timeout: float = 120.0
) -> list[HostEntry]:
    """The hosts of an Ansible inventory (after --limit), ready to sweep."""
    with PendingInventory(source, limit=limit, timeout=timeout) as pending:
        return pending.entries(limit)
