"""The console a command prints its report on (rich), the same way for every command."""

from __future__ import annotations

import os
import sys
from typing import IO, Any

from rich.console import Console

from runbook.printable import printable


class PrintableConsole(Console):
    """A rich console whose strings (markup, table cells, prompts) are made printable before
    they are rendered. What it writes goes to the stream's `rendered` side when the stream
    has one (runbook.redacted_output.RedactingStream): its text was made printable here, and
    its escape codes are rich's own (colour, the progress bar's cursor moves)."""

    def render_str(self, text: str, **kwargs: Any) -> Any:
        return super().render_str(printable(text), **kwargs)

    @property
    def file(self) -> IO[str]:
        inner: IO[str] = Console.file.fget(self)  # type: ignore[attr-defined]
        rendered: IO[str] | None = getattr(inner, "rendered", None)
        return rendered or inner

    @file.setter
    def file(self, new_file: IO[str]) -> None:
        Console.file.fset(self, new_file)  # type: ignore[attr-defined]


def write_rendered(stream: IO[str], text: str) -> None:
    """`text` made by a PrintableConsole (captured: rich's colours in it) written to `stream`
    as the console would have written it."""
    target = getattr(stream, "rendered", None) or stream
    target.write(text)
    target.flush()


def output_console(*, stderr: bool = False) -> Console:
    """The console a command prints its report on. On a terminal, rich's own (wrapped to the
    window); into a pipe or a file, lines are not hard-wrapped at 80 columns (a finding is one
    line for grep, and a log keeps it whole), unless COLUMNS asks for a width."""
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty() or os.environ.get("COLUMNS"):
        return PrintableConsole(stderr=stderr, highlight=False)
    return PrintableConsole(stderr=stderr, highlight=False, soft_wrap=True)


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
