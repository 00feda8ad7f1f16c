"""Shared setup for the Ansible tests: a private Ansible environment per test, inventories for
the SSH test hosts, and one way to run a playbook through ansible-runner.

Everything Ansible writes (ANSIBLE_HOME, local and remote temp) goes under the test's
tmp_path, its SSH control sockets under a short /tmp dir removed afterwards: the test hosts
share this machine's filesystem, so a default would land in /root/.ansible on both sides.
The playbooks name their roles by FQCN (nccl_runbook.fleet.*): a run from
project_dir=<repo>/playbooks finds this checkout as that collection through
playbooks/collections (Ansible's playbook-adjacent collections), as any `ansible-playbook
playbooks/…` does. The background runs of ansible-lint and molecule are set up here too (see
background.py).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import ansible_runner
import pytest

from tests.ansible.background import ToolRuns, tool_run_of
from tests.hosts.harness import HostNetwork, TestHost

REPO = Path(__file__).resolve().parents[2]
PLAYBOOKS = REPO / "playbooks"
#: the venv running the tests: ansible-playbook, ansible-lint, molecule live next to python
VENV_BIN = Path(sys.executable).parent


def ansible_environment(root: Path, control_dir: Path) -> dict[str, str]:
    """Environment for any Ansible tool run from a test: venv first on PATH, state under
    ``root``, no colour, short-lived SSH masters whose sockets live in ``control_dir`` (a
    short path: a socket's path must fit in 108 bytes, and pytest's tmp paths do not)."""
    root.mkdir(parents=True, exist_ok=True)
    for sub in ("home", "local-tmp", "remote-tmp"):
        (root / sub).mkdir(exist_ok=True)
    return {
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        "ANSIBLE_HOME": str(root / "home"),
        "ANSIBLE_LOCAL_TEMP": str(root / "local-tmp"),
        "ANSIBLE_REMOTE_TEMP": str(root / "remote-tmp"),
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(control_dir),
        "ANSIBLE_SSH_CONTROL_PATH": "%(directory)s/%%C",
        # a master outliving its test host would only wait for its peer: keep it short
        "ANSIBLE_SSH_ARGS": "-C -o ControlMaster=auto -o ControlPersist=10s",
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_LOCALHOST_WARNING": "False",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False",
        "ANSIBLE_PYTHON_INTERPRETER": "auto_silent",
    }


def ssh_host_vars(network: HostNetwork, host: TestHost) -> dict[str, Any]:
    """Inventory variables that reach a test host as root, trusting only the test
    known_hosts and key (as tests/hosts/harness.py's ssh_argv does)."""
    return {
        "ansible_host": host.address,
        "ansible_port": host.port,
        "ansible_user": "root",
        "ansible_ssh_private_key_file": str(network.client_key.private_path),
        "ansible_ssh_common_args": (
            f"-F /dev/null -o UserKnownHostsFile={network.known_hosts_path} "
            "-o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes "
            "-o IdentitiesOnly=yes -o BatchMode=yes -o ConnectTimeout=10"
        ),
        "ansible_python_interpreter": "/usr/bin/python3",
    }


def ssh_inventory(network: HostNetwork, hosts: Sequence[TestHost]) -> dict[str, Any]:
    """A YAML-structured inventory with the hosts in group gpu_nodes."""
    return {
        "all": {
            "children": {
                "gpu_nodes": {
                    "hosts": {h.name: ssh_host_vars(network, h) for h in hosts},
                }
            }
        }
    }


@pytest.fixture
def ansible_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The Ansible environment for one test (see ansible_environment)."""
    control_dir = Path(tempfile.mkdtemp(prefix="rbk-cp-", dir="/tmp"))
    try:
        yield ansible_environment(tmp_path / "ansible", control_dir)
    finally:
        shutil.rmtree(control_dir, ignore_errors=True)


def run_playbook(
    private_data_dir: Path,
    playbook: str,
    *,
    envvars: Mapping[str, str],
    extravars: Mapping[str, Any],
    inventory: Any = None,
    cmdline: str = "--diff",
) -> ansible_runner.Runner:
    """One playbook run as the remedies do it; ``private_data_dir`` must not be reused, so
    each run's events stay its own."""
    private_data_dir.mkdir(parents=True, exist_ok=False)
    kwargs: dict[str, Any] = {}
    if inventory is not None:
        kwargs["inventory"] = inventory
    runner = ansible_runner.run(
        private_data_dir=str(private_data_dir),
        project_dir=str(PLAYBOOKS),
        playbook=playbook,
        extravars=dict(extravars),
        envvars=dict(envvars),
        cmdline=cmdline,
        quiet=True,
        **kwargs,
    )
    return runner


def runner_output(runner: ansible_runner.Runner) -> str:
    """ansible-playbook's whole output, for assertion messages."""
    stdout = Path(runner.config.artifact_dir) / "stdout"
    return stdout.read_text(errors="replace") if stdout.exists() else ""


def task_results(runner: ansible_runner.Runner, status: str) -> list[dict[str, Any]]:
    """event_data of every ``runner_on_<status>`` / ``runner_item_on_<status>`` event."""
    wanted = {f"runner_on_{status}", f"runner_item_on_{status}"}
    return [e["event_data"] for e in runner.events if e.get("event") in wanted]


@pytest.fixture(scope="session")
def tool_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ToolRuns]:
    """The background runs (tests/ansible/background.py) that the selected tests wait for,
    all started when the first test of this directory sets up."""
    runs = ToolRuns(tmp_path_factory.mktemp("tool-runs"), request.getfixturevalue)
    try:
        runs.start(sorted({n for item in request.session.items if (n := tool_run_of(item))}))
        yield runs
    finally:
        runs.close()


@pytest.fixture(autouse=True)
def _background_tool_runs(tool_runs: ToolRuns) -> None:
    """Every test here sets the background runs going, so they overlap with the first test."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Within this directory, tests that wait for a background run go last (stable order
    otherwise), so the runs overlap with the other tests instead of with each other only."""
    here = Path(__file__).parent
    positions = [i for i, item in enumerate(items) if item.path.is_relative_to(here)]
    ordered = sorted((items[i] for i in positions), key=lambda it: tool_run_of(it) is not None)
    for i, item in zip(positions, ordered, strict=True):
        items[i] = item
