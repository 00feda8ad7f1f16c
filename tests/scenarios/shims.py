"""GPU and fabric tools for test hosts: real-format output from shims on the host's PATH.

This machine has no GPU, no NVIDIA driver, no InfiniBand: what a node's ``nvidia-smi``,
``lspci``, ``rdma``, ``ibdev2netdev``, ``all_reduce_perf`` (and, for hardware faults only,
``dmesg``) print is replayed by shims written into the host's shim dir, which sshd puts first on
every session's PATH (:meth:`tests.hosts.harness.TestHost.write_shim`). Everything between the
runbook and the shim (SSH, the shell, exit statuses, stderr) is real.

A *profile* maps an output key to an :class:`Output` (stdout, stderr, exit status). Profiles
live as files under ``node-data/<profile>/``: ``<key>.txt`` (stdout), optional ``<key>.err``
and ``<key>.rc``; the outputs there are real-format captures of the shape each tool prints
(8-GPU Blackwell node without NVLink, as in the incident). Keys:

=====================  =============================================================
key                    command
=====================  =============================================================
nvidia-smi             ``nvidia-smi`` (no arguments: its table)
nvidia-smi-L           ``nvidia-smi -L``
nvidia-smi-query       ``nvidia-smi --query-gpu=... --format=csv,noheader``
nvidia-smi-q           ``nvidia-smi -q``
nvidia-smi-topo-m      ``nvidia-smi topo -m``
nvidia-smi-topo-p2p-r  ``nvidia-smi topo -p2p r``
nvidia-smi-topo-p2p-w  ``nvidia-smi topo -p2p w``
nvidia-smi-nvlink      ``nvidia-smi nvlink --status``
lspci                  ``lspci`` (any flags)
rdma-link              ``rdma link show``
ibdev2netdev           ``ibdev2netdev``
all_reduce_perf        ``all_reduce_perf`` (any flags)
dmesg                  ``dmesg`` (any flags) -- only for the shim scenarios: the real
                       scenarios read the kernel's own log
=====================  =============================================================

A command whose keys are all absent gets no shim (the host's real command, or "command not
found", answers), which is how "this node has no ibdev2netdev" is written.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from tests.hosts.harness import TestHost

DATA = Path(__file__).with_name("node-data")


@dataclass(frozen=True)
class Output:
    stdout: str
    stderr: str = ""
    rc: int = 0


#: the shim each key belongs to, and the argument string (`$*`) that selects it ("*" = any)
_DISPATCH: dict[str, tuple[str, str]] = {
    "nvidia-smi": ("nvidia-smi", ""),
    "nvidia-smi-L": ("nvidia-smi", "-L"),
    "nvidia-smi-query": ("nvidia-smi", "--query-gpu=*"),
    "nvidia-smi-q": ("nvidia-smi", "-q"),
    "nvidia-smi-topo-m": ("nvidia-smi", "topo -m"),
    "nvidia-smi-topo-p2p-r": ("nvidia-smi", "topo -p2p r"),
    "nvidia-smi-topo-p2p-w": ("nvidia-smi", "topo -p2p w"),
    "nvidia-smi-nvlink": ("nvidia-smi", "nvlink --status"),
    "lspci": ("lspci", "*"),
    "rdma-link": ("rdma", "link show"),
    "ibdev2netdev": ("ibdev2netdev", "*"),
    "all_reduce_perf": ("all_reduce_perf", "*"),
    "dmesg": ("dmesg", "*"),
}


def load_profile(name: str) -> dict[str, Output]:
    """The outputs stored under node-data/<name>/."""
    base = DATA / name
    if not base.is_dir():
        raise FileNotFoundError(f"no node profile {name!r} under {DATA}")
    out: dict[str, Output] = {}
    for key in _DISPATCH:
        txt, err, rc = (base / f"{key}.{ext}" for ext in ("txt", "err", "rc"))
        if txt.exists() or err.exists() or rc.exists():
            out[key] = Output(
                txt.read_text() if txt.exists() else "",
                err.read_text() if err.exists() else "",
                int(rc.read_text()) if rc.exists() else 0,
            )
    return out


def profile(name: str, **changes: Output | None) -> dict[str, Output]:
    """A stored profile with some outputs replaced (or, given None, removed)."""
    outputs = load_profile(name)
    for key, value in changes.items():
        key = key.replace("_", "-") if key not in _DISPATCH else key
        if key not in _DISPATCH:
            raise KeyError(f"unknown output key {key!r}")
        if value is None:
            outputs.pop(key, None)
        else:
            outputs[key] = value
    return outputs


def with_stdout(outputs: Mapping[str, Output], key: str, stdout: str) -> Output:
    return replace(outputs[key], stdout=stdout)


def install(host: TestHost, outputs: Mapping[str, Output]) -> None:
    """Write the outputs under the host's dir and one shim per command that has any."""
    store = Path(host.dir) / "node-data"
    store.mkdir(exist_ok=True)
    by_command: dict[str, list[tuple[str, str]]] = {}
    for key, output in outputs.items():
        command, pattern = _DISPATCH[key]
        (store / f"{key}.txt").write_text(output.stdout)
        (store / f"{key}.err").write_text(output.stderr)
        by_command.setdefault(command, []).append((key, pattern))
    for command, entries in by_command.items():
        cases = []
        for key, pattern in entries:
            q = shlex.quote
            # patterns are shell case patterns: '*' must stay unquoted, the rest literal
            pat = "*" if pattern == "*" else (
                q(pattern[:-1]) + "*" if pattern.endswith("*") else q(pattern))
            rc = outputs[key].rc
            cases.append(
                f"  {pat}) cat {q(str(store / f'{key}.txt'))}; "
                f"cat {q(str(store / f'{key}.err'))} >&2; exit {rc} ;;"
            )
        script = "\n".join([
            "#!/bin/sh",
            f"# test shim: replays real-format {command} output (no such hardware here)",
            'case "$*" in',
            *cases,
            f'  *) echo "{command}: shim has no output for: $*" >&2; exit 2 ;;',
            "esac",
            "",
        ])
        host.write_shim(command, script)
