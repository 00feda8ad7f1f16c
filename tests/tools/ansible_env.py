"""The one Ansible test environment: what every test (and benchmark) that runs an Ansible tool
or reads an inventory through Ansible sets up, in one place.

* :func:`ansible_dirs` — Ansible's own state (ANSIBLE_HOME, the local and remote temp dirs)
  under a directory of the test's, never the user's ~/.ansible: the test hosts share this
  machine's filesystem, so a default would land in /root/.ansible on both sides. The CLI's
  environment (tests/integration/conftest.py ``cli_env``) and the tests that call Ansible's
  Python API in-process use these alone.
* :func:`ansible_environment` — the environment of an Ansible tool run from a test
  (ansible-runner, ansible-playbook, ansible-lint, molecule): the venv first on PATH, the dirs
  above, TMPDIR under the same root (kubernetes.core caches discovery in
  ``tempfile.gettempdir()``), no colour, no chatter; with a ``control_dir``, short-lived SSH
  masters whose sockets live there (see :func:`ssh_control_dir`).
* the ``ansible_env`` fixture (registered for the whole suite in tests/conftest.py): that
  environment under the test's tmp_path, SSH control sockets in a short /tmp dir removed
  afterwards.
* :func:`ssh_vars`, :func:`ssh_host_vars`, :func:`ssh_inventory` — inventory variables that
  reach the SSH test hosts as root, trusting only the test known_hosts and key (as
  tests/hosts/harness.py's ssh_argv does).
* :func:`run_playbook` (ansible_runner.run from a fresh private data dir, the way the remedies
  run a playbook), :func:`runner_output`, :func:`task_results`, :func:`task_result`.

The playbooks name their roles by FQCN (nccl_runbook.fleet.*): a run from
project_dir=<repo>/playbooks finds this checkout as that collection through
playbooks/collections (Ansible's playbook-adjacent collections), as any `ansible-playbook
playbooks/…` does; nothing here points Ansible at the roles otherwise.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import ansible_runner

    from tests.hosts.harness import HostNetwork, TestHost

REPO = Path(__file__).resolve().parents[2]
PLAYBOOKS = REPO / "playbooks"
#: the venv running the tests: ansible-playbook, ansible-lint, molecule live next to python
VENV_BIN = Path(sys.executable).parent


def ansible_dirs(root: Path) -> dict[str, str]:
    """ANSIBLE_HOME and Ansible's local and remote temp dirs, under ``root`` (created)."""
    for sub in ("home", "local-tmp", "remote-tmp"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    return {
        "ANSIBLE_HOME": str(root / "home"),
        "ANSIBLE_LOCAL_TEMP": str(root / "local-tmp"),
        "ANSIBLE_REMOTE_TEMP": str(root / "remote-tmp"),
    }


def ansible_environment(root: Path, control_dir: Path | None = None) -> dict[str, str]:
    """Environment for any Ansible tool run from a test: venv first on PATH, state and TMPDIR
    under ``root``, no colour; with ``control_dir``, short-lived SSH masters whose sockets live
    there (a short path: a socket's path must fit in 108 bytes, and pytest's tmp paths do
    not)."""
    (root / "tmp").mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        **ansible_dirs(root),
        "TMPDIR": str(root / "tmp"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_LOCALHOST_WARNING": "False",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False",
        "ANSIBLE_DEPRECATION_WARNINGS": "False",
        "ANSIBLE_PYTHON_INTERPRETER": "auto_silent",
    }
    if control_dir is not None:
        env.update(
            {
                "ANSIBLE_SSH_CONTROL_PATH_DIR": str(control_dir),
                "ANSIBLE_SSH_CONTROL_PATH": "%(directory)s/%%C",
                # a master outliving its test host would only wait for its peer: keep it short
                "ANSIBLE_SSH_ARGS": "-C -o ControlMaster=auto -o ControlPersist=10s",
                "ANSIBLE_PIPELINING": "True",
            }
        )
    return env


@contextmanager
def ssh_control_dir() -> Iterator[Path]:
    """A short-path temp dir for SSH control sockets, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="rbk-cp-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def ansible_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The Ansible environment for one test (see ansible_environment), under tmp_path."""
    with ssh_control_dir() as control_dir:
        yield ansible_environment(tmp_path / "ansible", control_dir)


# -- inventories for the SSH test hosts ----------------------------------------------------------


def ssh_vars(network: HostNetwork, known_hosts: Path | None = None) -> dict[str, Any]:
    """How a test host is reached, as an inventory's vars say it: as root, with the test key,
    trusting only ``known_hosts`` (default: the network's)."""
    known = known_hosts if known_hosts is not None else network.known_hosts_path
    return {
        "ansible_user": "root",
        "ansible_ssh_private_key_file": str(network.client_key.private_path),
        "ansible_ssh_common_args": (
            f"-F /dev/null -o UserKnownHostsFile={known} "
            "-o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes "
            "-o IdentitiesOnly=yes -o BatchMode=yes -o ConnectTimeout=10"
        ),
        "ansible_python_interpreter": "/usr/bin/python3",
    }


def ssh_host_vars(network: HostNetwork, host: TestHost) -> dict[str, Any]:
    """Inventory variables that reach one test host (address, port and :func:`ssh_vars`)."""
    return {"ansible_host": host.address, "ansible_port": host.port, **ssh_vars(network)}


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


# -- running a playbook ----------------------------------------------------------------------------


def run_playbook(
    private_data_dir: Path,
    playbook: str,
    *,
    envvars: Mapping[str, str],
    extravars: Mapping[str, Any] | None = None,
    inventory: Any = None,
    cmdline: str | None = "--diff",
    project_dir: Path = PLAYBOOKS,
) -> ansible_runner.Runner:
    """One playbook run as the remedies do it; ``private_data_dir`` must not exist yet (it is
    never reused, so each run's events stay its own)."""
    import ansible_runner

    private_data_dir.mkdir(parents=True, exist_ok=False)
    kwargs: dict[str, Any] = {}
    if inventory is not None:
        kwargs["inventory"] = inventory
    if extravars is not None:
        kwargs["extravars"] = dict(extravars)
    if cmdline is not None:
        kwargs["cmdline"] = cmdline
    return ansible_runner.run(
        private_data_dir=str(private_data_dir),
        project_dir=str(project_dir),
        playbook=playbook,
        envvars=dict(envvars),
        quiet=True,
        **kwargs,
    )


def runner_output(runner: ansible_runner.Runner) -> str:
    """ansible-playbook's whole output, for assertion messages."""
    stdout = Path(runner.config.artifact_dir) / "stdout"
    return stdout.read_text(errors="replace") if stdout.exists() else ""


def task_results(runner: ansible_runner.Runner, status: str) -> list[dict[str, Any]]:
    """event_data of every ``runner_on_<status>`` / ``runner_item_on_<status>`` event."""
    wanted = {f"runner_on_{status}", f"runner_item_on_{status}"}
    return [e["event_data"] for e in runner.events if e.get("event") in wanted]


def task_result(runner: ansible_runner.Runner, status: str, task: str) -> dict[str, Any]:
    """The event_data of the one ``runner_on_<status>`` event of ``task``."""
    found = [
        e["event_data"]
        for e in runner.events
        if e.get("event") == f"runner_on_{status}" and e["event_data"].get("task") == task
    ]
    assert len(found) == 1, f"{len(found)} {status} results for {task!r}"
    return found[0]
