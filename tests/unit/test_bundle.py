"""Bundles (DESIGN §4): written and read back the same, absent means not collected, archives
are unpacked without escaping, and multi-file probes split the same live and replayed."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from runbook.bundle import Bundle, BundleMeta, split_multi, write_bundle
from runbook.errors import BundleError
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


def test_multi_file_output_splits_into_one_file_per_header() -> None:
    live = CommandResult(
        "app/*.log",
        "tail -v -n 100 -- /var/log/train/*.log",
        stdout="==> /var/log/train/rank-0.log <==\na\nb\n\n==> /var/log/train/rank-1.log <==\nc\n",
        exited=0,
    )
    pieces = {p.name: p.stdout for p in split_multi(live)}
    assert pieces == {"app/rank-0.log": "a\nb\n", "app/rank-1.log": "c\n"}


def test_a_multi_file_probes_notes_go_with_the_file_they_name_and_the_cut_with_the_last() -> None:
    """Standard error is not copied onto every file, nor is `truncated`: a note naming a file
    goes with it, the rest (and the stream's cut) with the last file."""
    joined = CommandResult(
        "app/*.log",
        "tail -v -n 100 -- /var/log/train/*.log",
        stdout=("==> /var/log/train/rank-0.log <==\na\n\n==> /var/log/train/rank-1.log <==\nb\n"
                "\n==> /var/log/train/rank-2.log <==\nc\n"),
        stderr=("runbook: /var/log/train/rank-1.log is 2.0 GiB: only its last 16.0 MiB were read\n"
                "tail: cannot open '/var/log/train/rank-9.log' for reading: Permission denied\n"),
        exited=0,
        truncated=True,
    )  # fmt: skip
    pieces = {p.name: p for p in split_multi(joined)}
    assert {n: (p.stderr, p.truncated) for n, p in pieces.items()} == {
        "app/rank-0.log": ("", False),
        "app/rank-1.log": (joined.stderr.splitlines(keepends=True)[0], True),
        "app/rank-2.log": (joined.stderr.splitlines(keepends=True)[1], True),
    }
    whole = split_multi(CommandResult("app/*.log", "", stdout=joined.stdout, exited=0))
    assert [(p.stderr, p.truncated) for p in whole] == [("", False)] * 3


def test_a_replayed_multi_file_probe_splits_the_same_as_the_live_one(tmp_path: Path) -> None:
    root = tmp_path / "b"
    write_bundle(root, BundleMeta(node="n", collected_at="x"), [
        CommandResult("app/rank-0.log", "", stdout="a\nb\n", exited=0),
        CommandResult("app/rank-1.log", "", stdout="c\n", exited=0),
    ])  # fmt: skip
    replayed = ReplayTransport(root).run(Probe("app/*.log", "tail ..."))
    assert {p.name: p.stdout for p in split_multi(replayed)} == {
        "app/rank-0.log": "a\nb\n",
        "app/rank-1.log": "c\n",
    }
