"""The workload-patch remedy through ansible-runner, as the approval flow runs it: the check
pass (its diff is what the approver sees), the real pass, and a rerun. The patch is rendered
by the real `kubectl patch --local` (offline; no API server involved in file mode).

memory-limit.yml is the same play over the same role (only the patch differs): its merge
patch of a custom resource is what molecule/workload_patch converges, and ansible-lint
syntax-checks the playbook itself."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.tools.ansible_env import run_playbook, runner_output, task_results

pytestmark = pytest.mark.ansible

SAMPLE = Path(__file__).with_name("data") / "trainer-job.yaml"
DEST_TASK = "Write the patched manifest to the destination."
SHM_PATCH = {"spec": {"template": {"spec": {"volumes": [
    {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "48Gi"}}]}}}}
SHM_KUSTOMIZE = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: trainer
  namespace: ml
spec:
  template:
    spec:
      volumes:
        - name: dshm
          emptyDir:
            medium: Memory
            sizeLimit: 48Gi
"""


def diffs_by_task(runner: Any) -> dict[str, list[dict[str, Any]]]:
    """Each task's non-empty diffs, as ansible-runner's events carry them."""
    found: dict[str, list[dict[str, Any]]] = {}
    for data in task_results(runner, "ok"):
        diff = data.get("res", {}).get("diff") or []
        diffs = [d for d in (diff if isinstance(diff, list) else [diff]) if d]
        if diffs:
            found.setdefault(data["task"], []).extend(diffs)
    return found


def test_shm_size_limit_check_shows_the_diff_then_the_real_run_writes_it_once(
    ansible_env: dict[str, str], tmp_path: Path
) -> None:
    manifest = tmp_path / "gitops" / "trainer-job.yaml"
    manifest.parent.mkdir()
    shutil.copy(SAMPLE, manifest)
    manifest.chmod(0o664)
    original = manifest.read_bytes()
    out = tmp_path / "proposal"
    extravars = {
        "workload_patch_manifest": str(manifest),
        "workload_patch_patch": json.dumps(SHM_PATCH),
        "workload_patch_kustomize": SHM_KUSTOMIZE,
        "workload_patch_output_dir": str(out),
        "workload_patch_apply": "file",
    }

    check = run_playbook(tmp_path / "run-check", "shm-size-limit.yml", envvars=ansible_env,
                         extravars=extravars, cmdline="--check --diff")
    assert check.status == "successful", runner_output(check)
    diffs = diffs_by_task(check)
    # the approver sees one change: the manifest, before and after, nothing else
    assert list(diffs) == [DEST_TASK], diffs
    (diff,) = diffs[DEST_TASK]
    assert diff["before"] == original.decode()
    assert diff["after_header"] == str(manifest)
    before_volumes = yaml.safe_load(diff["before"])["spec"]["template"]["spec"]["volumes"]
    after_volumes = yaml.safe_load(diff["after"])["spec"]["template"]["spec"]["volumes"]
    assert before_volumes == [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    assert after_volumes == [{"name": "dshm",
                              "emptyDir": {"medium": "Memory", "sizeLimit": "48Gi"}}]
    assert manifest.read_bytes() == original, "check mode changed the manifest"
    assert not out.exists(), "check mode wrote the output directory"
    assert check.stats["changed"] == {"localhost": 1}, "check mode reported other changes"

    real = run_playbook(tmp_path / "run-real", "shm-size-limit.yml", envvars=ansible_env,
                        extravars=extravars)
    assert real.status == "successful", runner_output(real)
    assert DEST_TASK in {d["task"] for d in task_results(real, "ok") if d["res"].get("changed")}
    assert manifest.read_text() == diff["after"], "the real run wrote other than check showed"
    assert manifest.stat().st_mode & 0o777 == 0o664, "the manifest's mode was not kept"
    assert (out / "patch.yaml").read_text() == SHM_KUSTOMIZE
    assert (out / "patched.yaml").read_text() == manifest.read_text()
    mtime = manifest.stat().st_mtime_ns

    again = run_playbook(tmp_path / "run-again", "shm-size-limit.yml", envvars=ansible_env,
                         extravars=extravars)
    assert again.status == "successful", runner_output(again)
    assert not again.stats["changed"], runner_output(again)
    assert manifest.stat().st_mtime_ns == mtime
