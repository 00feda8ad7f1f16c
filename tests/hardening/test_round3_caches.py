"""The caches of compiled code (runbook/template_cache.py, runbook/dataclass_cache.py,
runbook/cache_dir.py) cannot be swapped or forged: root never runs code another user wrote
there, and never creates files where another user pointed it.

The attacker is a real other account (`nobody`, tests/hardening/other_user.py). Their forged
files hold code that writes `id -u` to a marker file when it is unpickled (Jinja's bytecode
format: a pickled checksum) or run (marshalled code): a marker that appears is root running
their code. Each test fails on a cache that opens its files by path or trusts a file it did
not seal."""

from __future__ import annotations

import json
import marshal
import os
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from runbook import dataclass_cache, template_cache, templating
from tests.hardening.other_user import OtherUser, another_user
from tests.unit.test_template_cache import forget_compiled

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "tests" / "bundles" / "gpu-memory-oom"


def _bomb(marker: Path) -> bytes:
    """A file that runs `id -u > MARKER` when read the way a cache file is read: Jinja's
    bytecode header followed by a pickle (run by unpickling), or marshalled code (run when a
    template's module code is executed) — whichever the reader tries."""
    from jinja2.bccache import bc_magic

    class Bomb:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, (f"id -u > {marker}",))

    evil = compile(f"import os\nos.system('id -u > {marker}')\n", "<forged>", "exec")
    return bc_magic + pickle.dumps(Bomb(), 2) + marshal.dumps(evil)


def _forged_code(marker: Path) -> bytes:
    """Marshalled code alone (what a cache of marshalled code would run)."""
    return marshal.dumps(compile(f"import os\nos.system('id -u > {marker}')\n", "<f>", "exec"))


@pytest.fixture
def other_user() -> Iterator[OtherUser]:
    """Another real account: the attacker (tests/hardening/other_user.py)."""
    yield from another_user()


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This process's cache in a fresh directory of root's (0700)."""
    monkeypatch.setenv("RUNBOOK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("RUNBOOK_NO_CACHE", raising=False)
    forget_compiled()
    template_cache.reset()
    yield tmp_path / "cache"
    forget_compiled()
    template_cache.reset()


def _env(**settings: str) -> dict[str, str]:
    unset = ("RUNBOOK_CACHE_DIR", "RUNBOOK_NO_CACHE")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    return {**env, **settings}


def _analyze(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runbook", "analyze", str(BUNDLE)],
        env=env, capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip


def _template_names(tmp_path: Path) -> list[str]:
    """The cache files a run of `analyze` uses: names anyone can work out from the shipped
    runbook's public text, learnt here from a clean run into a directory of its own."""
    warm = tmp_path / "warm"
    done = _analyze(_env(RUNBOOK_CACHE_DIR=str(warm)))
    assert done.returncode == 0, done.stderr
    names = sorted(p.name for p in (warm / "templates").iterdir())
    assert len(names) > 50
    return names


def _owned_by_root(top: Path) -> list[str]:
    return [str(p) for p in [top, *top.rglob("*")] if p.lstat().st_uid == 0]


SOURCE = "{{ n }} ranks on {{ node }}"


def test_a_templates_directory_swapped_for_a_link_after_it_was_opened_is_never_read(
    own_cache: Path, tmp_path: Path
) -> None:
    """The cache's check and its reads are one: a directory replaced by a link after the check
    (here by root itself, the one account allowed to) is not where the next read goes."""
    marker = tmp_path / "marker"
    assert templating.render_text(SOURCE, {"n": 8, "node": "gpu-7"}) == "8 ranks on gpu-7"
    assert template_cache.get() is not None  # the check passed; the directory is in use
    templates = own_cache / "templates"
    names = [p.name for p in templates.iterdir()]
    assert names
    forged = tmp_path / "forged"
    forged.mkdir(mode=0o700)
    for name in names:
        (forged / name).write_bytes(_bomb(marker))
        (forged / name).chmod(0o600)
    templates.rename(own_cache / "moved")
    templates.symlink_to(forged)
    forget_compiled()
    assert templating.render_text(SOURCE, {"n": 4, "node": "gpu-8"}) == "4 ranks on gpu-8"
    assert not marker.exists(), f"forged code ran as uid {marker.read_text().strip()}"


