"""Where this user's caches live, and how they are opened so that no one else can put code in them.

$RUNBOOK_CACHE_DIR, else $XDG_CACHE_HOME/nccl-runbook, else ~/.cache/nccl-runbook;
RUNBOOK_NO_CACHE=1 turns every cache off. Code kept there is run (compiled templates, the
dataclasses' generated methods), so it is trusted only as far as this user's own files are:

- The directory is reached one component at a time from `/`, each opened relative to the one
  before with O_NOFOLLOW|O_DIRECTORY and checked on the descriptor (fstat): every directory on
  the way is owned by root or this user and writable by no one else (a sticky directory such as
  /tmp excepted on the way, never as the cache itself); a symbolic link on the way is followed
  only when root or this user owns it (its directory passed the same check, so no one else put
  it there); the cache directory itself is this user's and writable by no one else. Missing
  directories are made 0700 on the way down. Anything else (another user's $XDG_CACHE_HOME or
  shared home, a link at `nccl-runbook`) means no cache, never a fallback to the path.
- The directory is then held by its descriptor, and every file in it is opened, created,
  renamed and removed relative to that descriptor (`dir_fd=`): a directory swapped for a link
  after it was opened cannot redirect a read or a write.
- Each file is opened O_NOFOLLOW|O_NONBLOCK and used only when, on its descriptor, it is a
  regular file of this user that no one else may write.
- Each file carries an HMAC-SHA256 of its content under a key of this user's (32 random bytes,
  `key`, 0600 in the same directory, read the same way and refused unless no one else may read
  it): content that was not written by this user's own runs is never unmarshalled.

Nothing here imports more than the standard library's basics: the dataclass cache asks before
any of runbook's modules load.
"""

from __future__ import annotations

import errno
import hmac
import logging
import os
import stat
from collections import deque
from pathlib import Path

log = logging.getLogger(__name__)

KEY_NAME = "key"
_KEY_BYTES = 32
_MAC_BYTES = 32
_MAX_LINKS = 40
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


class Unsafe(OSError):
    """A directory or file on the cache's way that another user could have changed."""


def off() -> bool:
    return os.environ.get("RUNBOOK_NO_CACHE", "").strip() not in ("", "0")


