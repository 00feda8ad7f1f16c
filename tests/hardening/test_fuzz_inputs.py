"""Bad runbooks and bad bundles are refused: a list of issues or one line, never a traceback,
never anything run, nothing written outside the target.

Runbooks: hypothesis-generated documents (the runbook's structure with hostile values; random
structures; random text) through the loader and `runbook validate`, and YAML bombs (billion
laughs through aliases and merge keys, nesting a thousand deep, a 50 MB scalar) through the
CLI under a memory and time bound. Every generated command would touch a marker file if it ran.

Bundles: `.tar.gz` archives with `..` and absolute names, symlinks and hard links pointing out
of the bundle (and a link followed by a member written through it), character and block
devices, a FIFO, a decompression bomb, more members than allowed. Each is refused by
`Bundle.open` and by `runbook analyze` with one line, and the files around the target (the
temp directory the archive is unpacked in, the places the links point at) are the same after as
before. (tests/unit/test_bundle.py already covers `..`, an absolute name, one symlink and a bomb
under a lowered limit; this adds the rest and the before/after check.)
"""

from __future__ import annotations

import gzip
import io
import os
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import runbook.bundle as bundle_mod
from runbook.errors import BundleError, SpecError
from runbook.spec import load_text, loader
from runbook.spec.models import ROOT_CAUSES
from tests.hardening.runs import run_now
from tests.integration.conftest import cli_env

