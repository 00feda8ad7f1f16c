"""The template cache (runbook/template_cache.py): compiled templates kept between runs must
behave exactly as freshly compiled ones (quoting, sandbox, errors), a damaged or foreign file
must be a miss, never a failure, and a directory others could write is never used.

Each "new process" here is simulated by clearing templating's in-process caches, so the next
render has to come from the files (or from a fresh compile)."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from runbook import template_cache, templating
from runbook.errors import TemplateError


def forget_compiled() -> None:
    """Nothing compiled or checked in memory, as in a new walk; the cache this process opened
    stays as it is."""
    for cached in (
        templating._command_template,
        templating._text_template,
        templating._expression,
        templating.check_template,
        templating.check_expression,
    ):
        cached.cache_clear()
    templating._PARSED.clear()


def _forget() -> None:
    """What a new process starts with: no compiled template, no checked text in memory."""
    forget_compiled()
    template_cache.reset()


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("RUNBOOK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("RUNBOOK_NO_CACHE", raising=False)
    _forget()
    yield tmp_path / "cache" / "templates"
    _forget()


def _files(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir()} if directory.exists() else set()


HOSTILE = "$(touch /tmp/pwned); rm -rf /"


def test_a_cached_command_template_still_quotes_every_value(cache_dir: Path) -> None:
    source = "cat {{ path }} | grep -c {{ word }}"
    values = {"path": HOSTILE, "word": "it's"}
    first = templating.render_command(source, values)
    stored = _files(cache_dir)
    assert stored, "the compiled command was not stored"
    _forget()
    calls: list[object] = []
    original = templating._COMMAND_ENV.compile
    templating._COMMAND_ENV.compile = lambda *a, **k: calls.append(a) or original(*a, **k)  # type: ignore[method-assign]
    try:
        again = templating.render_command(source, values)
    finally:
        del templating._COMMAND_ENV.compile
    assert calls == [], "the second run compiled the template again instead of loading it"
    assert again == first == "cat '$(touch /tmp/pwned); rm -rf /' | grep -c 'it'\"'\"'s'"


def test_a_cached_expression_is_still_sandboxed_and_evaluates_the_same(cache_dir: Path) -> None:
    facts = {"facts": {"cgroup": {"oom_kills": 2}}}
    assert templating.evaluate("facts.cgroup.oom_kills > 1", facts) is True
    assert templating.evaluate("facts.missing.deeper > 1", facts) is False
    escape = "().__class__.__base__.__subclasses__()"
    with pytest.raises(TemplateError, match="refused by the sandbox"):
        templating.evaluate(escape, {})
    _forget()
    assert template_cache.get() is not None
    assert template_cache.get().has("expr", "facts.cgroup.oom_kills > 1")  # type: ignore[union-attr]
    assert templating.evaluate("facts.cgroup.oom_kills > 1", facts) is True
    assert templating.evaluate("facts.cgroup.oom_kills > 1", {"facts": {}}) is False
    with pytest.raises(TemplateError, match="refused by the sandbox"):
        templating.evaluate(escape, {})


def test_a_template_that_fails_its_check_is_never_stored(cache_dir: Path) -> None:
    bad = ["{{ x | no_such_filter }}", "{{ self }}", "{% if %}"]
    for source in bad:
        assert templating.check_template(source) is not None
    assert templating.check_expression("1 +") is not None
    for source in bad:
        with pytest.raises(TemplateError):
            templating.render_text(source, {"x": 1})
    assert _files(cache_dir) == set()
    _forget()  # and the next run still finds them wrong
    for source in bad:
        assert templating.check_template(source) is not None
    assert templating.check_expression("1 +") is not None


def test_an_expression_error_reads_the_same_with_and_without_the_cache(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def message(source: str) -> str:
        with pytest.raises(TemplateError) as caught:
            templating.evaluate(source, {})
        return str(caught.value)

    cases = ["1 +", "a b", "x | no_such_filter", "self"]
    with_cache = [message(c) for c in cases]
    monkeypatch.setenv("RUNBOOK_NO_CACHE", "1")
    _forget()
    assert template_cache.get() is None
    assert [message(c) for c in cases] == with_cache


def test_a_checked_template_is_not_parsed_again_by_the_next_run(cache_dir: Path) -> None:
    source = "{{ facts.dmesg.xids | length }} Xid lines"
    assert templating.check_template(source) is None
    assert templating.check_expression("facts.a and not facts.b") is None
    _forget()

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("parsed again")

    original = templating._TEXT_ENV.parse
    templating._TEXT_ENV.parse = refuse  # type: ignore[method-assign,assignment]
    try:
        assert templating.check_template(source) is None
        assert templating.check_expression("facts.a and not facts.b") is None
        with pytest.raises(AssertionError, match="parsed again"):
            templating.check_template("{{ something never checked }}")
    finally:
        templating._TEXT_ENV.parse = original  # type: ignore[method-assign]


def test_damaged_files_are_a_miss_and_are_written_again(cache_dir: Path) -> None:
    source = "{{ n }} ranks on {{ node }}"
    assert templating.render_text(source, {"n": 8, "node": "gpu-7"}) == "8 ranks on gpu-7"
    for path in cache_dir.iterdir():
        path.write_bytes(b"not a cache file")
    _forget()
    assert templating.render_text(source, {"n": 4, "node": "gpu-8"}) == "4 ranks on gpu-8"
    assert any(p.read_bytes() != b"not a cache file" for p in cache_dir.iterdir())
    for path in cache_dir.iterdir():
        path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])  # cut short
    _forget()
    assert templating.render_text(source, {"n": 2, "node": "gpu-9"}) == "2 ranks on gpu-9"


def test_code_of_another_version_is_not_used(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    templating.render_text("{{ a }}-{{ b }}", {"a": 1, "b": 2})
    cache = template_cache.get()
    assert cache is not None
    assert cache.load(templating._TEXT_ENV, "text", "{{ a }}-{{ b }}") is not None
    monkeypatch.setattr(template_cache, "_TAG", "runbook 0.0.0 format 0 jinja2 0")
    assert cache.load(templating._TEXT_ENV, "text", "{{ a }}-{{ b }}") is None
    assert not cache.checked("text", "{{ a }}-{{ b }}")


@pytest.mark.parametrize("spoil", ["world-writable", "group-writable", "not a directory"])
def test_a_directory_others_could_write_is_never_used(cache_dir: Path, spoil: str) -> None:
    if spoil == "not a directory":
        cache_dir.parent.mkdir(parents=True)
        cache_dir.write_text("a file")
    else:
        cache_dir.mkdir(parents=True)
        cache_dir.chmod(0o777 if spoil == "world-writable" else 0o770)
    assert template_cache.get() is None
    assert templating.render_text("{{ 6 * 7 }}", {}) == "42"  # still works, uncached
    if cache_dir.is_dir():
        assert _files(cache_dir) == set()


def test_a_directory_of_another_user_is_never_used(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another user's directory, without needing root to give one away: this process is made
    to be someone else (its effective uid, as the cache reads it)."""
    cache_dir.mkdir(parents=True, mode=0o700)
    owner = cache_dir.stat().st_uid
    assert template_cache.get() is not None  # ours: used
    template_cache.reset()
    from runbook import cache_dir as cache_dir_mod

    monkeypatch.setattr(cache_dir_mod.os, "geteuid", lambda: owner + 1)
    assert template_cache.get() is None


def test_a_symlinked_cache_directory_is_never_used(cache_dir: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    cache_dir.parent.mkdir(parents=True)
    cache_dir.symlink_to(elsewhere)
    assert template_cache.get() is None


def test_the_cache_is_made_owner_only_and_can_be_turned_off(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert template_cache.get() is not None
    assert stat.S_IMODE(cache_dir.stat().st_mode) == 0o700
    monkeypatch.setenv("RUNBOOK_NO_CACHE", "1")
    template_cache.reset()
    assert template_cache.get() is None
    templating.render_text("{{ 'off' }}", {})
    assert _files(cache_dir) == set()


def test_no_home_directory_means_no_cache_not_a_failure(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RUNBOOK_CACHE_DIR")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    template_cache.reset()
    assert template_cache.get() is None
    assert templating.render_text("{{ 1 + 1 }}", {}) == "2"
