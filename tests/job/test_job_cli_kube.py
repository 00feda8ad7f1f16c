"""`runbook run … --job pytorchjob/NS/NAME` through the CLI, against the recorded Kubernetes
API double of tests/k8s (no API server can run here, and the double serves no `exec`): the job
resolves through real kubectl, every node is tried through its node-agent pod and recorded as
unreachable (exit 3, nothing read, nothing written to the cluster), and the job verdict still
carries the rank table from what the scheduler recorded — pods, GPUs, the OOMKilled worker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import cli_env
from tests.job.kube_objects import AGENT_NODES, TRAINING_JOBS, agent
from tests.k8s.fixtures import k8s_api, kubectl_env  # noqa: F401
from tests.sweep.helpers import runbook


@pytest.fixture
def cluster(k8s_api: Any) -> Iterator[Any]:  # noqa: F811
    k8s_api.state.load([TRAINING_JOBS])
    for node in AGENT_NODES:
        k8s_api.state.put(agent(node))
    k8s_api.clear_log()
    yield k8s_api


def test_a_pytorchjob_is_resolved_and_each_node_tried_through_its_agent(
    cluster: Any, tmp_path: Path
) -> None:
    env = {**cli_env(tmp_path), **kubectl_env(cluster, tmp_path)}
    run_dir = tmp_path / "run"
    result = runbook(
        [
            "run",
            "nccl-init-failure",
            "--job",
            "pytorchjob/ml/llama-ft",
            "--context",
            cluster.context,
            "--timeout-per-host",
            "20",
            "--no-input",
            "--format",
            "json",
            "--run-dir",
            str(run_dir),
        ],
        env,
    )
    assert result.rc == 3, result.stderr[-2000:]  # no node of the job could be read
    verdict = result.json()
    assert verdict["job"]["ref"] == "PyTorchJob/ml/llama-ft"
    assert verdict["root_cause"] == "inconclusive" and verdict["confidence"] == "low"
    nodes = {n["node"]: n for n in verdict["nodes"]}
    assert sorted(nodes) == ["gpu-node-01", "gpu-node-02"]
    assert all(n["status"] == "unreachable" for n in nodes.values())
    assert "kubectl exec failed" in nodes["gpu-node-01"]["error"]
    assert nodes["gpu-node-01"]["target"] == "kubectl://kube-system/node-agent-gpu-node-01"
    ranks = {r["rank"]: r for r in verdict["ranks"]}
    assert sorted(ranks) == list(range(16))
    oom = [r for r in ranks.values() if (r["exit"] or {}).get("oom_killed")]
    assert oom and {r["pod"] for r in oom} == {"llama-ft-worker-1"}
    assert all(r["exit"]["source"] == "scheduler" for r in oom)
    assert (run_dir / "job.json").exists() and "## Ranks" in (run_dir / "job.md").read_text()
    # the node-agent pods were exec'd into; nothing was written
    execs = [r for r in cluster.requests if r.path.endswith("/exec")]
    assert {r.path.split("/")[-2] for r in execs} == {
        "node-agent-gpu-node-01",
        "node-agent-gpu-node-02",
    }
    assert not [w for w in cluster.writes() if not w.path.endswith("/exec")]


def test_a_bad_job_reference_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = runbook(["run", "nccl-init-failure", "--job", "frobjob/x"], cli_env(tmp_path))
    assert result.rc == 2 and result.stderr.count("\n") == 1, result.stderr
    both = runbook(
        ["run", "nccl-init-failure", "--job", "slurm:1", "--target", "local"], cli_env(tmp_path)
    )
    assert both.rc == 2 and "--target" in both.stderr
    neither = runbook(["run", "nccl-init-failure"], cli_env(tmp_path))
    assert neither.rc == 2 and "--job" in neither.stderr
