"""JSON files a person may read as they are (verdict.json), written at the C encoder's speed.

json's indenting encoder is pure Python: a node's verdict, with every stage's facts, took a
quarter of a walk's CPU to write with `indent=2` (and a sweep writes one per host). `readable`
gives one line per top-level key, and one line per item of a top-level list (a verdict's
stages, its timeline), each written compactly by the C encoder: the same JSON to every reader,
still one stage a line to a person with `less`.

`loads` reads JSON a person or another process may have written (verdict.json, job.json, a
shard's sweep.json, a run's state): a document nested deeper than the parser can follow
(`[[[[…` 100,000 deep) is a `json.JSONDecodeError` like any other malformed one, so each
reader's usual one-line error names the file, never an internal RecursionError."""

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


def loads(text: str) -> Any:
    """`json.loads(text)`; nesting too deep to parse is a JSONDecodeError (module docstring)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply to read", text, 0) from None
