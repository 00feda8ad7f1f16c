"""One sweep of an inventory at a time: an flock on a file in the state dir, keyed by the
inventory's absolute path (and the shard). The kernel drops the lock when the holder dies, even
of SIGKILL, so a crashed sweep never blocks the next night's; the file names the holder's pid
for the message of the sweep that finds it taken."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from pathlib import Path

from runbook.errors import UsageError, disk_full_as_error


class SweepLocked(UsageError):
    """Another sweep of the same inventory holds the lock (exit 2)."""


class SweepLock:
    def __init__(self, key: str, directory: Path) -> None:
        self.key = key
        digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:24]
        self.path = directory / f"{digest}.lock"
        self._fd: int | None = None

    def acquire(self) -> SweepLock:
        with disk_full_as_error(self.path.parent):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").split("\n", 1)[0].strip()
            os.close(fd)
            raise SweepLocked(
                f"another sweep of {self.key} is running (pid {holder or 'unknown'}; "
                f"lock {self.path})"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        # the holder's pid is only for another sweep's message: a full disk costs that line,
        # not the sweep (the flock is the lock)
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n{self.key}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            # the file stays: unlinking it would let a third sweep lock a new inode while a
            # second still waits on the old one
            os.ftruncate(self._fd, 0)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> SweepLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
