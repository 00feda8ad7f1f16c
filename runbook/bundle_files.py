"""Every read of a bundle's files goes through here: confined to the bundle and bounded.

A bundle is input from anywhere (a colleague's tarball, a ticket attachment). Reading it must
never reach outside it, never block on a FIFO or a device, and never hold more than a bounded
amount of it in memory:

- a member is found by its bundle-relative name; the path it resolves to (links followed)
  must lie inside the bundle, and what is opened (`O_NOFOLLOW`, non-blocking) must be a
  regular file — else a one-line BundleError naming it;
- each kind of read has its byte bound, and the bundle as a whole a budget; beyond a bound
  the file's *tail* is read (the end of a log is where a failure is) and the cut is recorded
  as evidence (`truncated`, with a note saying how much was read).

| read | bound |
|---|---|
| `bundle.yaml` | MAX_META_BYTES; a larger one is refused |
| `.rc`, `.err` side files | MAX_SIDE_BYTES (tail) |
| a file read whole (≤ LAZY_BYTES) or a multi-file probe's member | MAX_WHOLE_BYTES (tail) |
| all members of one multi-file probe (`app/*.log`) together | MAX_MULTI_BYTES |
| one line of a file read whole | MAX_LINE_BYTES (its head) |
| a file scanned block by block (> LAZY_BYTES) | MAX_SCAN_BYTES (tail) |
| all of one bundle's reads together | MAX_BUNDLE_BYTES |
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from runbook.errors import BundleError
from runbook.units import human as _human

MAX_META_BYTES = 64 * 1024
MAX_SIDE_BYTES = 64 * 1024
MAX_WHOLE_BYTES = 16 * 1024 * 1024
MAX_MULTI_BYTES = 32 * 1024 * 1024
MAX_LINE_BYTES = 1024 * 1024
MAX_SCAN_BYTES = 8 * 1024**3
MAX_BUNDLE_BYTES = 32 * 1024**3
#: files and directories walked when listing a bundle, and how deep
MAX_ENTRIES = 20000
MAX_DEPTH = 64

_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True)
class Read:
    """What was read of one member: its bytes (or, for a scanned file, where to start), and
    whether the bound cut it."""

    data: bytes
    size: int
    offset: int = 0

    @property
    def truncated(self) -> bool:
        return self.offset > 0

    def note(self, name: str) -> str | None:
        if not self.truncated:
            return None
        return (
            f"{name} is {_human(self.size)}: only its last {_human(self.size - self.offset)} "
            "were read (a bundle read bound); its line numbers count from there"
        )


def _clip_lines(data: bytes) -> bytes:
    """`data` with every line longer than MAX_LINE_BYTES cut to its head (a file of one
    gigantic line — zeros, a binary — is not handed on whole)."""
    if len(data) <= MAX_LINE_BYTES:
        return data
    lines = data.split(b"\n")
    if all(len(line) <= MAX_LINE_BYTES for line in lines):
        return data
    return b"\n".join(line[:MAX_LINE_BYTES] for line in lines)


class BundleFiles:
    """The files of the bundle at `root`, read through the bounds above."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._real = root.resolve()
        self.spent = 0

    def locate(self, name: str | PurePosixPath) -> Path | None:
        """The resolved path of member `name`, None when absent; BundleError when it points
        outside the bundle or is not a regular file."""
        parts = PurePosixPath(name).parts
        if not parts or PurePosixPath(name).is_absolute() or ".." in parts:
            raise BundleError(f"unsafe path in bundle: {str(name)!r}")
        path = self.root.joinpath(*parts)
        try:
            resolved = path.resolve()
        except (OSError, RuntimeError) as exc:  # a link loop
            raise BundleError(f"bundle file {str(name)!r}: {exc}") from None
        if not resolved.is_relative_to(self._real):
            raise BundleError(f"bundle file {str(name)!r} points outside the bundle")
        try:
            mode = resolved.stat().st_mode
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise BundleError(f"bundle file {str(name)!r}: {exc.strerror or exc}") from None
        if stat.S_ISDIR(mode):
            return None
        if not stat.S_ISREG(mode):
            raise BundleError(f"bundle file {str(name)!r} is not a regular file")
        return resolved

    def _open(self, path: Path) -> tuple[int, int]:
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except OSError as exc:
            raise BundleError(f"bundle file {path.name!r}: {exc.strerror or exc}") from None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            raise BundleError(f"bundle file {path.name!r} is not a regular file")
        return fd, info.st_size

    def _allow(self, wanted: int) -> int:
        """How much of `wanted` bytes the bundle's budget still allows (and spend it)."""
        allowed = max(0, min(wanted, MAX_BUNDLE_BYTES - self.spent))
        self.spent += allowed
        return allowed

    def read(self, path: Path, limit: int) -> Read:
        """The last `limit` bytes of a located member (all of it when smaller); a cut read
        starts at a line's beginning."""
        fd, size = self._open(path)
        try:
            take = self._allow(min(size, limit))
            offset = size - take
            os.lseek(fd, offset, os.SEEK_SET)
            chunks = []
            left = take
            while left > 0:
                chunk = os.read(fd, min(left, 16 * 1024 * 1024))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
            data = b"".join(chunks)
        finally:
            os.close(fd)
        if offset:
            cut = data.find(b"\n") + 1  # the first line read is only part of one
            data, offset = data[cut:], offset + cut
        return Read(_clip_lines(data), size, offset)

    def scan_window(self, path: Path) -> Read:
        """For a file scanned block by block: no bytes, and where to start (its last
        MAX_SCAN_BYTES, within the budget); the scanner opens it itself, by this path."""
        fd, size = self._open(path)
        os.close(fd)
        take = self._allow(min(size, MAX_SCAN_BYTES))
        return Read(b"", size, size - take)

    def meta(self, shown: Path | str | None = None) -> bytes:
        """`bundle.yaml`'s bytes; BundleError when absent or larger than any real one.
        `shown`: the bundle as the user named it (an archive unpacks elsewhere)."""
        path = self.locate("bundle.yaml")
        if path is None:
            raise BundleError(f"{shown or self.root}: not a bundle (no bundle.yaml)")
        read = self.read(path, MAX_META_BYTES + 1)
        if read.size > MAX_META_BYTES:
            raise BundleError(
                f"{self.root / 'bundle.yaml'}: {_human(read.size)}, more than a bundle.yaml "
                f"holds ({_human(MAX_META_BYTES)} at most)"
            )
        return read.data

    def walk(self) -> list[Path]:
        """Every regular file inside the bundle, in name order (links are not followed; a file
        link that leaves the bundle is left out); at most MAX_ENTRIES entries and MAX_DEPTH
        directories deep — walked with a stack, not recursion (a 1500-deep tree is a one-line
        refusal, not a RecursionError)."""
        found: list[Path] = []
        seen = 0
        stack: list[tuple[Path, int]] = [(self.root, 0)]
        while stack:
            directory, depth = stack.pop()
            if depth > MAX_DEPTH:
                raise BundleError(f"{self.root}: directories nested more than {MAX_DEPTH} deep")
            try:
                entries = sorted(os.scandir(directory), key=lambda e: e.name, reverse=True)
            except OSError as exc:
                raise BundleError(f"{directory}: {exc.strerror or exc}") from None
            seen += len(entries)
            if seen > MAX_ENTRIES:
                raise BundleError(f"{self.root}: more than {MAX_ENTRIES} files")
            for entry in entries:
                path = Path(entry.path)
                if entry.is_dir(follow_symlinks=False):
                    stack.append((path, depth + 1))
                    continue
                try:
                    if self.locate(path.relative_to(self.root).as_posix()) is not None:
                        found.append(path)
                except BundleError:
                    continue
        return sorted(found)
