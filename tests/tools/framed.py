"""Captures recorded before multi-file probes were framed (`==> NAME <==` headers, a blank line
between files, as `tail -v` prints them), framed the way a probe frames its files now
(runbook/transports/framing.py). For test data only: these headers are known to be headers,
which is exactly what a live probe's output can no longer be trusted for."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import PurePosixPath

from runbook import bundle
from runbook.transports import framing
from runbook.transports.base import CommandResult

_HEADER = re.compile(r"^==> (.+) <==$")


def from_headers(text: str, token: str) -> str:
    """`text` in the `tail -v` layout, as the framed output of the same files."""
    files: list[tuple[str, list[str]]] = []
    for line in text.splitlines(keepends=True):
        match = _HEADER.match(line.rstrip("\n"))
        if match:
            files.append((PurePosixPath(match.group(1).strip()).name, []))
        elif files:
            files[-1][1].append(line)
    records = []
    for name, lines in files:
        body = "".join(lines)
        if body.endswith("\n\n"):  # the blank line between two files
            body = body[:-1]
        records.append(framing.Record("file", name, body, 0))
    return framing.frame(records, token)


def split_headers(result: CommandResult) -> list[CommandResult]:
    """A multi-file result in the `tail -v` layout, split as the walk splits a framed one."""
    token = framing.new_token()
    framed = replace(result, stdout=from_headers(result.stdout, token))
    return bundle.split_multi(framed, token)
