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

RUNBOOKS = Path(__file__).parent / "runbooks"


@dataclass
class CliResult:
    rc: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


@pytest.fixture
def cli(tmp_path: Path):  # type: ignore[no-untyped-def]
    """`cli("run", ...)` runs `python -m runbook ...` with its state under tmp_path."""
    env = {**os.environ, "RUNBOOK_STATE_DIR": str(tmp_path / "state"), "COLUMNS": "200"}

    def run(*args: str, timeout: float = 60) -> CliResult:
        proc = subprocess.run(
            [sys.executable, "-m", "runbook", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        return CliResult(proc.returncode, proc.stdout, proc.stderr)

    return run
