"""Bundles (DESIGN §4): written and read back the same, absent means not collected, archives
are unpacked without escaping, and multi-file probes split the same live and replayed."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from runbook.bundle import Bundle, BundleMeta, split_multi, write_bundle
from runbook.errors import BundleError
from runbook.transports import framing
from runbook.transports.base import CommandResult, Probe
from runbook.transports.replay import ReplayTransport


def _write(root: Path) -> Path:
    results = [
        CommandResult("dmesg.txt", "dmesg -T", stdout="[x] hello\n", exited=0),
        CommandResult(
            "dev-infiniband.txt",
            "ls -la /dev/infiniband",
            stderr="ls: cannot access '/dev/infiniband': No such file or directory\n",
            exited=2,
        ),
        CommandResult("cgroup/memory.max", "cat", stdout="max\n", exited=0),
    ]
    return write_bundle(
        root, BundleMeta(node="n1", collected_at="2026-03-04T10:40:00+00:00"), results
    )


def test_a_written_bundle_reads_back_with_exit_status_and_stderr(tmp_path: Path) -> None:
    bundle = Bundle.open(_write(tmp_path / "b"))
    assert bundle.meta.node == "n1"
    ib = bundle.read("dev-infiniband.txt")
    assert ib.exited == 2 and "No such file" in ib.stderr and ib.collected
    assert bundle.read("cgroup/memory.max").stdout == "max\n"
    assert not bundle.read("nvidia-smi-L.txt").collected
    assert set(bundle.names()) == {"dmesg.txt", "dev-infiniband.txt", "cgroup/memory.max"}


def test_a_directory_without_bundle_yaml_is_not_a_bundle(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match=r"no bundle\.yaml"):
        Bundle.open(tmp_path)


def test_an_unknown_format_is_refused(tmp_path: Path) -> None:
    (tmp_path / "bundle.yaml").write_text("format: 7\nnode: x\n")
    with pytest.raises(BundleError, match="unknown bundle format"):
        Bundle.open(tmp_path)


def test_a_bundle_file_name_cannot_escape_the_bundle(tmp_path: Path) -> None:
    bundle = Bundle.open(_write(tmp_path / "b"))
    result = bundle.read("../../etc/passwd")
    assert not result.collected and "unsafe" in (result.error or "")


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def test_a_tar_gz_bundle_opens_like_a_directory(tmp_path: Path) -> None:
    archive = _tar(tmp_path / "b.tar.gz", [
        _file("b/bundle.yaml", b"format: 1\nnode: n2\ncollected_at: x\n"),
        _file("b/dmesg.txt", b"[1.0] hi\n"),
    ])  # fmt: skip
    bundle = Bundle.open(archive)
    assert bundle.meta.node == "n2" and bundle.read("dmesg.txt").stdout == "[1.0] hi\n"
    bundle.close()


@pytest.mark.parametrize("name", ["../evil", "/etc/evil", "b/../../evil"])
def test_an_archive_member_outside_the_bundle_is_refused(tmp_path: Path, name: str) -> None:
    archive = _tar(tmp_path / "b.tar.gz", [
        _file("bundle.yaml", b"format: 1\nnode: n\n"), _file(name, b"x"),
    ])  # fmt: skip
    with pytest.raises(BundleError, match="unsafe"):
        Bundle.open(archive)
    assert not (tmp_path / "evil").exists()


def test_an_archive_symlink_is_refused(tmp_path: Path) -> None:
    link = tarfile.TarInfo("dmesg.txt")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/shadow"
    archive = _tar(tmp_path / "b.tar.gz", [_file("bundle.yaml", b"format: 1\n"), (link, None)])
    with pytest.raises(BundleError, match="not a plain file"):
        Bundle.open(archive)


def test_a_decompression_bomb_stops_before_filling_the_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import runbook.bundle as bundle_mod

    monkeypatch.setattr(bundle_mod, "MAX_UNPACKED_BYTES", 1 << 20)
    archive = _tar(tmp_path / "b.tar.gz", [
        _file("bundle.yaml", b"format: 1\n"), _file("dmesg.txt", b"\0" * (4 << 20)),
    ])  # fmt: skip
    assert archive.stat().st_size < 64 << 10
    with pytest.raises(BundleError, match="unpacks to more than"):
        Bundle.open(archive)


TOKEN = framing.new_token()


def _framed(*records: framing.Record) -> str:
    return framing.frame(list(records), TOKEN)


def _rec(name: str, text: str, status: int | None = 0) -> framing.Record:
    return framing.Record("file", name, text, status)


def test_multi_file_output_splits_into_one_file_per_frame_byte_for_byte() -> None:
    live = CommandResult(
        "app/*.log",
        "rbk_tail 100 /var/log/train '*.log'",
        stdout=_framed(_rec("rank-0.log", "a\nb\n\n"), _rec("rank-1.log", "c")),
        exited=0,
    )
    pieces = {p.name: (p.stdout, p.exited) for p in split_multi(live, TOKEN)}
    assert pieces == {"app/rank-0.log": ("a\nb\n\n", 0), "app/rank-1.log": ("c", 0)}


def test_a_header_or_a_frame_inside_a_file_is_that_files_text() -> None:
    """`tail -v` headers and frames with another token are text: only the walk's token cuts."""
    other = framing.frame([_rec("rank-0.log", "forged\n")], framing.new_token())
    forged = f"real error\n==> /var/log/train/rank-0.log <==\nforged\n{other}"
    live = CommandResult(
        "app/*.log", "", stdout=_framed(_rec("rank-0.log", "mine\n"), _rec("rank-1.log", forged))
    )
    pieces = {p.name: p.stdout for p in split_multi(live, TOKEN)}
    assert pieces == {"app/rank-0.log": "mine\n", "app/rank-1.log": forged}


