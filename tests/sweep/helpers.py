"""Helpers of the sweep tests: the CLI as a user runs it, the approval queue it wrote, and a
strict reader of the Prometheus text exposition format."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
RUNBOOKS = Path(__file__).parent / "runbooks"
HOSTNAME_RUNBOOK = REPO / "tests" / "integration" / "runbooks" / "hostname.yaml"


@dataclass
class Run:
    rc: int
    stdout: str
    stderr: str
    wall_s: float

    def json(self) -> Any:
        return json.loads(self.stdout)


def runbook(args: Sequence[str], env: dict[str, str], *, timeout: float = 120.0) -> Run:
    """`python -m runbook ARGS` as a user would run it (stdin closed, not a terminal)."""
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "runbook", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        cwd=REPO,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started)


def queued(env: dict[str, str]) -> list[Any]:
    """Every proposal in the approval queue of the CLI that ran with `env`."""
    from runbook.remedies.store import Store

    path = Path(env["RUNBOOK_STATE_DIR"]) / "approvals.db"
    if not path.exists():
        return []
    with Store(path) as store:
        return store.list()


_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\\\|\\"|\\n)*"'
_SAMPLE = re.compile(
    rf"^(?P<name>{_NAME})(?:\{{(?P<labels>{_LABEL}(?:,{_LABEL})*)?\}})? (?P<value>\S+)$"
)
_LABEL_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prom(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """The samples of a textfile-collector file, by metric; AssertionError on anything the
    exposition format does not allow (a sample before its TYPE, a duplicate series, a bad
    label or value, no trailing newline)."""
    assert text.endswith("\n"), "the file must end with a newline"
    typed: dict[str, str] = {}
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    for line in text.splitlines():
        if line.startswith("# HELP "):
            assert re.match(rf"^# HELP {_NAME} \S", line), line
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            assert kind in ("gauge", "counter", "untyped", "histogram", "summary"), line
            assert name not in typed, f"TYPE twice for {name}"
            typed[name] = kind
            continue
        assert not line.startswith("#") and line.strip(), f"unexpected line {line!r}"
        match = _SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        name = match["name"]
        assert name in typed, f"{name} sampled before its TYPE"
        labels = {
            k: v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
            for k, v in _LABEL_PAIR.findall(match["labels"] or "")
        }
        key = (name, tuple(sorted(labels.items())))
        assert key not in seen, f"duplicate series {key}"
        seen.add(key)
        samples.setdefault(name, []).append((labels, float(match["value"])))
    return samples


def promtool_check(path: Path) -> None:
    """`promtool check metrics` accepts the file (Debian's prometheus package)."""
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: tests/run.sh installs it (Debian's prometheus package)"
    with path.open("rb") as stdin:
        proc = subprocess.run([promtool, "check", "metrics"], stdin=stdin,
                              capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
