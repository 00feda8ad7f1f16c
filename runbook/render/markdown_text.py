"""Evidence in Markdown that stays text: a log line quoted in a report is read, never rendered.

A job's log can hold `<img src=x onerror=…>`, `<script>`, `[click](http://…)`, `![](http://…)`
or a backtick that closes the code span around it. A report is read in viewers that render
HTML inside Markdown and turn URLs into links; what a job printed must not become a tag, a
link or an image there. Three forms, one for each place evidence goes (pure):

- `code(text)`: an inline code span with more backticks than any run in the text (CommonMark:
  a span closes only on a run of its own length), padded when the text starts or ends with a
  backtick or a space;
- `fence(lines)`: a fenced block whose fence is longer than any backtick run in it;
- `text(value)`: prose outside code: `&`, `<` and `>` written as entities, the characters that
  open a link, an image or a code span (`[`, `]`, `` ` ``, `\\`) escaped, and every URL or
  e-mail address put in a code span (viewers link bare URLs: inside code they do not).

`table=True` also escapes `|`, which would end a table cell even inside a code span (GFM).
Whitespace runs (newlines included) become one space in `code` and `text`: an inline value
cannot start a block (a heading, an HTML block) on a line of its own. Every form is made
printable first (runbook.printable).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from runbook.printable import printable

_BACKTICKS = re.compile(r"`+")
#: what viewers turn into a link: a scheme's URL (`http://`, `ftp://`, `javascript:` written
#: as a URL), `www.`, `mailto:`/`xmpp:`, an e-mail address
_LINKABLE = re.compile(
    r"(?:[A-Za-z][A-Za-z0-9+.-]{0,31}://|www\.|mailto:|xmpp:)\S*"
    r"|[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+",
    re.IGNORECASE,
)
_ESCAPES = {
    "&": "&amp;",
    "<": "&lt;",
    ">": "&gt;",
    "\\": "\\\\",
    "`": "\\`",
    "[": "\\[",
    "]": "\\]",
}
_SPECIAL = re.compile(r"[&<>\\`\[\]]")
_SPECIAL_TABLE = re.compile(r"[&<>\\`\[\]|]")


def _one_line(value: Any) -> str:
    return " ".join(printable("" if value is None else str(value)).split())


def _longest_run(text: str) -> int:
    return max((len(run) for run in _BACKTICKS.findall(text)), default=0)


def code(value: Any, *, table: bool = False) -> str:
    """`value` as an inline code span nothing in it can close (one line)."""
    text = _one_line(value)
    if table:
        text = text.replace("|", "\\|")
    ticks = "`" * (_longest_run(text) + 1)
    if text[:1] in ("`", " ") or text[-1:] in ("`", " "):
        text = f" {text} "
    return f"{ticks}{text}{ticks}" if text else "` `"


def fence(lines: Iterable[str], info: str = "") -> list[str]:
    """`lines` as a fenced code block (the fence, the lines, the fence)."""
    body = [printable(line) for line in lines]
    ticks = "`" * max(3, max((_longest_run(line) for line in body), default=0) + 1)
    return [ticks + info, *body, ticks]


def _escaped(text: str, table: bool) -> str:
    special = _SPECIAL_TABLE if table else _SPECIAL
    return special.sub(lambda m: "\\|" if m.group() == "|" else _ESCAPES[m.group()], text)


def text(value: Any, *, table: bool = False) -> str:
    """`value` as Markdown prose that renders as the same characters: no tag, link, image or
    code span can come of it (one line)."""
    line = _one_line(value)
    out: list[str] = []
    start = 0
    for match in _LINKABLE.finditer(line):
        out.append(_escaped(line[start : match.start()], table))
        out.append(code(match.group(), table=table))
        start = match.end()
    out.append(_escaped(line[start:], table))
    return "".join(out)


def cell(value: Any, width: int | None = None) -> str:
    """`value` as a table cell's prose, cut to `width` characters of the original first."""
    line = _one_line(value)
    if width is not None and len(line) > width:
        line = line[: width - 1] + "…"
    return text(line, table=True)
