"""The CLI's shared vocabulary as a shell user meets it, through real processes: settings
from RUNBOOK_* variables, shell completion of runbook and proposal ids for bash, zsh and
fish, and -q keeping a command to its result."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import cli_env

DEMO = Path(__file__).resolve().parents[2] / "runbook" / "demo" / "incident"
MANIFEST = Path(__file__).resolve().parents[2] / "runbook" / "demo" / "workload.yaml"


def _runbook(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runbook", *args],
        env={**cli_env(tmp_path), **(env or {})},
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def _complete(tmp_path: Path, shell: str, words: str, env: dict[str, str]) -> list[str]:
    """What the shell's completion function would get back for `words` (the last one being
    completed), through the same variables click's generated script sets."""
    parts = words.split(" ")
    # bash and zsh give the index of the word completed, fish the word itself
    cword = parts[-1] if shell == "fish" else str(len(parts) - 1)
    done = _runbook(tmp_path, env={
        **env, "_RUNBOOK_COMPLETE": f"{shell}_complete", "COMP_WORDS": words,
        "COMP_CWORD": cword,
    })  # fmt: skip
    assert done.returncode == 0 and not done.stderr, done.stderr
    return [line for line in done.stdout.splitlines() if line]


@pytest.fixture
def queued(tmp_path: Path) -> tuple[dict[str, str], list[str]]:
    """A store with the demo incident's two proposals, named only by RUNBOOK_DB."""
    manifest = tmp_path / "job.yaml"
    manifest.write_text(MANIFEST.read_text())
    env = {"RUNBOOK_DB": str(tmp_path / "elsewhere" / "queue.db")}
    done = _runbook(tmp_path, "run", "nccl-init-failure", "--target", f"replay://{DEMO}",
                    "--var", f"manifest={manifest}", "--no-input", env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    listed = _runbook(tmp_path, "approvals", "list", env={
        **env, "RUNBOOK_APPROVALS_LIST_FORMAT": "json"})  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    ids = [p["id"] for p in json.loads(listed.stdout)]
    assert len(ids) == 2
    # the store the variable named, not the default one
    assert not (tmp_path / "state" / "approvals.db").exists()
    return env, ids


def test_bash_completes_proposal_ids_from_the_store_the_environment_names(
    tmp_path: Path, queued: tuple[dict[str, str], list[str]]
) -> None:
    env, ids = queued
    got = _complete(tmp_path, "bash", "runbook approvals approve p", env)
    assert sorted(line.split(",", 1)[1] for line in got) == sorted(ids)
    # --db on the line wins; an empty store completes nothing
    assert _complete(tmp_path, "bash", f"runbook approvals show --db {tmp_path}/none.db p",
                     env) == []  # fmt: skip


def test_zsh_shows_what_each_proposal_is(
    tmp_path: Path, queued: tuple[dict[str, str], list[str]]
) -> None:
    env, ids = queued
    got = _complete(tmp_path, "zsh", f"runbook approvals show {ids[0][:3]}", env)
    assert got[0] == "plain" and "on gpu-node-07 [pending]" in "\n".join(got)


def test_runbook_ids_complete_in_every_shell(tmp_path: Path) -> None:
    for shell in ("bash", "zsh", "fish"):
        got = "\n".join(_complete(tmp_path, shell, "runbook run nccl-r", {}))
        assert "nccl-recovery-check" in got and "nccl-init-failure" not in got, (shell, got)
    # a path completes as a file, by the shell
    assert _complete(tmp_path, "bash", "runbook validate ./my", {}) == ["file,./my"]


def test_the_completion_scripts_the_readme_shows_are_generated(tmp_path: Path) -> None:
    for shell, marker in (("bash", "complete -o nosort -F _runbook_completion runbook"),
                          ("zsh", "compdef _runbook_completion runbook"),
                          ("fish", "complete --no-files --command runbook")):  # fmt: skip
        done = _runbook(tmp_path, env={"_RUNBOOK_COMPLETE": f"{shell}_source"})
        assert done.returncode == 0 and marker in done.stdout, (shell, done.stdout[-300:])
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    for line in ('eval "$(_RUNBOOK_COMPLETE=bash_source runbook)"',
                 'eval "$(_RUNBOOK_COMPLETE=zsh_source runbook)"',
                 "_RUNBOOK_COMPLETE=fish_source runbook | source"):  # fmt: skip
        assert line in readme


def test_quiet_keeps_a_guided_run_to_its_findings_and_verdict(tmp_path: Path) -> None:
    loud = _runbook(tmp_path, "run", "nccl-init-failure", "--target", f"replay://{DEMO}",
                    "--no-input")  # fmt: skip
    quiet = _runbook(tmp_path, "-q", "run", "nccl-init-failure", "--target", f"replay://{DEMO}",
                     "--no-input")  # fmt: skip
    assert loud.returncode == quiet.returncode == 0, quiet.stderr
    assert "━━ 1/" in loud.stdout and "━━" not in quiet.stdout
    assert " → dmesg.txt" in loud.stdout and " → dmesg.txt" not in quiet.stdout
    assert "Verdict for gpu-node-07: host-memory-oom" in quiet.stdout
    # the same from the environment, and after the subcommand
    env_quiet = _runbook(tmp_path, "run", "nccl-init-failure", "--target", f"replay://{DEMO}",
                         "--no-input", env={"RUNBOOK_QUIET": "1"})  # fmt: skip
    after = _runbook(tmp_path, "run", "nccl-init-failure", "--target", f"replay://{DEMO}",
                     "--no-input", "-q")  # fmt: skip
    assert "━━" not in env_quiet.stdout and "━━" not in after.stdout


def test_quiet_sweep_prints_no_progress(tmp_path: Path) -> None:
    fetched = tmp_path / "fetched"
    fetched.mkdir()
    (fetched / "demo").symlink_to(DEMO, target_is_directory=True)
    loud = _runbook(tmp_path, "analyze-dir", str(fetched), "--report", str(tmp_path / "r1"))
    quiet = _runbook(tmp_path, "analyze-dir", str(fetched), "--report", str(tmp_path / "r2"),
                     "-q")  # fmt: skip
    assert loud.returncode == quiet.returncode == 1  # a finding
    assert "[1/1] demo finding host-memory-oom" in loud.stderr
    assert quiet.stderr == "" and "1 finding" in quiet.stdout
