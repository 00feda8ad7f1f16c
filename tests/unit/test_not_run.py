"""A command that could not run is said to have not run: runbook.not_run's reasons, and the
A/B comparison (runbook.remedies.ab) that never concludes from a case that measured nothing.

The texts are what the programs print: GNU env and timeout (the playbook's argv is
``timeout … env … all_reduce_perf``), busybox, dash and bash, nsenter, and nccl-tests on a node
without a GPU. The cases that ran are the real-format output of the tests' ``all_reduce_perf``
(tests/tools/all_reduce_perf.py, run here as the node would run it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runbook import not_run
from runbook.remedies import ab
from tests.tools.collective import AB_NODE, PROGRAM

NODE = "gpu-node-01"


@pytest.mark.parametrize(
    ("output", "rc", "expected"),
    [
        ("env: ‘all_reduce_perf’: No such file or directory\n", 127,
         "all_reduce_perf not found on gpu-node-01"),
        ("env: 'all_reduce_perf': No such file or directory\n", 127,
         "all_reduce_perf not found on gpu-node-01"),
        ("env: can't execute 'all_reduce_perf': No such file or directory\n", 127,
         "all_reduce_perf not found on gpu-node-01"),
        ("timeout: failed to run command ‘env’: No such file or directory\n", 127,
         "env not found on gpu-node-01"),
        ("sh: 1: all_reduce_perf: not found\n", 127, "all_reduce_perf not found on gpu-node-01"),
        ("bash: line 1: all_reduce_perf: command not found\n", 127,
         "all_reduce_perf not found on gpu-node-01"),
        ("nsenter: failed to execute all_reduce_perf: No such file or directory\n", 127,
         "all_reduce_perf not found on gpu-node-01"),
        ("env: ‘/opt/nccl-tests/build/all_reduce_perf’: Permission denied\n", 126,
         "all_reduce_perf cannot be executed on gpu-node-01 (exit 126)"),
        ("# nThread 1 nGpus 8 minBytes 8388608\n#  Rank  0 Group  0 Pid 51234\n", 124,
         "all_reduce_perf timed out on gpu-node-01 (exit 124: stopped by the time limit)"),
        ("gpu-node-01: Test CUDA failure common.cu:1016 'no CUDA-capable device is detected'\n"
         " .. gpu-node-01 pid 51234: Test failure common.cu:1075\n", 2,
         "no usable GPU on gpu-node-01 (all_reduce_perf: no CUDA-capable device is detected)"),
        ("", 2, "all_reduce_perf printed nothing on gpu-node-01 (exit 2)"),
        ("\n", None, "all_reduce_perf printed nothing on gpu-node-01 (no exit status)"),
    ],
)  # fmt: skip
def test_each_way_a_command_fails_to_run_is_named_with_the_node(
    output: str, rc: int | None, expected: str
) -> None:
    assert not_run.reason(output, rc, node=NODE, program="all_reduce_perf") == expected


def test_a_command_that_ran_and_failed_is_not_a_command_that_did_not_run() -> None:
    said = "gpu-node-01: Test NCCL failure common.cu:1005 'unhandled system error'\n"
    assert not_run.reason(said, 3, node=NODE, program="all_reduce_perf") is None
    # a "not found" among the output of a run that exited on its own is its output
    noisy = "NCCL WARN Could not open /sys/class/infiniband/mlx5_0: No such file or directory\n"
    assert not_run.reason(noisy, 3, node=NODE, program="all_reduce_perf") is None


def test_the_program_is_the_last_word_of_a_wrapped_command() -> None:
    wrapped = "nsenter --target 1 --mount --net -- /opt/nccl-tests/all_reduce_perf"
    assert not_run.program_of(wrapped, "x") == "all_reduce_perf"
    assert not_run.program_of("", "all_reduce_perf") == "all_reduce_perf"


def _run_shim(tmp_path: Path, *, ib_disabled: bool) -> tuple[str, int]:
    """The tests' all_reduce_perf as the A/B node runs it (IB fails at init; Socket works)."""
    here = tmp_path / ("off" if ib_disabled else "on")
    here.mkdir()
    shutil.copy(PROGRAM, here / "all_reduce_perf")
    (here / "all_reduce_perf.json").write_text(json.dumps(AB_NODE))
    env = {"PATH": os.environ["PATH"], "NCCL_DEBUG": "INFO"}
    if ib_disabled:
        env["NCCL_IB_DISABLE"] = "1"
    done = subprocess.run(
        [sys.executable, str(here / "all_reduce_perf"), "-b", "8M", "-e", "64M", "-f", "2",
         "-g", "2"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    return done.stdout + done.stderr, done.returncode


MISSING = "env: ‘all_reduce_perf’: No such file or directory\n"


def test_both_cases_not_found_could_not_measure_and_conclude_nothing() -> None:
    result = ab.compare({"ib-enabled": (MISSING, 127), "ib-disabled": (MISSING, 127)}, node=NODE)
    assert result["measured"] is False
    assert result["conclusion"] == "could not measure: all_reduce_perf not found on gpu-node-01"
    assert {c["not_run"] for c in result["cases"].values()} == {
        "all_reduce_perf not found on gpu-node-01"
    }
    lines = ab.render(result)
    assert lines[-1] == "=> could not measure: all_reduce_perf not found on gpu-node-01"
    assert all("not run" in line for line in lines[:2]), lines
    assert ab.not_measured({NODE: result}) == result["conclusion"]


def test_two_reasons_are_both_said() -> None:
    result = ab.compare({"ib-enabled": (MISSING, 127), "ib-disabled": ("", 124)}, node=NODE)
    assert result["conclusion"] == (
        "could not measure: ib-enabled: all_reduce_perf not found on gpu-node-01; "
        "ib-disabled: all_reduce_perf timed out on gpu-node-01 (exit 124: stopped by the time "
        "limit)"
    )


def test_a_case_that_ran_beside_one_that_did_not_is_said_and_not_compared(
    tmp_path: Path,
) -> None:
    enabled = _run_shim(tmp_path, ib_disabled=False)
    assert enabled[1] == 3 and "ibv_reg_mr" in enabled[0]  # it ran, and IB failed
    result = ab.compare(
        {"ib-enabled": enabled, "ib-disabled": ("# nThread 1 nGpus 2\n", 124)}, node=NODE
    )
    assert result["measured"] is False
    assert result["conclusion"] == (
        "could not compare: ib-disabled did not run (all_reduce_perf timed out on gpu-node-01 "
        "(exit 124: stopped by the time limit)); ib-enabled ran and failed"
    )
    assert result["cases"]["ib-enabled"]["not_run"] is None
    assert result["cases"]["ib-enabled"]["network"] == "IB"


def test_a_case_missing_altogether_is_no_comparison(tmp_path: Path) -> None:
    disabled = _run_shim(tmp_path, ib_disabled=True)
    result = ab.compare({"ib-disabled": disabled}, node=NODE)
    assert result["measured"] is False
    assert result["conclusion"] == (
        "could not compare: ib-enabled did not run (no output came back from gpu-node-01); "
        "ib-disabled ran and passed"
    )


def test_two_cases_that_ran_are_compared_as_before(tmp_path: Path) -> None:
    result = ab.compare(
        {"ib-enabled": _run_shim(tmp_path, ib_disabled=False),
         "ib-disabled": _run_shim(tmp_path, ib_disabled=True)},
        node=NODE,
    )  # fmt: skip
    assert result["measured"] is True
    assert result["conclusion"].startswith("IB init/transport fails and Socket succeeds")
    assert ab.not_measured({NODE: result}) is None


def test_no_node_at_all_measured_nothing() -> None:
    assert ab.not_measured({}) == "could not measure: no node's output came back"


def test_a_comparison_stored_before_measured_was_recorded_reads_by_its_cases() -> None:
    both = {"cases": {"ib-enabled": {}, "ib-disabled": {}}, "conclusion": "both pass"}
    assert ab.is_measured(both)
    assert not ab.is_measured({"cases": {"ib-enabled": {}}, "conclusion": "incomplete"})


def test_a_failed_case_is_shown_with_the_cause_its_failure_line_ends_with(tmp_path: Path) -> None:
    """nccl-tests' failure line puts the cause last ("… for details) / CAUSE'"): the A/B's
    table shows the whole line (the parsers clip it at 300 characters), never cut mid-word
    before the cause."""
    result = ab.compare(
        {"ib-enabled": _run_shim(tmp_path, ib_disabled=False),
         "ib-disabled": _run_shim(tmp_path, ib_disabled=True)},
        node=NODE,
    )  # fmt: skip
    row = next(line for line in ab.render(result) if line.startswith("ib-enabled"))
    assert "(run with NCCL_DEBUG=INFO for details) / " in row, row
    assert "Call to ibv_reg_mr failed with error Cannot allocate memory" in row, row