def base() -> Path:
    """The caches' directory (RuntimeError when there is no home directory to find it in)."""
    env = os.environ.get("RUNBOOK_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "nccl-runbook"


def _check_on_the_way(info: os.stat_result, what: str) -> None:
    """A directory the cache is reached through: root's or this user's, and writable by no
    one else unless sticky (no one else can then rename or remove what is in it)."""
    if not stat.S_ISDIR(info.st_mode):
        raise Unsafe(errno.ENOTDIR, f"{what}: not a directory")
    if info.st_uid not in (0, os.geteuid()):
        raise Unsafe(errno.EPERM, f"{what}: owned by uid {info.st_uid}")
    if stat.S_IMODE(info.st_mode) & _OTHERS_WRITE and not info.st_mode & stat.S_ISVTX:
        raise Unsafe(errno.EPERM, f"{what}: writable by others")


def _check_own_dir(info: os.stat_result, what: str) -> None:
    """The cache directory itself: this user's, writable by no one else."""
    if not stat.S_ISDIR(info.st_mode):
        raise Unsafe(errno.ENOTDIR, f"{what}: not a directory")
    if info.st_uid != os.geteuid():
        raise Unsafe(errno.EPERM, f"{what}: owned by uid {info.st_uid}, not this user")
    if stat.S_IMODE(info.st_mode) & _OTHERS_WRITE:
        raise Unsafe(errno.EPERM, f"{what}: writable by others")


def _open_child(parent: int, name: str, *, create: bool) -> int:
    """`name` in the directory `parent`, opened without following a link (made 0700 first
    when missing and `create`)."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        if not create:
            raise
    try:
        os.mkdir(name, 0o700, dir_fd=parent)
    except FileExistsError:
        pass  # made meanwhile by another run: opened and checked as any other
    return os.open(name, _DIR_FLAGS, dir_fd=parent)


def open_dir(path: Path, *, create: bool = True) -> int:
    """A descriptor of `path`, reached as the module docstring says; Unsafe (an OSError) when
    a step fails a check, any OSError when it cannot be reached or made."""
    parts = deque(p for p in os.path.abspath(os.fspath(path)).split("/") if p)
    fd = os.open("/", _DIR_FLAGS)
    links = 0
    try:
        _check_on_the_way(os.fstat(fd), "/")
        walked = ""
        while parts:
            name = parts.popleft()
            try:
                child = _open_child(fd, name, create=create)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                link = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if not stat.S_ISLNK(link.st_mode):
                    raise Unsafe(errno.ENOTDIR, f"{walked}/{name}: not a directory") from None
                if link.st_uid not in (0, os.geteuid()):
                    raise Unsafe(
                        errno.EPERM, f"{walked}/{name}: a link owned by uid {link.st_uid}"
                    ) from None
                links += 1
                if links > _MAX_LINKS:
                    raise Unsafe(errno.ELOOP, f"{path}: too many links") from None
                target = os.readlink(name, dir_fd=fd)
                parts.extendleft(reversed([p for p in target.split("/") if p]))
                if target.startswith("/"):
                    os.close(fd)
                    fd = os.open("/", _DIR_FLAGS)
                    walked = ""
                continue
            os.close(fd)
            fd = child
            walked = f"{walked}/{name}"
            if parts:
                _check_on_the_way(os.fstat(fd), walked)
            else:
                _check_own_dir(os.fstat(fd), walked)
        if walked == "":
            _check_own_dir(os.fstat(fd), "/")
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_subdir(parent: int, name: str) -> int:
    """`name` in the held directory `parent` (made 0700 when missing), checked as the cache
    directory itself is."""
    fd = _open_child(parent, name, create=True)
    try:
        _check_own_dir(os.fstat(fd), name)
    except BaseException:
        os.close(fd)
        raise
    return fd


def held(path: Path, what: str) -> int | None:
    """`open_dir(path)`, or None (logged at debug) when it is not safe or not there."""
    try:
        return open_dir(path)
    except OSError as exc:
        log.debug("%s cache %s not used: %s", what, path, exc)
        return None


def _mine(info: os.stat_result, forbidden: int) -> bool:
    """A regular file of this user's with none of the `forbidden` mode bits."""
    return (
        stat.S_ISREG(info.st_mode)
        and info.st_uid == os.geteuid()
        and not stat.S_IMODE(info.st_mode) & forbidden
    )


def read_own(directory: int, name: str, limit: int) -> bytes | None:
    """The bytes of `name` in `directory` when it is a regular file of this user that no one
    else may write, of at most `limit` bytes; None when it is missing or not."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=directory)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not _mine(info, _OTHERS_WRITE) or info.st_size > limit:
            log.debug("cache file %s: not this user's alone; not used", name)
            return None
        chunks = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks) if size <= limit else None
    except OSError:
        return None
    finally:
        os.close(fd)


def write_own(directory: int, name: str, data: bytes) -> None:
    """Replace `name` in `directory` with `data` (0600, whole or not at all: written to a
    temporary name and renamed, both relative to the held directory); OSError when it cannot."""
    temporary = f".{name}.{os.getpid()}.{os.urandom(4).hex()}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temporary, flags, 0o600, dir_fd=directory)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        try:
            os.unlink(temporary, dir_fd=directory)
        except OSError:
            pass
        raise


def key(directory: int) -> bytes | None:
    """This user's key for the cache files' HMAC, kept as `key` in the held directory; made
    on first use. None when the file there is not a 0600 file of this user's with a key in it
    (then nothing is read from or written to the cache)."""
    for _ in range(2):
        try:
            fd = os.open(KEY_NAME, _FILE_FLAGS, dir_fd=directory)
        except FileNotFoundError:
            _make_key(directory)
            continue
        except OSError as exc:
            log.debug("cache key not readable: %s", exc)
            return None
        try:
            info = os.fstat(fd)
            if not _mine(info, 0o077) or info.st_size != _KEY_BYTES:
                log.debug("cache key: not a 0600 file of this user's; no cache")
                return None
            data = os.read(fd, _KEY_BYTES + 1)
        except OSError:
            return None
        finally:
            os.close(fd)
        return data if len(data) == _KEY_BYTES else None
    return None


def _make_key(directory: int) -> None:
    """A new key, written to a temporary file and linked into place (two runs making one at
    once: the first link wins and both read it)."""
    temporary = f".{KEY_NAME}.{os.getpid()}.{os.urandom(4).hex()}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(temporary, flags, 0o600, dir_fd=directory)
        try:
            os.write(fd, os.urandom(_KEY_BYTES))
        finally:
            os.close(fd)
        try:
            os.link(temporary, KEY_NAME, src_dir_fd=directory, dst_dir_fd=directory)
        except FileExistsError:
            pass
        os.unlink(temporary, dir_fd=directory)
    except OSError as exc:
        log.debug("cache key not made: %s", exc)


def seal(secret: bytes, content: bytes) -> bytes:
    """`content` with its HMAC in front, as a cache file holds it."""
    return hmac.digest(secret, content, "sha256") + content


def unseal(secret: bytes, data: bytes) -> bytes | None:
    """The content of a cache file whose HMAC verifies under `secret`, else None."""
    if len(data) < _MAC_BYTES:
        return None
    mac, content = data[:_MAC_BYTES], data[_MAC_BYTES:]
    if not hmac.compare_digest(mac, hmac.digest(secret, content, "sha256")):
        return None
    return content
