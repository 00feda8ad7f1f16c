"""The parser registry: a runbook stage names a parser (`parse: dmesg`); this maps the name to
a pure function over the stage's collected files.

A registered parser is called as ``fn(files, context) -> dict`` where `files` maps each bundle
file name the stage collected to its CommandResult (stdout, stderr, exit status, `collected`),
and `context` holds run-wide values (`page_size`, `node`, `collected_at`, `vars`). It returns
JSON-serialisable facts, stored under ``facts.<name>``. It does no I/O.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
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


#: the shipped parsers and the module that registers each: a parser's module is imported the
#: first time a runbook asks for it (a run that reads two files does not import, and compile
#: the patterns of, all fourteen; tests/unit/parsers/test_registry.py keeps this map true)
BUILTIN: dict[str, str] = {
    "applog": "applog", "cgroup": "cgroup", "clock": "clock", "dmesg": "dmesg",
    "text": "generic", "keyvalue": "generic", "host": "host", "journal": "journal",
    "kube": "kube", "nccl_log": "nccl_log", "nccl_tests": "nccl_tests",
    "nvidia_smi": "nvidia_smi", "procmem": "procmem", "rdma": "rdma",
    "nccl_recovery": "verify_collective", "dcgm": "dcgm", "dcgm_diag": "dcgm_diag",
    "flight_recorder": "flight_recorder", "pyspy": "pyspy", "ncclras": "ncclras",
    "watchdog": "watchdog", "hang": "hang_state",
}  # fmt: skip


def get(name: str) -> ParserEntry:
    """The parser registered as `name` (KeyError if there is none)."""
    if name not in _REGISTRY and name in BUILTIN:
        importlib.import_module(f"runbook.parsers.{BUILTIN[name]}")
    return _REGISTRY[name]


def preload(names: Iterable[str]) -> None:
    """Import the modules of the shipped parsers named (unknown names are left for the
    runbook's check to report): a run does it while its connection is being made, so the
    walk does not stop at its first use of each (their patterns compile at import)."""
    for name in names:
        if name in BUILTIN:
            get(name)


def names() -> frozenset[str]:
    """Every parser a runbook may name: the shipped ones and any registered since."""
    return frozenset(BUILTIN) | frozenset(_REGISTRY)


def load_all() -> dict[str, ParserEntry]:
    """Every shipped parser, imported (for listings that show their summaries)."""
    for name in BUILTIN:
        get(name)
    return dict(_REGISTRY)
