"""runbook/dataclass_cache.py: the dataclasses' generated methods compiled once and kept, the
classes behaving exactly as without it, and the cache file trusted only as `__pycache__` is.

What a process imports and how it ends matter here, so the end-to-end cases run in fresh
interpreters; the file's checks run on a Cache object directly."""

from __future__ import annotations

import marshal
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runbook import dataclass_cache

#: dataclasses of every shape @dataclass generates code for, and what they do
CLASSES = """
import dataclasses, enum, typing
from dataclasses import InitVar, dataclass, field, KW_ONLY

@dataclass
class Plain:
    name: str
    count: int = 0
    tags: list = field(default_factory=list)

@dataclass(frozen=True, order=True)
class Frozen:
    a: int
    b: "str" = "x"

@dataclass(slots=True, kw_only=True)
class Slotted:
    x: int
    y: typing.Optional[int] = None

@dataclass
class WithPost:
    raw: InitVar[str]
    value: int = field(init=False)
    def __post_init__(self, raw):
        self.value = len(raw)

@dataclass(eq=False)
class Child(Plain):
    extra: float = 1.5
    _: KW_ONLY
    late: bool = True

out = []
p = Plain("n", 2)
out.append(repr(p)); out.append(p == Plain("n", 2)); out.append(p.tags is not Plain("m").tags)
f = Frozen(1)
out.append(repr(f)); out.append(hash(f) == hash(Frozen(1))); out.append(f < Frozen(2))
try:
    f.a = 3
except dataclasses.FrozenInstanceError as exc:
    out.append(type(exc).__name__)
out.append(repr(Slotted(x=1))); out.append(Slotted.__slots__)
out.append(WithPost("abcd").value)
c = Child("c", late=False)
out.append(repr(c)); out.append(c == Child("c", late=False))
out.append(sorted(Plain.__init__.__annotations__))
out.append(repr(Plain.__init__.__annotations__["count"]))
out.append(Plain.__init__.__qualname__)
print(out)
"""


def _python(code: str, cache: Path, *, off: bool = False) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RUNBOOK_CACHE_DIR": str(cache)}
    env.pop("RUNBOOK_NO_CACHE", None)
    if off:
        env["RUNBOOK_NO_CACHE"] = "1"
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip


INSTALLED = """
from runbook import dataclass_cache
cache = dataclass_cache.install()
"""


