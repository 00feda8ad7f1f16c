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

Trust: the file is read and written relative to the caches' directory held by descriptor
(runbook/cache_dir.py: reached without following links into another user's hands, this
user's alone), used only when it is a regular file of this user that no one else may write, and
unmarshalled only when its HMAC under this user's key verifies; `RUNBOOK_NO_CACHE=1` turns it
off. A missing, damaged or foreign file, or one that cannot be written, is code compiled as
before, never an error.
"""

from __future__ import annotations

import atexit
import builtins
import dataclasses
import importlib.util
import logging
import marshal
import os
import sys
from pathlib import Path
from types import CodeType
from typing import Any

from runbook import cache_dir

log = logging.getLogger(__name__)

#: more entries than this (old versions' classes piling up) and the file keeps only this run's
MAX_ENTRIES = 4000
_MAX_FILE_BYTES = 32 * 1024 * 1024
#: what a file starts with (after its HMAC): the format, and the bytecode it holds
_HEAD = b"runbook dataclasses 2\n" + importlib.util.MAGIC_NUMBER


def file_name() -> str:
    """One file per bytecode format: the interpreter's tag and its magic number."""
    return f"dataclasses-{sys.implementation.cache_tag}-{importlib.util.MAGIC_NUMBER.hex()}.marshal"


class Cache:
    """Compiled code by the source text dataclasses generated; `exec` is what it installs.
    `directory`: the held descriptor of the caches' directory; `secret`: this user's key."""

    def __init__(self, directory: int, secret: bytes, name: str | None = None) -> None:
        self.directory = directory
        self.secret = secret
        self.name = name or file_name()
        self.stored = self._read()
        self.new: dict[str, bytes] = {}
        self.used: set[str] = set()

    @classmethod
    def open(cls, directory: Path, name: str | None = None) -> Cache | None:
        """The cache kept in `directory` (see the module docstring); None when that is not
        safe or holds no usable key."""
        fd = cache_dir.held(directory, "dataclass")
        if fd is None:
            return None
        secret = cache_dir.key(fd)
        if secret is None:
            os.close(fd)
            return None
        return cls(fd, secret, name)

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
        entries = self._read()
        entries.update(self.new)
        if len(entries) > MAX_ENTRIES:
            entries = {k: v for k, v in entries.items() if k in self.used}
        try:
            content = _HEAD + marshal.dumps(entries)
            cache_dir.write_own(self.directory, self.name, cache_dir.seal(self.secret, content))
        except (OSError, ValueError) as exc:
            log.debug("dataclass cache: not written: %s", exc)

    def _read(self) -> dict[str, bytes]:
        """The file's entries; nothing when it is missing, damaged, not this user's alone, or
        not sealed with this user's key."""
        data = cache_dir.read_own(self.directory, self.name, _MAX_FILE_BYTES)
        content = cache_dir.unseal(self.secret, data) if data is not None else None
        if content is None or not content.startswith(_HEAD):
            if data is not None:
                log.debug("dataclass cache %s: not sealed by this user; not used", self.name)
            return {}
        try:
            entries = marshal.loads(content[len(_HEAD) :])  # noqa: S302 (sealed by this user)
        except (EOFError, ValueError, TypeError) as exc:
            log.debug("dataclass cache %s unreadable: %s", self.name, exc)
            return {}
        if type(entries) is not dict:
            return {}
        return {k: v for k, v in entries.items() if type(k) is str and type(v) is bytes}


def _code(raw: object) -> CodeType | None:
    if type(raw) is not bytes:
        return None
    try:
        code = marshal.loads(raw)  # noqa: S302 (from a file sealed by this user: Cache._read)
    except (EOFError, ValueError, TypeError):
        return None
    return code if type(code) is CodeType else None


def install() -> Cache | None:
    """Give `dataclasses` the caching `exec`, saved when the process exits; None when caches
    are off, the directory is not safe, or something else already replaced its `exec`."""
    if cache_dir.off() or "exec" in vars(dataclasses):
        return None
    try:
        directory = cache_dir.base()
    except RuntimeError:  # no home directory to find one in
        return None
    cache = Cache.open(directory)
    if cache is None:
        return None
    dataclasses.exec = cache.exec  # type: ignore[attr-defined]
    atexit.register(cache.save)
    return cache
