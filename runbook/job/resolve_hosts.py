"""A job given as a hosts file (`--hosts-from-file FILE`): one node per line.

    # comment lines and blank lines are ignored; `#` starts a comment anywhere outside quotes
    ssh://root@10.0.0.11:22   ranks=0-7   app_log_dir=/var/log/training
    kubectl://kube-system/node-agent-x2  node=gpu-node-07  ranks=8,9  pod=trainer-1 namespace=ml
    gpu-node-03               ranks=16-23        # an inventory host name
    local

The first word is the node: a target (`ssh://[user@]host[:port]`, `kubectl://NS/POD`,
`local`) or a host name, which is the inventory's entry of that name when an inventory is
given (and must be in it), else `ssh://USER@NAME:22`. A host, in a target or alone, must be a
host name or an address (transports/address.py `is_host`: nothing a shell could expand),
checked before any ssh config is read for it. The other words are `key=value`
(shell quoting allowed): `ranks=` (a list of ranks and ranges: `0,1`, `0-7`) fills the node's
ranks; `node=` names the node (default: the host of an ssh target — `host:port` when the file
lists that host on several ports —, the pod of a kubectl one, the inventory name); every other
key is a runbook variable for that node (as `--var`, after the inventory's `runbook_vars`).
Each node also gets `nodes` (how many the file lists) unless its line sets it. Every bad line
is reported at once, as FILE:LINE, in one error.
"""

from __future__ import annotations

import dataclasses
import getpass
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from runbook.errors import JobError, UsageError
from runbook.job.models import JobNode, JobSpec, RankSpec
from runbook.sweep.inventory import HostEntry
from runbook.transports.address import HOST_RULE, SSHAddress, is_host, split_address
from runbook.transports.nsenter import parse_kubectl_target

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NUMBER = re.compile(r"[0-9]{1,12}")


