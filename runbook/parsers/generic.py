"""Generic parsers for small runbooks: raw text and `key=value` output."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from runbook.parsers.registry import Files, register


@register("text", "each collected file as {stdout, stderr, rc, lines, collected}")
def parse_text(files: Files, context: Mapping[str, Any]) -> dict[str, Any]:
    return {
        name: {
            "stdout": result.stdout,
            "stderr": result.stderr,
            "rc": result.exited,
            "lines": len(result.stdout.splitlines()),
            "collected": result.collected and result.failure is None,
        }
        for name, result in files.items()
    }


_KV = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*[=:]\s*(.*?)\s*$")


def _typed(value: str) -> Any:
    """A number when `value` is one that JSON can hold (a finite float, an int Python will
    convert: at most 4300 digits), else the text as it is."""
    if re.fullmatch(r"-?[0-9]{1,4000}", value):
        return int(value)
    if re.fullmatch(r"-?[0-9]+\.[0-9]*", value):
        number = float(value)
        return number if math.isfinite(number) else value
    return value


@register("keyvalue", "`key=value` / `key: value` lines of every file, merged, numbers typed")
def parse_keyvalue(files: Files, context: Mapping[str, Any]) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    for result in files.values():
        for line in result.stdout.splitlines():
            match = _KV.match(line)
            if match:
                facts[match.group(1)] = _typed(match.group(2))
    return facts
