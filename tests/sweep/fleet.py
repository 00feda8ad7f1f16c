"""A fleet of SSH test hosts dressed as GPU nodes in known states, and the Ansible inventory
that lists them (used by the sweep tests and benchmarks/sweep_fleet.py).

Every host gets the healthy 8-GPU tool shims of tests/scenarios/node-data (there is no GPU
here) and a `dmesg` shim: the machine's real kernel log is shared by every namespace and holds
whatever other tests did to it, so each node's kernel log is written here, in `dmesg -T`'s real
format. Kinds:

    healthy        a quiet boot log
    oom            a memcg OOM kill (the kernel's real line sequence, as tests/scenarios
                   reproduce) in the cgroup of the job the inventory names for that node
                   (`runbook_vars: {cgroup_dir: …}`): the job's OOM, a finding
    neighbour-oom  a node running no job whose kernel log holds a real memcg OOM kill in an
                   unrelated cgroup: made here by the kernel (tests/scenarios/cgroups.py
                   foreign_oom) and its lines copied from this machine's kernel log into
                   the node's; a workload at its own limit, not a finding
    xid            Xid 79: the GPU fell off the bus
    hang      `dmesg` never returns (sleeps): the host must be cut off at its deadline
    stopped   sshd stopped with SIGSTOP: the host accepts TCP and never sends a banner
    rekeyed   the host key changed after known_hosts was recorded: must be refused
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.hosts.harness import HostNetwork, TestHost
from tests.scenarios import shims
from tests.scenarios.cgroups import foreign_oom
from tests.scenarios.shims import Output
from tests.tools.ansible_env import ssh_vars

HEALTHY_PROFILE = "healthy-8gpu"
KINDS = ("healthy", "oom", "neighbour-oom", "xid", "hang", "stopped", "rekeyed")
#: the root cause a swept host of each kind must get (None: it is not swept)
EXPECTED = {
    "healthy": "healthy",
    "oom": "host-memory-oom",
    "neighbour-oom": "healthy",
    "xid": "gpu-hardware",
}
EXPECTED_STATUS = {
    "healthy": "healthy",
    "oom": "finding",
    "neighbour-oom": "healthy",
    "xid": "finding",
    "hang": "timeout",
    "stopped": "timeout",
    "rekeyed": "refused",
}


def _kt(at: dt.datetime) -> str:
    """A `dmesg -T` stamp: `[Wed Dec  2 11:33:35 2026]`."""
    return at.strftime("[%a %b ") + f"{at.day:2d}" + at.strftime(" %H:%M:%S %Y]")


def kernel_log(*fault_lines: str, now: dt.datetime | None = None) -> str:
    now = now or dt.datetime.now()
    boot, fault = now - dt.timedelta(hours=3), now - dt.timedelta(minutes=10)
    quiet = [
        f"{_kt(boot)} Linux version 6.1.0-18-amd64 (debian-kernel@lists.debian.org)",
        f"{_kt(boot)} nvidia: loading out-of-tree module taints kernel.",
        f"{_kt(boot)} NVRM: loading NVIDIA UNIX x86_64 Kernel Module  575.57.08",
    ]
    return "\n".join(quiet + [f"{_kt(fault)} {line}" for line in fault_lines]) + "\n"


MEMCG = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod7c1d3a52.slice"
OOM_LINES = (
    "train_process invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=984",
    "memory: usage 671088640kB, limit 671088640kB, failcnt 0",
    "swap: usage 0kB, limit 0kB, failcnt 0",
    f"Memory cgroup stats for {MEMCG}:",
    "anon 612361404416",
    "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=cri-containerd-5e0f.scope,"
    f"mems_allowed=0-1,oom_memcg={MEMCG},task_memcg={MEMCG}/cri-containerd-5e0f.scope,"
    "task=train_process,pid=48230,uid=0",
    "Memory cgroup out of memory: Killed process 48230 (train_process) total-vm:98234560kB, "
    "anon-rss:80123456kB, file-rss:123456kB, shmem-rss:6710886kB, UID:0 pgtables:160512kB "
    "oom_score_adj:984",
)
#: the job's memory cgroup on an `oom` node, as its inventory entry names it
JOB_CGROUP_DIR = "/sys/fs/cgroup" + MEMCG
_STAMP = re.compile(r"^\[[ \d.]+\] ")


@functools.cache
def neighbour_oom_lines() -> tuple[str, ...]:
    """A real memcg OOM kill, as this machine's kernel printed it: a process in a cgroup of
    its own (32 MiB) killed for asking 128 MiB, from its `invoked oom-killer` line to its
    `Killed process` line, stamps removed (`kernel_log` stamps them again)."""
    _, memcg = foreign_oom("neighbour")
    lines = [_STAMP.sub("", line) for line in _kernel_log_now().splitlines()]
    kill = max(i for i, line in enumerate(lines) if f"oom_memcg={memcg}," in line)
    start = max(i for i in range(kill + 1) if "invoked oom-killer" in lines[i])
    end = next(i for i in range(kill, len(lines)) if "Killed process" in lines[i])
    return tuple(lines[start : end + 1])


def _kernel_log_now() -> str:
    return subprocess.run(["dmesg"], capture_output=True, text=True, check=True, timeout=30).stdout


XID_LINES = (
    "NVRM: Xid (PCI:0000:3a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    "NVRM: GPU 0000:3a:00.0: GPU has fallen off the bus.",
)
HANG_DMESG = "#!/bin/sh\n# test shim: a kernel log read that never returns\nexec sleep 600\n"
#: a node whose kubectl has no cluster configured, and whose journal has no kubelet entries:
#: what the real tools print then (the machine's own kubectl costs 0.2 s of CPU per call)
KUBECTL = """#!/bin/sh
# test shim: kubectl without a kubeconfig (no API server can run here)
echo 'The connection to the server localhost:8080 was refused - did you specify the right' \\
  'host or port?' >&2
