"""What the command's start and end skip must not change what it does: `invoke` loaded only
when an ssh_config's `Match exec` needs it (runbook/transports/__init__.py), and the process
ended without interpreter teardown only when nothing is left to wait for (cli/app.console).

Each case runs in a fresh interpreter: both are about what a new process imports and how it
ends."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


def _python(code: str, *, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


def test_paramiko_imports_without_invoke_until_match_exec_needs_it(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    result = _python(
        f"""
        import sys
        import runbook.transports.ssh_config as ssh_config
        import paramiko
        assert paramiko.__version__, "paramiko's own version lookup still ran"
        loaded = sorted(m for m in sys.modules if m == "invoke" or m.startswith("invoke."))
        assert loaded == ["invoke"], loaded  # the placeholder only
        assert "unittest.mock" not in sys.modules
        config = paramiko.SSHConfig.from_text(
            'Match exec "touch {marker}"\\n  User bob\\n'
            'Match exec "false"\\n  Port 2222\\n'
        )
        found = config.lookup("gpu-node-7")
        assert found.get("user") == "bob" and "port" not in found, found
        assert "invoke.tasks" in sys.modules  # the real invoke ran the commands
        print("ok")
        """
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
    assert marker.exists(), "the Match exec command did not run"


def test_an_already_imported_invoke_is_left_alone() -> None:
    result = _python(
        """
        import sys, types
        import invoke
        real = sys.modules["invoke"]
        import runbook.transports
        import paramiko.config
        assert sys.modules["invoke"] is real and paramiko.config.invoke is real
        print("ok")
        """
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_the_command_runs_exit_handlers_and_flushes_output_before_it_ends(tmp_path: Path) -> None:
    result = _python(
        """
        import atexit, sys
        sys.argv = ["runbook", "--version"]
        atexit.register(lambda: print("exit handler ran", file=sys.stderr))
        from runbook.cli.app import console
        sys.stdout.write("buffered, not yet flushed\\n")
        console()
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("buffered, not yet flushed\nrunbook, version ")
    assert "exit handler ran" in result.stderr


def test_the_exit_code_and_error_line_survive_the_quick_exit() -> None:
    result = _python(
        """
        import sys
        sys.argv = ["runbook", "run", "no-such-runbook", "--target", "local"]
        from runbook.cli.app import console
        console()
        """
    )
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert result.stderr.startswith("runbook: ") and "Traceback" not in result.stderr


def test_a_thread_still_working_is_waited_for(tmp_path: Path) -> None:
    done = tmp_path / "done"
    result = _python(
        f"""
        import sys, threading, time
        from pathlib import Path
        sys.argv = ["runbook", "--version"]
        def work():
            time.sleep(0.3)
            Path({str(done)!r}).write_text("finished")
        threading.Thread(target=work).start()  # not a daemon: the program waits for it
        from runbook.cli.app import console
        console()
        """
    )
    assert result.returncode == 0, result.stderr
    assert done.read_text() == "finished"


def test_python_dash_m_runbook_is_the_same_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "runbook", "--version"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and result.stdout.startswith("runbook, version "), result
