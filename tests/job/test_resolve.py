"""`--job REF`: references parsed to (kind, namespace, name), bad ones refused in one line."""

from __future__ import annotations

import pytest

from runbook.errors import JobError, UsageError
from runbook.job.resolve import parse_job_ref, resolve_job


@pytest.mark.parametrize(
    ("ref", "parsed"),
    [
        ("PyTorchJob/ml/llama-ft", ("PyTorchJob", "ml", "llama-ft")),
        ("pytorchjobs/ml/llama-ft", ("PyTorchJob", "ml", "llama-ft")),
        ("pytorchjobs.kubeflow.org/ml/llama-ft", ("PyTorchJob", "ml", "llama-ft")),
        ("tfjob/research/resnet-tf", ("TFJob", "research", "resnet-tf")),
        ("MPIJob/hpc/bert.mpi-2", ("MPIJob", "hpc", "bert.mpi-2")),
        ("job/default/nccl-sweep", ("Job", "default", "nccl-sweep")),
        ("jobs.batch/default/nccl-sweep", ("Job", "default", "nccl-sweep")),
        ("slurm:48213", ("slurm", None, "48213")),
        ("SLURM:7000_3", ("slurm", None, "7000_3")),
        ("slurm:123+1", ("slurm", None, "123+1")),
        ("hosts:/tmp/job.hosts", ("hosts", None, "/tmp/job.hosts")),
        ("  PyTorchJob/ml/llama-ft  ", ("PyTorchJob", "ml", "llama-ft")),
    ],
)
def test_job_references_name_a_kind_a_namespace_and_a_name(
    ref: str, parsed: tuple[str, str | None, str]
) -> None:
    assert parse_job_ref(ref) == parsed


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        (
            "ml/llama-ft",
            "--job 'ml/llama-ft': expected KIND/NAMESPACE/NAME (Job, PyTorchJob, TFJob, MPIJob), "
            "slurm:JOBID or hosts:FILE",
        ),
        ("PyTorchJob/ml/", "--job 'PyTorchJob/ml/': expected KIND/NAMESPACE/NAME"),
        (
            "Deployment/ml/llm-serve",
            "--job 'Deployment/ml/llm-serve': unsupported kind 'Deployment' "
            "(Job, PyTorchJob, TFJob or MPIJob)",
        ),
        ("PyTorchJob/ML/x", "--job 'PyTorchJob/ML/x': 'ML' is not a Kubernetes namespace name"),
        ("job/ml/Bad_Name", "--job 'job/ml/Bad_Name': 'Bad_Name' is not a Kubernetes object name"),
        ("slurm:", "--job 'slurm:': a Slurm job is slurm:JOBID, slurm:ID_TASK or slurm:ID+N"),
        ("slurm:12 34", "--job 'slurm:12 34': a Slurm job is slurm:JOBID, slurm:ID_TASK"),
        ("hosts:", "--job 'hosts:': hosts:FILE needs a file"),
    ],
)
def test_a_bad_reference_is_a_usage_error_of_one_line(ref: str, message: str) -> None:
    with pytest.raises(JobError) as err:
        parse_job_ref(ref)
    assert isinstance(err.value, UsageError) and err.value.exit_code == 2
    assert err.value.one_line().startswith(message)


def test_a_job_is_named_by_a_ref_or_a_hosts_file_not_both() -> None:
    with pytest.raises(JobError, match="give one of --job REF or --hosts-from-file FILE"):
        resolve_job()
    with pytest.raises(JobError, match="give one of"):
        resolve_job("slurm:1", hosts_file="job.hosts")
