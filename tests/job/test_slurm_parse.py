"""Slurm's text, parsed: `scontrol [-d] show job [-o]` of several versions and job shapes,
`sacct -P`, and hostlists (samples and their provenance: tests/job/slurm/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runbook.job.slurm_parse import (
    expand_hostlist,
    gpu_indices,
    pairs,
    parse_sacct,
    parse_scontrol_jobs,
)

SAMPLES = Path(__file__).with_name("slurm")


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def test_a_failed_multi_node_gpu_job_with_details() -> None:
    (job,) = parse_scontrol_jobs(sample("scontrol-23.02-failed-d.txt"))
    assert (job.job_id, job.ref, job.get("JobName")) == ("48213", "48213", "llama-pretrain")
    assert (job.state, job.get("Reason"), job.exit) == ("FAILED", "NonZeroExitCode", (1, 0))
    assert (job.get("StartTime"), job.get("EndTime")) == (
        "2025-03-11T09:00:01",
        "2025-03-11T09:41:37",
    )
    assert (job.node_list, job.get("BatchHost"), job.get("NumNodes"), job.get("NumTasks")) == (
        "gpu-[07-08]",
        "gpu-07",
        "2",
        "16",
    )
    # values keep their own `=` and `:`
    assert (
        job.get("AllocTRES") == "cpu=224,mem=1600G,node=2,billing=224,gres/gpu=16,gres/gpu:h100=16"
    )
    assert job.get("AllocNode:Sid") == "login-1:2841733"
    assert job.get("NtasksPerN:B:S:C") == "8:0:*:*"
    (alloc,) = job.allocations
    assert (alloc.nodes, alloc.hosts, alloc.cpu_ids, alloc.mem) == (
        "gpu-[07-08]",
        ("gpu-07", "gpu-08"),
        "0-111",
        "819200",
    )
    assert job.gpus_on("gpu-08") == tuple(str(i) for i in range(8))
    # `Deadline=N/A`, `ReqNodeList=(null)`: Slurm's spellings of nothing
    assert job.get("Deadline") is None and job.get("ReqNodeList") is None


def test_each_allocation_line_gives_its_own_nodes_their_gpus() -> None:
    (job,) = parse_scontrol_jobs(sample("scontrol-23.11-oom-d.txt"))
    assert (job.state, job.get("Reason"), job.exit) == ("OUT_OF_MEMORY", "OutOfMemory", (0, 125))
    assert [a.hosts for a in job.allocations] == [("gpu-a01", "gpu-a02"), ("gpu-a03",)]
    assert job.gpus_on("gpu-a02") == ("0", "1", "2", "3")
    assert job.gpus_on("gpu-a03") == ("4", "5")
    assert job.gpus_on("gpu-b01") == ()


def test_slurm_18_spelling_gres_idx_and_tres() -> None:
    (job,) = parse_scontrol_jobs(sample("scontrol-18.08-running-d.txt"))
    assert (job.state, job.exit, job.get("TRES")) == (
        "RUNNING",
        (0, 0),
        "cpu=16,mem=64000M,node=2,billing=16,gres/gpu=8",
    )
    assert [(a.hosts, a.gpus) for a in job.allocations] == [
        (("node-63",), ("0", "1", "2", "3")),
        (("node-64",), ("0", "1", "2", "3")),
    ]
    assert job.get("Gres") == "gpu:4"
    assert job.get("Power") is None


def test_a_pending_job_has_no_nodes_and_no_start() -> None:
    (job,) = parse_scontrol_jobs(sample("scontrol-22.05-pending.txt"))
    assert (job.state, job.get("Reason")) == ("PENDING", "Resources")
    assert job.node_list is None and job.allocations == ()
    # a pending job's StartTime is the scheduler's projection, and SchedNodeList its plan
    assert job.get("SchedNodeList") == "gpu-[03-04]"
    assert job.get("NumNodes") == "2-2"


def test_a_job_array_element_is_named_array_underscore_task() -> None:
    (job,) = parse_scontrol_jobs(sample("scontrol-22.05-array-nodefail-d.txt"))
    assert (job.job_id, job.ref) == ("7003", "7000_3")
    assert (job.state, job.get("Reason"), job.get("FailedNode")) == (
        "NODE_FAIL",
        "NodeDown",
        "gpu-12",
    )
    # the key after Reason= ends its value
    assert job.get("Dependency") is None


def test_an_array_asked_for_by_its_id_prints_every_record() -> None:
    jobs = parse_scontrol_jobs(sample("scontrol-22.05-array-all.txt"))
    assert [(j.job_id, j.ref, j.state) for j in jobs] == [
        ("7000", "7000_4-9", "PENDING"),
        ("7003", "7000_3", "NODE_FAIL"),
    ]
    assert jobs[0].get("ArrayTaskThrottle") == "2"


def test_the_one_line_form_keeps_spaces_in_values_and_the_details() -> None:
    (job,) = parse_scontrol_jobs(sample("scontrol-24.05-cancelled-oneliner.txt"))
    assert job.get("JobName") == "bert large"
    assert (job.state, job.exit) == ("CANCELLED", (0, 15))
    assert job.get("Command") == "/home/erin/bert/run.sh --lr=3e-4"
    (alloc,) = job.allocations
    assert (alloc.hosts, alloc.cpu_ids, alloc.gpus) == (
        ("gpu-21",),
        "0-15,64-79",
        ("4", "5", "6", "7"),
    )
    assert job.get("MinCPUsNode") == "8"


def test_sacct_records_read_as_scontrol_records() -> None:
    (job,) = parse_sacct(sample("sacct-23.02-failed.txt"))
    assert (job.job_id, job.state, job.exit, job.node_list, job.get("StartTime")) == (
        "48213",
        "FAILED",
        (1, 0),
        "gpu-[07-08]",
        "2025-03-11T09:00:01",
    )
    (element,) = parse_sacct(
        "7000_3|nccl-sweep|CANCELLED by 1003|0:15|2025-03-09T17:21:30|2025-03-09T17:29:22|"
        "gpu-[11-12]|2|h100|dave\n"
    )
    assert (element.ref, element.state) == ("7000_3", "CANCELLED")
    (piped,) = parse_sacct("9|a|b|RUNNING|0:0|Unknown|Unknown|gpu-1|1|h100|erin\n")
    assert (piped.get("JobName"), piped.state, piped.get("StartTime")) == ("a|b", "RUNNING", None)


@pytest.mark.parametrize(
    ("hostlist", "hosts"),
    [
        ("gpu-07", ["gpu-07"]),
        ("gpu-[07-08]", ["gpu-07", "gpu-08"]),
        ("gpu-[01-02,04],login1", ["gpu-01", "gpu-02", "gpu-04", "login1"]),
        ("node[8-11]", ["node8", "node9", "node10", "node11"]),
        ("r[1-2]n[01-02]", ["r1n01", "r1n02", "r2n01", "r2n02"]),
        ("gpu-[1-2]-ib", ["gpu-1-ib", "gpu-2-ib"]),
    ],
)
def test_hostlists_expand_as_slurm_expands_them(hostlist: str, hosts: list[str]) -> None:
    assert expand_hostlist(hostlist) == hosts


@pytest.mark.parametrize(
    ("gres", "gpus"),
    [
        ("gpu:h100:8(IDX:0-7)", tuple(str(i) for i in range(8))),
        ("gpu:4(IDX:0,2,5-6)", ("0", "2", "5", "6")),
        ("gpu(IDX:1-4)", ("1", "2", "3", "4")),
        ("gpu:h100:1(IDX:0),gpu:6000pro_maxq:2(IDX:1-2)", ("0", "1", "2")),
        ("gpu:a100:2(IDX:0-1),shard:2(IDX:0)", ("0", "1")),
        ("mps:100(IDX:0)", ()),
        ("gpu:2(IDX:N/A)", ()),
        ("", ()),
    ],
)
def test_gpu_indices_of_each_gres_spelling(gres: str, gpus: tuple[str, ...]) -> None:
    assert gpu_indices(gres) == gpus


def test_a_key_starts_only_after_a_space() -> None:
    assert list(pairs("Command=/opt/run.sh --x=1 WorkDir=/a b/c")) == [
        ("Command", "/opt/run.sh --x=1"),
        ("WorkDir", "/a b/c"),
    ]