def test_a_cache_base_another_user_controls_is_never_used_while_they_swap_it(
    other_user: OtherUser,
    tmp_path: Path,
) -> None:
    """$XDG_CACHE_HOME in another user's directory: they exchange root's `nccl-runbook` with a
    link to their forged tree as fast as the kernel lets them (renameat2 RENAME_EXCHANGE)
    while root runs the command four times. No forged code runs, every answer is the same as
    without a cache, and root leaves nothing of its own in their directory."""
    marker = tmp_path / "marker"
    names = _template_names(tmp_path)
    baseline = _analyze(_env(RUNBOOK_NO_CACHE="1"))
    assert baseline.returncode == 0, baseline.stderr
    shared = other_user.mkdir(other_user.world / "home")
    stage = other_user.world / "stage"
    stage.mkdir(mode=0o755)
    (stage / "bomb").write_bytes(_bomb(marker))
    (stage / "dataclasses").write_bytes(_forged(marker))
    for path in stage.iterdir():
        path.chmod(0o644)
    flipper = other_user.start(
        FLIPPER, str(shared), str(stage / "bomb"), str(stage / "dataclasses"),
        dataclass_cache.file_name(), *names,
    )  # fmt: skip
    try:
        assert flipper.stdout is not None
        assert flipper.stdout.readline().strip() == "ready", flipper.stderr
        answers = [_analyze(_env(XDG_CACHE_HOME=str(shared))) for _ in range(4)]
    finally:
        flipper.terminate()
        flipper.communicate(timeout=10)
    assert not marker.exists(), f"forged code ran as uid {marker.read_text().strip()}"
    for done in answers:
        assert done.returncode == 0, done.stderr
        assert done.stdout == baseline.stdout
    assert _owned_by_root(shared) == []


#: the attacker: a forged tree `evil/templates/<every name>` and a link `.l -> evil` in their
#: directory, then root's `nccl-runbook` (once it exists) exchanged with the link, again and
#: again, until stopped
FLIPPER = r"""
import ctypes, os, shutil, sys, time
shared, bomb, forged_dataclasses, dataclasses_name = sys.argv[1:5]
os.makedirs(f"{shared}/evil/templates")
for name in sys.argv[5:]:
    shutil.copyfile(bomb, f"{shared}/evil/templates/{name}")
shutil.copyfile(forged_dataclasses, f"{shared}/evil/{dataclasses_name}")
os.symlink("evil", f"{shared}/.l")
libc = ctypes.CDLL(None, use_errno=True)
d = os.open(shared, os.O_RDONLY | os.O_DIRECTORY)
print("ready", flush=True)
end = time.time() + 120
while time.time() < end:
    if libc.renameat2(d, b"nccl-runbook", d, b".l", 2) != 0:  # RENAME_EXCHANGE
        time.sleep(0.0005)
"""


