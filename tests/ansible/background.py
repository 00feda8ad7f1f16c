"""Long tool runs (ansible-lint, `molecule test`) started in the background and waited for by
the tests that assert on them.

Why: each costs 15-25 s of one core, nearly all of it in ansible-playbook processes, and the
suite targets a two-core machine whose other Ansible tests (ansible-runner against test
hosts) keep one core busy. So the runs start when the first test of tests/ansible starts,
the tests that wait for them are ordered after the others (tests/ansible/conftest.py), and
the directory costs about half of its one-after-another time. Each run still gets its own
Ansible state (ANSIBLE_HOME, temp dirs, SSH control sockets), molecule state and fixtures;
each test asserts on its own run's exit status and output.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: a run that has not finished by then is killed and reported as such
TIMEOUT = 300.0


@dataclass(frozen=True)
class ToolResult:
    rc: int
    output: str
    seconds: float


@dataclass
class ToolRun:
    name: str
    argv: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes]
    started: float = field(default_factory=time.monotonic)

    def wait(self, timeout: float = TIMEOUT) -> ToolResult:
        """Wait for the run to end (killing it past ``timeout``) and return what it did."""
        try:
            rc = self.proc.wait(max(0.0, self.started + timeout - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.kill()
            rc = -9
        output = self.log_path.read_text(errors="replace")
        if rc == -9:
            output += f"\n[test harness: {self.name} killed after {timeout:.0f} s]\n"
        return ToolResult(rc=rc, output=output, seconds=time.monotonic() - self.started)

    def kill(self) -> None:
        if self.proc.poll() is None:
            # its own process group: molecule's ansible-playbook children go with it
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, 9)
            self.proc.wait()


Starter = Callable[["ToolRuns"], ToolRun]

#: name -> (starter, names of the session fixtures it needs); filled by register()
STARTERS: dict[str, tuple[Starter, tuple[str, ...]]] = {}


def register(name: str, *, needs: tuple[str, ...] = ()) -> Callable[[Starter], Starter]:
    """Declare how to start the background run ``name`` (in the module of its test)."""

    def deco(fn: Starter) -> Starter:
        STARTERS[name] = (fn, needs)
        return fn

    return deco


def waits_for(name: str) -> Callable[[Any], Any]:
    """Mark a test function as asserting on the background run ``name``."""

    def deco(fn: Any) -> Any:
        fn.tool_run = name
        return fn

    return deco


def tool_run_of(item: Any) -> str | None:
    return getattr(getattr(item, "function", None), "tool_run", None)


class ToolRuns:
    """The session's background runs; ``start(names)`` is idempotent."""

    def __init__(self, base: Path, fixture: Callable[[str], Any]) -> None:
        self.base = base
        #: the session fixtures the starters asked for, by name
        self.fixtures: dict[str, Any] = {}
        self._get_fixture = fixture
        self.runs: dict[str, ToolRun] = {}
        self._cleanups: list[Callable[[], None]] = []

    def start(self, names: Iterable[str]) -> None:
        """Start each named run not started yet (its fixtures first)."""
        for name in names:
            if name in self.runs:
                continue
            starter, needs = STARTERS[name]
            for fixture in needs:
                self.fixtures.setdefault(fixture, self._get_fixture(fixture))
            self.runs[name] = starter(self)

    def result(self, name: str) -> ToolResult:
        self.start([name])
        return self.runs[name].wait()

    def workdir(self, name: str) -> Path:
        path = self.base / name
        path.mkdir(parents=True, exist_ok=False)
        return path

    def short_dir(self) -> Path:
        """A short-path temp dir (for SSH control sockets), removed at close."""
        path = Path(tempfile.mkdtemp(prefix="rbk-cp-", dir="/tmp"))
        self.on_close(lambda: shutil.rmtree(path, ignore_errors=True))
        return path

    def on_close(self, fn: Callable[[], None]) -> None:
        self._cleanups.append(fn)

    def spawn(self, name: str, argv: list[str], *, cwd: Path, env: dict[str, str]) -> ToolRun:
        log_path = self.base / f"{name}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        return ToolRun(name=name, argv=argv, log_path=log_path, proc=proc)

    def close(self) -> None:
        for run in self.runs.values():
            run.kill()
        for fn in reversed(self._cleanups):
            fn()
        self._cleanups.clear()
