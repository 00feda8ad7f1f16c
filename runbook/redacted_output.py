"""Everything a command prints goes through the redactor files get (runbook.redact).

A finding quoting `Authorization: Bearer …`, a `-v` walk echoing a probe's `HF_TOKEN=…`, an
error naming `ssh://user:password@host`: the console is a place secrets leak as surely as a
bundle. Rather than trust every `print`, `click.echo` and rich console to remember, `main`
puts the process's stdout and stderr behind `RedactingStream` for the length of a command:
whole lines are redacted as they are written, a partial line when it is flushed (a prompt).
Terminal detection, the terminal's size and the encoding are the real stream's.

The same streams make what is written printable (runbook.printable): an escape sequence in a
log line, a finding or a `--var` never reaches the terminal raw. A PrintableConsole writes
through the stream's `rendered` side instead: its text was made printable before rich
rendered it, and the escape codes in what it writes are rich's own colours and cursor moves.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from runbook.printable import printable
from runbook.redact import redact


class RedactingStream(io.TextIOBase):
    """A text stream that writes `redact(line)` to `inner` for every line written to it, its
    control characters made printable (`rendered` takes what a PrintableConsole wrote)."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner
        self._pending = ""
        self.rendered = _Rendered(self)

    def write(self, text: str | bytes) -> int:
        # click.echo writes bytes to a stream without a binary buffer (shell completion's
        # answer is bytes): decoded and redacted like text, never refused
        if isinstance(text, (bytes, bytearray)):
            self._pending += printable(bytes(text).decode(self.encoding, "replace"))
            self._flush_lines()
            return len(text)
        self._pending += printable(text)
        self._flush_lines()
        return len(text)

    def write_rendered(self, text: str) -> int:
        """What a PrintableConsole wrote: redacted, its escape codes kept."""
        self._pending += text
        self._flush_lines()
        return len(text)

    def _flush_lines(self) -> None:
        if "\n" in self._pending:
            lines, _, self._pending = self._pending.rpartition("\n")
            self._inner.write(redact(lines + "\n"))

    def flush(self) -> None:
        if self._pending:
            self._inner.write(redact(self._pending))
            self._pending = ""
        self._inner.flush()

    def isatty(self) -> bool:
        return self._inner.isatty()

    def fileno(self) -> int:
        return self._inner.fileno()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._inner, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self._inner, "errors", None)


class _Rendered(io.TextIOBase):
    """The side of a RedactingStream a PrintableConsole writes to (runbook.printable)."""

    def __init__(self, stream: RedactingStream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write_rendered(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._stream.encoding

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return self._stream.errors


@contextmanager
def redacted_output() -> Iterator[None]:
    """stdout and stderr redacted until the block ends (then flushed and put back)."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = RedactingStream(out), RedactingStream(err)
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe: nothing more to say
                pass
        sys.stdout, sys.stderr = out, err
