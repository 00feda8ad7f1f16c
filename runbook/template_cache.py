"""Compiled runbook templates kept between runs, as Python keeps a module's bytecode.

Every `runbook run` loads the same shipped runbook: it parses its ~250 templates and
expressions to check them, then compiles those the walk renders (Jinja generates Python source
for each and compiles it). That was a sixth of a guided run's own time (about 50 ms to check,
50 ms to compile, every run, for the same text). Here each compiled template is kept on disk
under a key made of its text, the kind of template (command, text or expression: each
environment generates different code), this package's and Jinja's versions; a later run
loads the code instead of parsing and generating it, and a template found here needs no
load-time check either (only code that passed the checks and compiled is ever stored).

The files are Jinja's own bytecode cache (jinja2.FileSystemBytecodeCache: Jinja's magic
and Python's version in each file, written to a temporary name and renamed into place, so a
reader never sees half a file and a stale or foreign one is simply not used).

Trust: the code in these files is run, so they are trusted exactly as Python trusts
`__pycache__`: the directory must be a real directory owned by this user and writable by no
one else, else the cache is not used at all. Where: $RUNBOOK_CACHE_DIR, else
$XDG_CACHE_HOME/nccl-runbook, else ~/.cache/nccl-runbook (a `templates` directory in it).
RUNBOOK_NO_CACHE=1 turns it off. A cache that cannot be read or written (read-only home, a
full disk) is a slower run, never an error.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import CodeType
from typing import Any

import jinja2
from jinja2.bccache import Bucket, FileSystemBytecodeCache

from runbook import __version__
from runbook import cache_dir as cache_dir_mod

log = logging.getLogger(__name__)

#: bumped when templating.py changes what it generates for the same text (the package
#: version changes too, but a checkout keeps one version across many changes)
FORMAT = 1
_NOTHING = compile("", "<checked>", "exec")
_TAG = f"runbook {__version__} format {FORMAT} jinja2 {jinja2.__version__}"


def cache_dir() -> Path:
    return cache_dir_mod.base() / "templates"


class CodeCache:
    """Compiled code by (kind, template text); every failure is a miss."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._files = FileSystemBytecodeCache(str(directory), "%s.j2c")

    def _key(self, kind: str, source: str) -> str:
        return self._files.get_cache_key(f"{kind}\n{source}", _TAG)

    def has(self, kind: str, source: str) -> bool:
        """Whether code for this text is stored (what the load-time check asks: stored code
        passed the check)."""
        try:
            return (self.directory / f"{self._key(kind, source)}.j2c").is_file()
        except (OSError, UnicodeError, ValueError):
            return False

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
        try:
            bucket = self._files.get_bucket(environment, f"{kind}\n{source}", _TAG, source)
        except Exception as exc:  # a damaged file is a miss: it is compiled again
            log.debug("template cache: %s unreadable: %s", kind, exc)
            return None
        return bucket.code

    def store(self, environment: Any, kind: str, source: str, code: CodeType) -> None:
        try:
            bucket = Bucket(
                environment, self._key(kind, source), self._files.get_source_checksum(source)
            )
            bucket.code = code
            self._files.set_bucket(bucket)
        except Exception as exc:  # read-only, full: the next run compiles it again
            log.debug("template cache: cannot store a %s template: %s", kind, exc)


_UNSET = object()
_cache: Any = _UNSET


def get() -> CodeCache | None:
    """This process's cache, or None when it is turned off or its directory is not safe."""
    global _cache
    if _cache is _UNSET:
        try:
            directory = None if cache_dir_mod.off() else cache_dir()
        except RuntimeError as exc:  # no $HOME and no passwd entry to find one
            log.debug("template cache: no directory: %s", exc)
            directory = None
        if directory is not None and not cache_dir_mod.safe_dir(directory):
            directory = None
        _cache = CodeCache(directory) if directory is not None else None
    return _cache  # type: ignore[no-any-return]


def reset() -> None:
    """Forget the directory chosen (tests that change RUNBOOK_CACHE_DIR)."""
    global _cache
    _cache = _UNSET
