"""Where this user's caches live, and whether a directory is safe to keep code in.

$RUNBOOK_CACHE_DIR, else $XDG_CACHE_HOME/nccl-runbook, else ~/.cache/nccl-runbook;
RUNBOOK_NO_CACHE=1 turns every cache off. Code kept there is run (compiled templates, the
dataclasses' generated methods), so a directory is used only as Python uses `__pycache__`:
a real directory of this user that no one else may write. Nothing here imports more than the
standard library's basics: the dataclass cache asks before any of runbook's modules load.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)


def off() -> bool:
    return os.environ.get("RUNBOOK_NO_CACHE", "").strip() not in ("", "0")


def base() -> Path:
    """The caches' directory (RuntimeError when there is no home directory to find it in)."""
    env = os.environ.get("RUNBOOK_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "nccl-runbook"


def safe_dir(path: Path) -> bool:
    """Make `path` (owner-only) if it is missing; whether it is a real directory this user
    owns that no one else may write."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(path)
    except OSError as exc:
        log.debug("cache %s unusable: %s", path, exc)
        return False
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        log.debug("cache %s: not a directory of this user; not used", path)
        return False
    if stat.S_IMODE(info.st_mode) & (stat.S_IWGRP | stat.S_IWOTH):
        log.debug("cache %s: writable by others; not used", path)
        return False
    return True
