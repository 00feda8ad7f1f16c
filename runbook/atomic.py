"""Files replaced whole or not at all: a temporary beside the target, fsynced, then renamed
over it. A reader (or a crash, or a full disk) sees the old file or the new one, never half
of one, and no temporary is left behind when the write fails."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_bytes(path: Path, data: bytes, *, suffix: str = "", mode: int | None = None) -> None:
    """Replace `path` with `data`. `suffix` names the temporary (a directory watcher may read
    every `*.prom`); `mode` sets the file's permissions (default: mkstemp's 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str, *, suffix: str = "", mode: int | None = None) -> None:
    write_bytes(path, text.encode("utf-8"), suffix=suffix, mode=mode)