REPO = Path(__file__).resolve().parents[2]
FUZZ = settings(
    max_examples=int(os.environ.get("RUNBOOK_HYPOTHESIS_EXAMPLES", "200")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
#: every command template below runs this if anything executes it
MARKER = Path(tempfile.gettempdir()) / f"rbk-fuzz-executed-{os.getpid()}"


@pytest.fixture(autouse=True)
def _nothing_ran() -> Iterator[None]:
    MARKER.unlink(missing_ok=True)
    yield
    assert not MARKER.exists(), "a fuzzed runbook's command was executed"


def validate_cli(
    path: Path, tmp_path: Path, *, timeout: float = 60
) -> tuple[int, str, float, float]:
    """`runbook validate PATH` in a child limited to 1 GiB of address space: (rc, stderr,
    seconds, its peak RSS in MiB)."""
    done = run_now(
        ["validate", str(path)],
        cli_env(tmp_path),
        tmp_path / f"cli-{path.name}",
        prefix=["prlimit", f"--as={1 << 30}", "--"],
        timeout=timeout,
    )
    return done.rc, done.stderr, done.wall_s, done.max_rss_mib


def assert_issues_or_one_line(rc: int, stderr: str) -> None:
    """`validate`'s answer: exit 0 or 2; each stderr line an issue (`FILE:LINE: …`) or the one
    `runbook: …` error; never a traceback or an internal error."""
    assert rc in (0, 2), (rc, stderr[-2000:])
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr[-2000:]
    lines = stderr.strip().splitlines()
    if lines and lines[0].startswith("runbook: "):
        assert len(lines) == 1, stderr[-2000:]
    else:
        assert all(":" in line for line in lines), stderr[-2000:]


def read_never_raises(text: str) -> loader.Reading:
    reading = loader.read(text, "fuzz.yaml")
    assert all(isinstance(issue.message, str) for issue in reading.issues)
    try:
        load_text(text, "fuzz.yaml")
    except SpecError as exc:
        assert reading.errors or reading.runbook is None
        assert "\n" not in str(exc), str(exc)
    return reading


# -- runbook documents ---------------------------------------------------------------------------

HOSTILE_VALUES = st.one_of(
    st.text(max_size=40),
    st.sampled_from([
        f"$(touch {MARKER})", f"`touch {MARKER}`", f"; touch {MARKER}", f"&& touch {MARKER}",
        f"{{{{ x }}}}; touch {MARKER}", "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ cycler.__init__.__globals__.os.system('id') }}", "{% for x in range(10**9) %}",
        "{{ 'a' * 10**10 }}", "{{", "}}", "{%", "../../etc/passwd", "/abs/path", "end",
        "host-memory-oom", "dmesg", "*", "\x00", "a\nb", "!!python/object:os.system", "y", "~",
    ]),
    st.integers(),
    st.floats(),
    st.booleans(),
    st.none(),
)  # fmt: skip
IDS = st.one_of(st.from_regex(r"[a-z0-9][a-z0-9-]{0,10}", fullmatch=True), HOSTILE_VALUES)
COMMANDS = st.one_of(
    st.just(f"touch {MARKER}"),
    st.sampled_from([f"touch {MARKER} {{{{ v }}}}", f"echo '{{{{ v }}}}'; touch {MARKER}"]),
    HOSTILE_VALUES,
)
RULES = st.fixed_dictionaries(
    {},
    optional={
        "when": HOSTILE_VALUES,
        "finding": HOSTILE_VALUES,
        "cause": st.one_of(st.sampled_from(sorted(ROOT_CAUSES)), HOSTILE_VALUES),
        "evidence": HOSTILE_VALUES,
        "rule_out": st.one_of(
            st.fixed_dictionaries({"cause": HOSTILE_VALUES, "because": HOSTILE_VALUES}),
            HOSTILE_VALUES,
        ),
        "propose": st.one_of(IDS, st.lists(IDS, max_size=2)),
        "next": IDS,
        "conclude": HOSTILE_VALUES,
        "remedy": HOSTILE_VALUES,
    },
)
STAGES = st.fixed_dictionaries(
    {"id": IDS},
    optional={
        "title": HOSTILE_VALUES,
        "when": HOSTILE_VALUES,
        "collect": st.dictionaries(st.one_of(st.text(max_size=20), HOSTILE_VALUES), COMMANDS,
                                   max_size=3),
        "parse": st.one_of(st.sampled_from(["dmesg", "text", "nope"]), HOSTILE_VALUES,
                           st.lists(HOSTILE_VALUES, max_size=2)),
        "timeout": HOSTILE_VALUES,
        "derive": st.dictionaries(st.text(max_size=10), HOSTILE_VALUES, max_size=2),
        "decide": st.one_of(st.lists(RULES, max_size=3), HOSTILE_VALUES),
        "playbook": HOSTILE_VALUES,
    },
)  # fmt: skip
RUNBOOKS = st.fixed_dictionaries(
    {"id": IDS, "stages": st.one_of(st.lists(STAGES, max_size=4), HOSTILE_VALUES)},
    optional={
        "title": HOSTILE_VALUES,
        "vars": st.dictionaries(st.text(max_size=10),
                                st.one_of(HOSTILE_VALUES, st.lists(HOSTILE_VALUES, max_size=3)),
                                max_size=3),
        "surfaced_as": HOSTILE_VALUES,
        "remedies": st.lists(
            st.fixed_dictionaries({"id": IDS, "kind": HOSTILE_VALUES},
                                  optional={"params": st.dictionaries(st.text(max_size=8),
                                                                      HOSTILE_VALUES, max_size=2),
                                            "playbook": HOSTILE_VALUES,
                                            "summary": HOSTILE_VALUES}),
            max_size=2,
        ),
        "decde": HOSTILE_VALUES,
    },
)  # fmt: skip
ANY_YAML = st.recursive(
    HOSTILE_VALUES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=20,
)  # fmt: skip


@FUZZ
@given(document=RUNBOOKS)
def test_a_runbook_shaped_document_with_hostile_values_gives_issues_not_a_crash(
    document: dict[str, Any],
) -> None:
    read_never_raises(yaml.safe_dump(document, allow_unicode=True))


@FUZZ
@given(document=ANY_YAML)
def test_any_yaml_structure_gives_issues_not_a_crash(document: Any) -> None:
    reading = read_never_raises(yaml.safe_dump(document, allow_unicode=True))
    if not isinstance(document, dict):
        assert reading.errors


@FUZZ
@given(text=st.one_of(
    st.text(max_size=400),
    st.lists(st.sampled_from(["id: x\n", "stages:\n", "  - id: s\n", "    collect:\n",
                              "      a.txt: echo\n", "&a ", "*a ", "<<: *a\n", "!!map ", "[",
                              "{", "? ", "- ", "\t", "'", '"', "%YAML 1.1\n", "---\n", "...\n",
                              "!!python/name:os.system ", "!!binary ", "\x00", "\ufeff"]),
             max_size=30).map("".join),
))  # fmt: skip
def test_any_text_gives_issues_not_a_crash(text: str) -> None:
    read_never_raises(text)


MISFIT_TAGS = ["!!map 0", "!!seq 0", "id: !!map x", "a: !!seq {b: 1}", "id: !!str [1]",
               "a: !!timestamp x", "a: !!int x", "a: !!float x", "a: !!bool x", "!!set 0",
               "a: !!binary xyz", "a: " + "1" * 5000, "a: !!int " + "9" * 5000]  # fmt: skip


@pytest.mark.parametrize("text", MISFIT_TAGS)
def test_a_value_its_tag_does_not_fit_is_an_issue_not_a_crash(text: str) -> None:
    """PyYAML's safe constructors raise ValueError, KeyError or AttributeError on these (found
    by the property above: `!!map 0`); the loader reports them as invalid YAML."""
    reading = read_never_raises("id: x\n" + text if text.startswith("a:") else text)
    assert [i.message for i in reading.issues if "invalid YAML" in i.message], reading.issues
    with pytest.raises(BundleError, match=r"not YAML"):
        bundle_mod.parse_meta("format: 1\nnode: n\n" + text if text.startswith("a:") else text)


def _laughs(levels: int = 9) -> str:
    """The billion laughs: ten references at each of `levels` levels (10**levels strings)."""
    text = 'l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
    for level in range(1, levels + 1):
        text += f"l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * 10) + "]\n"
    return text


def _merge_bomb(levels: int = 9) -> str:
    text = "m0: &m0 {k0: 1, k1: 2}\n"
    for level in range(1, levels + 1):
        refs = ", ".join([f"*m{level - 1}"] * 10)
        text += f"m{level}: &m{level} {{<<: [{refs}], z{level}: {level}}}\n"
    return text


def _indent(text: str, by: str = "  ") -> str:
    return "".join(by + line + "\n" for line in text.splitlines())


STAGE = f"stages:\n  - id: s\n    collect:\n      a.txt: touch {MARKER}\n"
#: where an alias may point: every kind of value the loader reads
LAUGH_SITES = {
    "top-level key": "id: x\n{laughs}" + STAGE,
    "stages": "id: x\n{laughs}stages: *l9\n",
    "vars": "id: x\nvars:\n{laughs_in}  v: *l9\n" + STAGE,
    "title": "id: x\n{laughs}title: *l9\n" + STAGE,
    "collect": "id: x\n{laughs}stages:\n  - id: s\n    collect: *l9\n",
    "collect command": "id: x\n{laughs}stages:\n  - id: s\n    collect:\n      a.txt: *l9\n",
    "decide": "id: x\n{laughs}stages:\n  - id: s\n    decide: *l9\n",
    "when": "id: x\n{laughs}stages:\n  - id: s\n    decide:\n      - {{when: *l9, next: end}}\n",
    "parse": "id: x\n{laughs}stages:\n  - id: s\n    parse: *l9\n",
    "remedy params": "id: x\n{laughs}" + STAGE + "remedies:\n  - id: r\n    kind: node-drain\n"
                     "    params: {{p: *l9}}\n",
}  # fmt: skip


def _bombs() -> dict[str, str]:
    out = {
        f"billion laughs at {where}": site.format(laughs=_laughs(), laughs_in=_indent(_laughs()))
        for where, site in LAUGH_SITES.items()
    }
    out["merge-key bomb"] = "id: x\n" + STAGE + "x:\n" + _indent(_merge_bomb())
    out["merge-key bomb as vars"] = (
        "id: x\n" + _merge_bomb() + "vars: {<<: [" + ", ".join(["*m9"] * 10) + "]}\n" + STAGE
    )
    out["nesting 990 deep (flow)"] = "id: x\n" + STAGE + "vars: " + "[" * 990 + "]" * 990 + "\n"
    out["nesting 5000 deep (flow)"] = "id: x\n" + STAGE + "x: " + "{a: " * 5000 + "}" * 5000
    out["nesting 2000 deep (block)"] = "id: x\n" + STAGE + "x:\n" + "".join(
        " " * (i + 1) + "- \n" for i in range(2000)
    )
    # over the size bound (refused unread) and under it (read)
    out["a 50 MB scalar"] = "id: x\ndescription: '" + "x" * 50_000_000 + "'\n" + STAGE
    out["a million keys"] = "id: x\n" + STAGE + "vars:\n" + "".join(
        f"  v{i}: {i}\n" for i in range(1_000_000)
    )
    out["a 3 MB command"] = (
        "id: x\nstages:\n  - id: s\n    collect:\n      a.txt: '{{ v }}" + "x" * 3_000_000 + "'\n"
    )
    out["100k keys"] = "id: x\n" + STAGE + "vars:\n" + "".join(
        f"  v{i}: {i}\n" for i in range(100_000)
    )
    return out


BOMBS = _bombs()


@pytest.mark.parametrize("name", list(BOMBS))
def test_a_yaml_bomb_is_refused_by_validate_in_bounded_time_and_memory(
    name: str, tmp_path: Path
) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMBS[name])
    rc, err, took, rss = validate_cli(path, tmp_path)
    assert_issues_or_one_line(rc, err)
    assert took < 30, f"{name}: {took:.1f}s"
    assert rss < 900, f"{name}: {rss:.0f} MiB"  # 1 GiB of address space was the ceiling anyway