def test_a_file_named_as_a_status_twice_or_off_the_pattern_is_refused() -> None:
    live = CommandResult(
        "app/*.log",
        "",
        stdout=_framed(
            _rec("rank-0.log", "first\n"),
            _rec("rank-0.log", "second\n"),
            _rec("rank-1.log.rc", "1\n"),
            _rec("rank-2.txt", "x\n"),
            _rec("../../etc/cron.d/x.log", "x\n"),
        ),
    )
    pieces = split_multi(live, TOKEN)
    assert [(p.name, p.stdout) for p in pieces] == [("app/rank-0.log", "first\n")]
    assert pieces[0].stderr.count("left out") == 4


def test_a_file_the_probe_did_not_read_is_a_result_not_collected_with_its_reason() -> None:
    live = CommandResult(
        "app/*.log",
        "",
        stdout=_framed(
            _rec("rank-0.log", "a\n"),
            framing.Record("skip", "rank-8.log", reason="link"),
            framing.Record("skip", "rank-9.log", reason="fifo"),
        ),
        exited=0,
    )
    pieces = {p.name: p for p in split_multi(live, TOKEN)}
    assert pieces["app/rank-0.log"].ok
    link, fifo = pieces["app/rank-8.log"], pieces["app/rank-9.log"]
    assert not link.collected and link.stderr.startswith("runbook: not read: a symbolic link")
    assert not fifo.collected and "a FIFO" in fifo.error


def test_a_file_whose_end_never_came_is_cut_as_the_probe_was() -> None:
    stdout = _framed(_rec("rank-0.log", "whole\n"), _rec("rank-1.log", "half", status=None))
    timed_out = CommandResult("app/*.log", "", stdout=stdout, timed_out=True, duration=30.0)
    pieces = {p.name: p for p in split_multi(timed_out, TOKEN)}
    assert pieces["app/rank-0.log"].ok
    assert pieces["app/rank-1.log"].timed_out and pieces["app/rank-1.log"].stdout == "half"
    capped = CommandResult("app/*.log", "", stdout=stdout, exited=0, truncated=True)
    cut = {p.name: p for p in split_multi(capped, TOKEN)}
    assert cut["app/rank-1.log"].truncated and cut["app/rank-1.log"].exited == 0
    assert not cut["app/rank-0.log"].truncated


def test_a_multi_file_probes_notes_go_with_the_file_they_name_and_the_cut_with_the_last() -> None:
    """Standard error is not copied onto every file, nor is `truncated`: a note naming a file
    goes with it, the rest (and the stream's cut) with the last file."""
    joined = CommandResult(
        "app/*.log",
        "",
        stdout=_framed(
            _rec("rank-0.log", "a\n"), _rec("rank-1.log", "b\n"), _rec("rank-2.log", "c\n")
        ),
        stderr=("runbook: app/rank-1.log is 2.0 GiB: only its last 16.0 MiB were read\n"
                "dd: failed to open '/var/log/train/rank-11.log': Permission denied\n"),
        exited=0,
        truncated=True,
    )  # fmt: skip
    pieces = {p.name: p for p in split_multi(joined, TOKEN)}
    assert {n: (p.stderr, p.truncated) for n, p in pieces.items()} == {
        "app/rank-0.log": ("", False),
        "app/rank-1.log": (joined.stderr.splitlines(keepends=True)[0], True),
        "app/rank-2.log": (joined.stderr.splitlines(keepends=True)[1], False),
    }


def test_a_replayed_multi_file_probe_splits_the_same_as_the_live_one(tmp_path: Path) -> None:
    root = tmp_path / "b"
    live = CommandResult(
        "app/*.log",
        "",
        stdout=_framed(
            _rec("rank-0.log", "a\nb\n"),
            _rec("rank-1.log", "c"),
            framing.Record("skip", "rank-8.log", reason="link"),
        ),
        exited=0,
    )
    pieces = split_multi(live, TOKEN)
    write_bundle(root, BundleMeta(node="n", collected_at="x"), pieces)
    assert not (root / "app" / "rank-8.log").exists()
    assert (root / "app" / "rank-8.log.err").read_text().startswith("runbook: not read: a sym")
    replayed = ReplayTransport(root).run(Probe("app/*.log", "tail ...", secret=TOKEN))
    again = split_multi(replayed, TOKEN)
    assert [(p.name, p.stdout, p.collected, p.error) for p in again] == [
        (p.name, p.stdout, p.collected, p.error) for p in pieces
    ]
