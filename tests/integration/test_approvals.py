"""The approval queue end to end, through the real CLI: a replayed shm-exhausted incident queues
a shm-size-limit proposal against a workload manifest in a real Git checkout; approving runs
the real playbook through ansible-runner (check mode, then the real run) and patches the
manifest with the real `kubectl patch --local`; the audit trail is verified by the CLI.

No Kubernetes API is involved (file mode: the patched manifest goes to the Git checkout).
"""

from __future__ import annotations

import getpass
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.integration.conftest import cli_env
from tests.tools import bundles, manifests

pytestmark = pytest.mark.ansible

BUNDLE = bundles.path("shm-exhausted")

JOB = manifests.GPU_JOB


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    return make_checkout(tmp_path)


def make_checkout(tmp_path: Path) -> Path:
    """A Git checkout holding the workload's manifest (job.yaml, one commit)."""
    repo = tmp_path / "deploy"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "sre@example.com")
    git(repo, "config", "user.name", "SRE")
    (repo / "job.yaml").write_text(JOB)
    git(repo, "add", "job.yaml")
    git(repo, "commit", "-qm", "train-llm job")
    return repo


def queue(cli, checkout: Path, *extra: str) -> str:  # type: ignore[no-untyped-def]
    """Run the runbook non-interactively; the one queued shm-size-limit proposal's id."""
    result = cli("run", "nccl-init-failure", "--target", f"replay://{BUNDLE}", "--no-input",
                 "--var", f"manifest={checkout / 'job.yaml'}", *extra, timeout=120)
    assert result.rc == 0, result.stderr
    listed = cli("approvals", "list", "--format", "json")
    assert listed.rc == 0, listed.stderr
    items = [p for p in json.loads(listed.stdout) if p["kind"] == "shm-size-limit"]
    assert len(items) == 1, listed.stdout
    assert items[0]["state"] == "pending"
    return str(items[0]["id"])


def audit_events(cli, pid: str) -> list[str]:  # type: ignore[no-untyped-def]
    shown = cli("audit", "show", "--proposal", pid, "--format", "json")
    assert shown.rc == 0, shown.stderr
    return [json.loads(line)["event"] for line in shown.stdout.splitlines()]


def size_limit(path: Path) -> str | None:
    doc = yaml.safe_load(path.read_text())
    volume = doc["spec"]["template"]["spec"]["volumes"][0]
    return volume["emptyDir"].get("sizeLimit")


def test_no_input_queues_the_proposal_and_changes_nothing(cli, checkout: Path) -> None:
    pid = queue(cli, checkout)
    assert (checkout / "job.yaml").read_text() == JOB
    shown = cli("approvals", "show", pid)
    assert shown.rc == 0, shown.stderr
    # the evidence it rests on and the exact playbook and variables
    assert "posix_fallocate" in shown.stdout
    assert "playbooks/shm-size-limit.yml" in shown.stdout
    assert "workload_patch_manifest" in shown.stdout
    # its state is shown, and no field left empty pads a line's end
    head = shown.stdout.splitlines()
    assert head[0].endswith(" [pending]"), shown.stdout
    assert [r for r in head if r.startswith("  first anomaly: ")] == [
        "  first anomaly: nccl/nccl.worker-0.88.log:3"
    ], shown.stdout
    assert audit_events(cli, pid) == ["proposed"]
    listed = cli("approvals", "list")  # a pipe: whole lines, no padding at their ends
    rows = listed.stdout.splitlines()
    assert rows[0].split()[:3] == ["ID", "STATE", "KIND"] and any(pid in r for r in rows[1:])
    assert not [r for r in rows if r != r.rstrip()], rows


def test_approve_runs_check_then_apply_once_and_the_size_comes_from_the_measurement(
    cli, checkout: Path
) -> None:
    pid = queue(cli, checkout)
    approved = cli("approvals", "approve", pid, "--as", "alice", timeout=180)
    assert approved.rc == 0, approved.stdout + approved.stderr
    # the bundle's /dev/shm held 64 GiB when NCCL failed; headroom 1.25 → 80 GiB, not a constant
    assert size_limit(checkout / "job.yaml") == "80Gi"
    assert audit_events(cli, pid) == ["proposed", "approved", "check", "executed"]
    shown = json.loads(cli("approvals", "show", pid, "--format", "json").stdout)
    assert shown["state"] == "succeeded"
    assert shown["decided_by"].endswith(" as alice")  # the OS user, and the name it gave
    again = cli("approvals", "approve", pid, timeout=60)
    assert again.rc == 1 and "never run twice" in again.stderr, again.stderr
    assert audit_events(cli, pid).count("executed") == 1
    verified = cli("audit", "verify")
    assert verified.rc == 0 and "chain intact" in verified.stdout, verified.stderr


