"""`--job KIND/NAMESPACE/NAME` end to end: real kubectl over real HTTPS against the recorded
Kubernetes API double of tests/k8s (no API server can run here), which now serves the
kubeflow.org group: PyTorchJob and TFJob (v1), MPIJob (v2beta1), seeded with
tests/k8s/fixtures/trainingjobs.json and node-agent pods on every node but gpu-node-09."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runbook.errors import JobError, UnreachableError
from runbook.job.resolve import resolve_job
from tests.job.kube_objects import AGENT_NODES, TRAINING_JOBS, agent
from tests.k8s.fixtures import k8s_api, kubectl_env  # noqa: F401


@pytest.fixture
def cluster(
    k8s_api: Any,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Any]:
    k8s_api.state.load([TRAINING_JOBS])
    for node in AGENT_NODES:
        k8s_api.state.put(agent(node))
    for key, value in kubectl_env(k8s_api, tmp_path).items():
        monkeypatch.setenv(key, value)
    k8s_api.clear_log()
    yield k8s_api


def reads(api: Any) -> list[tuple[str, str, str | None]]:
    return [
        (r.method, r.path, (r.query.get("labelSelector") or [None])[0])
        for r in api.requests
        if r.path.startswith(("/api/v1/", "/apis/kubeflow.org/", "/apis/batch/"))
        and r.path.count("/") > 3
    ]


def test_a_pytorchjob_resolves_through_kubectl_to_its_nodes_and_agents(cluster: Any) -> None:
    """The API is the recorded double (no API server can run here)."""
    spec = resolve_job("pytorchjobs/ml/llama-ft", kube_context=cluster.context)
    assert spec.ref == "PyTorchJob/ml/llama-ft"
    assert [(n.name, n.entry.target, n.entry.variables["pod"]) for n in spec.nodes] == [
        ("gpu-node-01", "kubectl://kube-system/node-agent-gpu-node-01", "llama-ft-master-0"),
        ("gpu-node-02", "kubectl://kube-system/node-agent-gpu-node-02", "llama-ft-worker-1"),
    ]
    assert spec.nodes[0].entry.kube_context == cluster.context
    assert [r.rank for r in spec.ranks] == list(range(16))
    assert {r.pod for r in spec.ranks if r.reason == "OOMKilled"} == {"llama-ft-worker-1"}
    # three reads (the workload, its pods, the agents) and nothing written
    assert reads(cluster) == [
        ("GET", "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/llama-ft", None),
        ("GET", "/api/v1/namespaces/ml/pods", "training.kubeflow.org/job-name=llama-ft"),
        ("GET", "/api/v1/namespaces/kube-system/pods", "app=node-agent"),
    ]
    assert not cluster.writes()


def test_an_mpijob_of_mpi_operator_v2beta1_resolves_with_its_launcher(cluster: Any) -> None:
    """The API is the recorded double (no API server can run here)."""
    spec = resolve_job("MPIJob/ml/bert-mpi", kube_context=cluster.context)
    assert [(n.name, n.ranks[:2]) for n in spec.nodes] == [
        ("gpu-node-08", (0, 1)),
        ("gpu-node-09", (8, 9)),
        ("cpu-node-01", (None,)),
    ]
    assert spec.details["apiVersion"] == "kubeflow.org/v2beta1"
    assert "no node-agent pod" in str(spec.nodes[1].entry.problem)
    assert reads(cluster)[0][1] == "/apis/kubeflow.org/v2beta1/namespaces/ml/mpijobs/bert-mpi"


def test_a_tfjob_with_an_unscheduled_worker_resolves_and_reports_it(cluster: Any) -> None:
    """The API is the recorded double (no API server can run here)."""
    spec = resolve_job("tfjob/ml/resnet-tf", kube_context=cluster.context)
    assert [n.name for n in spec.nodes] == ["gpu-node-03", "gpu-node-04", "cpu-node-01"]
    assert spec.details["unscheduled"] == ["resnet-tf-worker-1"]


def test_an_indexed_batch_job_is_found_by_its_own_selector(cluster: Any) -> None:
    """The API is the recorded double (no API server can run here)."""
    spec = resolve_job("job/ml/nccl-sweep", kube_context=cluster.context)
    assert [(n.name, n.ranks) for n in spec.nodes] == [
        ("gpu-node-05", (0, 1)),
        ("gpu-node-06", (2, 3)),
    ]
    selector = reads(cluster)[1][2]
    assert selector is not None and selector.startswith("batch.kubernetes.io/controller-uid=")
    assert reads(cluster)[0][1] == "/apis/batch/v1/namespaces/ml/jobs/nccl-sweep"


def test_a_job_that_does_not_exist_is_one_line(cluster: Any) -> None:
    """The API is the recorded double (no API server can run here)."""
    with pytest.raises(JobError) as err:
        resolve_job("PyTorchJob/ml/nope", kube_context=cluster.context)
    assert err.value.one_line() == "PyTorchJob ml/nope not found"


def test_a_job_without_pods_names_the_selectors_it_tried(cluster: Any) -> None:
    """The API is the recorded double (no API server can run here); the seeded
    ml/nccl-allreduce Job has no pods left."""
    with pytest.raises(JobError) as err:
        resolve_job("Job/ml/nccl-allreduce", kube_context=cluster.context)
    message = err.value.one_line()
    assert message.startswith("Job ml/nccl-allreduce has no pods (selector ")
    assert "batch.kubernetes.io/controller-uid=76300ee8" in message
    assert "job-name=nccl-allreduce" in message


def test_a_cluster_kubectl_cannot_reach_is_one_line(cluster: Any) -> None:
    """The API is the recorded double (no API server can run here); it is stopped here."""
    cluster.stop()
    # a cluster out of reach is a target out of reach (exit 3), as kubectl:// says it
    with pytest.raises(UnreachableError) as err:
        resolve_job("PyTorchJob/ml/llama-ft", kube_context=cluster.context, timeout=20)
    assert err.value.exit_code == 3
    assert "kubectl get PyTorchJob ml/llama-ft:" in err.value.one_line()
    assert "\n" not in err.value.one_line()
