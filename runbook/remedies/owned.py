"""Files only this user (or root) could have written: the approval store and the audit log.

A queued plan is code in waiting: its inventory names the interpreter Ansible runs, its
variables the files a playbook writes. A store another user can write lets that user rewrite a
plan that root then approves, previews or runs; an audit log they can write lets them forge the
record, or point it through a symbolic link at a file of their choosing. So both are used only
when they, and the directory holding them, are owned by the running user or root and writable
by nobody else, and neither is ever followed through a symbolic link.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from runbook.errors import UsageError


class NotOwnedError(UsageError):
    """A store, log or directory another user could have written: refused, never used."""


def _why_not(st: os.stat_result, *, directory: bool) -> str | None:
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if directory and not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if not directory and not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_uid not in (os.geteuid(), 0):
        return f"is owned by uid {st.st_uid}, not by this user or root"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by {'others' if st.st_mode & stat.S_IWOTH else 'its group'}"
    return None


def _check(path: Path, said: str, *, directory: bool) -> None:
    """Refuse `path` (absent is fine) unless only this user or root can write it; `said`
    names it in the error."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    why = _why_not(st, directory=directory)
    if why:
        raise NotOwnedError(
            f"{said} {why}; refusing to use it (another user could rewrite what is approved there)"
        )


def check_dir(path: Path, what: str) -> None:
    """Refuse `path` (a directory holding `what`) unless only this user or root can write it."""
    _check(path, f"{what}: its directory {path}", directory=True)


def check_file(path: Path, what: str) -> None:
    """Refuse the file `path` (absent is fine) unless only this user or root can write it."""
    _check(path, f"{what} {path}", directory=False)


def check_fd(fd: int, path: Path, what: str) -> None:
    """The same check of a file already opened (no race between the check and the use)."""
    why = _why_not(os.fstat(fd), directory=False)
    if why:
        raise NotOwnedError(f"{what} {path} {why}; refusing to use it")


def check_store(path: Path) -> None:
    """The approval store (SQLite, with its -wal and -shm files) and its directory."""
    check_dir(path.parent, f"approval store {path}")
    for part in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        check_file(part, "approval store file")
