"""JSON files a person may read as they are (verdict.json), written at the C encoder's speed.

json's indenting encoder is pure Python: a node's verdict, with every stage's facts, took a
quarter of a walk's CPU to write with `indent=2` (and a sweep writes one per host). `readable`
gives one line per top-level key, and one line per item of a top-level list (a verdict's
stages, its timeline), each written compactly by the C encoder: the same JSON to every reader,
still one stage a line to a person with `less`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def _compact(value: Any) -> str:
    return json.dumps(value, default=str)


def readable(data: Mapping[str, Any]) -> str:
    """`data` as JSON text ending in a newline (see the module docstring)."""
    if not data:
        return "{}\n"
    lines = []
    for key, value in data.items():
        name = _compact(str(key))
        if isinstance(value, list | tuple) and value:
            items = ",\n".join(f"    {_compact(item)}" for item in value)
            lines.append(f"  {name}: [\n{items}\n  ]")
        else:
            lines.append(f"  {name}: {_compact(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"
