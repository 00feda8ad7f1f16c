"""Fixtures of the recovery-check tests.

* ``recovery_hosts`` (module): a factory of SSH test hosts that live for the module (each
  test reconfigures its node's shims instead of paying for a new host);
* ``rbk`` (function): ``rbk("run", "nccl-recovery-check", "--var", …, host=host)`` runs the real
  CLI against a host over SSH (known_hosts and the client key of the test network filled in)
  with its state, config and Ansible dirs under the test's tmp_path; returns a CliResult
  (:class:`Cli` is the same for a module-scoped root).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.hosts.fixtures import HostFactory
from tests.hosts.harness import HostNetwork, TestHost
from tests.integration.conftest import CliResult, cli_env


@pytest.fixture(scope="module")
def recovery_hosts(host_network: HostNetwork) -> Iterator[HostFactory]:
    factory = HostFactory(host_network)
    yield factory
    factory.remove_all()


def target_args(network: HostNetwork, host: TestHost) -> list[str]:
    return ["--target", f"ssh://root@{host.address}:{host.port}",
            "--known-hosts", str(network.known_hosts_path),
            "--identity", str(network.client_key.private_path), "--connect-timeout", "5"]


class Cli:
    """The real CLI (`python -m runbook …`) with its state, config and Ansible dirs under
    `root`; `host=` adds the SSH target flags of a test host."""

    def __init__(self, root: Path, network: HostNetwork) -> None:
        self.env = cli_env(root)
        self.network = network

    def __call__(self, *args: Any, timeout: float = 120, host: TestHost | None = None,
                 stdin: str | None = None) -> CliResult:
        argv = [str(a) for a in args]
        if host is not None:
            argv += target_args(self.network, host)
        proc = subprocess.run([sys.executable, "-m", "runbook", *argv], capture_output=True,
                              text=True, env=self.env, timeout=timeout, input=stdin,
                              stdin=None if stdin is not None else subprocess.DEVNULL,
                              check=False)
        return CliResult(proc.returncode, proc.stdout, proc.stderr)

    @property
    def db(self) -> Path:
        return Path(self.env["RUNBOOK_STATE_DIR"]) / "approvals.db"


@pytest.fixture
def rbk(tmp_path: Path, host_network: HostNetwork) -> Cli:
    return Cli(tmp_path, host_network)