@pytest.mark.parametrize(
    "content",
    [b"", b"\xff\xfe\x00garbage", "id: x\n".encode("utf-16"), b"id: \x00\n", b"\x1b[2J\x07",
     b"- [a\n", b"id: x\nstages: {{ }}\n"],
)  # fmt: skip
def test_unreadable_or_garbage_files_are_one_line_or_issues(content: bytes, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    rc, err, _, _ = validate_cli(path, tmp_path)
    assert rc == 2
    assert_issues_or_one_line(rc, err)


def test_control_characters_from_the_file_never_reach_the_terminal(tmp_path: Path) -> None:
    """A value quoted in an issue keeps its issue on one line and sends no escape sequence to
    the terminal (found by the generated documents: a vertical tab split an issue)."""
    path = tmp_path / "escapes.yaml"
    path.write_text(yaml.safe_dump({
        "id": "x\x1b[2J", "vars": {"\x1b]0;pwned\x07": 1, "a\x0bb": 2, "c\u2028d": 3},
        "stages": [{"id": "s\r\nx", "parse": "dm\x1b[31mesg"}],
    }))  # fmt: skip
    rc, err, _, _ = validate_cli(path, tmp_path)
    assert rc == 2
    assert_issues_or_one_line(rc, err)
    assert "\x1b" not in err and "\x07" not in err and "\x0b" not in err and "\r" not in err
    assert "\\x1b" in err  # shown, escaped


def test_a_directory_is_one_line(tmp_path: Path) -> None:
    rc, err, _, _ = validate_cli(tmp_path, tmp_path)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and err.startswith("runbook: ")


def test_generated_documents_through_the_cli_never_run_anything(tmp_path: Path) -> None:
    """A sample of the generated documents through `runbook validate` (a process each), and a
    valid runbook whose every command would touch the marker: validating runs nothing."""
    docs = [
        f"id: ok\nstages:\n  - id: s\n    collect:\n      a.txt: touch {MARKER}\n    parse: text\n",
        f"id: x\nvars: {{v: '$(touch {MARKER})'}}\nstages:\n  - id: s\n    collect:\n"
        f"      a.txt: echo {{{{ v }}}}\n    decide:\n      - when: \"{{{{ v }}}}\"\n",
    ]

    @settings(FUZZ, max_examples=4)
    @given(document=RUNBOOKS)
    def more(document: dict[str, Any]) -> None:
        docs.append(yaml.safe_dump(document, allow_unicode=True))

    more()
    for index, text in enumerate(docs):
        path = tmp_path / f"doc-{index}.yaml"
        path.write_text(text)
        rc, err, _, _ = validate_cli(path, tmp_path)
        assert_issues_or_one_line(rc, err)
    assert not MARKER.exists()


# -- bundles -------------------------------------------------------------------------------------

BUNDLE_YAML = b"format: 1\nnode: n1\ncollected_at: '2026-03-04T10:40:00+00:00'\n"


def _member(name: str, kind: bytes = tarfile.REGTYPE, *, data: bytes = b"", link: str = ""
            ) -> tuple[tarfile.TarInfo, bytes | None]:  # fmt: skip
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    if kind in (tarfile.CHRTYPE, tarfile.BLKTYPE):
        info.devmajor, info.devminor = 1, 3  # /dev/null's numbers
    return info, data if kind == tarfile.REGTYPE else None


def _archive(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _lying_bomb(path: Path) -> Path:
    """A member whose header says 5 GiB (over the 4 GiB bound) in an archive of a few KiB:
    refused from the header, before a byte is unpacked."""
    meta = tarfile.TarInfo("b/bundle.yaml")
    meta.size = len(BUNDLE_YAML)
    big = tarfile.TarInfo("b/dmesg.txt")
    big.size = 5 * 1024**3
    body = meta.tobuf() + BUNDLE_YAML + b"\0" * (-len(BUNDLE_YAML) % 512)
    path.write_bytes(gzip.compress(body + big.tobuf() + b"x" * 4096))
    return path


def _evil_archives(root: Path, outside: Path, victim: Path) -> dict[str, Path]:
    """Each archive lives in `root`; `outside` is a directory it must not write into, `victim`
    a file it must not change."""
    ok = _member("b/bundle.yaml", data=BUNDLE_YAML)
    cases: dict[str, list[tuple[tarfile.TarInfo, bytes | None]]] = {
        "dot-dot": [ok, _member(f"b/../../{outside.name}/evil", data=b"x")],
        "absolute": [ok, _member(f"{outside}/evil", data=b"x")],
        "symlink-out": [ok, _member("b/dmesg.txt", tarfile.SYMTYPE, link=str(victim))],
        "symlink-dot-dot": [ok, _member("b/x", tarfile.SYMTYPE, link="../../../etc/passwd")],
        "symlink-then-write-through": [
            ok,
            _member("b/out", tarfile.SYMTYPE, link=str(outside)),
            _member("b/out/evil", data=b"x"),
        ],
        "hardlink-out": [ok, _member("b/dmesg.txt", tarfile.LNKTYPE, link=str(victim))],
        "hardlink-then-overwrite": [
            ok,
            _member("b/dmesg.txt", tarfile.LNKTYPE, link=str(victim)),
            _member("b/dmesg.txt", data=b"overwritten"),
        ],
        "char-device": [ok, _member("b/dmesg.txt", tarfile.CHRTYPE)],
        "block-device": [ok, _member("b/sda", tarfile.BLKTYPE)],
        "fifo": [ok, _member("b/dmesg.txt", tarfile.FIFOTYPE)],
        "backslash-name": [ok, _member("b\\..\\..\\evil", data=b"x")],
    }  # fmt: skip
    out = {name: _archive(root / f"{name}.tar.gz", members) for name, members in cases.items()}
    out["bomb-5-GiB-header"] = _lying_bomb(root / "bomb-header.tar.gz")
    many = [ok] + [_member(f"b/f{i}", data=b"") for i in range(bundle_mod.MAX_MEMBERS + 1)]
    out["more-members-than-allowed"] = _archive(root / "many.tar.gz", many)
    return out


def snapshot(*roots: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under `roots` with its type, size and inode: what "nothing changed" means."""
    seen: dict[str, tuple[int, int, int]] = {}
    for root in roots:
        if not root.exists():
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                st_ = os.lstat(os.path.join(dirpath, name))
                seen[os.path.join(dirpath, name)] = (stat.S_IFMT(st_.st_mode), st_.st_size,
                                                     st_.st_ino)  # fmt: skip
    return seen


@pytest.fixture(scope="module")
def evil(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("evil-bundles")
    outside, unpack_tmp = base / "outside", base / "tmp"
    outside.mkdir()
    unpack_tmp.mkdir()
    victim = outside / "victim.txt"
    victim.write_text("do not touch\n")
    (base / "archives").mkdir()
    archives = _evil_archives(base / "archives", outside, victim)
    return {"base": base, "outside": outside, "tmp": unpack_tmp, "victim": victim,
            "archives": archives}  # fmt: skip


EVIL_NAMES = ["dot-dot", "absolute", "symlink-out", "symlink-dot-dot", "symlink-then-write-through",
              "hardlink-out", "hardlink-then-overwrite", "char-device", "block-device", "fifo",
              "backslash-name", "bomb-5-GiB-header", "more-members-than-allowed"]  # fmt: skip


@pytest.mark.parametrize("name", EVIL_NAMES)
def test_an_evil_archive_is_refused_and_nothing_around_the_target_changes(
    name: str, evil: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(evil["tmp"]))  # Bundle.open unpacks in here
    watched = (evil["outside"], evil["tmp"], evil["base"] / "archives")
    before = snapshot(*watched)
    victim_before = evil["victim"].read_bytes()
    started = time.monotonic()
    with pytest.raises(BundleError) as refused:
        bundle_mod.Bundle.open(evil["archives"][name]).close()
    assert time.monotonic() - started < 30
    assert "\n" not in str(refused.value)
    assert snapshot(*watched) == before
    assert evil["victim"].read_bytes() == victim_before
    assert not Path(f"{evil['outside']}/evil").exists()


@pytest.mark.parametrize("name", ["symlink-then-write-through", "hardlink-out", "char-device",
                                  "bomb-5-GiB-header", "absolute"])  # fmt: skip
def test_runbook_analyze_refuses_an_evil_archive_in_one_line(
    name: str, evil: dict[str, Any], tmp_path: Path
) -> None:
    env = {**cli_env(tmp_path), "TMPDIR": str(evil["tmp"])}
    before = snapshot(evil["outside"], evil["tmp"])
    proc = subprocess.run(
        [sys.executable, "-m", "runbook", "analyze", str(evil["archives"][name])],
        capture_output=True, text=True, env=env, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("runbook: "), proc.stderr
    assert snapshot(evil["outside"], evil["tmp"]) == before


def test_an_honest_decompression_bomb_stops_at_the_bound_before_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real compressed zeros (64 MiB in ~64 KiB) against a bound lowered to 16 MiB: refused
    while reading headers; the unpack directory stays empty."""
    monkeypatch.setattr(bundle_mod, "MAX_UNPACKED_BYTES", 16 << 20)
    archive = tmp_path / "bomb.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info, _ = _member("b/bundle.yaml", data=BUNDLE_YAML)
        tar.addfile(info, io.BytesIO(BUNDLE_YAML))
        for i in range(4):
            zeros = tarfile.TarInfo(f"b/zeros-{i}")
            zeros.size = 16 << 20
            tar.addfile(zeros, io.BytesIO(bytes(zeros.size)))
    assert archive.stat().st_size < 1 << 20
    target = tmp_path / "target"
    target.mkdir()
    with pytest.raises(BundleError, match="unpacks to more than"):
        bundle_mod.unpack(archive, target)
    assert list(target.iterdir()) == []


@pytest.mark.parametrize(
    "meta",
    [
        _laughs() + "format: 1\nnode: *l9\n",
        _laughs() + "format: 1\nnode: n\nlabels: {a: *l9}\n",
        "format: 1\nnode: n\nextra: " + "[" * 3000 + "]" * 3000 + "\n",
        "format: 1\nnode: !!python/object/apply:os.system ['touch " + str(MARKER) + "']\n",
    ],
    ids=["laughs-in-node", "laughs-in-labels", "nested-3000", "python-tag"],
)
def test_a_hostile_bundle_yaml_is_refused_in_one_line(meta: str, tmp_path: Path) -> None:
    """bundle.yaml is written by us and holds no alias: one that does (a billion laughs once
    `node` is made text), nests 3000 deep, or asks for a Python object is refused at once."""
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "bundle.yaml").write_text(meta)
    started = time.monotonic()
    with pytest.raises(BundleError) as refused:
        bundle_mod.Bundle.open(tmp_path / "b")
    assert time.monotonic() - started < 5
    assert "\n" not in str(refused.value)
