"""The dataclasses' generated methods kept compiled between runs of the command.

`@dataclass` writes each class's `__init__`, `__repr__`, `__eq__` (and for a frozen class
`__setattr__`, `__delattr__`, `__hash__`) as Python source and compiles it when the class is
defined. The command imports some 120 of our dataclasses before it can do anything: compiling
their 640 small functions was 60 ms of every run's CPU (a fifth of a guided run's start-up),
for the same text every time. Python keeps no bytecode for these; this does, as it keeps a
module's: the compiled code of each text, by text, in one file per Python bytecode format.

How: the `dataclasses` module calls `exec(source, globals, namespace)` on the text it
generated (Python 3.10 to 3.13 alike). `install()` gives that module its own `exec` (a name in
its globals, found before the builtin): the same call with the code compiled earlier, or
compiled now with exactly what `exec` of the text would use (`<string>`, no inherited future
flags) and kept for the next run. Nothing else changes: the code objects are the ones `exec`
would have made. Only the command installs it (`runbook.start`), never an import of the
library.

Trust: as `__pycache__` (runbook/cache_dir.py): the directory must be this user's and writable by
no one else, and so must the file; `RUNBOOK_NO_CACHE=1` turns it off. A missing, damaged or
foreign file, or one that cannot be written, is code compiled as before, never an error.
"""

from __future__ import annotations

import atexit
import builtins
import dataclasses
import importlib.util
import logging
import marshal
import os
import stat
import sys
from pathlib import Path
from types import CodeType
from typing import Any

from runbook import cache_dir

log = logging.getLogger(__name__)

#: more entries than this (old versions' classes piling up) and the file keeps only this run's
MAX_ENTRIES = 4000
_MAX_FILE_BYTES = 32 * 1024 * 1024


def file_name() -> str:
    """One file per bytecode format: the interpreter's tag and its magic number."""
    return f"dataclasses-{sys.implementation.cache_tag}-{importlib.util.MAGIC_NUMBER.hex()}.marshal"


class Cache:
    """Compiled code by the source text dataclasses generated; `exec` is what it installs."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.stored = _read(path)
        self.new: dict[str, bytes] = {}
        self.used: set[str] = set()

    def exec(self, source: Any, globals: Any = None, locals: Any = None, /) -> None:
        # what dataclasses asked for, as it asked: its own generated methods
        if type(source) is not str:
            return builtins.exec(source, globals, locals)  # noqa: S102
        code = _code(self.stored.get(source))
        if code is None:
            code = compile(source, "<string>", "exec", dont_inherit=True)
            self.new[source] = marshal.dumps(code)
        self.used.add(source)
        return builtins.exec(code, globals, locals)  # noqa: S102

    def save(self) -> None:
        """Add what this process compiled to the file (read again first: another run may have
        written it since), replaced whole by rename."""
        if not self.new:
            return
        entries = _read(self.path)
        entries.update(self.new)
        if len(entries) > MAX_ENTRIES:
            entries = {k: v for k, v in entries.items() if k in self.used}
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            with os.fdopen(os.open(temporary, flags, 0o600), "wb") as out:
                marshal.dump(entries, out)
            os.replace(temporary, self.path)
        except (OSError, ValueError) as exc:
            log.debug("dataclass cache: not written: %s", exc)
            try:
                temporary.unlink()
            except OSError:
                pass


def _code(raw: object) -> CodeType | None:
    if type(raw) is not bytes:
        return None
    try:
        code = marshal.loads(raw)  # noqa: S302 (a file of this user's alone: _read)
    except (EOFError, ValueError, TypeError):
        return None
    return code if type(code) is CodeType else None


def _read(path: Path) -> dict[str, bytes]:
    """The file's entries; nothing when it is missing, damaged, or not this user's alone."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return {}
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if (
            not stat.S_ISREG(info.st_mode)
            or info.st_uid != os.geteuid()
            or stat.S_IMODE(info.st_mode) & (stat.S_IWGRP | stat.S_IWOTH)
            or info.st_size > _MAX_FILE_BYTES
        ):
            log.debug("dataclass cache %s: not this user's alone; not used", path)
            return {}
        try:
            entries = marshal.load(handle)  # noqa: S302 (checked above: this user's alone)
        except (EOFError, ValueError, TypeError) as exc:
            log.debug("dataclass cache %s unreadable: %s", path, exc)
            return {}
    if type(entries) is not dict:
        return {}
    return {k: v for k, v in entries.items() if type(k) is str and type(v) is bytes}


def install() -> Cache | None:
    """Give `dataclasses` the caching `exec`, saved when the process exits; None when caches
    are off, the directory is not safe, or something else already replaced its `exec`."""
    if cache_dir.off() or "exec" in vars(dataclasses):
        return None
    try:
        directory = cache_dir.base()
    except RuntimeError:  # no home directory to find one in
        return None
    if not cache_dir.safe_dir(directory):
        return None
    cache = Cache(directory / file_name())
    dataclasses.exec = cache.exec  # type: ignore[attr-defined]
    atexit.register(cache.save)
    return cache