def default_ssh_user() -> str:
    """The user an `ssh HOST` from here logs in as: the local user (as ssh does)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "root"


#: more ranks than one node of any job runs: `ranks=0-99999999999` is a typo, not a node
MAX_RANKS = 100_000


def parse_ranks(text: str) -> tuple[int, ...]:
    """`0,1`, `0-7`, `0-3,8-11` → the ranks, in order; ValueError on anything else (and on
    more than MAX_RANKS ranks)."""
    ranks: dict[int, None] = {}  # ordered, and a cheap membership test
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        if not _NUMBER.fullmatch(low) or (dash and not _NUMBER.fullmatch(high)):
            raise ValueError(f"bad rank {part.strip()!r} (expected N or N-M)")
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise ValueError(f"bad rank range {part.strip()!r}")
        if len(ranks) + last - first >= MAX_RANKS:
            raise ValueError(f"more than {MAX_RANKS} ranks on one node ({part.strip()!r})")
        ranks.update(dict.fromkeys(range(first, last + 1)))
    return tuple(ranks)


def _entry(
    word: str,
    inventory: dict[str, HostEntry],
    has_inventory: bool,
    user: str,
    shared: frozenset[str] = frozenset(),
    user_given: bool = True,
) -> HostEntry:
    """The target of a line's first word (UsageError when it is not one). `shared`: hosts the
    file lists on more than one port (each such node is named `host:port`)."""
    if word == "local":
        return HostEntry("local", "local")
    if word.startswith("ssh://"):
        given_user, _, given_port = split_address(word.removeprefix("ssh://"))
        address = SSHAddress.parse(word.removeprefix("ssh://"), default_user=user)
        # two sshd ports on one address are two nodes (containers, test rigs): name them apart
        name = f"{address.host}:{address.port}" if address.host in shared else address.host
        # what the line leaves open, the ssh config may set (as for `ssh NAME`)
        return HostEntry(
            name,
            str(address),
            user_given=bool(given_user) or user_given,
            port_given=given_port is not None,
        )
    if word.startswith("kubectl://"):
        _, pod = parse_kubectl_target(word.removeprefix("kubectl://"))
        return HostEntry(pod, word)
    if "://" in word:
        raise UsageError(f"unknown target {word!r}: use ssh://, kubectl://, local or a host name")
    if word in inventory:
        return inventory[word]
    if has_inventory:
        raise UsageError(f"{word} is not in the inventory")
    if not is_host(word):
        raise UsageError(f"{word[:120]!r} is not {HOST_RULE}")
    return HostEntry(word, f"ssh://{user}@{word}:22", user_given=user_given, port_given=False)


def _hosts_on_several_ports(text: str, user: str) -> frozenset[str]:
    ports: dict[str, set[int]] = {}
    for line in text.splitlines():
        try:
            words = shlex.split(line, comments=True)
            if words and words[0].startswith("ssh://"):
                address = SSHAddress.parse(words[0].removeprefix("ssh://"), default_user=user)
                ports.setdefault(address.host, set()).add(address.port)
        except (ValueError, UsageError):
            continue  # the line's own error is reported where it is parsed
    return frozenset(host for host, found in ports.items() if len(found) > 1)


def parse_hosts_file(
    text: str,
    *,
    source: str = "hosts",
    inventory: Sequence[HostEntry] = (),
    ssh_user: str | None = None,
) -> JobSpec:
    """Pure: the text of a hosts file → the JobSpec (kind `hosts`, named after `source`)."""
    user = ssh_user or default_ssh_user()
    by_name = {e.name: e for e in inventory}
    problems: list[str] = []
    nodes: list[tuple[JobNode, dict[str, Any]]] = []
    seen: dict[str, int] = {}
    shared = _hosts_on_several_ports(text, user)
    for number, line in enumerate(text.splitlines(), start=1):
        where = f"{source}:{number}"
        try:
            words = shlex.split(line, comments=True)
        except ValueError as exc:
            problems.append(f"{where}: {exc}")
            continue
        if not words:
            continue
        try:
            entry = _entry(
                words[0], by_name, bool(inventory), user, shared, user_given=bool(ssh_user)
            )
        except UsageError as exc:
            problems.append(f"{where}: {exc}")
            continue
        variables: dict[str, Any] = {}
        ranks: tuple[int, ...] = ()
        name = entry.name
        for word in words[1:]:
            key, eq, value = word.partition("=")
            if not eq or not _KEY.match(key):
                problems.append(f"{where}: {word!r} is not key=value")
            elif key == "ranks":
                try:
                    ranks = parse_ranks(value)
                except ValueError as exc:
                    problems.append(f"{where}: ranks: {exc}")
            elif key == "node":
                name = value
            else:
                variables[key] = value
        if not name:
            problems.append(f"{where}: node= is empty")
            continue
        if name in seen:
            problems.append(f"{where}: node {name} is already listed on line {seen[name]}")
            continue
        seen[name] = number
        node = JobNode(name, dataclasses.replace(entry, name=name), ranks or (None,))
        nodes.append((node, variables))
    if problems:
        raise JobError("; ".join(problems))
    if not nodes:
        raise JobError(f"{source}: lists no node")
    out = []
    for node, variables in nodes:
        merged = {**node.entry.variables, "nodes": len(nodes), **variables}
        out.append(
            dataclasses.replace(node, entry=dataclasses.replace(node.entry, variables=merged))
        )
    ranks_out = [
        RankSpec(
            rank=r,
            node=n.name,
            pod=n.entry.variables.get("pod"),
            namespace=n.entry.variables.get("namespace"),
        )
        for n in out
        for r in n.ranks
    ]
    ranks_out.sort(key=lambda r: (r.rank is None, r.rank or 0, r.node))
    return JobSpec(kind="hosts", name=source, nodes=tuple(out), ranks=tuple(ranks_out))


def load_hosts_file(
    path: str | Path, *, inventory: Sequence[HostEntry] = (), ssh_user: str | None = None
) -> JobSpec:
    """Read FILE and parse it (see the module docstring); JobError when it cannot be read."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        raise JobError(f"hosts file {path}: {why}") from None
    return parse_hosts_file(text, source=str(path), inventory=inventory, ssh_user=ssh_user)
