"""Compiled runbook templates kept between runs, as Python keeps a module's bytecode.

Every `runbook run` loads the same shipped runbook: it parses its ~250 templates and
expressions to check them, then compiles those the walk renders (Jinja generates Python source
for each and compiles it). That was a sixth of a guided run's own time (about 50 ms to check,
50 ms to compile, every run, for the same text). Here each compiled template is kept on disk
under a key made of its text, the kind of template (command, text or expression: each
environment generates different code), this package's and Jinja's versions and Python's
bytecode format; a later run loads the code instead of parsing and generating it, and a
template found here needs no load-time check either (only code that passed the checks and
compiled is ever stored).

The files: one per template, `<sha256 of the key>.code`, holding an HMAC of the rest, the key
itself and the code as `marshal` writes it; written to a temporary name and renamed into place,
so a reader never sees half a file, and a file whose HMAC, key or code does not fit is simply
not used (compiled again and replaced).

Trust: the code in these files is run. Jinja's own bytecode cache opened its files by path and
unpickled a header of each, so a directory swapped for a link, or a file another user wrote,
ran their code. Here the directory is reached and held as runbook/cache_dir.py says (one
component at a time without following links into another user's hands, then by descriptor),
each file is opened relative to it and used only when it is this user's alone, and its HMAC
under this user's key is checked before a byte of it is unmarshalled. A directory that fails
the checks means no cache. Where: $RUNBOOK_CACHE_DIR, else $XDG_CACHE_HOME/nccl-runbook, else
~/.cache/nccl-runbook (a `templates` directory in it). RUNBOOK_NO_CACHE=1 turns it off. A cache
that cannot be read or written (read-only home, a full disk) is a slower run, never an error.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import marshal
import os
from pathlib import Path
from types import CodeType
from typing import Any

import jinja2

from runbook import __version__
from runbook import cache_dir as cache_dir_mod

log = logging.getLogger(__name__)

#: bumped when templating.py changes what it generates for the same text (the package
#: version changes too, but a checkout keeps one version across many changes)
FORMAT = 2
_NOTHING = compile("", "<checked>", "exec")
_TAG = f"runbook {__version__} format {FORMAT} jinja2 {jinja2.__version__}"
_MAGIC = importlib.util.MAGIC_NUMBER
#: far more than any template compiles to
_MAX_FILE_BYTES = 4 * 1024 * 1024


def cache_dir() -> Path:
    return cache_dir_mod.base() / "templates"


class CodeCache:
    """Compiled code by (kind, template text), in the directory held by `directory` (a
    descriptor), sealed with `secret`; every failure is a miss."""

    def __init__(self, directory: int, secret: bytes) -> None:
        self.directory = directory
        self._secret = secret

    def close(self) -> None:
        """Let the directory go; every later call is a miss."""
        directory, self.directory = self.directory, -1
        if directory >= 0:
            os.close(directory)

    def _key(self, kind: str, source: str) -> bytes:
        return f"{_TAG}\n{kind}\n{source}".encode("utf-8", "surrogatepass")

    def _name(self, key: bytes) -> str:
        return hashlib.sha256(key).hexdigest() + ".code"

    def _code(self, kind: str, source: str) -> CodeType | None:
        try:
            key = self._key(kind, source)
        except UnicodeError:
            return None
        if self.directory < 0:
            return None
        data = cache_dir_mod.read_own(self.directory, self._name(key), _MAX_FILE_BYTES)
        content = cache_dir_mod.unseal(self._secret, data) if data is not None else None
        if content is None:
            return None
        head = _MAGIC + len(key).to_bytes(4, "big") + key
        if not content.startswith(head):
            return None  # another version's, or another text's under the same name
        try:
            code = marshal.loads(content[len(head) :])  # noqa: S302 (sealed by this user)
        except (EOFError, ValueError, TypeError):
            return None
        return code if type(code) is CodeType else None

    def has(self, kind: str, source: str) -> bool:
        """Whether code for this text is stored (what the load-time check asks: stored code
        passed the check)."""
        return self._code(kind, source) is not None

    def mark_checked(self, kind: str, source: str) -> None:
        """Record that this text passed the load-time check (a template a walk never renders
        is checked on every load but never compiled: without this it would be parsed again
        by every run). Stored as code that does nothing, in the same files."""
        self.store(None, f"checked {kind}", source, _NOTHING)

    def checked(self, kind: str, source: str) -> bool:
        """Whether this text passed the load-time check in an earlier run (or compiled: only
        code that passed it is stored)."""
        return self.has(f"checked {kind}", source) or self.has(kind, source)

    def load(self, environment: Any, kind: str, source: str) -> CodeType | None:
        return self._code(kind, source)

    def store(self, environment: Any, kind: str, source: str, code: CodeType) -> None:
        if self.directory < 0:
            return
        try:
            key = self._key(kind, source)
            content = _MAGIC + len(key).to_bytes(4, "big") + key + marshal.dumps(code)
            cache_dir_mod.write_own(
                self.directory, self._name(key), cache_dir_mod.seal(self._secret, content)
            )
        except (OSError, ValueError, UnicodeError) as exc:  # read-only, full: compiled again
            log.debug("template cache: cannot store a %s template: %s", kind, exc)


_UNSET = object()
_cache: Any = _UNSET


def _open() -> CodeCache | None:
    if cache_dir_mod.off():
        return None
    try:
        where = cache_dir_mod.base()
    except RuntimeError as exc:  # no $HOME and no passwd entry to find one
        log.debug("template cache: no directory: %s", exc)
        return None
    top = cache_dir_mod.held(where, "template")
    if top is None:
        return None
    try:
        secret = cache_dir_mod.key(top)
        if secret is None:
            return None
        directory = cache_dir_mod.open_subdir(top, "templates")
    except OSError as exc:
        log.debug("template cache %s not used: %s", where / "templates", exc)
        return None
    finally:
        os.close(top)
    return CodeCache(directory, secret)


def get() -> CodeCache | None:
    """This process's cache, or None when it is turned off or its directory is not safe."""
    global _cache
    if _cache is _UNSET:
        _cache = _open()
    return _cache  # type: ignore[no-any-return]


def reset() -> None:
    """Forget the directory chosen (tests that change RUNBOOK_CACHE_DIR)."""
    global _cache
    if isinstance(_cache, CodeCache):
        _cache.close()
    _cache = _UNSET
