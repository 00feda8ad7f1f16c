"""Several probes in one remote shell: the script that runs them one after another, and the
splitter that cuts each output stream back into one piece per probe.

Why: over SSH a channel costs more than the probes it carries. Opening one is a round trip and
an exec request, and on the node sshd forks a session, runs the login shell and `/bin/sh -c`
(measured on the test hosts: 0.8 ms of this process's CPU and 4.3 ms of the host's for a
channel, against 0.2 ms and 1.6 ms for the same `cat` as one command of a batch). A walk's
first burst is thirty probes that mostly read a file.

The script runs probe i as ``(eval 'CMD_i')``: a subshell, so `exit`, `cd`, `set -e`, traps and
variables stay the probe's own, and a syntax error in one command is that probe's exit 2, not
the end of the script (the text is quoted once more here, so it reaches eval exactly as the
template rendered it). After it, the shell writes an end mark on both streams: a newline, the
batch's mark and the exit status on stdout; a newline and the mark on stderr. The newline
before the mark is the splitter's to remove, so output that does not end in a newline comes
back byte for byte.

The mark carries a random token made for the batch, and the token is not in the script: the
script reads it from its standard input first (the client sends it, then closes the input), so
it is in no command line or environment another user of the node could read (`ps` shows the
script). Evidence read by a probe (a log a job writes) therefore cannot end that probe early
and pass its own text off as the next probe's output. The second line of the input is the
batch's frame token (transports/framing.py, empty when no probe is framed): a multi-file
probe gets it as the one line of its own input, as it would alone; every other probe sees its
input closed.

Nothing is written on the node: outputs are told apart by their order on the two streams,
which is why the probes of one batch run one after another (see the SSH transport for what it
does with one that takes long). SIGUSR1 asks the script to stop before its next probe.

What differs from a channel a probe: the shell's own error messages name eval (dash: `sh: 1:
eval: dcgmi: not found`), and a probe killed by a signal exits 128+N instead of reporting
the signal; `$$` is the batch's shell, as it was the channel's.
"""

from __future__ import annotations

import shlex
from collections import deque
from collections.abc import Sequence

#: a batch's script stays well under Linux's bound on one argument (MAX_ARG_STRLEN, 128 KiB):
#: it is `/bin/sh -c`'s argument on the node
MAX_SCRIPT_BYTES = 64 * 1024

#: the digits of an exit status, at most, after a mark (`255`, or a shell's 128+signal)
_STATUS_DIGITS = 8


#: the script's first line: the token, from the input (see above); SIGUSR1 asks the script
#: to stop once the probe it runs has ended (a shell runs a trap only after the foreground
#: command it waits for; the probe's subshell is not signalled)
_PROLOGUE = "IFS= read -r T || exit 0; IFS= read -r F || F=; stop=; trap 'stop=1' USR1"
_ENDS = 'printf \'\\n__RBK_END_%s %d\\n\' "$T" "$?"; printf \'\\n__RBK_END_%s\\n\' "$T" >&2'
_STEP = '[ -z "$stop" ] || exit 0; (T= F=; eval {command}); ' + _ENDS
#: a framed probe: the frame token its one line of input
_FRAMED_STEP = (
    '[ -z "$stop" ] || exit 0; (T=; printf \'%s\\n\' "$F" | (F=; eval {command})); ' + _ENDS
)


def mark_for(token: str) -> bytes:
    """What the script writes after each probe, given `token` on its input."""
    return f"__RBK_END_{token}".encode("ascii")


def script(commands: Sequence[str], framed: Sequence[bool] = ()) -> str:
    """The shell script that runs `commands` in order, each followed by its end marks, and
    that ends before the next one once it was sent SIGUSR1. Its input's first line is the
    token of its marks, the second the frame token given to each command `framed` marks."""
    steps = (
        (_FRAMED_STEP if i < len(framed) and framed[i] else _STEP).format(
            command=shlex.quote(command)
        )
        for i, command in enumerate(commands)
    )
    return "\n".join((_PROLOGUE, *steps))


def fits(commands: Sequence[str], framed: Sequence[bool] = ()) -> int:
    """How many of `commands`, from the first, one batch's script can hold (at least one)."""
    size = len(_PROLOGUE) + 1
    for count, command in enumerate(commands):
        one = script([command], framed[count : count + 1])
        size += len(one.encode("utf-8", "surrogateescape")) - len(_PROLOGUE)
        if size > MAX_SCRIPT_BYTES and count:
            return count
    return len(commands)


class Splitter:
    """One output stream of a batch, cut into its probes' pieces as the bytes arrive.

    Each piece keeps at most `limit` bytes (`truncated` says more came); the marks are found
    in bytes that were dropped too, so one probe's flood does not hide the next probe's start.
    `with_status` is stdout's form of the mark (followed by the exit status)."""

    def __init__(self, mark: bytes, *, with_status: bool, limit: int) -> None:
        self._needle = b"\n" + mark
        self._with_status = with_status
        self._limit = limit
        #: the current piece, up to `limit` bytes
        self._head = bytearray()
        self._truncated = False
        #: bytes not yet known to be content: the start of a mark, or a mark and its status
        self._pending = bytearray()
        #: finished pieces: (content, truncated, exit status or None)
        self.pieces: deque[tuple[bytes, bool, int | None]] = deque()

    def feed(self, data: bytes) -> None:
        pending = self._pending
        pending += data
        needle = self._needle
        while True:
            at = pending.find(needle)
            if at < 0:
                # all but what could be the start of a mark is content
                cut = len(pending) - (len(needle) - 1)
                if cut > 0:
                    self._content(pending[:cut])
                    del pending[:cut]
                return
            end = at + len(needle)
            status: int | None = None
            if self._with_status:
                line_end = pending.find(b"\n", end)
                if line_end < 0 and len(pending) - end <= _STATUS_DIGITS + 1:
                    self._content(pending[:at])
                    del pending[:at]
                    return  # the status has not all come yet
                status = _status(pending[end:line_end]) if line_end >= 0 else None
                if status is None:
                    # the token followed by something that is not a status: content that
                    # happened to contain it (it cannot, unless the node saw the command line)
                    self._content(pending[:end])
                    del pending[:end]
                    continue
            else:
                if len(pending) == end:
                    self._content(pending[:at])
                    del pending[:at]
                    return
                if pending[end : end + 1] != b"\n":
                    self._content(pending[:end])
                    del pending[:end]
                    continue
                line_end = end
            self._content(pending[:at])
            self.pieces.append((bytes(self._head), self._truncated, status))
            self._head = bytearray()
            self._truncated = False
            del pending[: line_end + 1]

    def partial(self) -> tuple[bytes, bool]:
        """What the current piece has so far (a probe that timed out or was cut off)."""
        head = bytearray(self._head)
        room = self._limit - len(head)
        head += self._pending[: max(0, room)]
        return bytes(head), self._truncated or len(self._pending) > room

    def _content(self, data: bytes | bytearray) -> None:
        if not data:
            return
        room = self._limit - len(self._head)
        if len(data) > room:
            self._truncated = True
            data = data[: max(0, room)]
        self._head += data


def _status(digits: bytes | bytearray) -> int | None:
    if not digits.startswith(b" ") or not digits[1:].isdigit() or len(digits) > _STATUS_DIGITS + 1:
        return None
    return int(digits[1:])
