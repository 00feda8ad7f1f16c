"""Benchmark: one guided run of a 10-command runbook over SSH vs ten separate `ssh` calls.

Brings up one real OpenSSH test host in a network namespace (tests/hosts harness, needs root),
then times, as medians over --repeat runs:
  * `runbook run ten-commands.yaml --target ssh://…` as a user runs it (a new Python process:
    interpreter start, imports, connect, ten commands over one connection, run directory);
  * the same walk in-process (connect + ten commands + parse + decide), the engine's own cost;
  * the ten commands as ten separate `ssh` invocations of the OpenSSH client, in sequence.

Run:  sudo .venv/bin/python -m benchmarks.ssh_connection_reuse [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from runbook.executor import execute
from runbook.spec import load_file
from runbook.transports.address import SSHAddress
from runbook.transports.ssh import SSHOptions, SSHTransport
from tests.hosts.harness import HostNetwork

RUNBOOK = Path(__file__).resolve().parent.parent / "tests/integration/runbooks/ten-commands.yaml"


def median_text(samples: list[float]) -> str:
    return f"{statistics.median(samples):.3f} s (min {min(samples):.3f}, max {max(samples):.3f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    runbook = load_file(RUNBOOK)
    commands = [c.command for s in runbook.stages for c in s.collect]
    assert len(commands) == 10, commands
    with tempfile.TemporaryDirectory(prefix="rbk-bench-") as tmp, HostNetwork(Path(tmp)) as net:
        host = net.add_host("bench")
        key = net.client_key
        target = f"ssh://root@{host.address}:{host.port}"
        cli_args = [sys.executable, "-m", "runbook", "run", str(RUNBOOK), "--target", target,
                    "--known-hosts", str(net.known_hosts_path), "--identity", str(key.private_path),
                    "--run-dir", str(Path(tmp) / "run"), "--no-input"]  # fmt: skip
        cli_s, engine_s, ssh_s = [], [], []
        for i in range(args.repeat):
            cli_args[-2] = str(Path(tmp) / f"run-{i}")
            start = time.perf_counter()
            subprocess.run(cli_args, check=True, capture_output=True)
            cli_s.append(time.perf_counter() - start)

            start = time.perf_counter()
            transport = SSHTransport(
                SSHAddress(host.address, host.port),
                SSHOptions(known_hosts=net.known_hosts_path, identities=(key.private_path,)),
            )
            try:
                result = execute(runbook, transport)
            finally:
                transport.close()
            engine_s.append(time.perf_counter() - start)
            assert all(s.status == "ok" for s in result.verdict.stages), result.verdict

            start = time.perf_counter()
            for command in commands:
                subprocess.run(net.ssh_argv(host, command), check=True, capture_output=True)
            ssh_s.append(time.perf_counter() - start)
    print(f"10-command runbook over SSH, {args.repeat} runs each (median):")
    print(f"  runbook run (new process, guided):  {median_text(cli_s)}")
    print(f"  engine in-process (connect + walk): {median_text(engine_s)}")
    print(f"  10 separate ssh invocations:        {median_text(ssh_s)}")
    print(
        f"  speed-up vs ssh: CLI {statistics.median(ssh_s) / statistics.median(cli_s):.1f}x, "
        f"engine {statistics.median(ssh_s) / statistics.median(engine_s):.1f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
