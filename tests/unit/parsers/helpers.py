"""Shared helpers for the parser tests: sample files and CommandResults as a bundle holds them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runbook.transports.base import CommandResult

SAMPLES = Path(__file__).parent / "samples"


def sample(relpath: str) -> str:
    return (SAMPLES / relpath).read_text(encoding="utf-8")


def sample_lines(relpath: str) -> list[str]:
    return sample(relpath).splitlines()


def result(name: str, stdout: str = "", *, rc: int | None = 0, stderr: str = "") -> CommandResult:
    return CommandResult(name=name, command=f"collect {name}", stdout=stdout, stderr=stderr,
                         exited=rc)


def missing(name: str) -> CommandResult:
    return CommandResult(name=name, command="", collected=False)


def roundtrip(facts: dict[str, Any]) -> dict[str, Any]:
    """Facts as the engine stores them: through JSON and back."""
    out: dict[str, Any] = json.loads(json.dumps(facts))
    return out
