"""The one exception tree of nccl-runbook.

::

    RunbookError                      every error the tool raises on purpose; cli.py turns each
    │                                 into one line on stderr and the exit code in `exit_code`
    ├── UsageError (2)                bad flags, a bad --var, an unknown runbook id
    ├── SpecError (2)                 a runbook file that does not load or validate
    │                                 (carries every issue found, with line numbers)
    ├── TemplateError (2)             a command template or expression that does not render
    ├── BundleError (2)               an evidence bundle that cannot be read (DESIGN §4)
    └── TargetError (3)               the target cannot be used at all
        ├── UnreachableError          DNS, refused, timed out, connection dropped
        ├── AuthenticationError       no key accepted
        └── HostKeyError              unknown or changed host key (carries the fingerprint)

A failing *command* is never an exception: it is a CommandResult with a non-zero exit, a
timeout flag or an error text, and the engine records it as evidence (STYLE §3).
"""

from __future__ import annotations


class RunbookError(Exception):
    """Base of every error raised on purpose; `exit_code` is what the CLI exits with."""

    exit_code = 1

    def one_line(self) -> str:
        """The message, folded to one line for stderr."""
        return " ".join(str(self).split())


class UsageError(RunbookError):
    exit_code = 2


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