def test_two_people_approving_at_the_same_moment_execute_it_once(
    cli, checkout: Path, tmp_path: Path
) -> None:
    pid = queue(cli, checkout)
    env = cli_env(tmp_path)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "runbook", "approvals", "approve", pid, "--as", who],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for who in ("alice", "bob")
    ]
    outcomes = []
    for proc in procs:
        out, err = proc.communicate(timeout=180)
        outcomes.append((proc.returncode, out, err))
    rcs = sorted(rc for rc, _, _ in outcomes)
    assert rcs == [0, 1], outcomes
    loser = next(err for rc, _, err in outcomes if rc == 1)
    assert "already being executed" in loser or "never run twice" in loser, loser
    events = audit_events(cli, pid)
    assert events.count("approved") == 1 and events.count("executed") == 1, events
    applies = list((tmp_path / "state" / "remedies").glob("*/ansible-apply-*"))
    assert len(applies) == 1, applies
    assert size_limit(checkout / "job.yaml") == "80Gi"


def test_deny_records_the_reason_and_changes_nothing(cli, checkout: Path) -> None:
    pid = queue(cli, checkout)
    missing = cli("approvals", "deny", pid)
    assert missing.rc == 2 and "--reason" in missing.stderr
    denied = cli("approvals", "deny", pid, "--reason", "change freeze until Monday")
    assert denied.rc == 0, denied.stderr
    shown = json.loads(cli("approvals", "show", pid, "--format", "json").stdout)
    assert (shown["state"], shown["reason"]) == ("denied", "change freeze until Monday")
    assert (checkout / "job.yaml").read_text() == JOB
    late = cli("approvals", "approve", pid)
    assert late.rc == 1 and "denied" in late.stderr
    assert audit_events(cli, pid) == ["proposed", "denied"]


def test_a_stale_proposal_is_refused_with_the_reason(cli, checkout: Path, tmp_path: Path) -> None:
    config = tmp_path / "config" / "nccl-runbook" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text("approvals:\n  ttl: 1s\n")
    pid = queue(cli, checkout)
    time.sleep(1.2)
    refused = cli("approvals", "approve", pid)
    assert refused.rc == 1 and "stale" in refused.stderr and "TTL of 1 s" in refused.stderr
    assert "0.0 h" not in refused.stderr  # a TTL of seconds reads as seconds
    assert (checkout / "job.yaml").read_text() == JOB
    shown = json.loads(cli("approvals", "show", pid, "--format", "json").stdout)
    assert shown["state"] == "refused" and "stale" in shown["reason"]


def test_only_configured_approvers_may_approve(cli, checkout: Path, tmp_path: Path) -> None:
    """The approver is the OS user: `--as` a listed name counts only where the config's
    delegation lets this OS user act as it; deny is checked like approve."""
    me = getpass.getuser()
    config = tmp_path / "config" / "nccl-runbook" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text("approvers: [carol]\n")
    pid = queue(cli, checkout)
    for args in (("approve", pid), ("approve", pid, "--as", "mallory"),
                 ("approve", pid, "--as", "carol"), ("deny", pid, "--reason", "no")):  # fmt: skip
        refused = cli("approvals", *args)
        assert refused.rc == 1, (args, refused.stderr)
        assert "may not" in refused.stderr, refused.stderr
    shown = json.loads(cli("approvals", "show", pid, "--format", "json").stdout)
    assert shown["state"] == "pending"  # someone allowed can still decide
    assert (checkout / "job.yaml").read_text() == JOB
    config.write_text(f"approvers: [carol]\ndelegation: {{{me}: [carol]}}\n")
    ok = cli("approvals", "approve", pid, "--as", "carol", timeout=180)
    assert ok.rc == 0, ok.stderr
    shown = json.loads(cli("approvals", "show", pid, "--format", "json").stdout)
    assert shown["decided_by"] == f"{me} as carol"


def test_audit_verify_fails_after_an_entry_is_edited(cli, checkout: Path, tmp_path: Path) -> None:
    pid = queue(cli, checkout)
    assert cli("approvals", "deny", pid, "--reason", "not needed").rc == 0
    log = tmp_path / "state" / "audit.jsonl"
    lines = log.read_text().splitlines()
    entry = json.loads(lines[-1])
    assert entry["event"] == "denied"
    entry["event"] = "approved"
    lines[-1] = json.dumps(entry)
    log.write_text("\n".join(lines) + "\n")
    broken = cli("audit", "verify")
    assert broken.rc == 1
    assert f"line {len(lines)}: content does not match its hash" in broken.stderr


