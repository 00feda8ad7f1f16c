"""The one writer: files replaced whole or not at all, never through a link someone placed.

A temporary beside the target, fsynced, then renamed over it: a reader (or a crash, or a full
disk) sees the old file or the new one, never half of one, and no temporary is left behind
when the write fails. A writer of many small files (a guided run's evidence) may skip the
fsync of each (`durable=False`): the rename alone keeps every file whole whatever kills the
process, SIGKILL included; only a power cut can then lose the newest of them.

Renaming replaces a link at the target's name instead of writing through
it; `within` (the run directory, the bundle) makes every directory between it and the target a
real directory — a pre-placed link to elsewhere is refused, a missing one created owner-only.
`open_append` is the same for an append-only log (`O_NOFOLLOW`).

Directories are walked and held by descriptor (`openat` with `O_NOFOLLOW | O_DIRECTORY`, one
step at a time from `within`), and the temporary is created and renamed relative to the
directory's descriptor: a directory swapped for a link after it was checked cannot redirect
the write (a path-based check-then-write could be raced). The standard library has no
`openat`-style writer, hence this module.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO

from runbook.errors import UsageError

_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _refused(shown: Path, exc: OSError, lstat: Callable[[], os.stat_result]) -> Exception:
    """A one-line refusal when a link (or a non-directory) stood where a directory or file was
    opened without following links; any other error (no space, no permission) as it was."""
    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
        return exc
    try:
        info = lstat()
    except OSError:
        info = None
    if info is not None and stat.S_ISLNK(info.st_mode):
        return UsageError(f"{shown} is a symbolic link: refusing to write through it")
    # a link or a file stood there when it was opened (it may have been swapped back since)
    return UsageError(f"{shown} is not a directory (or was a link when opened): refusing it")


def _open_top(path: Path, mode: int | None, *, follow: bool) -> int:
    """A descriptor on the directory `path` (created with its parents where missing, `mode`
    whatever the umask, or the umask's default when None); a link at `path` itself is refused
    unless `follow`."""
    flags = _DIR & ~os.O_NOFOLLOW if follow else _DIR
    for _ in range(2):
        try:
            return os.open(path, flags)
        except FileNotFoundError:
            path.mkdir(parents=True, mode=0o777 if mode is None else mode, exist_ok=True)
            if mode is not None:
                os.chmod(path, mode)
        except OSError as exc:
            raise _refused(path, exc, lambda: os.lstat(path)) from None
    return os.open(path, flags)


def _open_step(parent: int, name: str, shown: Path, mode: int) -> int:
    """The real directory `name` in the directory `parent` holds, created `mode` if missing."""
    for _ in range(2):
        try:
            return os.open(name, _DIR, dir_fd=parent)
        except FileNotFoundError:
            try:
                os.mkdir(name, mode, dir_fd=parent)
            except FileExistsError:
                continue  # made meanwhile: open what is there (a link is still refused)
            fd = os.open(name, _DIR, dir_fd=parent)
            os.fchmod(fd, mode)  # whatever the umask
            return fd
        except OSError as exc:
            raise _refused(
                shown, exc, lambda: os.stat(name, dir_fd=parent, follow_symlinks=False)
            ) from None
    return os.open(name, _DIR, dir_fd=parent)


def _dir_fd(path: Path, within: Path | None, mode: int | None) -> int:
    """A descriptor on the directory `path`. Below `within` every step is opened without
    following a link; without `within`, `path` is opened as the user named it (their own
    directory may be reached through a link of theirs)."""
    if within is None:
        return _open_top(path, mode, follow=True)
    parts = path.relative_to(within).parts
    mode = 0o700 if mode is None else mode
    fd = _open_top(within, mode, follow=False)
    shown = within
    try:
        for part in parts:
            shown = shown / part
            step = _open_step(fd, part, shown, mode)
            os.close(fd)
            fd = step
    except BaseException:
        os.close(fd)
        raise
    return fd


def real_dir(path: Path, *, within: Path | None = None, mode: int = 0o700) -> None:
    """Make `path` a real directory (created with `mode` where missing), refusing a link at
    it or — below `within` — at any directory on the way."""
    if within is None:
        os.close(_open_top(path, mode, follow=False))
    else:
        os.close(_dir_fd(path, within, mode))


def owner_only_dir(path: Path) -> None:
    """A directory only its owner may enter: created 0700, or a pre-existing one (that is a
    real directory owned by this user) set to 0700 — a 0777 `--run-dir` does not stay so."""
    fd = _open_top(path, 0o700, follow=False)
    try:
        info = os.fstat(fd)
        if info.st_uid != os.geteuid():
            raise UsageError(f"{path} belongs to another user (uid {info.st_uid}): choose another")
        if stat.S_IMODE(info.st_mode) != 0o700:
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def _replace(
    path: Path,
    fill: Callable[[BinaryIO], object],
    *,
    suffix: str = "",
    mode: int | None,
    within: Path | None,
    durable: bool = True,
) -> None:
    """Write a temporary beside `path` with `fill`, fsync it (when `durable`), rename it over
    `path` — all relative to one descriptor on the directory (see the module docstring)."""
    folder = _dir_fd(path.parent, within, None)
    try:
        tmp, fd = _temporary(folder, f".{path.name}.", suffix)
        try:
            with os.fdopen(fd, "wb") as handle:
                fill(handle)
                handle.flush()
                if mode is not None:
                    os.fchmod(handle.fileno(), mode)
                if durable:
                    os.fsync(handle.fileno())
            os.replace(tmp, path.name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=folder)
            raise
    finally:
        os.close(folder)


def _temporary(folder: int, prefix: str, suffix: str) -> tuple[str, int]:
    """A new file (0600, not a link) in the directory `folder` holds: its name and descriptor."""
    for _ in range(100):
        name = f"{prefix}{secrets.token_hex(4)}{suffix}"
        try:
            return name, os.open(name, _CREATE, 0o600, dir_fd=folder)
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name {prefix}*{suffix}")


def write_bytes(
    path: Path,
    data: bytes,
    *,
    suffix: str = "",
    mode: int | None = None,
    within: Path | None = None,
    durable: bool = True,
) -> None:
    """Replace `path` with `data`. `suffix` names the temporary (a directory watcher may read
    every `*.prom`); `mode` sets the file's permissions (default: mkstemp's 0600); `within`
    and `durable`: see the module docstring."""
    _replace(
        path,
        lambda handle: handle.write(data),
        suffix=suffix,
        mode=mode,
        within=within,
        durable=durable,
    )


def write_chunks(
    path: Path,
    chunks: Iterable[str],
    *,
    mode: int | None = None,
    within: Path | None = None,
    durable: bool = True,
) -> None:
    """Replace `path` with the text `chunks` make, written as they come (a large file is
    never held whole)."""

    def fill(handle: BinaryIO) -> None:
        for chunk in chunks:
            handle.write(chunk.encode("utf-8"))

    _replace(path, fill, mode=mode, within=within, durable=durable)


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
    """An append-only descriptor on `path` (created with `mode`), opened in its directory held
    by descriptor: a link at `path` or at its directory is refused."""
    folder = _open_top(path.parent, 0o700, follow=False)
    try:
        return os.open(path.name, _APPEND, mode, dir_fd=folder)
    except OSError as exc:
        raise _refused(
            path, exc, lambda: os.stat(path.name, dir_fd=folder, follow_symlinks=False)
        ) from None
    finally:
        os.close(folder)


def append_whole(fd: int, data: bytes) -> None:
    """Append `data` whole or not at all: a write cut short (a full disk) is undone, so a
    JSON-lines file never ends in half a line."""
    size = os.fstat(fd).st_size
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except BaseException:
        os.ftruncate(fd, size)
        raise
