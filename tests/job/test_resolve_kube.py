"""Kubernetes workloads → JobSpec, pure: real-shaped workload and pod objects (the seed of the
API double, tests/k8s/fixtures/trainingjobs.json) in, ranks, pods, nodes and GPUs out."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from runbook.errors import JobError
from runbook.job.kube_pods import layout_of, pod_facts
from runbook.job.models import JobSpec
from runbook.job.resolve_kube import (
    KINDS,
    job_pods,
    job_spec_from_kube,
    kube_kind,
    pod_selectors,
    resolve_kube_job,
    selector_string,
)
from tests.job.kube_objects import agents, pods_labelled, workload

JOB_NAME = "training.kubeflow.org/job-name"


def resolve(kind: str, name: str, job: dict[str, Any] | None = None) -> JobSpec:
    """What resolve_kube_job computes once kubectl has answered, without kubectl."""
    job = job or workload(kind, name)
    spec = KINDS[kind.lower()]
    selector = pod_selectors(spec, job)[0]
    key, value = selector.split(",")[0].split("=")
    pods = job_pods(spec, {"items": pods_labelled(key, value)})
    return job_spec_from_kube(kind, job, pods, agents(), selector=selector)


def by_rank(spec: JobSpec) -> dict[int | None, Any]:
    return {r.rank: r for r in spec.ranks}


def test_a_pytorchjob_master_is_rank_zero_and_each_pod_holds_its_torchrun_processes() -> None:
    spec = resolve("PyTorchJob", "llama-ft")
    assert spec.ref == "PyTorchJob/ml/llama-ft"
    # Master + 3 Workers, 4 GPUs and 4 processes each (PET_NPROC_PER_NODE), two pods per node
    assert [(n.name, n.ranks) for n in spec.nodes] == [
        ("gpu-node-01", tuple(range(0, 8))),
        ("gpu-node-02", tuple(range(8, 16))),
    ]
    first = spec.nodes[0].entry
    assert first.target == "kubectl://kube-system/node-agent-gpu-node-01"
    assert first.variables == {
        "pod": "llama-ft-master-0",
        "pods": ["llama-ft-master-0", "llama-ft-worker-0"],
        "namespace": "ml",
        "nodes": 2,
    }
    assert spec.nodes[1].entry.variables["pods"] == ["llama-ft-worker-1", "llama-ft-worker-2"]
    ranks = by_rank(spec)
    assert [r.rank for r in spec.ranks] == list(range(16))
    master, oom, running = ranks[3], ranks[8], ranks[4]
    assert (master.pod, master.role, master.node, master.container) == (
        "llama-ft-master-0",
        "Master",
        "gpu-node-01",
        "pytorch",
    )
    assert (master.phase, master.exit_code, master.signal, master.reason) == (
        "Failed",
        1,
        None,
        "Error",
    )
    assert (oom.pod, oom.role, oom.exit_code, oom.signal, oom.reason) == (
        "llama-ft-worker-1",
        "Worker",
        137,
        9,
        "OOMKilled",
    )
    assert (running.pod, running.phase, running.exit_code) == ("llama-ft-worker-0", "Running", None)
    assert running.started_at == "2025-03-11T09:00:21Z"
    # only the count of GPUs is known (the device plugin picks them at run time)
    assert master.gpus == () and spec.details["pods"]["llama-ft-master-0"]["gpu_count"] == 4
    assert (spec.details["state"], spec.details["reason"]) == ("Failed", "PyTorchJobFailed")
    assert spec.details["selector"] == "training.kubeflow.org/job-name=llama-ft"
    assert spec.details["unscheduled"] == [] and spec.details["unreachable"] == {}


def test_a_pytorchjob_without_a_master_numbers_its_workers_from_zero() -> None:
    spec = resolve("PyTorchJob", "trainer")
    # the four workers of pods.json, `torchrun --nproc-per-node=8` on one node each
    assert [(n.name, n.ranks[0], n.ranks[-1]) for n in spec.nodes] == [
        ("gpu-node-04", 0, 7),
        ("gpu-node-05", 8, 15),
        ("gpu-node-06", 16, 23),
        ("gpu-node-07", 24, 31),
    ]
    assert by_rank(spec)[17].pod == "trainer-worker-2"
    assert spec.details["state"] == "Running"


def test_a_tfjob_chief_is_rank_zero_ps_holds_no_rank_and_an_unscheduled_worker_is_reported() -> (
    None
):
    spec = resolve("TFJob", "resnet-tf")
    ranks = by_rank(spec)
    assert (ranks[0].pod, ranks[0].role, ranks[0].reason) == ("resnet-tf-chief-0", "Chief", "Error")
    assert (ranks[1].pod, ranks[1].node) == ("resnet-tf-worker-0", "gpu-node-04")
    # worker-1 never got a node: it is a rank without one, with the scheduler's reason
    pending = ranks[2]
    assert (pending.pod, pending.node, pending.phase, pending.reason) == (
        "resnet-tf-worker-1",
        "",
        "Pending",
        "Unschedulable",
    )
    assert (ranks[None].pod, ranks[None].role, ranks[None].node) == (
        "resnet-tf-ps-0",
        "PS",
        "cpu-node-01",
    )
    assert [(n.name, n.ranks) for n in spec.nodes] == [
        ("gpu-node-03", (0,)),
        ("gpu-node-04", (1,)),
        ("cpu-node-01", (None,)),
    ]
    assert spec.details["unscheduled"] == ["resnet-tf-worker-1"]
    assert all(n.entry.variables["nodes"] == 3 for n in spec.nodes)


def test_an_mpijob_worker_holds_its_slots_and_the_launcher_holds_no_rank() -> None:
    spec = resolve("MPIJob", "bert-mpi")
    assert [(n.name, n.ranks) for n in spec.nodes] == [
        ("gpu-node-08", tuple(range(0, 8))),
        ("gpu-node-09", tuple(range(8, 16))),
        ("cpu-node-01", (None,)),
    ]
    launcher = by_rank(spec)[None]
    assert (launcher.pod, launcher.role, launcher.exit_code) == (
        "bert-mpi-launcher-x7k2q",
        "Launcher",
        1,
    )
    # the operator blanks the launcher's NVIDIA_VISIBLE_DEVICES: no GPU, not "all"
    assert launcher.gpus == ()
    # gpu-node-09 has no node agent: its node is kept, with why it cannot be reached
    unreachable = spec.nodes[1].entry
    assert unreachable.problem_status == "unreachable"
    assert "no node-agent pod" in str(unreachable.problem)
    assert spec.details["unreachable"] == {"gpu-node-09": unreachable.problem}
    assert by_rank(spec)[12].signal == 9


def test_run_launcher_as_worker_puts_the_launcher_first_in_the_hostfile() -> None:
    job = copy.deepcopy(workload("MPIJob", "bert-mpi"))
    job["spec"]["runLauncherAsWorker"] = True
    spec = resolve("MPIJob", "bert-mpi", job)
    assert by_rank(spec)[0].pod == "bert-mpi-launcher-x7k2q"
    assert by_rank(spec)[8].pod == "bert-mpi-worker-0"
    assert by_rank(spec)[23].pod == "bert-mpi-worker-1"


def test_an_indexed_job_numbers_pods_by_completion_index_and_splits_pinned_gpus() -> None:
    spec = resolve("Job", "nccl-sweep")
    # the Job's own selector (the controller uid the API server set) finds its pods
    assert spec.details["selector"].startswith("batch.kubernetes.io/controller-uid=")
    ranks = by_rank(spec)
    assert [(r, ranks[r].node, ranks[r].gpus) for r in (0, 1)] == [
        (0, "gpu-node-05", ("0",)),
        (1, "gpu-node-05", ("1",)),
    ]
    assert ranks[3].gpus == ("GPU-8a9b0c1d-3e4f-4a5b-8c6d-7e8f9a0b1c2d",)
    assert (ranks[0].reason, ranks[0].exit_code, ranks[0].signal) == ("OOMKilled", 137, 9)
    assert [n.entry.variables["pod"] for n in spec.nodes] == [
        "nccl-sweep-0-7hq2d",
        "nccl-sweep-1-m4x8z",
    ]


def _pod(**container: Any) -> dict[str, Any]:
    pod = copy.deepcopy(pods_labelled("batch.kubernetes.io/job-name", "nccl-sweep")[0])
    pod["metadata"]["labels"].pop("batch.kubernetes.io/job-completion-index")
    pod["metadata"].pop("annotations")
    pod["spec"]["containers"][0].update(container)
    return pod


def test_a_non_indexed_job_pod_has_no_rank_unless_its_env_gives_one() -> None:
    layout = layout_of("Job", workload("Job", "nccl-sweep"))
    assert pod_facts(_pod(command=["all_reduce_perf"]), layout).ranks == (None,)
    ranked = _pod(command=["python", "train.py"], env=[{"name": "RANK", "value": "5"}])
    assert pod_facts(ranked, layout).ranks == (5,)


def test_a_restarted_container_reports_how_its_previous_run_ended() -> None:
    pod = copy.deepcopy(pods_labelled(JOB_NAME, "trainer")[0])
    status = pod["status"]["containerStatuses"][0]
    status["restartCount"] = 1
    status["lastState"] = {
        "terminated": {
            "exitCode": 137,
            "reason": "OOMKilled",
            "startedAt": "2025-03-10T22:14:09Z",
            "finishedAt": "2025-03-10T23:02:41Z",
        }
    }
    facts = pod_facts(pod, layout_of("PyTorchJob", workload("PyTorchJob", "trainer")))
    assert (facts.phase, facts.exit_code, facts.signal, facts.reason, facts.restarts) == (
        "Running",
        137,
        9,
        "OOMKilled",
        1,
    )


def test_a_job_whose_pods_are_all_unscheduled_is_one_clear_error() -> None:
    job = workload("TFJob", "resnet-tf")
    pending = [p for p in pods_labelled(JOB_NAME, "resnet-tf") if not p["spec"].get("nodeName")]
    with pytest.raises(JobError, match=r"TFJob ml/resnet-tf: no pod of the job is on a node: "):
        job_spec_from_kube("TFJob", job, pending, agents(), selector="x")


def test_a_pod_of_another_operators_job_with_the_same_name_is_left_out() -> None:
    pods = pods_labelled(JOB_NAME, "llama-ft")
    stranger = copy.deepcopy(pods[0])
    stranger["metadata"]["name"] = "llama-ft-chief-0"
    stranger["metadata"]["labels"]["training.kubeflow.org/operator-name"] = "tfjob-controller"
    kept = job_pods(KINDS["pytorchjob"], {"items": [*pods, stranger]})
    assert {p["metadata"]["name"] for p in kept} == {p["metadata"]["name"] for p in pods}


def test_pods_are_found_by_the_workloads_own_selector_then_the_older_labels() -> None:
    job = workload("Job", "nccl-sweep")
    uid = job["metadata"]["uid"]
    assert pod_selectors(KINDS["job"], job) == [
        f"batch.kubernetes.io/controller-uid={uid}",
        "job-name=nccl-sweep",
    ]
    assert pod_selectors(KINDS["pytorchjob"], workload("PyTorchJob", "llama-ft")) == [
        "training.kubeflow.org/job-name=llama-ft",
        "pytorch-job-name=llama-ft",
        "job-name=llama-ft,group-name=kubeflow.org",
    ]
    assert (
        selector_string(
            {
                "matchLabels": {"app": "x"},
                "matchExpressions": [
                    {"key": "tier", "operator": "In", "values": ["a", "b"]},
                    {"key": "gpu", "operator": "Exists"},
                    {"key": "spot", "operator": "DoesNotExist"},
                    {"key": "zone", "operator": "NotIn", "values": ["z1"]},
                ],
            }
        )
        == "app=x,tier in (a,b),gpu,!spot,zone notin (z1)"
    )


def test_older_operator_labels_still_give_role_and_rank() -> None:
    pod = copy.deepcopy(pods_labelled(JOB_NAME, "llama-ft")[1])  # worker-0
    pod["metadata"]["labels"] = {
        "pytorch-job-name": "llama-ft",
        "pytorch-replica-type": "worker",
        "pytorch-replica-index": "0",
    }
    pod["spec"]["containers"][0]["env"] = []
    facts = pod_facts(pod, layout_of("PyTorchJob", workload("PyTorchJob", "llama-ft")))
    assert (facts.role, facts.ranks) == ("Worker", (1,))


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("PyTorchJob", "PyTorchJob"),
        ("pytorchjobs", "PyTorchJob"),
        ("pytorchjobs.kubeflow.org", "PyTorchJob"),
        ("TFJOB", "TFJob"),
        ("mpijob", "MPIJob"),
        ("job", "Job"),
        ("jobs.batch", "Job"),
        ("deployment", None),
        ("", None),
    ],
)
def test_kinds_are_read_in_any_case_singular_or_plural(text: str, kind: str | None) -> None:
    found = kube_kind(text)
    assert (found.kind if found else None) == kind


def test_an_mpijob_of_the_training_operator_v1_is_numbered_the_same_way() -> None:
    job = copy.deepcopy(workload("MPIJob", "bert-mpi"))
    job["apiVersion"] = "kubeflow.org/v1"
    pods = copy.deepcopy(pods_labelled(JOB_NAME, "bert-mpi"))
    for pod in pods:
        labels = pod["metadata"]["labels"]
        role = labels.pop("training.kubeflow.org/job-role")
        labels["training.kubeflow.org/replica-type"] = role
        labels["training.kubeflow.org/operator-name"] = "mpijob-controller"
        labels.setdefault("training.kubeflow.org/replica-index", "0")
    spec = job_spec_from_kube("MPIJob", job, pods, agents(), selector="x")
    assert [(n.name, n.ranks[0]) for n in spec.nodes] == [
        ("gpu-node-08", 0),
        ("gpu-node-09", 8),
        ("cpu-node-01", None),
    ]


def test_an_unsupported_kind_is_refused_before_kubectl_runs() -> None:
    with pytest.raises(JobError) as err:
        resolve_kube_job("Deployment", "ml", "llm-serve", kubectl="/nonexistent/kubectl")
    assert err.value.one_line() == (
        "unsupported job kind 'Deployment': use Job, PyTorchJob, TFJob or MPIJob"
    )