def test_a_playbook_failing_halfway_is_recorded_failed_and_never_retried(
    cli, tmp_path: Path
) -> None:
    """The manifest is not in a Git checkout but a commit is asked for: the check run passes
    (it commits nothing), the real run writes the file and then fails at the commit."""
    loose = tmp_path / "loose"
    loose.mkdir()
    (loose / "job.yaml").write_text(JOB)
    pid = queue(cli, loose, "--var", "git_commit=true")
    failed = cli("approvals", "approve", pid, timeout=180)
    assert failed.rc == 1, failed.stdout + failed.stderr
    assert "failed" in failed.stdout
    shown = json.loads(cli("approvals", "show", pid, "--format", "json").stdout)
    assert shown["state"] == "failed"
    assert shown["result"]["stage"] == "apply"
    assert any("git" in line for line in shown["result"]["failed"]), shown["result"]["failed"]
    assert audit_events(cli, pid) == ["proposed", "approved", "check", "failed"]
    again = cli("approvals", "approve", pid, timeout=60)
    assert again.rc == 1 and "never run twice" in again.stderr


_CLAIM = """
import os, sys, time
from pathlib import Path
from runbook.remedies.store import Store
store = Store(Path(sys.argv[1]))
store.claim(sys.argv[2], actor="approver")
print("claimed", flush=True)
if sys.argv[3] == "die":
    os.kill(os.getpid(), 9)  # SIGKILLed mid-playbook: nothing finishes the proposal
time.sleep(600)
"""


def test_a_proposal_whose_approver_was_killed_is_seen_and_recovered_never_rerun(
    cli, checkout: Path, tmp_path: Path
) -> None:
    """A claim whose process is gone leaves the proposal `running`: `list` says the process
    is gone, approve says how to recover, `recover` marks it failed (audited) and it is never
    run; a claim whose process still lives is not recovered."""
    pid = queue(cli, checkout)
    db = tmp_path / "state" / "approvals.db"
    env = cli_env(tmp_path)
    alive = subprocess.Popen([sys.executable, "-c", _CLAIM, str(db), pid, "live"],
                             stdout=subprocess.PIPE, text=True, env=env)  # fmt: skip
    try:
        assert alive.stdout is not None and alive.stdout.readline().strip() == "claimed"
        busy = cli("approvals", "recover", pid)
        assert busy.rc == 1 and "still being executed" in busy.stderr, busy.stderr
    finally:
        alive.kill()
        alive.wait()
        if alive.stdout is not None:
            alive.stdout.close()
    listed = cli("approvals", "list")
    assert "running, process gone" in listed.stdout, listed.stdout
    again = cli("approvals", "approve", pid)
    assert again.rc == 1 and f"approvals recover {pid}" in again.stderr, again.stderr
    recovered = cli("approvals", "recover", pid)
    assert recovered.rc == 0, recovered.stderr
    shown = json.loads(cli("approvals", "show", pid, "--format", "json").stdout)
    assert shown["state"] == "failed" and shown["result"]["stage"] == "recovered"
    assert audit_events(cli, pid)[-1] == "recovered"
    assert cli("approvals", "recover", pid).rc == 1  # once
    assert cli("approvals", "approve", pid).rc == 1  # never run
    assert (checkout / "job.yaml").read_text() == JOB


def test_a_killed_claim_is_recovered_the_same_way(cli, checkout: Path, tmp_path: Path) -> None:
    pid = queue(cli, checkout)
    died = subprocess.run(
        [sys.executable, "-c", _CLAIM, str(tmp_path / "state" / "approvals.db"), pid, "die"],
        capture_output=True, text=True, env=cli_env(tmp_path), timeout=60, check=False,
    )  # fmt: skip
    assert died.returncode == -9, died.stderr
    assert cli("approvals", "recover", pid).rc == 0


def test_db_is_taken_after_the_subcommand_as_run_takes_it(  # type: ignore[no-untyped-def]
    cli, checkout: Path, tmp_path: Path
) -> None:
    db = tmp_path / "team.db"
    ran = cli("run", "nccl-init-failure", "--target", f"replay://{BUNDLE}", "--no-input",
              "--var", f"manifest={checkout / 'job.yaml'}", "--db", str(db), timeout=120)
    assert ran.rc == 0, ran.stderr
    after = cli("approvals", "list", "--db", str(db), "--format", "json")
    assert after.rc == 0, after.stderr
    (proposal,) = [p for p in after.json() if p["kind"] == "shm-size-limit"]
    before = cli("approvals", "--db", str(db), "list", "--format", "json")
    assert [p["id"] for p in before.json()] == [p["id"] for p in after.json()]
    shown = cli("approvals", "show", proposal["id"], "--db", str(db))
    assert shown.rc == 0 and proposal["id"] in shown.stdout, shown.stderr
    default = cli("approvals", "list", "--format", "json")  # the default store holds none
    assert default.rc == 0 and default.json() == []