exit 1
"""
JOURNALCTL = (
    "#!/bin/sh\n# test shim: a journal without entries for the unit\necho '-- No entries --'\n"
)


def dress(host: TestHost, kind: str) -> None:
    """Install the shims of `kind` on `host` (stopped/rekeyed: see `finish`)."""
    changes: dict[str, Output] = {"dmesg": Output(kernel_log())}
    if kind == "oom":
        changes["dmesg"] = Output(kernel_log(*OOM_LINES))
    elif kind == "neighbour-oom":
        changes["dmesg"] = Output(kernel_log(*neighbour_oom_lines()))
    elif kind == "xid":
        changes["dmesg"] = Output(kernel_log(*XID_LINES))
    shims.install(host, shims.profile(HEALTHY_PROFILE, **changes))  # type: ignore[arg-type]
    host.write_shim("kubectl", KUBECTL)
    host.write_shim("journalctl", JOURNALCTL)
    if kind == "hang":
        host.write_shim("dmesg", HANG_DMESG)


def finish(hosts: Mapping[str, tuple[TestHost, str]]) -> None:
    """What must happen after known_hosts was copied: rekey, stop sshds."""
    for host, kind in hosts.values():
        if kind == "rekeyed":
            host.regenerate_host_key()
        elif kind == "stopped":
            pid = host.sshd_pid
            assert pid is not None
            os.kill(pid, signal.SIGSTOP)


def resume(hosts: Iterable[tuple[TestHost, str]]) -> None:
    """SIGCONT stopped sshds (so teardown's SIGTERM is not left pending)."""
    for host, kind in hosts:
        if kind == "stopped" and host.sshd_pid is not None:
            os.kill(host.sshd_pid, signal.SIGCONT)


def group_vars(network: HostNetwork, known_hosts: Path) -> dict[str, Any]:
    """How every host is reached, as an inventory's `all: vars:` would say it."""
    return ssh_vars(network, known_hosts)


def inventory(
    network: HostNetwork,
    hosts: Mapping[str, tuple[TestHost, str]],
    known_hosts: Path,
    *,
    extra: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """A YAML-structured inventory: one group per kind (`kind_healthy`, `kind_neighbour_oom`,
    …) under `gpu_nodes`, the connection settings in `all: vars:` (an `oom` node's job
    cgroup in its `runbook_vars`); `extra` adds hosts (name → hostvars) to group `other`."""
    children: dict[str, Any] = {}
    for name, (host, kind) in hosts.items():
        group = children.setdefault(f"kind_{kind.replace('-', '_')}", {"hosts": {}})
        entry: dict[str, Any] = {"ansible_host": host.address, "ansible_port": host.port}
        if kind == "oom":
            # the node runs a job whose cgroup the inventory knows (a scheduler's dynamic
            # inventory would): its OOM is that job's
            entry["runbook_vars"] = {"cgroup_dir": JOB_CGROUP_DIR}
        group["hosts"][name] = entry
    tree: dict[str, Any] = {
        "all": {
            "vars": group_vars(network, known_hosts),
            "children": {"gpu_nodes": {"children": children}},
        }
    }
    if extra:
        tree["all"]["children"]["other"] = {"hosts": {k: dict(v) for k, v in extra.items()}}
    return tree


def write_inventory(path: Path, data: Mapping[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(dict(data), sort_keys=False))
    return path


def build(
    factory: Any,
    network: HostNetwork,
    kinds: Sequence[str],
    workdir: Path,
    *,
    prefix: str = "n",
) -> tuple[dict[str, tuple[TestHost, str]], Path]:
    """Hosts `<prefix><i>-<kind>` (one per entry of `kinds`), dressed and finished, and a copy of
    known_hosts taken before any host was rekeyed."""
    names = [f"{prefix}{i:03d}-{kind}"[:32] for i, kind in enumerate(kinds)]
    made = factory.many(names)
    hosts = {h.name: (h, k) for h, k in zip(made, kinds, strict=True)}
    for host, kind in hosts.values():
        dress(host, kind)
    known = workdir / "known_hosts"
    shutil.copyfile(network.known_hosts_path, known)
    finish(hosts)
    return hosts, known
