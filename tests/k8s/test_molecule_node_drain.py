"""`molecule test -s node_drain`: converge, idempotence, verify, against the API double.

There is no API server on this machine, so the scenario's kubeconfig (passed in
NCCL_RUNBOOK_TEST_KUBECONFIG, read by molecule/node_drain/molecule.yml) points at
tests/k8s/apiserver.py, a double of the API seeded from objects in the shape `kubectl get -o json`
writes.
Molecule, ansible-playbook, kubernetes.core and the kubernetes client are real.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.k8s.fixtures import KubeApi
from tests.tools.ansible_env import REPO, VENV_BIN, ansible_environment

pytestmark = pytest.mark.ansible


def test_molecule_drains_once_then_changes_nothing_and_verifies(
    k8s_api: KubeApi, tmp_path: Path
) -> None:
    """Double of the API (no API server here): the idempotence converge writes nothing."""
    env = {
        **os.environ,
        **ansible_environment(tmp_path / "ansible"),
        "MOLECULE_EPHEMERAL_DIRECTORY": str(tmp_path / "molecule"),
        "NCCL_RUNBOOK_TEST_KUBECONFIG": str(k8s_api.kubeconfig),
        "NO_COLOR": "1",
    }
    env.pop("VIRTUAL_ENV", None)  # ansible-compat would cache under the venv otherwise
    proc = subprocess.run(
        [str(VENV_BIN / "molecule"), "test", "-s", "node_drain"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    for step in ("converge", "idempotence", "verify"):
        assert f"{step}: Executed: Successful" in out, out[-3000:]
    writes = [(w.method, w.path) for w in k8s_api.writes()]
    assert writes == [
        ("PATCH", "/api/v1/nodes/gpu-node-07"),
        ("POST", "/api/v1/namespaces/ml/pods/llm-serve-6d5f7c9b8-k2xqp/eviction"),
        ("POST", "/api/v1/namespaces/ml/pods/trainer-worker-3/eviction"),
    ]
