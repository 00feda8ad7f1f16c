"""Another local user, for tests where an attacker with an account of their own acts beside root:
their steps run as a real other uid (a subprocess started with `user=`/`group=`, no extra
groups), so what they can and cannot do is what the kernel lets that account do, not what a
test pretends. The account is `nobody` (present on every Debian machine); its files are made
in a directory it can reach (`world`, 0755 under /tmp), and removed by root afterwards."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class OtherUser:
    uid: int
    gid: int
    #: a root-owned 0755 directory this user can reach (its own directories go inside)
    world: Path

    def run(self, code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Python `code` run as this user (argv[1:] = args); CalledProcessError on failure."""
        return subprocess.run(
            [_python(), "-I", "-c", code, *args],
            user=self.uid, group=self.gid, extra_groups=[], cwd="/",
            capture_output=True, text=True, timeout=timeout, check=True,
        )  # fmt: skip

    def start(self, code: str, *args: str) -> subprocess.Popen[str]:
        """The same, in the background."""
        return subprocess.Popen(
            [_python(), "-I", "-c", code, *args],
            user=self.uid, group=self.gid, extra_groups=[], cwd="/",
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def mkdir(self, path: Path, mode: int = 0o755) -> Path:
        """A directory of this user's (made by root, then given away)."""
        path.mkdir(mode=mode)
        os.chown(path, self.uid, self.gid)
        path.chmod(mode)
        return path


def _python() -> str:
    """An interpreter the other user may run (the test's own may live under /root)."""
    for candidate in ("/usr/bin/python3", sys.executable):
        if os.access(candidate, os.X_OK) and _reachable(Path(candidate)):
            return candidate
    pytest.fail("no Python interpreter another user can run")


def _reachable(path: Path) -> bool:
    return all(p.stat().st_mode & 0o001 for p in path.resolve().parents)


def another_user() -> Iterator[OtherUser]:
    """The body of a test module's fixture: `yield from another_user()`."""
    if os.geteuid() != 0:
        pytest.fail("these tests act as another user: they need root")
    nobody = pwd.getpwnam("nobody")
    world = Path(tempfile.mkdtemp(prefix="rbk-world-"))
    world.chmod(0o755)
    try:
        yield OtherUser(nobody.pw_uid, nobody.pw_gid, world)
    finally:
        shutil.rmtree(world, ignore_errors=True)
