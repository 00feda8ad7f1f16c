"""The approval store's errors, whichever database holds it (runbook.remedies.store)."""

from __future__ import annotations

from runbook.errors import RunbookError


class StoreError(RunbookError):
    exit_code = 2


class NotFound(StoreError):
    pass


class Conflict(StoreError):
    """The proposal is not pending any more (someone else decided, or it ran)."""

    exit_code = 1


class StoreUnreachable(StoreError):
    """The store's server cannot be used: down, unreachable, or refused the login (exit 3,
    as an unreachable node is)."""

    exit_code = 3
