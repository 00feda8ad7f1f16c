"""The Ansible collections the fix playbooks depend on (galaxy.yml's `dependencies`:
kubernetes.core, for node_drain and workload_patch's cluster mode), installed where this
installation's `ansible-playbook` and `ansible-lint` find them: `runbook setup-collections`.

Ansible Galaxy is often out of reach where a Python package index is not (a mirror-only
network, a CI runner, an image build). The `ansible` community package on PyPI carries every
collection of its release, so the wheel of one pinned release is fetched with pip — the index
and proxy pip is configured for, as `pip install .` used — and only the collections named
here are unpacked from it into this interpreter's site-packages (`<site>/ansible_collections/
kubernetes/core`), one of the places ansible-core searches (its sys.path scan), without
installing the package's other 20 000 files. A collection already there is left as it is.

With Galaxy at hand, `ansible-galaxy collection install -r requirements.yml` does the same job
into `~/.ansible/collections`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from runbook.errors import RunbookError, UsageError

#: the `ansible` release the collections come from (it ships kubernetes.core 6.2.0, which
#: galaxy.yml's `kubernetes.core: ">=5.0.0"` admits; tests/integration/test_shipped.py checks)
ANSIBLE_RELEASE = "12.3.0"
#: what the fix playbooks use beyond ansible.builtin (galaxy.yml `dependencies`)
COLLECTIONS = ("kubernetes.core",)
#: a download or unpack that takes longer than this has failed
PIP_TIMEOUT_S = 600


class CollectionInstallError(RunbookError):
    """The collections could not be fetched or unpacked (exit 1: the install did not happen)."""


@dataclass(frozen=True)
class CollectionState:
    """One collection: its name, the version found (None: not installed), and where."""

    name: str
    version: str | None
    path: Path
    installed_now: bool = False

    def line(self) -> str:
        if self.version is None:
            return f"{self.name}: not installed (looked in {self.path})"
        how = "installed" if self.installed_now else "already installed"
        return f"{self.name} {self.version}: {how} in {self.path}"


def site_dir() -> Path:
    """This interpreter's site-packages: where its ansible-core looks for ansible_collections."""
    return Path(sysconfig.get_paths()["purelib"])


def collection_path(site: Path, name: str) -> Path:
    """`kubernetes.core` -> <site>/ansible_collections/kubernetes/core."""
    namespace, _, collection = name.partition(".")
    return site / "ansible_collections" / namespace / collection


def installed_version(path: Path) -> str | None:
    """The version in the collection's MANIFEST.json, or None when there is none to read."""
    try:
        manifest = json.loads((path / "MANIFEST.json").read_text())
        return str(manifest["collection_info"]["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def states(site: Path | None = None, names: Sequence[str] = COLLECTIONS) -> list[CollectionState]:
    site = site or site_dir()
    return [
        CollectionState(name, installed_version(collection_path(site, name)),
                        collection_path(site, name))
        for name in names
    ]  # fmt: skip


def wheel_members(namelist: Sequence[str], name: str) -> list[str]:
    """The wheel's members that make up collection `name` (ansible_collections/NS/NAME/…).
    A member that would land outside that directory (`..`, an absolute path) is refused."""
    namespace, _, collection = name.partition(".")
    prefix = f"ansible_collections/{namespace}/{collection}/"
    members = [m for m in namelist if m.startswith(prefix)]
    for member in members:
        parts = PurePosixPath(member).parts
        if ".." in parts or member.startswith("/") or "\\" in member:
            raise CollectionInstallError(f"refusing wheel member {member!r}")
    if not any(m == prefix + "MANIFEST.json" for m in members):
        raise CollectionInstallError(f"the wheel has no collection {name}")
    return members


def download_wheel(dest: Path, release: str = ANSIBLE_RELEASE) -> Path:
    """`pip download ansible==RELEASE` (the wheel only, no dependencies) into dest."""
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
            "--disable-pip-version-check", "--only-binary=:all:", f"ansible=={release}",
            "--dest", str(dest)]  # fmt: skip
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise CollectionInstallError(
            f"pip download ansible=={release} did not finish in {PIP_TIMEOUT_S} s"
        ) from exc
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise CollectionInstallError(f"pip download ansible=={release} failed: {last}")
    wheels = sorted(dest.glob("ansible-*.whl"))
    if not wheels:
        raise CollectionInstallError(f"pip download ansible=={release} left no wheel in {dest}")
    return wheels[0]


def unpack(wheel: Path, site: Path, name: str) -> Path:
    """Unpack collection `name` from `wheel` into site: into a staging directory beside it
    first, then moved in place, so an interrupted unpack never leaves half a collection that
    would look installed. What is at the final path without a MANIFEST.json is such a broken
    copy, and is replaced."""
    final = collection_path(site, name)
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        with zipfile.ZipFile(wheel) as zf:
            for member in wheel_members(zf.namelist(), name):
                zf.extract(member, staging)
        if final.exists():  # a directory without MANIFEST.json (not installed): a broken copy
            shutil.rmtree(final)
        os.replace(staging.joinpath(*collection_path(Path(), name).parts), final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def install(
    site: Path | None = None, wheel: Path | None = None, names: Sequence[str] = COLLECTIONS
) -> list[CollectionState]:
    """Install every collection in `names` that is not yet in site; what each is now."""
    if wheel is not None and not wheel.is_file():
        raise UsageError(f"no such wheel: {wheel}")
    site = site or site_dir()
    before = states(site, names)
    missing = [s.name for s in before if s.version is None]
    if not missing:
        return before
    try:
        with tempfile.TemporaryDirectory(prefix="runbook-ansible-") as tmp:
            source = wheel or download_wheel(Path(tmp))
            try:
                for name in missing:
                    unpack(source, site, name)
            except zipfile.BadZipFile as exc:
                raise CollectionInstallError(f"{source.name} is not a wheel: {exc}") from exc
    except OSError as exc:
        raise CollectionInstallError(f"cannot install into {site}: {exc}") from exc
    after = states(site, names)
    return [
        CollectionState(s.name, s.version, s.path, installed_now=s.name in missing) for s in after
    ]
