"""How a probe's output is told apart from what a login printed before it, on any transport
that starts a shell for it (SSH, `kubectl exec`): the shell reads a token from its input
(never from its command line, which `ps` shows every user of the node), writes a start mark
carrying it on both streams, its own pid on stderr's (the process group of everything the
command starts, when the shell leads one), then execs the command; `Gate` passes on a stream
from its mark on."""

from __future__ import annotations

import logging
import shlex
from typing import Generic, Protocol, TypeVar

log = logging.getLogger(__name__)

#: what starts a probe's output on both streams, the channel's token after it (wrap_for_pgid)
_START = "__RBK_START_"


class Sink(Protocol):
    def feed(self, data: bytes) -> None: ...


#: the login shell's part: the start token from the input, the start marks (stderr's with the
#: process group), then the command in a shell of its own
_STARTING = (
    "IFS= read -r T || exit 125; "
    f'printf \'\\n{_START}%s\\n\' "$T"; printf \'\\n{_START}%s %s\\n\' "$T" "$$" >&2; '
    "T=; exec /bin/sh -c "
)


def wrap_for_pgid(command: str, token: str = "") -> str:
    """The remote form of a probe: read the start token (the first line of the input), mark
    the start of both streams with it and report the process group there, then run it.

    `token` marks the probe for a cancel that cannot wait for the start mark (a slow login
    shell or ForceCommand wrapper held it back past the timeout): the command carries it in
    its environment (RBK_PROBE), and it does not start at all once a cancel file for it exists
    (see `_cancel`). It is seen in the command line, so it frames nothing."""
    if not token:
        return _STARTING + shlex.quote(command)
    cancel = f'"${{TMPDIR:-/tmp}}/.rbk-cancel-{token}"'
    return (
        f"if [ -e {cancel} ]; then rm -f {cancel}; exit 124; fi; "
        f"RBK_PROBE={token}; export RBK_PROBE; " + _STARTING + shlex.quote(command)
    )


def start_mark(start: str) -> bytes:
    """What begins both streams of a probe given `start` on its input (before stderr's pid)."""
    return f"{_START}{start}".encode("ascii")


_S = TypeVar("_S", bound=Sink)


class Gate(Generic[_S]):
    """One stream of a probe's channel, passed on to `inner` from its start mark on
    (wrap_for_pgid): what came before is the login's own words (a profile that prints), never
    a probe's output, so it is dropped. stderr's mark carries the process group."""

    def __init__(self, inner: _S, mark: bytes, *, with_pgid: bool = False) -> None:
        self.inner = inner
        self._needle = b"\n" + mark
        self._with_pgid = with_pgid
        self._head = bytearray()
        self.opened = False
        self.pgid: int | None = None
        #: bytes the login printed before the mark
        self.dropped = 0

    def feed(self, data: bytes) -> None:
        if self.opened:
            self.inner.feed(data)
            return
        head = self._head
        head += data
        at = head.find(self._needle)
        if at < 0:
            # all but what could be the start of the mark is the login's
            cut = len(head) - len(self._needle)
            if cut > 0:
                self.dropped += cut
                del head[:cut]
            return
        line_end = head.find(b"\n", at + len(self._needle))
        if line_end < 0:
            return  # the mark's line is not whole yet
        rest = bytes(head[at + len(self._needle) : line_end])
        if self._with_pgid and rest[:1] == b" " and rest[1:].isdigit():
            self.pgid = int(rest[1:])
        self.dropped += at
        after = bytes(head[line_end + 1 :])
        self._head = bytearray()
        self.opened = True
        if after:
            self.inner.feed(after)

    def dropped_note(self, address: object, what: str) -> None:
        if self.dropped:
            log.debug("%s: %s: %d bytes the login printed first, left out", address, what,
                      self.dropped)  # fmt: skip
