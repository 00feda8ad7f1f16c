"""Text that stays text on a terminal and in a report: the one place control characters from
evidence or from a user's values are made inert.

A job's log line may carry `ESC ] 0 ; …` (retitle the terminal), `ESC [ 2 J` (clear it),
`ESC [ 1 A ESC [ 2 K` (rewrite the line above: a finding erased, a verdict forged), a carriage
return that overprints, or a bidirectional override that shows text in another order than it
is. `printable` writes each such character as a visible escape (`\\x1b`, `\\r`, `\\u202e`):
what the log held is still read, and nothing in it acts. Tab and newline stay as they are.

Every console of the command is a `runbook.output.PrintableConsole` (its strings made
printable before rich renders them, rich's own colours and cursor moves kept), and what
reaches the process's stdout and stderr by any other way (click.echo, print, logging) is made
printable as it is written (runbook.redacted_output). Reports (Markdown, sweep.md, JUnit,
Slack payloads) call `printable` on their text.
"""

from __future__ import annotations

import re

#: C0 controls but tab and newline, DEL, C1 controls, and the bidirectional embeddings,
#: overrides and isolates (U+202A..U+202E, U+2066..U+2069); the line and paragraph
#: separators, which some viewers break a line at
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` with every control character but tab and newline written as a visible escape."""
    return _CONTROL.sub(_visible, text)


def has_control(text: str) -> bool:
    """Whether `text` holds a character `printable` would rewrite."""
    return _CONTROL.search(text) is not None


def shortened(text: str, width: int) -> str:
    """`text`, or its first width - 1 characters and "…" when longer: a line cut for a summary
    says that it was cut."""
    return text if len(text) <= width else text[: width - 1] + "…"