def test_classes_behave_the_same_with_the_cache_filled_empty_or_off(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    off = _python(INSTALLED + "assert cache is None\n" + CLASSES, cache, off=True)
    first = _python(INSTALLED + "assert cache.new == {}\n" + CLASSES, cache)
    second = _python(
        INSTALLED
        + CLASSES
        + "print(len(cache.new), len(cache.used), len(cache.stored))\n",
        cache,
    )
    for done in (off, first, second):
        assert done.returncode == 0, done.stderr
    assert first.stdout == off.stdout
    behaviour, counts = second.stdout.splitlines()
    assert behaviour == off.stdout.strip()
    new, used, stored = map(int, counts.split())
    assert new == 0 and used > 10 and stored >= used  # nothing compiled again
    assert (cache / dataclass_cache.file_name()).is_file()


def test_the_kept_code_is_what_compiling_the_text_gives(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert _python(INSTALLED + CLASSES, cache).returncode == 0
    stored = _stored(cache / dataclass_cache.file_name())
    assert len(stored) > 10
    for text, raw in stored.items():
        assert "def __create_fn__" in text
        assert marshal.loads(raw) == compile(text, "<string>", "exec", dont_inherit=True)


def test_the_command_installs_it_and_the_library_does_not(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    command = "import sys\nsys.argv = ['runbook', '--version']\nimport runbook.__main__"
    done = _python(command, cache)
    assert done.returncode == 0, done.stderr
    assert (cache / dataclass_cache.file_name()).is_file()
    library = _python(
        "import dataclasses, runbook.session, runbook.executor\n"
        "assert 'exec' not in vars(dataclasses)\nprint('ok')",
        tmp_path / "other",
    )
    assert library.stdout.strip() == "ok", library.stderr
    assert not (tmp_path / "other").exists()


def _stored(path: Path) -> dict[str, bytes]:
    """The entries a run reading `path` would use."""
    cache = dataclass_cache.Cache.open(path.parent, path.name)
    assert cache is not None
    return cache.stored


def _write(path: Path, entries: dict[str, bytes]) -> None:
    """`entries` written as a run of this user writes them (sealed with its key)."""
    cache = dataclass_cache.Cache.open(path.parent, path.name)
    assert cache is not None
    cache.new = dict(entries)
    cache.stored = {}
    path.unlink(missing_ok=True)
    cache.save()


def _cache_file(tmp_path: Path) -> Path:
    cache = tmp_path / "cache"
    assert _python(INSTALLED + CLASSES, cache).returncode == 0
    return cache / dataclass_cache.file_name()


@pytest.mark.parametrize(
    "spoil",
    ["writable by others", "a link to this user's own copy", "garbage", "wrong types"],
)
def test_a_file_that_is_not_this_users_alone_or_not_whole_is_not_used(
    tmp_path: Path, spoil: str
) -> None:
    path = _cache_file(tmp_path)
    if spoil == "writable by others":
        path.chmod(0o666)
    elif spoil == "a link to this user's own copy":
        copy = tmp_path / "copy"
        copy.write_bytes(path.read_bytes())
        copy.chmod(0o600)
        path.unlink()
        path.symlink_to(copy)
    elif spoil == "garbage":
        path.write_bytes(b"\xe3\x00\x00garbage")
    else:
        _write(path, {"def __create_fn__(): pass": "not bytes", 3: b""})  # type: ignore[dict-item]
    assert _stored(path) == {}
    # and the classes still come out right, compiled as without a cache
    done = _python(INSTALLED + CLASSES + "print(len(cache.new))", tmp_path / "cache")
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.splitlines()[-1]) > 10


def test_a_damaged_entry_is_compiled_again(tmp_path: Path) -> None:
    path = _cache_file(tmp_path)
    entries = {text: b"\x00damaged" for text in _stored(path)}
    _write(path, entries)
    cache = dataclass_cache.Cache.open(path.parent, path.name)
    assert cache is not None and cache.stored == entries
    namespace: dict[str, object] = {}
    text = next(iter(entries))
    cache.exec(text, {"__builtins__": __builtins__}, namespace)
    assert "__create_fn__" in namespace and text in cache.new


def test_saving_merges_with_what_another_run_wrote_and_stays_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "dc.marshal"
    mine = dataclass_cache.Cache.open(tmp_path, path.name)
    assert mine is not None
    source = "def __create_fn__():\n def f(self):\n  return 1\n return f"
    mine.exec(source, {}, {})
    other = {f"def __create_fn__():\n def f{i}(self): pass\n return f{i}": b"x" for i in range(5)}
    _write(path, other)
    mine.save()
    assert set(_stored(path)) == {*other, source}
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)
    monkeypatch.setattr(dataclass_cache, "MAX_ENTRIES", 3)
    mine.save()
    assert set(_stored(path)) == {source}  # only what this run used
    # no temporary left; the key the files are sealed with beside them, this user's alone
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dc.marshal", "key"]
    assert oct((tmp_path / "key").stat().st_mode & 0o777) == oct(0o600)


def test_a_directory_others_may_write_is_not_used_and_no_cache_turns_it_off(
    tmp_path: Path,
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    done = _python(INSTALLED + "print(cache)", shared)
    assert done.stdout.strip() == "None", done.stderr
    assert list(shared.iterdir()) == []
    twice = _python(INSTALLED + "print(dataclass_cache.install())", tmp_path / "mine")
    assert twice.stdout.strip() == "None"  # installed once per process
