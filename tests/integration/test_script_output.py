"""What scripts and logs get from the real CLI: a run's JSON names its run directory, every time
in JSON is ISO 8601 UTC, one exit code per class of failure (a missing key file is bad input,
exit 2; a cluster out of reach is a target out of reach, exit 3, as with `kubectl://`), a bad
notify setting does not stop a command that sends no notice, and `run` takes the job flags
`collect` takes.

The incident is a recorded bundle replayed (`replay://`), no node needed; the `--job` test
points kubectl at a server address nothing listens on (no Kubernetes API is involved)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.integration.test_approvals import JOB
from tests.tools import bundles

BUNDLE = bundles.path("shm-exhausted")
ISO_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


def queued(cli, tmp_path: Path) -> tuple[Path, dict]:  # type: ignore[no-untyped-def,type-arg]
    """The shm-exhausted incident replayed by `run` into a store in `tmp_path` (its proposals
    queued against a manifest there): the store and the run's JSON."""
    manifest = tmp_path / "job.yaml"
    manifest.write_text(JOB)
    db = tmp_path / "approvals.db"
    run = cli("run", "nccl-init-failure", "--target", f"replay://{BUNDLE}", "--no-input",
              "--var", f"manifest={manifest}", "--db", str(db), "--format", "json")  # fmt: skip
    assert run.rc == 0, run.stderr
    return db, run.json()


def test_run_json_names_its_run_directory_for_resume_and_report(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _, verdict = queued(cli, tmp_path)
    run_dir = Path(verdict["run_dir"])
    assert (run_dir / "run.json").is_file() and (run_dir / "verdict.json").is_file()
    assert verdict["root_cause"] == "shm-exhausted"  # the verdict is all there, as before
    report = cli("report", str(run_dir))
    assert report.rc == 0 and "shm-exhausted" in report.stdout


def test_every_time_in_approvals_json_is_iso_8601_utc(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    db, _ = queued(cli, tmp_path)
    listed = cli("approvals", "list", "--db", str(db), "--format", "json")
    assert listed.rc == 0, listed.stderr
    proposals = listed.json()
    assert proposals
    for p in proposals:
        for key in ("created_at", "expires_at", "updated_at"):
            assert ISO_Z.match(p[key]), (key, p[key])
        assert p["decided_at"] is None  # not decided: null, not a number
    denied = cli("approvals", "deny", proposals[0]["id"], "--db", str(db), "--reason", "freeze",
                 "--format", "json")  # fmt: skip
    assert denied.rc == 0, denied.stderr
    assert ISO_Z.match(denied.json()["decided_at"])


def test_a_missing_key_file_is_one_line_and_exit_2(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Bad input, said before any connection (nothing listens on port 1 here)."""
    missing = tmp_path / "no-such-key"
    result = cli("run", "nccl-init-failure", "--target", "ssh://root@127.0.0.1:1",
                 "--identity", str(missing), "--no-input")  # fmt: skip
    assert result.rc == 2
    assert result.stderr.count("\n") == 1 and "Errno" not in result.stderr
    assert f"SSH key {missing} is not a file" in result.stderr


def test_a_job_whose_cluster_is_out_of_reach_exits_3_as_kubectl_targets_do(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
    )
    env = {"KUBECONFIG": str(kubeconfig)}
    job = cli("run", "nccl-init-failure", "--job", "pytorchjob/ml/llama-ft", "--no-input",
              extra_env=env)  # fmt: skip
    node = cli("run", "nccl-init-failure", "--target", "kubectl://kube-system/agent-x",
               "--no-input", extra_env=env)  # fmt: skip
    assert (job.rc, node.rc) == (3, 3), (job.stderr, node.stderr)
    assert job.stderr.count("\n") == 1 and "Traceback" not in job.stderr


def test_a_bad_notify_setting_warns_where_no_notice_is_sent(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    db, _ = queued(cli, tmp_path)
    env = {"RUNBOOK_WEBHOOK_FORMAT": "teams-ish"}
    listed = cli("approvals", "list", "--db", str(db), extra_env=env)
    assert listed.rc == 0, listed.stderr
    assert "warning:" in listed.stderr and "'teams-ish'" in listed.stderr
    assert "ID" in listed.stdout  # the queue is still shown
    # a command that would send a notice refuses the setting, in one line
    pid = json.loads(cli("approvals", "list", "--db", str(db), "--format", "json").stdout)[0]["id"]
    denied = cli("approvals", "deny", pid, "--db", str(db), "--reason", "x", extra_env=env)
    assert denied.rc == 2 and "'teams-ish'" in denied.stderr


def test_run_takes_the_job_flags_collect_takes(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    run_dir = tmp_path / "run"
    result = cli("run", "nccl-init-failure", "--target", f"replay://{BUNDLE}", "--no-input",
                 "--pod", "trainer-0", "-n", "ml", "--cgroup", "/sys/fs/cgroup/memory/kubepods/x",
                 "--run-dir", str(run_dir), "--db", str(tmp_path / "a.db"))  # fmt: skip
    assert result.rc == 0, result.stderr
    recorded = json.loads((run_dir / "run.json").read_text())["variables"]
    assert recorded["pod"] == "trainer-0" and recorded["namespace"] == "ml"
    assert recorded["cgroup_dir"] == "/sys/fs/cgroup/memory/kubepods/x"
    refused = cli("run", "nccl-init-failure", "--job", "pytorchjob/ml/x", "--pod", "p")
    assert refused.rc == 2 and "--pod, --namespace and --cgroup" in refused.stderr
