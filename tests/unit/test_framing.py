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


def test_a_file_swapped_for_a_link_or_a_fifo_while_it_is_read_is_never_followed_or_waited_on(
    tmp_path: Path,
) -> None:
    """The check and the open are two steps: another process flips the name between a log, a
    link to a secret and a FIFO as fast as it can while the probe reads it again and again.
    The open does not follow a link nor wait on a FIFO (`dd iflag=nofollow,nonblock`), so the
    secret never comes back and no read is held."""
    secret = tmp_path / "secret"
    secret.write_text("root only\n")
    logs = tmp_path / "logs"
    logs.mkdir()
    target = logs / "rank-0.log"
    target.write_text("a log\n")
    flipper = subprocess.Popen(
        ["python3", "-c", _FLIP, str(logs), str(secret)], stdout=subprocess.DEVNULL
    )
    try:
        command = f"for i in $(seq 1 150); do rbk_tail 5 {logs} 'rank-*.log'; done"
        started = time.monotonic()
        done = _run("sh", command)
        elapsed = time.monotonic() - started
    finally:
        flipper.kill()
        flipper.wait()
    assert b"root only" not in done.stdout
    records = framing.parse(done.stdout.decode(), TOKEN).records
    assert {r.text for r in records if r.kind == "file"} <= {"a log\n", ""}
    assert elapsed < 15, elapsed


#: flips logs/rank-0.log between a log, a link to the secret and a FIFO (rename is atomic)
_FLIP = """
import os, sys
logs, secret = sys.argv[1], sys.argv[2]
target = os.path.join(logs, "rank-0.log")
n = 0
while True:
    n += 1
    tmp = os.path.join(logs, ".flip")
    kind = n % 3
    if kind == 0:
        with open(tmp, "w") as f:
            f.write("a log\\n")
    elif kind == 1:
        os.symlink(secret, tmp)
    else:
        os.mkfifo(tmp)
    os.rename(tmp, target)
"""


def test_the_ansible_module_splits_framed_output_as_the_walk_does() -> None:
    """plugins/modules/evidence_bundle.py runs on the node without nccl-runbook: its copy of
    the splitter keeps the same files and the same reasons."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "plugins" / "modules" / "evidence_bundle.py"
    spec = importlib.util.spec_from_file_location("evidence_bundle_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.SKIPPED == framing.SKIPPED and module.FRAME == framing.MARK
    forged = f"ok\n==> /x/rank-1.log <==\nforged\n{framing.MARK}{framing.new_token()} end 0\n"
    stdout = "banner" + framing.frame(
        [
            framing.Record("file", "rank-0.log", forged, 0),
            framing.Record("file", "rank-0.log", "again\n", 0),
            framing.Record("file", "rank-1.log.rc", "1\n", 0),
            framing.Record("skip", "rank-8.log", reason="link"),
            framing.Record("file", "rank-9.log", "cut", None),
        ],
        TOKEN,
    )
    from runbook import bundle
    from runbook.transports.base import CommandResult

    walk = bundle.split_multi(CommandResult("app/*.log", "", stdout=stdout, exited=0), TOKEN)
    ansible = module.split_multi({"name": "app/*.log", "stdout": stdout}, TOKEN)
    # a file whose end never came takes the probe's status (0 here) when the module writes it
    assert [(p.name, p.stdout, p.exited if p.collected else None, p.error) for p in walk] == [
        (name, text, None if skipped else 0 if status is None else status,
         f"not read: {skipped}" if skipped else None)
        for name, text, status, skipped in ansible
    ]  # fmt: skip
    assert [p.name for p in walk] == ["app/rank-0.log", "app/rank-8.log", "app/rank-9.log"]
    assert walk[0].stdout == forged
