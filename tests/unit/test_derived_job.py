"""`job_known` (runbook/derived.py): whether a job is under diagnosis on the node, which decides
if an OOM nothing ties to a job may still be blamed on it (a job was named) or is only context
(a node running no job: a sweep, a node-problem-detector check)."""

from __future__ import annotations

from typing import Any

import pytest

from runbook import derived

NCCL_RANK = {"source": "nccl/nccl.gpu-node-07.4711.log", "rank": None}
TESTS_RANK = {"source": "nccl-tests/all_reduce.txt", "rank": None}


@pytest.mark.parametrize(
    ("facts", "variables", "known"),
    [
        ({}, {"pod": "llm-sft-worker-0"}, True),
        ({}, {"cgroup_dir": "/sys/fs/cgroup/kubepods.slice/pod1"}, True),
        ({"kube": {"pod": {"collected": True, "uid": "7c1d3a52"}}}, {}, True),
        ({"applog": {"collected": True, "app_collected": True, "ranks": []}}, {}, True),
        ({"applog": {"collected": True, "app_collected": False, "ranks": [NCCL_RANK]}}, {}, True),
        # an acceptance test's output is not a job
        ({"applog": {"collected": True, "app_collected": False, "ranks": [TESTS_RANK]}}, {},
         False),
        ({"applog": {"collected": False, "app_collected": False}}, {}, False),
        ({"kube": {"pod": {"collected": False}}}, {"pod": "", "cgroup_dir": " "}, False),
        ({}, {}, False),
        # facts of the wrong shape are no job, never an error
        ({"applog": {"ranks": "nccl/x.log"}, "kube": {"pod": []}}, {"pod": None}, False),
    ],
    ids=["pod-named", "cgroup-named", "pod-json-read", "app-logs", "nccl-logs",
         "nccl-tests-only", "no-logs", "blank-vars", "nothing", "odd-shapes"],
)  # fmt: skip
def test_a_job_is_known_only_from_what_names_or_shows_it(
    facts: dict[str, Any], variables: dict[str, Any], known: bool
) -> None:
    assert derived.compute("job_known", facts, variables) is known
