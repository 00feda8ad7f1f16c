"""The console a command prints its report on (rich), the same way for every command."""

from __future__ import annotations

import os
import sys

from rich.console import Console


def output_console(*, stderr: bool = False) -> Console:
    """The console a command prints its report on. On a terminal, rich's own (wrapped to the
    window); into a pipe or a file, lines are not hard-wrapped at 80 columns (a finding is one
    line for grep, and a log keeps it whole), unless COLUMNS asks for a width."""
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty() or os.environ.get("COLUMNS"):
        return Console(stderr=stderr, highlight=False)
    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def count(n: int, noun: str, plural: str | None = None) -> str:
    """`1 host`, `2 hosts`, `0 hosts`: a count that agrees in number with its noun."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


#: how much a command says besides its result: -1 quiet (-q), 0 default, 1 and up (-v, -vv).
#: Set once per invocation by the CLI's -v/-q (runbook.cli.options); the progress printers
#: (guided stages, sweep progress, playbook tasks) read it instead of every call site
#: threading a flag through.
_verbosity = 0


def set_verbosity(level: int) -> None:
    global _verbosity
    _verbosity = level


def verbosity() -> int:
    return _verbosity


def quiet() -> bool:
    """-q: results and errors only: no progress, no stage-by-stage walk, no task lines."""
    return _verbosity < 0
