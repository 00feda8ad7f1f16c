"""The one writer: files replaced whole or not at all, never through a link someone placed.

A temporary beside the target, fsynced, then renamed over it: a reader (or a crash, or a full
disk) sees the old file or the new one, never half of one, and no temporary is left behind
when the write fails. Renaming replaces a link at the target's name instead of writing through
it; `within` (the run directory, the bundle) makes every directory between it and the target a
real directory — a pre-placed link to elsewhere is refused, a missing one created owner-only.
`open_append` is the same for an append-only log (`O_NOFOLLOW`).
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO

from runbook.errors import UsageError

_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def real_dir(path: Path, *, within: Path | None = None, mode: int = 0o700) -> None:
    """Make `path` a real directory (created with `mode` where missing), refusing a link at
    it or — below `within` — at any directory on the way."""
    top = within if within is not None else path
    parts = path.relative_to(top).parts if within is not None else ()
    current = top
    for step in (None, *parts):
        if step is not None:
            current = current / step
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            current.mkdir(parents=step is None, mode=mode, exist_ok=True)
            os.chmod(current, mode)  # whatever the umask
            continue
        if stat.S_ISLNK(info.st_mode):
            raise UsageError(f"{current} is a symbolic link: refusing to write through it")
        if not stat.S_ISDIR(info.st_mode):
            raise UsageError(f"{current} is not a directory")


def owner_only_dir(path: Path) -> None:
    """A directory only its owner may enter: created 0700, or a pre-existing one (that is a
    real directory owned by this user) set to 0700 — a 0777 `--run-dir` does not stay so."""
    real_dir(path)
    info = os.lstat(path)
    if info.st_uid != os.geteuid():
        raise UsageError(f"{path} belongs to another user (uid {info.st_uid}): choose another")
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(path, 0o700)


def _replace(
    path: Path,
    fill: Callable[[BinaryIO], object],
    *,
    suffix: str = "",
    mode: int | None,
    within: Path | None,
) -> None:
    """Write a temporary beside `path` with `fill`, fsync it, rename it over `path`."""
    if within is not None:
        real_dir(path.parent, within=within)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as handle:
            fill(handle)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_bytes(
    path: Path,
    data: bytes,
    *,
    suffix: str = "",
    mode: int | None = None,
    within: Path | None = None,
) -> None:
    """Replace `path` with `data`. `suffix` names the temporary (a directory watcher may read
    every `*.prom`); `mode` sets the file's permissions (default: mkstemp's 0600); `within`:
    see the module docstring."""
    _replace(path, lambda handle: handle.write(data), suffix=suffix, mode=mode, within=within)


def write_chunks(
    path: Path, chunks: Iterable[str], *, mode: int | None = None, within: Path | None = None
) -> None:
    """Replace `path` with the text `chunks` make, written as they come (a large file is
    never held whole)."""

    def fill(handle: BinaryIO) -> None:
        for chunk in chunks:
            handle.write(chunk.encode("utf-8"))

    _replace(path, fill, mode=mode, within=within)


def write_text(
    path: Path,
    text: str,
    *,
    suffix: str = "",
    mode: int | None = None,
    within: Path | None = None,
) -> None:
    write_bytes(path, text.encode("utf-8"), suffix=suffix, mode=mode, within=within)


def open_append(path: Path, mode: int = 0o600) -> int:
    """An append-only descriptor on `path` (created with `mode`); a link there is refused."""
    try:
        return os.open(path, _APPEND, mode)
    except OSError as exc:
        if os.path.islink(path):
            raise UsageError(f"{path} is a symbolic link: refusing to write through it") from None
        raise exc
