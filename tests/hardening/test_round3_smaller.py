"""The smaller holes of the third round, each through the real CLI: a webhook that answers a
byte at a time, a private key whose BEGIN line was outside what was read, a node's name in
other spellings left by `collect --sanitize`, a proposal ID that is not text, files nested
100,000 deep, probes left running after the command was killed with SIGKILL, and analyze-dir's
reports readable by everyone."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hardening.runs import Background, one_line_error, run_now
from tests.integration.conftest import cli_env
from tests.tools import bundles

REPO = Path(__file__).resolve().parents[2]


def _cli(args: list[str | bytes], env: dict[str, str], timeout: float = 120):  # type: ignore[no-untyped-def]
    return subprocess.run(
        [sys.executable, "-m", "runbook", *args],
        capture_output=True,
        text=True,
        errors="replace",
        env=env,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        cwd=REPO,
    )


# -- a webhook that answers one byte at a time ------------------------------------------------


@pytest.fixture
def dripping_webhook() -> Iterator[str]:
    """An HTTP receiver on 127.0.0.1 that reads the request, then answers one byte every
    1.5 s (a complete, valid answer after about two minutes): each read of it is well within
    a socket timeout."""
    stop = threading.Event()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    answer = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n"
        b"Connection: close\r\n\r\nok"
    )

    def drip(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            try:
                conn.recv(65536)
                for byte in answer:
                    if stop.wait(1.5):
                        return
                    conn.sendall(bytes([byte]))
            except OSError:
                return

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            threading.Thread(target=drip, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    host, port = listener.getsockname()
    try:
        yield f"http://{host}:{port}/hook"
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def test_a_webhook_answering_a_byte_at_a_time_is_cut_off_at_the_attempts_deadline(
    tmp_path: Path, dripping_webhook: str
) -> None:
    manifest = tmp_path / "job.yaml"
    manifest.write_text("apiVersion: batch/v1\nkind: Job\nmetadata: {name: train}\n")
    env = {**cli_env(tmp_path), "RUNBOOK_WEBHOOK_URL": dripping_webhook}
    started = time.monotonic()
    try:
        done = _cli(
            ["run", "nccl-init-failure", "--target", f"replay://{bundles.path('shm-exhausted')}",
             "--no-input", "--var", f"manifest={manifest}"],
            env, timeout=60,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail("the command was held by a receiver answering a byte every 1.5 s")
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    (warning,) = [line for line in done.stderr.splitlines() if "warning" in line]
    assert "webhook http://127.0.0.1:" in warning and "no answer within " in warning, warning
    # the run (a second or two), then attempts of 2 s and their backoff within the 5 s deadline
    assert took < 20, took


# -- a key's body without its BEGIN line --------------------------------------------------------


def _key(tmp_path: Path, kind: str) -> list[str]:
    path = tmp_path / f"key-{kind}"
    args = ["-t", "rsa", "-b", "2048", *(["-m", "PEM"] if kind == "pem" else [])]
    subprocess.run(["ssh-keygen", "-q", "-N", "", "-f", str(path), *args], check=True)
    return path.read_text().splitlines()


@pytest.mark.parametrize("kind", ["pem", "openssh"])
def test_a_private_key_whose_begin_line_was_not_read_reaches_no_file_of_the_run(
    tmp_path: Path, kind: str
) -> None:
    key = _key(tmp_path, kind)
    assert key[0].startswith("-----BEGIN") and len(key) > 6
    body = key[1:-1]
    bundle = bundles.materialize("healthy", tmp_path / "bundle")
    # the log as `tail -n N` read it: the BEGIN line (and the body's first line) just before
    log = bundle / "app" / "rank-0.log"
    log.parent.mkdir(exist_ok=True)
    log.write_text("[2025-03-04 10:20:11] INFO dumping deploy key\n" + "\n".join(key[2:]) + "\n")
    run_dir = tmp_path / "run"
    done = _cli(
        ["run", "nccl-init-failure", "--target", f"replay://{bundle}", "--no-input",
         "--run-dir", str(run_dir)],
        cli_env(tmp_path),
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    written = [p for p in run_dir.rglob("*") if p.is_file()]
    assert any(p.name == "rank-0.log" for p in written)
    for path in written:
        text = path.read_text(errors="replace")
        leaked = [line for line in body[1:] if len(line) >= 16 and line in text]
        assert not leaked, (path, leaked[:2])
    assert "<REDACTED>" in (run_dir / "bundle" / "app" / "rank-0.log").read_text()


# -- collect --sanitize and a node's name in other spellings -----------------------------------


def test_collect_sanitize_replaces_a_name_and_a_uid_in_every_spelling(tmp_path: Path) -> None:
    bundle = bundles.materialize("article-incident", tmp_path / "bundle")
    node, uid = "gpu-node-07", "3f9c2d1e-8b7a-4c55-9e21-6a1b2c3d4e5f"
    assert node in (bundle / "pod.json").read_text() and uid in (bundle / "pod.json").read_text()
    (bundle / "app" / "launcher.log").write_text(
        f"launching 8 ranks on {node}\n"
        f"{node.upper()}: all ranks up\n"
        f"NODE_NAME={node.replace('-', '_')} world=8\n"
        f"rank 0 log: /logs/{node}_rank0.log\n"
        f"pod uid {uid.replace('-', '')} ({uid.upper().replace('-', '')})\n"
        f"cgroup kubepods-pod{uid.replace('-', '_')}.slice\n"
    )
    out = tmp_path / "out"
    done = _cli(
        ["collect", "-t", f"replay://{bundle}", "-o", str(out), "--sanitize"], cli_env(tmp_path)
    )
    assert done.returncode == 0, done.stderr
    launcher = (out / "app" / "launcher.log").read_text()
    assert launcher.count("<NODE_") == 4 and launcher.count("<POD_UID_1>") == 3, launcher
    spellings = {node, node.replace("-", "_"), uid, uid.replace("-", ""), uid.replace("-", "_")}
    for path in out.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace").lower()
            assert not [s for s in spellings if s in text], path


# -- a proposal ID that is not text -------------------------------------------------------------


@pytest.mark.parametrize(
    "command", [["approvals", "show"], ["approvals", "deny", "--reason", "no"], ["verify"]]
)
def test_a_proposal_id_that_is_not_utf8_is_one_line_and_exit_2(
    tmp_path: Path, command: list[str]
) -> None:
    done = _cli([*command, b"\xff"], cli_env(tmp_path))
    assert done.returncode == 2, done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("runbook: no proposal \\xff"), lines


# -- nested 100,000 deep ------------------------------------------------------------------------

DEEP = 100_000


def test_a_config_a_verdict_and_a_shard_nested_100k_deep_are_one_line_errors(
    tmp_path: Path,
) -> None:
    env = cli_env(tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text("notify: " + "[" * DEEP + "]" * DEEP + "\n")
    run_dir = tmp_path / "run"
    (run_dir / "bundle").mkdir(parents=True)
    (run_dir / "verdict.json").write_text("[" * DEEP + "]" * DEEP)
    shard = tmp_path / "shard"
    shard.mkdir()
    (shard / "sweep.json").write_text("[" * DEEP + "]" * DEEP)
    for args, file in (
        (["--config", str(config), "approvals", "list"], config),
        (["report", str(run_dir)], run_dir / "verdict.json"),
        (["sweep-merge", str(shard), "--report", str(tmp_path / "merged")], shard / "sweep.json"),
    ):
        done = run_now(args, env, tmp_path / "cli" / args[0].strip("-"))
        assert done.rc == 2, (args, done.stderr)
        line = one_line_error(done)
        assert str(file) in line and "nested too deeply" in line, line


# -- probes that outlive a killed command -------------------------------------------------------


def _processes_naming(needle: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = (Path("/proc") / entry / "cmdline").read_bytes()
        except OSError:
            continue
        if needle.encode() in cmdline:
            found.append(int(entry))
    return found


def test_local_probes_die_with_a_command_killed_by_sigkill(tmp_path: Path) -> None:
    fifo = tmp_path / "nobody-writes-this.fifo"
    os.mkfifo(fifo)
    runbook = tmp_path / "blocked.yaml"
    runbook.write_text(
        "id: blocked\ntitle: A probe blocked on a FIFO (test)\nstages:\n"
        "  - id: read\n    title: read a FIFO nobody writes\n    timeout: 300\n"
        "    collect:\n      fifo.txt: 'tail -v -n 5 -- {{ fifo }} | cat'\n"
    )
    cli = Background(
        ["run", str(runbook), "--target", "local", "--no-input", "--run-dir",
         str(tmp_path / "run"), "--var", f"fifo={fifo}"],
        cli_env(tmp_path), tmp_path / "cli",
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while len(_processes_naming(str(fifo))) < 2:  # the shell and tail, blocked in open()
            assert cli.running(), "the command ended before its probe blocked"
            assert time.monotonic() < deadline, "the probe did not start"
            time.sleep(0.05)
        os.kill(cli.proc.pid, signal.SIGKILL)  # the command alone: no handler runs
        cli.finish(10)
        deadline = time.monotonic() + 5
        while _processes_naming(str(fifo)) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = _processes_naming(str(fifo))
        assert not left, f"probes left running after the command was killed: {left}"
    finally:
        cli.kill()
        for pid in _processes_naming(str(fifo)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


# -- analyze-dir's reports ----------------------------------------------------------------------


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_analyze_dir_writes_its_reports_owner_only_under_a_lax_umask(tmp_path: Path) -> None:
    evidence = tmp_path / "bundles"
    bundles.materialize("gpu-memory-oom", evidence / "node-1")
    env = cli_env(tmp_path)
    state = Path(env["RUNBOOK_STATE_DIR"])
    assert not state.exists()
    old = os.umask(0o022)
    try:
        done = _cli(["analyze-dir", str(evidence)], env)
    finally:
        os.umask(old)
    assert done.returncode in (0, 1), done.stderr
    (report,) = (state / "sweeps").iterdir()
    for directory in (state, state / "sweeps", report):
        assert mode(directory) == 0o700, (directory, oct(mode(directory)))
    files = sorted(p.name for p in report.iterdir())
    assert files == ["junit.xml", "runbook.prom", "sweep.json", "sweep.md"]
    for name in files:
        assert mode(report / name) == 0o600, (name, oct(mode(report / name)))
