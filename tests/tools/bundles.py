"""The recorded evidence bundles under tests/bundles, composed into real directories.

Most synthetic bundles are one 8-GPU node with one fault, so they share most of their files
(nvidia-smi output, the InfiniBand tools' absence, meminfo, lspci, cgroup v2 files...). Those
files are stored once:

    tests/bundles/_base/                 the shared files (never a bundle by itself)
    tests/bundles/NAME/overlay.yaml      base: _base (or another bundle), without: [files]
    tests/bundles/NAME/...               only what this bundle has of its own
    tests/bundles/_composed.sha256       each composed bundle's evidence digest (files, bytes,
                                         modes; not expected.yaml or README.md)

A bundle with an ``overlay.yaml`` is the files of its base (itself composed, so a bundle can
build on another: pcie-corrected-aer-only is healthy plus corrected AER lines), less those
named under ``without:``, with its own files laid over them; ``overlay.yaml`` itself is not part
of the bundle. A bundle without one (every real-* bundle: machine output verbatim, shared with
nothing) is its directory as it is. Directories whose name starts with ``_`` are not bundles.

Nothing reads tests/bundles/NAME directly: a test takes :func:`path` (a composed copy made once
per process, not to be modified) or :func:`materialize` (a private copy in a directory of its
own, to modify). tests/unit/test_bundle_overlays.py holds every composed bundle's evidence to
the digest recorded in ``_composed.sha256``, so a change to a shared file cannot silently change
the bundles built on it, nor an edit a real-* bundle's verbatim output. After a deliberate
change to evidence, rewrite the digests and review the diff:

    python -m tests.tools.bundles digests > tests/bundles/_composed.sha256
    python -m tests.tools.bundles materialize NAME DEST      # a bundle to run `runbook` on
"""

from __future__ import annotations

import atexit
import hashlib
import shutil
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import yaml

SOURCE = Path(__file__).resolve().parents[1] / "bundles"
MANIFEST = "overlay.yaml"
DIGESTS = SOURCE / "_composed.sha256"
#: a bundle's files that are the test's, not evidence: left out of the recorded digests
NOT_EVIDENCE = frozenset({"expected.yaml", "README.md"})


@dataclass(frozen=True)
class Overlay:
    """What an ``overlay.yaml`` says: the bundle (or ``_base``) it builds on, and the files of
    that base this bundle does not have."""

    base: str
    without: tuple[str, ...] = ()


def names() -> list[str]:
    """Every bundle's name (``_``-prefixed directories are parts, not bundles)."""
    return sorted(p.name for p in SOURCE.iterdir() if p.is_dir() and not p.name.startswith("_"))


def overlay(name: str) -> Overlay | None:
    """The overlay manifest of bundle (or part) ``name``; None when it is a plain directory."""
    path = SOURCE / name / MANIFEST
    if not path.is_file():
        return None
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("base"), str):
        raise ValueError(f"{path}: must be a mapping with base: NAME")
    unknown = set(data) - {"base", "without"}
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)}")
    without = data.get("without") or []
    if not isinstance(without, list) or not all(isinstance(w, str) for w in without):
        raise ValueError(f"{path}: without: must be a list of file names")
    return Overlay(data["base"], tuple(without))


def sources(name: str) -> dict[str, Path]:
    """The composed bundle ``name``: each file's path inside the bundle (``cgroup/memory.max``)
    and the stored file it is read from, in path order."""
    return dict(sorted(_sources(name, ()).items()))


def _sources(name: str, seen: tuple[str, ...]) -> dict[str, Path]:
    if name in seen:
        raise ValueError(f"overlay cycle: {' -> '.join((*seen, name))}")
    directory = SOURCE / name
    if not directory.is_dir():
        via = f" (the base of {seen[-1]})" if seen else ""
        raise ValueError(f"no bundle directory {directory}{via}")
    files: dict[str, Path] = {}
    manifest = overlay(name)
    if manifest is not None:
        files = _sources(manifest.base, (*seen, name))
        for dropped in manifest.without:
            if files.pop(dropped, None) is None:
                raise ValueError(
                    f"{directory / MANIFEST}: without: {dropped!r} is not a file of {manifest.base}"
                )
    for path in directory.rglob("*"):
        relative = path.relative_to(directory).as_posix()
        if path.is_file() and relative != MANIFEST:
            files[relative] = path
    return files


