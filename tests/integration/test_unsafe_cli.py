"""Jinja planted in what the CLI hands Ansible is never run, end to end through the real CLI:
a workload manifest whose comment holds a lookup, a `--var manifest_dest` whose path holds an
expression, queued by `run --no-input`, then `approvals preview` (check mode, documented as
changing nothing), `approvals approve` (check mode and the real run), and the guided prompt's
automatic check-mode diff answered with `skip`.

A lookup that ran would create the marker file; an expression that ran would write the
manifest at the path it renders to (`6*7` → `42`) instead of the path as typed. Both are
checked on the file system, not inferred from our own code. tests/ansible/test_unsafe_vars.py
shows the same values handed to ansible-runner the plain way do run.

The workload is a manifest in a real Git checkout (file mode); no Kubernetes API is involved.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pexpect
import pytest

from tests.integration.conftest import cli_env
from tests.integration.test_approvals import BUNDLE, JOB, git

pytestmark = pytest.mark.ansible


def lookup(marker: Path) -> str:
    return "{{ lookup('ansible.builtin.pipe', 'touch " + str(marker) + "') }}"


@pytest.fixture
def hostile(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A checkout whose manifest carries a planted lookup in a comment; the marker that lookup
    would create; the destination path with a planted expression in its name."""
    marker = tmp_path / "pwned"
    repo = tmp_path / "deploy"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "job.yaml").write_text(f"# {lookup(marker)}\n{JOB}# {{% set x = 1 %}}\n")
    dest = repo / "out-{{ 6*7 }}.yaml"
    return repo / "job.yaml", marker, dest


def test_preview_and_approve_run_no_jinja_from_the_manifest_or_a_var(
    cli, hostile: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    manifest, marker, dest = hostile
    ran = cli("run", "nccl-init-failure", "--target", f"replay://{BUNDLE}", "--no-input",
              "--var", f"manifest={manifest}", "--var", f"manifest_dest={dest}", timeout=120)
    assert ran.rc == 0, ran.stderr
    listed = cli("approvals", "list", "--format", "json")
    (proposal,) = [p for p in json.loads(listed.stdout) if p["kind"] == "shm-size-limit"]
    # the plan carries the text as typed and as read
    assert proposal["plan"]["extravars"]["workload_patch_dest"] == str(dest)
    assert lookup(marker) in proposal["plan"]["extravars"]["workload_patch_content"]

    previewed = cli("approvals", "preview", proposal["id"], timeout=180)
    assert previewed.rc == 0, previewed.stdout + previewed.stderr
    assert "sizeLimit: 80Gi" in previewed.stdout
    assert not marker.exists(), "approvals preview ran a lookup from the manifest"
    assert not dest.exists() and not (dest.parent / "out-42.yaml").exists()

    approved = cli("approvals", "approve", proposal["id"], timeout=180)
    assert approved.rc == 0, approved.stdout + approved.stderr
    assert not marker.exists(), "approvals approve ran a lookup from the manifest"
    assert not (dest.parent / "out-42.yaml").exists(), "the destination path was templated"
    written = dest.read_text()
    assert lookup(marker) in written and "{% set x = 1 %}" in written
    assert "sizeLimit: 80Gi" in written
    assert manifest.read_text().startswith(f"# {lookup(marker)}\n")  # the source untouched


def test_the_prompts_check_mode_diff_runs_no_jinja_even_when_skipped(
    hostile: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    manifest, marker, dest = hostile
    env = cli_env(tmp_path)
    env["TERM"] = "dumb"
    child = pexpect.spawn(
        sys.executable,
        ["-m", "runbook", "run", "nccl-init-failure", "--target", f"replay://{BUNDLE}",
         "--var", f"manifest={manifest}", "--var", f"manifest_dest={dest}"],
        env=env, encoding="utf-8", timeout=120, dimensions=(60, 200),
    )  # fmt: skip
    child.expect("what would change:")
    child.expect(r"\+\s+sizeLimit: 80Gi")
    child.expect("approve / deny / skip")
    assert not marker.exists(), "the check-mode diff ran a lookup from the manifest"
    child.sendline("s")
    child.expect("left in the queue")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    assert not marker.exists()
    assert not dest.exists() and not (dest.parent / "out-42.yaml").exists()
