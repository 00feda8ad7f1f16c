"""The two-person rule at the guided run's prompt, through a real pseudo-terminal (pexpect):
the person whose run queued a proposal of a two-person kind approves it at the prompt; the
approval is recorded and the proposal left pending for another person, and the run directory's
ledger says it waits for one (not `refused`). The kind is the shm patch here (the config's
`two_person.kinds`), so no cluster is involved."""

from __future__ import annotations

import getpass
import json
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

from tests.integration.conftest import cli_env
from tests.integration.test_approvals import BUNDLE, JOB, git

pytestmark = pytest.mark.ansible


def test_the_requester_approving_at_the_prompt_is_recorded_and_left_for_a_second_person(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "deploy"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "job.yaml").write_text(JOB)
    config = tmp_path / "config.yaml"
    config.write_text("two_person:\n  kinds: [shm-size-limit]\n")
    env = {**cli_env(tmp_path), "TERM": "dumb", "RUNBOOK_CONFIG": str(config)}
    child = pexpect.spawn(
        sys.executable,
        ["-m", "runbook", "run", "nccl-init-failure", "--target", f"replay://{BUNDLE}",
         "--var", f"manifest={repo / 'job.yaml'}", "--as", "oncall"],
        env=env, encoding="utf-8", timeout=120, dimensions=(60, 200),
    )  # fmt: skip
    child.expect("approve / deny / skip")
    child.sendline("a")
    child.expect("needs a second person: you queued it")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    assert (repo / "job.yaml").read_text() == JOB  # nothing ran
    listed = subprocess.run(
        [sys.executable, "-m", "runbook", "approvals", "list", "--format", "json"],
        env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    (proposal,) = [p for p in json.loads(listed) if p["kind"] == "shm-size-limit"]
    me = getpass.getuser()
    assert proposal["state"] == "pending" and proposal["requested_by"] == f"{me} as oncall"
    assert proposal["approvals"] == [me]  # an unvouched --as is the OS user's approval
    ledger = json.loads(next(tmp_path.rglob("approvals.json")).read_text())
    assert ledger["decisions"][proposal["id"]] == "waiting for a second person", ledger