def materialize(name: str, dest: Path) -> Path:
    """Write the composed bundle ``name`` into ``dest`` (absent or an empty directory): every
    file with its bytes and mode. Returns ``dest``."""
    if dest.exists() and any(dest.iterdir()):
        raise FileExistsError(f"{dest} is not empty")
    dest.mkdir(parents=True, exist_ok=True)
    for relative, source in sources(name).items():
        target = dest / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        shutil.copymode(source, target)
    return dest


_cache: Path | None = None
_lock = threading.Lock()


def path(name: str) -> Path:
    """The composed bundle ``name``, made once per process in a temporary directory removed
    at exit. Shared by every test of the process: read it, never write into it."""
    global _cache
    with _lock:
        if _cache is None:
            _cache = Path(tempfile.mkdtemp(prefix="rbk-bundles-"))
            _cache.chmod(0o755)  # readable as the checkout is, by any process of the test
            atexit.register(shutil.rmtree, _cache, ignore_errors=True)
            (_cache / "bundles").mkdir()
        composed = _cache / "bundles" / name
        if not composed.is_dir():
            staging = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=_cache))
            materialize(name, staging / name)
            (staging / name).rename(composed)
            staging.rmdir()
        return composed


def root() -> Path:
    """A directory holding every composed bundle (see :func:`path`), for code that walks the
    whole corpus or names bundles as ``root() / NAME``: nothing but bundles in it."""
    for name in names():
        path(name)
    assert _cache is not None
    return _cache / "bundles"


def tree_digest(directory: Path, skip: frozenset[str] = frozenset()) -> str:
    """One digest of a directory tree: every file's path, mode and bytes (directories count
    through the files in them), less the paths in ``skip``."""
    digest = hashlib.sha256()
    for file in sorted(p for p in directory.rglob("*") if p.is_file()):
        relative = file.relative_to(directory).as_posix()
        if relative in skip:
            continue
        mode = file.stat().st_mode & 0o7777
        content = hashlib.sha256(file.read_bytes()).hexdigest()
        digest.update(f"{relative}\0{mode:o}\0{content}\n".encode())
    return digest.hexdigest()


def evidence_digest(directory: Path) -> str:
    """The digest ``_composed.sha256`` records for a bundle: its tree less NOT_EVIDENCE."""
    return tree_digest(directory, NOT_EVIDENCE)


def recorded_digests() -> dict[str, str]:
    """``_composed.sha256``: bundle name → the evidence digest its composed directory must
    have."""
    lines = DIGESTS.read_text(encoding="utf-8").splitlines()
    pairs = (line.split(maxsplit=1) for line in lines if line and not line.startswith("#"))
    return {name: digest for digest, name in pairs}


def _main(argv: list[str]) -> int:
    if argv[:1] == ["digests"] and len(argv) == 1:
        print("# each composed bundle's evidence digest (tests/tools/bundles.py evidence_digest),")
        print("# checked by tests/unit/test_bundle_overlays.py. Rewrite after a deliberate change:")
        print("#   python -m tests.tools.bundles digests > tests/bundles/_composed.sha256")
        with tempfile.TemporaryDirectory() as tmp:
            for name in names():
                print(f"{evidence_digest(materialize(name, Path(tmp) / name))}  {name}")
        return 0
    if argv[:1] == ["materialize"] and len(argv) == 3:
        print(materialize(argv[1], Path(argv[2])))
        return 0
    print("usage: python -m tests.tools.bundles digests | materialize NAME DEST", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
