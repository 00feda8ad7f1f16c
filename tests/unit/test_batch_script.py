"""transports/batch.py: the script that runs several probes in one shell, and the splitter that
cuts its two output streams back into one piece per probe. The script is run by this machine's
real /bin/sh; what it gives each command is compared with what `sh -c COMMAND` gives alone."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runbook.transports import batch

TOKEN = "0123456789abcdef"
MARK = batch.mark_for(TOKEN)
#: what the client sends: the marks' token, then the frame token (none here)
INPUT = f"{TOKEN}\n\n".encode()

#: commands whose output, stderr or exit a careless batch would change
COMMANDS = [
    "echo plain",
    "printf 'no newline at the end'",
    "printf ''",
    "printf 'two\\n\\n'",
    "echo to stderr >&2; echo to stdout",
    "exit 3",
    "nosuchcommand-here",
    "if then",  # a syntax error is this command's exit 2, not the script's end
    "echo '# not a comment' # a comment to the end of the line",
    "x=leaked; cd /; pwd",
    'echo "x is [${x:-}]"; pwd',  # the command before it set nothing here
    "set -e; false; echo not reached",
    "trap 'echo trapped' EXIT; echo body",
    "cat <<'EOF'\nheredoc $HOME\nEOF",
    "printf '\\000\\377\\376 binary\\n'",
    "echo \"it's \\\"quoted\\\"\" '$x' `echo sub` $(echo dollar)",
    f"echo '\\n{MARK.decode()}' is not a mark without a status",
    "cat; echo the input is closed",
    "echo \"[$T]\"",  # the token is not the probes' to see
    "kill -s TERM $$ 2>/dev/null; echo the subshell's $$ is the batch's: this probe ends it",
]


def _alone(command: str) -> tuple[bytes, bytes, int]:
    done = subprocess.run(
        ["/bin/sh", "-c", command], stdin=subprocess.DEVNULL, capture_output=True, timeout=10
    )
    return done.stdout, done.stderr, done.returncode


def _split(stdout: bytes, stderr: bytes) -> list[tuple[bytes, bytes, int | None]]:
    out = batch.Splitter(MARK, with_status=True, limit=1 << 20)
    err = batch.Splitter(MARK, with_status=False, limit=1 << 20)
    out.feed(stdout)
    err.feed(stderr)
    assert len(out.pieces) == len(err.pieces)
    return [(o[0], e[0], o[2]) for o, e in zip(out.pieces, err.pieces, strict=True)]


def _batched(commands: list[str]) -> list[tuple[bytes, bytes, int | None]]:
    done = subprocess.run(
        ["/bin/sh", "-c", batch.script(commands)], input=INPUT, capture_output=True, timeout=20
    )
    return _split(done.stdout, done.stderr)


def _normal(stderr: bytes) -> bytes:
    # the shell names itself in its errors: `/bin/sh: 1: eval: x: not found` in a batch,
    # `/bin/sh: 1: x: not found` alone
    return stderr.replace(b"eval: ", b"")


def test_every_command_gets_in_a_batch_what_it_gets_alone() -> None:
    commands = [c for c in COMMANDS if "$$" not in c]
    pieces = _batched(commands)
    assert len(pieces) == len(commands)
    for command, (stdout, stderr, status) in zip(commands, pieces, strict=True):
        alone_out, alone_err, alone_status = _alone(command)
        assert stdout == alone_out, command
        assert status == alone_status, command
        if status == 0:
            assert stderr == alone_err, command
        else:
            assert bool(stderr) == bool(alone_err), command
            assert _normal(stderr).split(b":")[-1] == _normal(alone_err).split(b":")[-1], command


def test_a_probe_that_signals_the_batch_shell_ends_the_batch_with_its_own_result() -> None:
    """`$$` in a probe is the batch's shell (as it was the channel's shell alone): a probe
    that kills it ends the script; the probes before it keep their pieces."""
    pieces = _batched(["echo before", COMMANDS[-1], "echo never"])
    assert pieces[0] == (b"before\n", b"", 0)
    assert len(pieces) == 1


def test_the_commands_reach_the_shell_exactly_as_rendered() -> None:
    # any byte but NUL, quotes and shell syntax included: printed back as they were
    text = "".join(chr(c) for c in range(1, 128)) + "é ü ✓"
    command = "printf '%s' " + "'" + text.replace("'", "'\"'\"'") + "'"
    (piece,) = _batched([command])
    assert piece[0].decode("utf-8") == text and piece[2] == 0


def _stream(pieces: list[tuple[bytes, int]], with_status: bool) -> bytes:
    mark = MARK.decode()
    if with_status:
        return b"".join(p + f"\n{mark} {s}\n".encode() for p, s in pieces)
    return b"".join(p + f"\n{mark}\n".encode() for p, _ in pieces)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.binary(max_size=300), st.integers(0, 255)), min_size=1, max_size=6),
    st.lists(st.integers(1, 40), min_size=1, max_size=30),
    st.booleans(),
)
def test_the_pieces_do_not_depend_on_how_the_stream_was_cut(
    pieces: list[tuple[bytes, int]], cuts: list[int], with_status: bool
) -> None:
    data = _stream(pieces, with_status)
    splitter = batch.Splitter(MARK, with_status=with_status, limit=1 << 20)
    at = 0
    for size in cuts * (len(data) // max(1, sum(cuts)) + 1):
        splitter.feed(data[at : at + size])
        at += size
        if at >= len(data):
            break
    splitter.feed(data[at:])
    assert [p[0] for p in splitter.pieces] == [p for p, _ in pieces]
    assert not any(p[1] for p in splitter.pieces)
    if with_status:
        assert [p[2] for p in splitter.pieces] == [s for _, s in pieces]


def test_a_piece_is_cut_at_the_limit_and_the_next_one_is_whole() -> None:
    splitter = batch.Splitter(MARK, with_status=True, limit=10)
    data = _stream([(b"x" * 25, 0), (b"short", 1)], True)
    for at in range(0, len(data), 7):
        splitter.feed(data[at : at + 7])
    assert list(splitter.pieces) == [(b"x" * 10, True, 0), (b"short", False, 1)]


def test_the_token_without_a_status_after_it_is_content() -> None:
    mark = MARK.decode()
    data = f"a\n{mark} not-a-status\nb\n{mark} 0\n".encode()
    splitter = batch.Splitter(MARK, with_status=True, limit=1 << 20)
    splitter.feed(data)
    assert list(splitter.pieces) == [(f"a\n{mark} not-a-status\nb".encode(), False, 0)]
    other = batch.mark_for("fedcba9876543210").decode()
    splitter.feed(f"\n{other} 0\nc\n{mark} 4\n".encode())
    assert splitter.pieces[-1] == (f"\n{other} 0\nc".encode(), False, 4)


def test_what_a_cut_off_probe_said_so_far_is_kept() -> None:
    splitter = batch.Splitter(MARK, with_status=True, limit=8)
    splitter.feed(b"first\n" + f"\n{MARK.decode()} 0\n".encode() + b"partial output")
    assert len(splitter.pieces) == 1
    assert splitter.partial() == (b"partial ", True)


def test_a_script_holds_only_what_fits_one_argument() -> None:
    big = "echo " + "x" * 20_000
    assert batch.fits([big] * 10) == 3
    assert batch.fits(["x" * 100_000]) == 1  # one command always goes
    assert batch.fits(["echo a"] * 50) == 50
    assert len(batch.script([big] * 3).encode()) <= batch.MAX_SCRIPT_BYTES
    assert len(batch.script([big] * 4).encode()) > batch.MAX_SCRIPT_BYTES


def test_the_token_of_the_marks_is_in_no_command_line() -> None:
    """`ps` shows the script to every user of the node; the token comes on its input."""
    text = batch.script(["echo a", "echo b"])
    assert TOKEN not in text and "__RBK_END_%s" in text
    done = subprocess.run(
        ["/bin/sh", "-c", text + "\ntr '\\0' ' ' < /proc/$$/cmdline; env"],
        input=INPUT, capture_output=True, timeout=10,
    )  # fmt: skip
    assert done.stdout.count(TOKEN.encode()) == 2  # the two marks, and nothing else


def test_sigusr1_stops_the_script_after_the_probe_it_runs() -> None:
    """What the SSH transport sends a batch whose tail it handed to another channel: the
    running probe finishes and is reported, the next one never starts."""
    script = batch.script(["sleep 0.5; echo slept", "echo second"])
    shell = subprocess.Popen(
        ["/bin/sh", "-c", script],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert shell.stdin is not None
        shell.stdin.write(INPUT)
        shell.stdin.flush()
        time.sleep(0.2)
        os.kill(shell.pid, signal.SIGUSR1)
        stdout, stderr = shell.communicate(timeout=10)
    finally:
        if shell.poll() is None:
            shell.kill()
            shell.wait()
    assert shell.returncode == 0
    assert _split(stdout, stderr) == [(b"slept\n", b"", 0)]


@pytest.mark.parametrize("shell", ["/bin/sh", "bash", "dash"])
def test_the_script_runs_in_the_shells_nodes_have(shell: str) -> None:
    # both are installed by the test command (tests/run.sh), as every Debian-family node has them
    done = subprocess.run(
        [shell, "-c", batch.script(["echo a", "exit 4", "echo c >&2"])],
        input=INPUT,
        capture_output=True,
        timeout=10,
    )
    assert _split(done.stdout, done.stderr) == [
        (b"a\n", b"", 0),
        (b"", b"", 4),
        (b"", b"c\n", 0),
    ]


def test_a_framed_probe_reads_the_frame_token_as_its_one_line_of_input_and_no_other_does() -> None:
    """A multi-file probe of a batch gets the frame token (the input's second line) on its own
    input, as it would alone; the probes beside it see their input closed."""
    frame = "f" * 32
    commands = ["cat; echo end", 'IFS= read -r k; echo "[$k]"; cat; echo end', "cat; echo end"]
    done = subprocess.run(
        ["/bin/sh", "-c", batch.script(commands, [False, True, False])],
        input=f"{TOKEN}\n{frame}\n".encode(),
        capture_output=True,
        timeout=20,
    )
    pieces = _split(done.stdout, done.stderr)
    assert [p[0] for p in pieces] == [b"end\n", f"[{frame}]\nend\n".encode(), b"end\n"]
    assert frame.encode() not in done.stdout.replace(pieces[1][0], b"")
