"""Running the Kubernetes remedies' playbooks from tests, the way the engine runs them.

ansible_runner.run(private_data_dir=..., project_dir=<repo>/playbooks, playbook=NAME.yml, ...),
with everything Ansible and the kubernetes client write kept under the test's tmp_path:
ANSIBLE_HOME, the local/remote temp dirs and TMPDIR (kubernetes.core caches discovery in
``tempfile.gettempdir()``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import ansible_runner

REPO = Path(__file__).resolve().parents[2]
PLAYBOOKS = REPO / "playbooks"
ROLES = REPO / "roles"
VENV_BIN = Path(sys.executable).parent


def ansible_env(root: Path) -> dict[str, str]:
    for sub in ("home", "local-tmp", "remote-tmp", "tmp"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    return {
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        "ANSIBLE_HOME": str(root / "home"),
        "ANSIBLE_LOCAL_TEMP": str(root / "local-tmp"),
        "ANSIBLE_REMOTE_TEMP": str(root / "remote-tmp"),
        "ANSIBLE_ROLES_PATH": str(ROLES),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_LOCALHOST_WARNING": "False",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False",
        "ANSIBLE_DEPRECATION_WARNINGS": "False",
        "TMPDIR": str(root / "tmp"),
    }


def run_playbook(
    root: Path,
    name: str,
    playbook: str,
    *,
    extravars: Mapping[str, Any],
    inventory: Any = None,
    check: bool = False,
) -> ansible_runner.Runner:
    """One run in a fresh private_data_dir ``root/name``: ``--check --diff`` or ``--diff``."""
    private = root / name
    private.mkdir(parents=True, exist_ok=False)
    kwargs: dict[str, Any] = {"inventory": inventory} if inventory is not None else {}
    return ansible_runner.run(
        private_data_dir=str(private),
        project_dir=str(PLAYBOOKS),
        playbook=playbook,
        extravars=dict(extravars),
        envvars=ansible_env(root / "ansible"),
        cmdline="--check --diff" if check else "--diff",
        quiet=True,
        **kwargs,
    )


def output(runner: ansible_runner.Runner) -> str:
    """ansible-playbook's output, for assertion messages."""
    stdout = Path(runner.config.artifact_dir) / "stdout"
    return stdout.read_text(errors="replace") if stdout.exists() else ""


def task_result(runner: ansible_runner.Runner, status: str, task: str) -> dict[str, Any]:
    """The event_data of the one ``runner_on_<status>`` event of ``task``."""
    found = [
        e["event_data"]
        for e in runner.events
        if e.get("event") == f"runner_on_{status}" and e["event_data"].get("task") == task
    ]
    assert len(found) == 1, f"{len(found)} {status} results for {task!r}"
    return found[0]
