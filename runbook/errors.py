"""The one exception tree of nccl-runbook.

::

    RunbookError                      every error the tool raises on purpose; cli.py turns each
    │                                 into one line on stderr and the exit code in `exit_code`
    ├── UsageError (2)                bad flags, a bad --var, an unknown runbook id
    │   ├── JobError (2)              a job that does not resolve to nodes: a bad job reference,
    │   │                             an unsupported kind, a job not found or without pods or
    │   │                             nodes, its scheduler (kubectl, scontrol) failing
    │   └── StateError (2)            a run directory `runbook resume` cannot continue: not a
    │                                 run, its runbook changed, a state that does not fit it
    ├── SpecError (2)                 a runbook file that does not load or validate
    │                                 (carries every issue found, with line numbers)
    ├── TemplateError (2)             a command template or expression that does not render
    ├── BundleError (2)               an evidence bundle that cannot be read (DESIGN §4)
    ├── DiskFullError (2)             no space (ENOSPC) or quota (EDQUOT) left where a run
    │                                 directory, bundle, report or the approval store is written
    └── TargetError (3)               the target cannot be used at all
        ├── UnreachableError          DNS, refused, timed out, connection dropped
        ├── AuthenticationError       no key accepted
        └── HostKeyError              unknown or changed host key (carries the fingerprint)

Not errors, and outside the tree: being stopped by ^C, SIGTERM or SIGHUP is a KeyboardInterrupt
(`runbook.interrupt.Interrupted`), so every cleanup unwinds and no `except Exception` catches it.

A failing *command* is never an exception: it is a CommandResult with a non-zero exit, a
timeout flag or an error text, and the engine records it as evidence (STYLE §3).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager


class RunbookError(Exception):
    """Base of every error raised on purpose; `exit_code` is what the CLI exits with."""

    exit_code = 1

    def one_line(self) -> str:
        """The message, folded to one line for stderr."""
        return " ".join(str(self).split())


class UsageError(RunbookError):
    exit_code = 2


class JobError(UsageError):
    """A job that cannot be resolved to its ranks and nodes (runbook/job/resolve*.py)."""


class StateError(UsageError):
    """A run directory that cannot be resumed: not a run, its runbook changed since, or a
    saved state that does not fit the runbook (runbook/rundir.py, Conductor.from_state)."""


class SpecError(RunbookError):
    """A runbook that does not load or validate; `issues` holds every problem found."""

    exit_code = 2

    def __init__(self, message: str, issues: list[object] | None = None) -> None:
        super().__init__(message)
        self.issues = list(issues or [])


class TemplateError(RunbookError):
    exit_code = 2


class BundleError(RunbookError):
    exit_code = 2


class DiskFullError(RunbookError):
    """A write failed for want of space or quota; the message names the directory. What was
    complete before stays complete: every file is replaced atomically or appended whole."""

    exit_code = 2


#: what a full filesystem or an exhausted quota says
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


@contextmanager
def disk_full_as_error(where: str | os.PathLike[str]) -> Iterator[None]:
    """Turn ENOSPC/EDQUOT raised inside into a DiskFullError naming `where` (a traceback
    reaching a user is a bug; `[Errno 28]` without a path says little)."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in NO_SPACE:
            raise
        raise DiskFullError(f"no space left on {os.fspath(where)} ({exc.strerror})") from exc


class TargetError(RunbookError):
    exit_code = 3


class UnreachableError(TargetError):
    pass


class AuthenticationError(TargetError):
    pass


class HostKeyError(TargetError):
    """An unknown or changed host key; `fingerprint` is the key the server offered."""

    def __init__(self, message: str, *, host: str, fingerprint: str) -> None:
        super().__init__(message)
        self.host = host
        self.fingerprint = fingerprint