def test_a_link_another_user_placed_at_the_cache_makes_root_create_nothing_there(
    other_user: OtherUser,
    tmp_path: Path,
) -> None:
    """`nccl-runbook -> /elsewhere` pre-placed in another user's $XDG_CACHE_HOME: root follows
    no link into a directory they chose, and writes nothing there."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    shared = other_user.mkdir(other_user.world / "home")
    other_user.run(f"import os; os.symlink({str(elsewhere)!r}, {str(shared / 'nccl-runbook')!r})")
    done = _analyze(_env(XDG_CACHE_HOME=str(shared)))
    assert done.returncode == 0, done.stderr
    assert list(elsewhere.iterdir()) == []
    assert _owned_by_root(shared) == []


def test_cache_files_another_user_owns_are_never_loaded(
    other_user: OtherUser,
    tmp_path: Path,
) -> None:
    """root's own 0700 cache directory holding files of another user's (0666: left by a
    directory that was theirs, a copy, a restore): each file's owner and mode are checked on
    the opened file before it is used."""
    marker = tmp_path / "marker"
    cache = tmp_path / "cache"
    env = _env(RUNBOOK_CACHE_DIR=str(cache))
    first = _analyze(env)
    assert first.returncode == 0, first.stderr
    files = [p for p in cache.rglob("*") if p.is_file() and p.name != "key"]
    assert len(files) > 50
    for path in files:
        path.write_bytes(_bomb(marker) if path.parent.name == "templates" else _forged(marker))
        os.chown(path, other_user.uid, other_user.gid)
        path.chmod(0o666)
    again = _analyze(env)
    assert again.returncode == 0, again.stderr
    assert not marker.exists(), f"forged code ran as uid {marker.read_text().strip()}"
    assert again.stdout == first.stdout


def _forged(marker: Path) -> bytes:
    """A dataclass cache file whose every entry is the forged code (the entries' texts are
    what dataclasses generates; a forger would copy them from a run of their own)."""
    texts = subprocess.run(
        [sys.executable, "-c", DATACLASS_TEXTS], capture_output=True, text=True, check=True,
        cwd=REPO, timeout=60,
    ).stdout  # fmt: skip
    entries = {text: _forged_code(marker) for text in json.loads(texts)}
    return marshal.dumps(entries)


#: the texts dataclasses compiles for the command's classes, as a JSON list
DATACLASS_TEXTS = """
import dataclasses, json, sys
texts = []
def record(source, globals=None, locals=None, /):
    texts.append(source)
    return exec(source, globals, locals)
dataclasses.exec = record
sys.argv = ["runbook", "--version"]
try:
    import runbook.cli.app
except SystemExit:
    pass
print(json.dumps(texts))
"""


def test_a_file_this_user_did_not_seal_is_never_run(own_cache: Path, tmp_path: Path) -> None:
    """Files of this user's own that its runs did not write (another machine's cache copied
    in, a restore): without this user's seal (an HMAC under its 0600 key) no byte of them is
    unpickled or unmarshalled — neither a template's nor the dataclasses'."""
    marker = tmp_path / "marker"
    assert templating.render_text(SOURCE, {"n": 8, "node": "gpu-7"}) == "8 ranks on gpu-7"
    for path in (own_cache / "templates").iterdir():
        path.write_bytes(_bomb(marker))
        path.chmod(0o600)
    template_cache.reset()
    forget_compiled()
    assert templating.render_text(SOURCE, {"n": 4, "node": "gpu-8"}) == "4 ranks on gpu-8"
    assert not marker.exists(), f"forged code ran as uid {marker.read_text().strip()}"
    # the dataclasses' file, in the same directory, the same way
    env = _env(RUNBOOK_CACHE_DIR=str(own_cache))
    done = subprocess.run([sys.executable, "-m", "runbook", "--version"], env=env,
                          capture_output=True, text=True, timeout=60, cwd=REPO)  # fmt: skip
    assert done.returncode == 0, done.stderr
    (dataclasses_file,) = [p for p in own_cache.iterdir() if p.name.startswith("dataclasses")]
    dataclasses_file.write_bytes(_forged(marker))
    dataclasses_file.chmod(0o600)
    again = subprocess.run([sys.executable, "-m", "runbook", "--version"], env=env,
                           capture_output=True, text=True, timeout=60, cwd=REPO)  # fmt: skip
    assert again.returncode == 0 and again.stdout == done.stdout, again.stderr
    assert not marker.exists(), f"forged code ran as uid {marker.read_text().strip()}"


def test_a_key_others_could_read_means_no_cache(own_cache: Path) -> None:
    """The seal is only as good as its key: a key file others may read (or that is a link,
    or not this user's) turns the cache off rather than trusting it."""
    assert template_cache.get() is not None
    key = own_cache / "key"
    assert oct(key.stat().st_mode & 0o777) == oct(0o600)
    key.chmod(0o644)
    template_cache.reset()
    assert template_cache.get() is None
    key.chmod(0o600)
    template_cache.reset()
    assert template_cache.get() is not None
    real = own_cache / "real-key"
    key.rename(real)
    key.symlink_to(real)
    template_cache.reset()
    assert template_cache.get() is None
