"""Benchmark: one guided `runbook run nccl-init-failure` over SSH vs the incident's probe
commands typed as separate `ssh` calls, on the same test host.

Brings up one real OpenSSH test host in a network namespace (tests/hosts harness, needs root)
dressed as a healthy 8-GPU node (the scenario shims of tests/scenarios: nvidia-smi, lspci,
rdma, ibdev2netdev print real-format output), then times, as medians over --repeat runs:
  * `runbook run nccl-init-failure --target ssh://…` as a user runs it: a new Python process
    (interpreter start, imports, connect, the whole walk, the run directory), with Python's
    bytecode cache on as an installed package has it (one untimed run warms it);
  * the 16 commands an on-call engineer types for the incident (GPU identity and topology,
    the kernel log's signatures, the RDMA devices, kubelet's and containerd's journals,
    /dev/shm) as 16 separate invocations of the OpenSSH client, in sequence.
and prints where a run's own time goes: the CLI's start-up (`-X importtime` of the run).

Run:  sudo .venv/bin/python -m benchmarks.guided_run [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.ssh_connection_reuse import median_text
from tests.hosts.harness import HostNetwork
from tests.scenarios import shims

#: the incident's probe commands, as the write-up runs them one by one
COMMANDS = [
    "nvidia-smi -L",
    "nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,driver_version,pstate,temperature.gpu,"
    "memory.used,memory.total,compute_mode --format=csv,noheader",
    "nvidia-smi topo -m",
    "nvidia-smi topo -p2p r",
    "nvidia-smi topo -p2p w",
    "nvidia-smi nvlink --status",
    "dmesg -T | grep -Ei 'NVRM: Xid|Xid \\(|GPU has fallen|PCIe Bus Error|AER:.*(error|fatal)'",
    "nvidia-smi -q",
    "ls -la /dev/infiniband",
    "ls -la /sys/class/infiniband",
    "rdma link show",
    "ibdev2netdev",
    "lspci -nn | grep -Ei 'Mellanox|Infiniband|Ethernet controller'",
    "journalctl -u kubelet --since -6h --no-pager | grep -E 'OOM|ContainerDied'",
    "journalctl -u containerd --since -6h --no-pager | grep -E 'TaskOOM|shim disconnected'",
    "df -B1 /dev/shm",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    assert len(COMMANDS) == 16
    # an installed package has its bytecode compiled; a checkout run with
    # PYTHONDONTWRITEBYTECODE recompiles every module on each start
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory(prefix="rbk-bench-") as tmp, HostNetwork(Path(tmp)) as net:
        host = net.add_host("guided")
        shims.install(host, shims.load_profile("healthy-8gpu"))
        env["RUNBOOK_STATE_DIR"] = str(Path(tmp) / "state")
        base = [sys.executable, "-m", "runbook", "run", "nccl-init-failure",
                "--target", f"ssh://root@{host.address}:{host.port}",
                "--known-hosts", str(net.known_hosts_path),
                "--identity", str(net.client_key.private_path), "--no-input"]  # fmt: skip
        subprocess.run([*base, "--run-dir", f"{tmp}/warm"], check=True, capture_output=True,
                       env=env)  # fmt: skip
        cli_s, ssh_s = [], []
        for i in range(args.repeat):
            start = time.perf_counter()
            subprocess.run([*base, "--run-dir", f"{tmp}/run-{i}"], check=True,
                           capture_output=True, env=env)  # fmt: skip
            cli_s.append(time.perf_counter() - start)
            start = time.perf_counter()
            for command in COMMANDS:
                subprocess.run(net.ssh_argv(host, command), capture_output=True, check=False)
            ssh_s.append(time.perf_counter() - start)
        imports = subprocess.run(
            [sys.executable, "-X", "importtime", *base[1:], "--run-dir", f"{tmp}/imports"],
            capture_output=True, text=True, env=env, check=True,
        ).stderr
        by_package: dict[str, int] = {}
        for m in re.finditer(r"import time:\s+(\d+) \|\s+\d+ \|\s+([\w.]+)", imports):
            top = m.group(2).split(".")[0]
            by_package[top] = by_package.get(top, 0) + int(m.group(1))
        total_us = sum(by_package.values())
    print(f"nccl-init-failure over SSH vs the incident's 16 commands, {args.repeat} runs each:")
    print(f"  runbook run (new process, guided): {median_text(cli_s)}")
    print(f"  16 separate ssh invocations:       {median_text(ssh_s)}")
    ratio = statistics.median(cli_s) / statistics.median(ssh_s)
    print(f"  ratio: {ratio:.2f}x the separate-ssh time (target <= 0.15x)")
    print(f"  of a run, imports (-X importtime, self times summed): {total_us / 1e6:.3f} s")
    largest = sorted(by_package.items(), key=lambda item: -item[1])[:10]
    print("    largest: " + ", ".join(f"{name} {us / 1000:.0f} ms" for name, us in largest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
