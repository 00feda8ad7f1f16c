"""runbook/transports/framing.py: the prelude a multi-file probe runs, under this machine's real
dash and bash, over real files, links, FIFOs and directories; and the parser that reads its
frames back, cut only by the walk's token."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from runbook.transports import framing

TOKEN = framing.new_token()
SHELLS = [s for s in ("dash", "bash") if shutil.which(s)]


def _run(shell: str, command: str, token: str | None = TOKEN) -> subprocess.CompletedProcess[bytes]:
    given = b"" if token is None else f"{token}\n".encode()
    return subprocess.run(
        [shell, "-c", framing.script(command)], input=given, capture_output=True, timeout=20
    )


@pytest.mark.parametrize("shell", SHELLS)
def test_rbk_tail_frames_each_regular_file_and_opens_nothing_else(
    shell: str, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.log").write_text("one\ntwo\nthree\n")
    (logs / "b.log").write_text("no newline at the end")
    (logs / "c.log").write_text(f"\n{framing.MARK}{framing.new_token()} file x.log\n==> a <==\n")
    secret = tmp_path / "secret"
    secret.write_text("root only\n")
    (logs / "link.log").symlink_to(secret)
    (logs / "dangling.log").symlink_to(tmp_path / "nowhere")
    os.mkfifo(logs / "fifo.log")
    (logs / "dir.log").mkdir()
    (logs / "new\nline.log").write_text("x\n")
    (logs / "other.txt").write_text("not matched\n")
    started = time.monotonic()
    done = _run(shell, f"rbk_tail 2 {logs} '*.log'")
    assert time.monotonic() - started < 5
    assert done.returncode == 0, done.stderr
    framed = framing.parse(done.stdout.decode(), TOKEN)
    assert framed.outside == 0
    got = {(r.kind, r.name): (r.text, r.status, r.reason) for r in framed.records}
    assert got == {
        ("file", "a.log"): ("two\nthree\n", 0, ""),
        ("file", "b.log"): ("no newline at the end", 0, ""),
        ("file", "c.log"): ((logs / "c.log").read_text()[1:], 0, ""),  # its last 2 lines
        ("skip", "link.log"): ("", None, "link"),
        ("skip", "dangling.log"): ("", None, "link"),
        ("skip", "fifo.log"): ("", None, "fifo"),
        ("skip", "dir.log"): ("", None, "directory"),
        ("skip", "new?line.log"): ("", None, "name"),
    }
    assert b"root only" not in done.stdout


@pytest.mark.parametrize("shell", SHELLS)
def test_all_reads_whole_files_and_absent_names_are_no_files(shell: str, tmp_path: Path) -> None:
    (tmp_path / "memory.max").write_text("max\n")
    (tmp_path / "memory.stat").write_text("anon 1\nfile 2\n")
    done = _run(shell, f"rbk_tail all {tmp_path} memory.max memory.current memory.stat")
    records = framing.parse(done.stdout.decode(), TOKEN).records
    assert [(r.name, r.text) for r in records] == [
        ("memory.max", "max\n"),
        ("memory.stat", "anon 1\nfile 2\n"),
    ]


def test_a_file_past_the_window_gives_its_last_lines(tmp_path: Path) -> None:
    line = "y" * 63 + "\n"
    count = framing.WINDOW_BYTES // len(line) + 1000
    (tmp_path / "big.log").write_text(line * (count - 1) + "the last line\n")
    done = _run("sh", f"rbk_tail 2 {tmp_path} big.log")
    (record,) = framing.parse(done.stdout.decode(), TOKEN).records
    assert record.text == line + "the last line\n"


def test_without_its_token_a_probe_reads_nothing(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text("a\n")
    for token in (None, "not-hex"):
        done = _run("sh", f"rbk_tail all {tmp_path} '*.log'", token=token)
        assert done.returncode == 125 and done.stdout == b""
        assert b"no frame token" in done.stderr


def test_only_frames_with_the_token_cut_the_output() -> None:
    other = framing.frame([framing.Record("file", "forged.log", "x\n", 0)], framing.new_token())
    stdout = (
        "a banner before the first frame\n"
        + framing.frame([framing.Record("file", "a.log", other + "tail\n", 0)], TOKEN)
        + "between files\n"
        + framing.frame([framing.Record("file", "b.log", "cut", None)], TOKEN)
    )
    framed = framing.parse(stdout, TOKEN)
    assert [(r.name, r.text, r.status) for r in framed.records] == [
        ("a.log", other + "tail\n", 0),
        ("b.log", "cut", None),
    ]
    assert framed.outside == len("a banner before the first frame") + len("between files")
    # a frame line the output ended inside of is no frame
    assert framing.parse(f"\n{framing.MARK}{TOKEN} file half", TOKEN).records == []
