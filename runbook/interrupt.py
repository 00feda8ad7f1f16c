"""Being stopped: SIGINT (^C), SIGTERM (`kill`, systemd, a Kubernetes pod's end) and SIGHUP (the
terminal went away) all end a command the same way — the exception unwinds every `finally`
(the transport closed, the run directory's files whole: each is replaced atomically or
appended whole), and the CLI prints one line and exits 128 + the signal's number (130, 143,
129). A guided run's line says how to continue it: `runbook resume RUN_DIR`.

SIGTERM and SIGHUP are turned into `Interrupted`, a KeyboardInterrupt, so every cleanup that
already holds for ^C holds for them, and `except Exception` (a probe, a parser) never swallows
them. A signal whose disposition was ignored when we started (`nohup`, a shell's background
job) stays ignored. Once the first signal is being handled, the next one takes its default
action: a second ^C ends the process at once, never with a traceback.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

#: the signals handled like ^C, besides SIGINT itself
HANDLED = (signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """The command was stopped by `signum` (None: its input ended at a prompt); `hint` says how
    to carry on (appended to the one-line message)."""

    def __init__(self, signum: int | None = signal.SIGINT, hint: str = "") -> None:
        super().__init__(signum)
        self.signum = signum
        self.hint = hint

    @property
    def exit_code(self) -> int:
        return 128 + (self.signum or signal.SIGINT)

    def one_line(self) -> str:
        if self.signum is None:
            what = "aborted (end of input at a prompt)"
        elif self.signum == signal.SIGINT:
            what = "interrupted"
        else:
            what = f"interrupted ({signal.Signals(self.signum).name})"
        return what + (f"; {self.hint}" if self.hint else "")


def as_interrupted(exc: BaseException, hint: str = "") -> Interrupted:
    """`exc` (a KeyboardInterrupt, an Interrupted, or click's Abort raised for either at a
    prompt) as an Interrupted carrying `hint`."""
    cause: BaseException | None = exc
    if not isinstance(exc, KeyboardInterrupt):
        cause = exc.__context__  # click.prompt: `raise Abort() from None` inside the except
    if isinstance(cause, Interrupted):
        return Interrupted(cause.signum, hint or cause.hint)
    if isinstance(cause, KeyboardInterrupt):
        return Interrupted(signal.SIGINT, hint)
    return Interrupted(None, hint)


def _raise(signum: int, frame: FrameType | None) -> None:
    settle()
    raise Interrupted(signum)


def settle() -> None:
    """From now on a signal takes its default action (the first one is being handled)."""
    for signum in (signal.SIGINT, *HANDLED):
        try:
            if signal.getsignal(signum) is not signal.SIG_IGN:
                signal.signal(signum, signal.SIG_DFL)
        except ValueError:  # not the main thread
            return


@contextmanager
def stop_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP raise Interrupted while inside (main thread only); restored after."""
    previous: dict[int, object] = {}
    try:
        for signum in HANDLED:
            current = signal.getsignal(signum)
            if current is signal.SIG_IGN:
                continue  # nohup, or a parent that wants us to survive it
            previous[signum] = current
            signal.signal(signum, _raise)
    except ValueError:  # not the main thread (an embedding program): leave signals alone
        pass
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)  # type: ignore[arg-type]
