"""Benchmark: `runbook sweep` of a fleet of real SSH test hosts — hosts/s, CPU and peak RSS —
beside (with --paramiko) a minimal paramiko thread pool and (with --ansible) ansible-playbook
running the same probe commands with the same forks.

Brings up the largest --hosts count of healthy GPU-node test hosts (tests/sweep/fleet.py:
network namespaces, real sshd, tool shims; needs root) and, for each host count N and each
--forks F, measures in a fresh process each:

  * sweep     `runbook sweep nccl-init-failure -i INVENTORY --forks F` (the whole CLI: start,
              ansible-inventory, the walk of every host, the approval queue, four reports);
  * paramiko  the commands of `runbook collect-plan nccl-init-failure`, one connection per
              host, one channel per command, F hosts at a time; nothing parsed or written;
              twice: as paramiko comes, and with TCP_NODELAY set on its sockets (as runbook's
              SSH transport sets it);
  * ansible   the same commands as `ansible.builtin.shell` tasks, forks F, pipelining on,
              gather_facts off (slow: N x 25 tasks; --ansible-hosts limits it).

For each: wall time, hosts/s (N / wall), CPU seconds (user + system of the process and what it
waited for) and peak RSS (the largest of those processes), from wait4(2). Every host here shares
this machine's cores with its own sshd, so the figures are an upper bound on the controller's
cost, not a fleet's speed: a real fleet does its half of the work on its own CPUs.

Run:  sudo .venv/bin/python -m benchmarks.sweep_fleet --hosts 30 200 --forks 16 64 --paramiko
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.hosts.fixtures import HostFactory
from tests.hosts.harness import HostNetwork
from tests.sweep import fleet
from tests.tools.ansible_env import ansible_dirs

REPO = Path(__file__).resolve().parent.parent

PARAMIKO_POOL = textwrap.dedent(
    """
    import json, socket, sys
    from concurrent.futures import ThreadPoolExecutor
    import paramiko

    hosts, commands, key, known, forks, nodelay = json.load(open(sys.argv[1]))

    def one(host):
        client = paramiko.SSHClient()
        client.load_host_keys(known)
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        sock = None
        if nodelay:
            sock = socket.create_connection((host[0], host[1]), timeout=30)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client.connect(host[0], port=host[1], username="root", key_filename=key,
                       allow_agent=False, look_for_keys=False, timeout=30, sock=sock)
        try:
            for command in commands:
                _, out, err = client.exec_command(command, timeout=30)
                out.read(); err.read(); out.channel.recv_exit_status()
        finally:
            client.close()

    with ThreadPoolExecutor(max_workers=forks) as pool:
        list(pool.map(one, hosts))
    """
)


@dataclass
class Measure:
    what: str
    hosts: int
    forks: int
    wall_s: float
    cpu_s: float
    rss_mb: float
    note: str = ""

    def row(self) -> str:
        return (
            f"| {self.what} | {self.hosts} | {self.forks} | {self.wall_s:.1f} | "
            f"{self.hosts / self.wall_s:.1f} | {self.cpu_s:.1f} | "
            f"{1000 * self.cpu_s / self.hosts:.0f} | {self.rss_mb:.0f} | {self.note} |"
        )


def measured(argv: list[str], env: dict[str, str], timeout: float) -> tuple[float, float, float, int]:
    """(wall s, CPU s, peak RSS MiB, exit status) of one process and what it waited for."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, env=env, cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = start + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            proc.kill()
        time.sleep(0.02)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - start
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, proc.returncode


