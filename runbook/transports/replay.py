"""`replay://BUNDLE`: serves a recorded bundle, so analysing a bundle and running live share one
code path. A probe is answered by the bundle file of its name; the command is not run."""

from __future__ import annotations

import os

from runbook.bundle import Bundle, is_multi
from runbook.transports import framing
from runbook.transports.base import CommandResult, Probe


class ReplayTransport:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.bundle = Bundle.open(path)
        self.description = f"replay://{os.fspath(path)}"

    def run(self, probe: Probe) -> CommandResult:
        if is_multi(probe.name):
            # framed with the probe's token, as the node frames a live probe's files
            token = probe.secret or framing.new_token()
            return self.bundle.read_multi(probe.name, probe.command, token=token)
        return self.bundle.read(probe.name, probe.command)

    def close(self) -> None:
        self.bundle.close()
