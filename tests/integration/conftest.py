"""Helpers for the integration tests: run the real CLI as a subprocess, as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.tools.ansible_env import ansible_dirs

RUNBOOKS = Path(__file__).parent / "runbooks"


@dataclass
class CliResult:
    rc: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def cli_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a CLI under test: its state, config and Ansible's own dirs under
    tmp_path (never the user's ~/.local/state, ~/.config or ~/.ansible; the Ansible dirs are
    tests/tools/ansible_env.py's)."""
    return {
        **os.environ,
        "RUNBOOK_STATE_DIR": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        **ansible_dirs(tmp_path / "ansible"),
        "COLUMNS": "200",
    }


@pytest.fixture
def cli(tmp_path: Path):  # type: ignore[no-untyped-def]
    """`cli("run", ...)` runs `python -m runbook ...` with its state under tmp_path."""
    env = cli_env(tmp_path)

    def run(*args: str, timeout: float = 60, extra_env: dict[str, str] | None = None) -> CliResult:
        proc = subprocess.run(
            [sys.executable, "-m", "runbook", *args],
            capture_output=True,
            text=True,
            env={**env, **(extra_env or {})},
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        return CliResult(proc.returncode, proc.stdout, proc.stderr)

    return run
