"""playbooks/shm-size-limit.yml with workload_patch_apply=cluster, against the API double.

There is no API server on this machine, so kubernetes.core.k8s talks to tests/k8s/apiserver.py,
a double of the API seeded from objects in the shape `kubectl get -o json` writes: the
llm-serve Deployment in namespace ml has an emptyDir {medium: Memory} /dev/shm volume and no
sizeLimit. The manifest the role patches is the Git form of that object
(tests/k8s/fixtures/llm-serve-deployment.yaml); `kubectl patch --local` renders the patch for
real, offline. (A Job's pod template is immutable: the double refuses such a patch with the
server's 422, see test_apiserver.py, so a Job's fix goes to its manifest,
workload_patch_apply=file.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import ansible_runner
import pytest

from tests.k8s.fixtures import KubeApi
from tests.tools.ansible_env import (
    ansible_environment,
    run_playbook,
    runner_output,
    task_result,
)

pytestmark = pytest.mark.ansible

FIXTURES = Path(__file__).parent / "fixtures"
APPLY = "Ensure the cluster object matches the patched manifest."


def shm_patch(size: str) -> str:
    return json.dumps(
        {
            "spec": {
                "template": {
                    "spec": {
                        "volumes": [
                            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": size}}
                        ]
                    }
                }
            }
        }
    )


def apply(
    api: KubeApi, tmp_path: Path, name: str, manifest: str, *, check: bool
) -> ansible_runner.Runner:
    return run_playbook(
        tmp_path / name,
        "shm-size-limit.yml",
        envvars=ansible_environment(tmp_path / "ansible"),
        extravars={
            "workload_patch_manifest": str(FIXTURES / manifest),
            "workload_patch_patch": shm_patch("24Gi"),
            "workload_patch_kustomize": "# the kustomize patch is not what this test is about\n",
            "workload_patch_output_dir": str(tmp_path / "out"),
            "workload_patch_apply": "cluster",
            "workload_patch_kubeconfig": str(api.kubeconfig),
            "workload_patch_context": api.context,
        },
        cmdline="--check --diff" if check else "--diff",
    )


def shm_volume(obj: dict[str, Any] | None) -> dict[str, Any]:
    assert obj is not None
    (volume,) = [v for v in obj["spec"]["template"]["spec"]["volumes"] if v["name"] == "dshm"]
    return volume


def test_check_mode_shows_the_servers_dry_run_diff_then_the_apply_sets_the_size_limit(
    k8s_api: KubeApi, tmp_path: Path
) -> None:
    """Double of the API (no API server here). Check mode: one PATCH with ?dryRun=All, its
    diff is the sizeLimit alone, nothing stored. Real run: the same strategic merge patch
    stored, volumes and containers merged by name (the server's defaults kept). A second run
    changes nothing."""
    before = k8s_api.state.get("deployments", "llm-serve", "ml")
    assert shm_volume(before) == {"emptyDir": {"medium": "Memory"}, "name": "dshm"}

    check = apply(k8s_api, tmp_path, "check", "llm-serve-deployment.yaml", check=True)
    assert check.status == "successful", runner_output(check)
    (dry,) = k8s_api.writes()
    assert dry.dry_run and dry.method == "PATCH"
    assert dry.path == "/apis/apps/v1/namespaces/ml/deployments/llm-serve"
    assert k8s_api.state.get("deployments", "llm-serve", "ml") == before
    shown = task_result(check, "ok", APPLY)["res"]
    assert shown["changed"] is True
    # the module's recursive diff of the live object and the server's dry-run answer
    volume = {"spec": {"template": {"spec": {"volumes": [{"emptyDir": {}, "name": "dshm"}]}}}}
    assert shown["diff"]["before"] == {**volume, "metadata": {"generation": 3}}
    volume["spec"]["template"]["spec"]["volumes"][0]["emptyDir"] = {"sizeLimit": "24Gi"}
    assert shown["diff"]["after"] == {**volume, "metadata": {"generation": 4}}

    k8s_api.clear_log()
    real = apply(k8s_api, tmp_path, "real", "llm-serve-deployment.yaml", check=False)
    assert real.status == "successful", runner_output(real)
    (patch,) = k8s_api.writes()
    assert not patch.dry_run and patch.status == 200
    assert patch.content_type == "application/strategic-merge-patch+json"
    after = k8s_api.state.get("deployments", "llm-serve", "ml")
    assert after is not None and before is not None
    assert shm_volume(after) == {
        "emptyDir": {"medium": "Memory", "sizeLimit": "24Gi"},
        "name": "dshm",
    }
    assert after["metadata"]["generation"] == before["metadata"]["generation"] + 1
    container = after["spec"]["template"]["spec"]["containers"][0]
    assert container["terminationMessagePath"] == "/dev/termination-log"  # server default kept
    assert container["readinessProbe"]["timeoutSeconds"] == 1
    assert task_result(real, "ok", APPLY)["res"]["changed"] is True

    again = apply(k8s_api, tmp_path, "again", "llm-serve-deployment.yaml", check=False)
    assert again.status == "successful", runner_output(again)
    assert task_result(again, "ok", APPLY)["res"]["changed"] is False
    assert k8s_api.state.get("deployments", "llm-serve", "ml") == after
