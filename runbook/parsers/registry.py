"""The parser registry: a runbook stage names a parser (`parse: dmesg`); this maps the name to
a pure function over the stage's collected files.

A registered parser is called as ``fn(files, context) -> dict`` where `files` maps each bundle
file name the stage collected to its CommandResult (stdout, stderr, exit status, `collected`),
and `context` holds run-wide values (`page_size`, `node`, `collected_at`, `vars`). It returns
JSON-serialisable facts, stored under ``facts.<name>``. It does no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from runbook.transports.base import CommandResult

Files = Mapping[str, CommandResult]
ParserFunc = Callable[[Files, Mapping[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class ParserEntry:
    name: str
    func: ParserFunc
    summary: str


_REGISTRY: dict[str, ParserEntry] = {}


def register(name: str, summary: str = "") -> Callable[[ParserFunc], ParserFunc]:
    """Decorator: make `fn` available to runbooks as `parse: name`."""

    def decorate(func: ParserFunc) -> ParserFunc:
        if name in _REGISTRY and _REGISTRY[name].func is not func:
            raise ValueError(f"parser {name!r} registered twice")
        _REGISTRY[name] = ParserEntry(name, func, summary or (func.__doc__ or "").strip())
        return func

    return decorate


def get(name: str) -> ParserEntry:
    _load_builtin()
    return _REGISTRY[name]


def names() -> frozenset[str]:
    _load_builtin()
    return frozenset(_REGISTRY)


def _load_builtin() -> None:
    # importing the package registers every shipped parser module
    import runbook.parsers  # noqa: F401
    from runbook.parsers import procmem  # noqa: F401  (registered here: not imported by the package)
    from runbook.parsers import recovery as _recovery  # noqa: F401  (the recovery check)
