"""A console whose output is delivered as plain lines: what the command line's printers print
(task lines, a diff, an execution's result), handed one complete line at a time to a
callback, without colour or escape codes. The web desk shows an approval's output this way:
it receives text, never a console of its own."""

from __future__ import annotations

from collections.abc import Callable
from typing import IO, cast

from rich.console import Console


class _Lines:
    """A file for a console: each complete line passed to `say`."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self._partial = ""

    def write(self, text: str) -> int:
        self._partial += text
        *lines, self._partial = self._partial.split("\n")
        for line in lines:
            self.say(line)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def line_console(say: Callable[[str], None], *, width: int = 160) -> Console:
    """A console printing plain text (no colour, no highlighting), each line to `say`."""
    from runbook.output import PrintableConsole

    return PrintableConsole(
        file=cast(IO[str], _Lines(say)),
        highlight=False,
        color_system=None,
        width=width,
        soft_wrap=True,
    )
