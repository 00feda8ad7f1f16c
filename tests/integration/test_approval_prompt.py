"""The guided run's approval prompt, driven through a real pseudo-terminal (pexpect): the
proposal, its evidence and the Ansible check-mode diff are shown before the question; approve
runs the playbook, deny records the reason and changes nothing, skip leaves it queued.

The workload is a manifest in a real Git checkout (file mode); no Kubernetes API is involved.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

from tests.integration.conftest import cli_env
from tests.integration.test_approvals import BUNDLE, JOB, checkout, size_limit  # noqa: F401
from tests.tools import bundles

pytestmark = pytest.mark.ansible


def spawn(tmp_path: Path, checkout: Path, bundle: Path = BUNDLE) -> pexpect.spawn:  # noqa: F811
    """The guided run on a pseudo-terminal (so stdin is a TTY and it prompts)."""
    env = cli_env(tmp_path)
    env["TERM"] = "dumb"
    return pexpect.spawn(
        sys.executable,
        ["-m", "runbook", "run", "nccl-init-failure", "--target", f"replay://{bundle}",
         "--var", f"manifest={checkout / 'job.yaml'}", "--as", "oncall"],
        env=env,
        encoding="utf-8",
        timeout=120,
        dimensions=(60, 200),
    )


def state_of(tmp_path: Path) -> list[dict]:  # type: ignore[type-arg]
    out = subprocess.run(
        [sys.executable, "-m", "runbook", "approvals", "list", "--state", "all", "--format",
         "json"],
        env=cli_env(tmp_path), capture_output=True, text=True, check=True,
    ).stdout
    return [p for p in json.loads(out) if p["kind"] == "shm-size-limit"]


def test_approve_at_the_prompt_runs_the_playbook(tmp_path: Path, checkout: Path) -> None:  # noqa: F811
    child = spawn(tmp_path, checkout)
    child.expect("check mode")
    child.expect("what would change:")
    # the diff of exactly the change: the sizeLimit line added to the manifest
    child.expect(r"\+\s+sizeLimit: 80Gi")
    child.expect("approve / deny / skip")
    child.sendline("a")
    child.expect("succeeded")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    assert size_limit(checkout / "job.yaml") == "80Gi"
    (proposal,) = state_of(tmp_path)
    assert proposal["state"] == "succeeded"
    assert proposal["decided_by"].endswith(" as oncall")  # the OS user, and --as


def test_deny_at_the_prompt_records_the_reason_and_changes_nothing(
    tmp_path: Path, checkout: Path  # noqa: F811
) -> None:
    child = spawn(tmp_path, checkout)
    child.expect("approve / deny / skip")
    child.sendline("deny")
    child.expect("reason")
    child.sendline("   ")  # a blank reason is asked again, not recorded
    child.expect("a denial needs a reason")
    child.sendline("the job is being rewritten to use less shm")
    child.expect("denied")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    assert (checkout / "job.yaml").read_text() == JOB
    (proposal,) = state_of(tmp_path)
    assert proposal["state"] == "denied"
    assert proposal["reason"] == "the job is being rewritten to use less shm"


def test_skip_leaves_it_queued(tmp_path: Path, checkout: Path) -> None:  # noqa: F811
    child = spawn(tmp_path, checkout)
    child.expect("approve / deny / skip")
    child.sendline("s")
    child.expect("left in the queue")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    (proposal,) = state_of(tmp_path)
    assert proposal["state"] == "pending"
    assert (checkout / "job.yaml").read_text() == JOB
    # who saw it and left it is in the audit trail
    shown = subprocess.run(
        [sys.executable, "-m", "runbook", "audit", "show", "--proposal", proposal["id"],
         "--format", "json"],
        env=cli_env(tmp_path), capture_output=True, text=True, check=True,
    ).stdout
    entries = [json.loads(line) for line in shown.splitlines()]
    assert [e["event"] for e in entries] == ["proposed", "previewed", "skipped"]
    assert entries[-1]["actor"]


def test_two_proposals_on_one_manifest_both_apply_the_second_replanned(
    tmp_path: Path, checkout: Path  # noqa: F811
) -> None:
    """The article's incident proposes a /dev/shm sizeLimit and a memory limit for the same
    Job: once the first is applied, the second is planned again against the file as it now
    is (its check-mode diff shows only the memory lines), and both land."""
    child = spawn(tmp_path, checkout, bundles.path("article-incident"))
    child.expect(r"shm-size-limit on gpu-node-07")
    child.expect(r"\+\s+sizeLimit: 10Gi")
    child.expect("approve / deny / skip")
    child.sendline("a")
    child.expect("succeeded")
    child.expect(r"memory-limit on gpu-node-07")
    child.expect("what would change:")
    child.expect(r"\+\s+memory: 768Gi")
    child.expect("approve / deny / skip")
    child.sendline("a")
    child.expect("succeeded")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    import yaml

    spec = yaml.safe_load((checkout / "job.yaml").read_text())["spec"]["template"]["spec"]
    assert spec["volumes"][0]["emptyDir"]["sizeLimit"] == "10Gi"
    resources = spec["containers"][0]["resources"]
    assert resources["limits"]["memory"] == "768Gi"
    assert resources["requests"]["memory"] == "640Gi"
    log = (tmp_path / "state" / "audit.jsonl").read_text()
    assert '"event": "replanned"' in log
