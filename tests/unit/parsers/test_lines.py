"""Launcher and log-pipeline prefixes: each form alone, stacked, and hostile input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runbook.parsers.lines import MAX_DEPTH, strip

BODY = "ValueError: unknown optimizer 'adamw8'"


@pytest.mark.parametrize(
    ("prefix", "layer", "rank", "host", "pid", "time"),
    [
        ("2025-05-03T08:14:02.551908112Z ", "kubectl-timestamps", None, None, None,
         "2025-05-03T08:14:02.551908+00:00"),
        ("2025-05-03T08:14:02.551908112Z stderr F ", "cri", None, None, None,
         "2025-05-03T08:14:02.551908+00:00"),
        ("[pod/trainer-0/pytorch] ", "kubectl-prefix", None, None, None, None),
        ("[default3]:", "default", 3, None, None, None),
        ("[rank5]: ", "rank", 5, None, None, None),
        ("[1,3]<stderr>:", "mpi", 3, None, None, None),
        ("7: ", "srun-label", 7, None, None, None),
        ("gpu-node-3: ", "host", None, "gpu-node-3", None, None),
        ("(pid=1234) ", "ray", None, None, 1234, None),
        ("(RayTrainWorker pid=4711, ip=10.0.0.5) ", "ray", None, None, 4711, None),
        ("trainer-1  | ", "compose", None, "trainer-1", None, None),
    ],
)  # fmt: skip
def test_each_prefix_is_removed_and_says_what_it_knows(
    prefix: str, layer: str, rank: int | None, host: str | None, pid: int | None, time: str | None
) -> None:
    s = strip(prefix + BODY)
    assert s.text.strip() == BODY
    assert s.layers == (layer,)
    assert (s.rank, s.host, s.pid, s.time) == (rank, host, pid, time)


def test_stacked_prefixes_are_all_removed_and_the_innermost_rank_wins() -> None:
    line = "2025-05-03T08:14:02Z stderr F [pod/job-w-1/c] node-7: [1,12]<stderr>:[rank12]:" + BODY
    s = strip(line)
    assert s.text == BODY
    assert s.layers == ("cri", "kubectl-prefix", "host", "mpi", "rank")
    assert (s.rank, s.host) == (12, "node-7")


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: NCCL error",  # an exception name is not a host
        "warnings: 3",
        "ng30903:3063025:3066048 [0] NCCL INFO Bootstrap",  # NCCL's own prefix stays
        "10:12:01 something",
        "2025-03-04: a date, not a host",
        "torch.distributed.elastic.multiprocessing.api: [ERROR] failed",
    ],
)
def test_text_that_only_looks_like_a_prefix_is_kept(line: str) -> None:
    assert strip(line).text == line


def test_a_rank_tag_of_five_thousand_digits_is_text_not_a_rank() -> None:
    line = "[rank" + "9" * 5000 + "]: " + BODY
    s = strip(line)
    assert s.rank is None and s.text == line


def test_the_prefix_loop_is_bounded() -> None:
    s = strip("[rank1]:" * (MAX_DEPTH * 10) + BODY)
    assert len(s.layers) == MAX_DEPTH


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.text(max_size=300), st.lists(st.sampled_from(
    ["[rank3]:", "[default0]:", "[1,2]<stdout>:", "h-1: ", "(pid=9) ", "5: ",
     "2025-01-01T00:00:00Z stdout F "]), max_size=20))  # fmt: skip
def test_any_line_under_any_stack_never_raises(body: str, stack: list[str]) -> None:
    s = strip("".join(stack) + body)
    assert isinstance(s.text, str) and len(s.layers) <= MAX_DEPTH