def ansible_playbook(path: Path, commands: list[str]) -> Path:
    tasks = [{"name": f"probe {i}", "ansible.builtin.shell": c, "changed_when": False,
              "failed_when": False} for i, c in enumerate(commands)]  # fmt: skip
    path.write_text(yaml.safe_dump([{"name": "probes", "hosts": "all", "gather_facts": False,
                                     "tasks": tasks}]))  # fmt: skip
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[30, 200])
    parser.add_argument("--forks", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--paramiko", action="store_true", help="also the paramiko pool")
    parser.add_argument("--ansible", action="store_true", help="also ansible-playbook")
    parser.add_argument("--ansible-hosts", type=int, default=30,
                        help="largest host count ansible-playbook runs on")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    results: list[Measure] = []
    with tempfile.TemporaryDirectory(prefix="rbk-sweep-bench-") as tmp:
        work = Path(tmp)
        # bytecode cached as an installed package has it (PYTHONDONTWRITEBYTECODE, set in some
        # checkouts, would recompile every module at each start)
        base_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env = {**base_env, "RUNBOOK_STATE_DIR": str(work / "state"),
               "XDG_CONFIG_HOME": str(work / "config"), **ansible_dirs(work / "ansible"),
               "ANSIBLE_HOST_KEY_CHECKING": "True", "ANSIBLE_PIPELINING": "True",
               "ANSIBLE_SSH_ARGS": "-o ControlMaster=auto -o ControlPersist=30s",
               "ANSIBLE_SSH_CONTROL_PATH_DIR": str(work / "cp")}
        with HostNetwork(work) as net:
            factory = HostFactory(net)
            started = time.monotonic()
            hosts, known = fleet.build(factory, net, ["healthy"] * max(args.hosts), work)
            print(f"{len(hosts)} test hosts up in {time.monotonic() - started:.1f} s",
                  file=sys.stderr)
            names = sorted(hosts)
            plan = subprocess.run(
                [sys.executable, "-m", "runbook", "collect-plan", "nccl-init-failure",
                 "--format", "json"], capture_output=True, text=True, check=True, env=env,
                cwd=REPO,
            )
            commands = [p["command"] for p in json.loads(plan.stdout)["evidence_collect_probes"]]
            for n in sorted(args.hosts):
                subset = {name: hosts[name] for name in names[:n]}
                inventory = fleet.write_inventory(
                    work / f"inventory-{n}.yml", fleet.inventory(net, subset, known)
                )
                for forks in args.forks:
                    report = work / f"report-{n}-{forks}"
                    wall, cpu, rss, rc = measured(
                        [sys.executable, "-m", "runbook", "sweep", "nccl-init-failure", "-i",
                         str(inventory), "--forks", str(forks), "--timeout-per-host", "600",
                         "--report", str(report)], env, 1800,
                    )
                    data = json.loads((report / "sweep.json").read_text())
                    note = f"rc {rc}; sweep {data['duration_s']:.1f} s; " + ", ".join(
                        f"{v} {k}" for k, v in data["counts"].items() if v)
                    results.append(Measure("runbook sweep", n, forks, wall, cpu, rss, note))
                    print(results[-1].row(), file=sys.stderr)
                    # the pool as paramiko comes, and with TCP_NODELAY as runbook sets it
                    # (without it each channel waits ~40 ms on a delayed ACK)
                    for nodelay in (False, True) if args.paramiko else ():
                        spec = work / f"paramiko-{n}-{forks}.json"
                        spec.write_text(json.dumps([
                            [[h.address, h.port] for h, _ in subset.values()], commands,
                            str(net.client_key.private_path), str(known), forks, nodelay]))
                        wall, cpu, rss, rc = measured(
                            [sys.executable, "-c", PARAMIKO_POOL, str(spec)], env, 1800
                        )
                        what = "paramiko pool, TCP_NODELAY" if nodelay else "paramiko pool"
                        results.append(Measure(what, n, forks, wall, cpu, rss,
                                               f"rc {rc}; {len(commands)} commands per host"))
                        print(results[-1].row(), file=sys.stderr)
                    if args.ansible and n <= args.ansible_hosts:
                        book = ansible_playbook(work / "probes.yml", commands)
                        wall, cpu, rss, rc = measured(
                            [str(Path(sys.executable).parent / "ansible-playbook"), "-i",
                             str(inventory), "--forks", str(forks), str(book)], env, 3600,
                        )
                        results.append(Measure("ansible-playbook", n, forks, wall, cpu, rss,
                                               f"rc {rc}; pipelining"))
                        print(results[-1].row(), file=sys.stderr)
        load = os.getloadavg()
    print(f"Sweep of healthy GPU-node test hosts, {os.cpu_count()} CPUs, "
          f"load average {load[0]:.1f} at the end")
    print("| what | hosts | forks | wall s | hosts/s | CPU s | CPU ms/host | peak RSS MiB | note |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for measure in results:
        print(measure.row())
    if args.json:
        args.json.write_text(json.dumps([m.__dict__ for m in results], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

