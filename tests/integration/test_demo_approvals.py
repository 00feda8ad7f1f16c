"""The demo as a newcomer meets it: after the verdict it walks on into the approval prompt
(check-mode diff, approve / deny / skip) on its own copy of the incident's manifest, keeps its
own approval store, and ends by naming the next commands. Driven through a real
pseudo-terminal (pexpect); the playbook really runs (ansible-runner, file mode, localhost)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest
import yaml

from tests.integration.conftest import cli_env

pytestmark = pytest.mark.ansible


def _env(tmp_path: Path) -> dict[str, str]:
    # the demo's scratch folder (mkdtemp) lands under tmp_path, not the machine's /tmp
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return {**cli_env(tmp_path), "TMPDIR": str(tmp_path / "tmp"), "TERM": "dumb"}


def _queue(tmp_path: Path, db: str) -> dict[str, dict[str, str]]:
    out = subprocess.run(
        [sys.executable, "-m", "runbook", "approvals", "list", "--state", "all",
         "--format", "json", "--db", db],
        env=_env(tmp_path), capture_output=True, text=True, check=True,
    ).stdout
    return {p["kind"]: p for p in json.loads(out)}


def _container(manifest: Path) -> dict:  # type: ignore[type-arg]
    job = yaml.safe_load(manifest.read_text())
    return job["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def test_the_demo_prompts_and_an_approval_patches_only_its_own_copy(tmp_path: Path) -> None:
    child = pexpect.spawn(
        sys.executable, ["-m", "runbook", "demo"], env=_env(tmp_path), encoding="utf-8",
        timeout=180, dimensions=(60, 200),
    )
    child.expect("Verdict for gpu-node-07: host-memory-oom")
    # the first fix: /dev/shm bounded, its check-mode diff shown before the question
    child.expect("shm-size-limit")
    child.expect("what would change:")
    child.expect(r"\+\s+sizeLimit: 10Gi")
    child.expect("approve / deny / skip")
    child.sendline("approve")
    child.expect("succeeded")
    child.expect("memory-limit")
    child.expect("approve / deny / skip")
    child.sendline("deny")
    child.expect("reason")
    child.sendline("the demo, not a real cluster")
    child.expect("denied")
    child.expect("next")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    text = re.sub(r"\s+", " ", child.before or "")
    db = re.search(r"runbook approvals list --db (\S+)", text)
    assert db, text
    assert "runbook report " in text and "runbook run nccl-init-failure --target ssh://" in text
    scratch = Path(db.group(1)).parent
    assert scratch.parent == tmp_path / "tmp"
    spec = _container(scratch / "workload.yaml")
    assert spec["volumes"][0]["emptyDir"]["sizeLimit"] == "10Gi"
    # denied: the memory limit is as the incident had it
    assert spec["containers"][0]["resources"]["limits"]["memory"] == "640Gi"
    queue = _queue(tmp_path, db.group(1))
    assert queue["shm-size-limit"]["state"] == "succeeded"
    assert queue["memory-limit"]["state"] == "denied"
    # the user's own store was never touched
    assert not (tmp_path / "state" / "approvals.db").exists()
    # its audit trail is found from the same --db, as every command takes it
    trail = subprocess.run(
        [sys.executable, "-m", "runbook", "audit", "show", "--db", db.group(1), "--format",
         "json"], env=_env(tmp_path), capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    events = {(e["proposal"], e["event"]) for e in map(json.loads, trail)}
    assert (queue["memory-limit"]["id"], "denied") in events
    assert (queue["shm-size-limit"]["id"], "approved") in events


def test_the_demo_without_a_terminal_lists_the_proposals_and_the_next_commands(
    tmp_path: Path,
) -> None:
    textfiles = tmp_path / "textfiles"
    textfiles.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "runbook", "demo", "--run-dir", str(tmp_path / "run")],
        # a real textfile directory and webhook in the environment: the demo's scratch queue
        # must reach neither (port 9 on loopback: nothing listens, a send would warn)
        env={**_env(tmp_path), "RUNBOOK_TEXTFILE_DIR": str(textfiles),
             "RUNBOOK_WEBHOOK_URL": "http://127.0.0.1:9/hook"},
        capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    assert "approve / deny / skip" not in proc.stdout
    ids = re.findall(r"queued: runbook approvals show (p[0-9a-f]+)", proc.stdout)
    assert len(ids) == 2, proc.stdout
    db = re.search(r"runbook approvals list --db (\S+)", proc.stdout)
    assert db, proc.stdout
    queue = _queue(tmp_path, db.group(1))
    assert {p["state"] for p in queue.values()} == {"pending"}
    assert {p["id"] for p in queue.values()} == set(ids)
    # nothing was patched without an approval
    manifest = Path(db.group(1)).parent / "workload.yaml"
    assert "sizeLimit" not in manifest.read_text()
    assert f"runbook report {tmp_path / 'run'}" in proc.stdout
    assert list(textfiles.iterdir()) == [] and "webhook" not in proc.stderr, proc.stderr
    # every closing suggestion that names no node of yours runs, as printed, on the demo
    suggested = [
        line.split("  #")[0].strip()
        for line in proc.stdout.split("\nnext:\n", 1)[1].splitlines()
        if line.strip().startswith("runbook ") and "NODE" not in line
    ]
    assert len(suggested) == 4, suggested  # report, list, show × 2
    for command in suggested:
        ran = subprocess.run(
            [sys.executable, "-m", "runbook", *shlex.split(command)[1:]], env=_env(tmp_path),
            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert ran.returncode == 0, (command, ran.stderr)
