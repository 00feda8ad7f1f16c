"""all_reduce_perf that measured nothing about the fabric — nccl-tests built without MPI=1 and
started as a copy per process — read from public incidents' own output (tests/bundles/real-*),
by every reader of nccl-tests output: the node verdict's parser, the recovery check's criteria,
the sweep's bandwidth outliers and the NCCL_IB_DISABLE A/B comparison."""

from __future__ import annotations

import pytest

from runbook.job.merge import outliers
from runbook.parsers import busbw_thresholds as thresholds
from runbook.parsers.nccl_tests import parse_nccl_tests
from runbook.parsers.verify_criteria import Expectation, RunInput, evaluate
from runbook.remedies import ab
from tests.job.test_job_merge import node_verdict, result
from tests.tools import bundles

NO_MPI = {
    # rows only: busbw 0.00 on every row while algbw is 212–637 GB/s (nccl-tests #294)
    "busbw-zero": "real-inconclusive-nccl-tests-no-mpi-h100-busbw-zero",
    # two headers, `Rank 0` on two hosts (nccl-tests #107)
    "rank0-twice": "real-inconclusive-nccl-tests-no-mpi-rank0-on-two-hosts",
    # `rank 0 nranks 2` Destroy lines on testgpu1 and on testgpu2, two footers (#182)
    "per-host": "real-inconclusive-nccl-tests-no-mpi-per-node-communicators",
}
MULTI_NODE = [
    "real-healthy-nccl-tests-3node-a100-hdr",
    "real-healthy-nccl-tests-eks-p5-mpijob",
    "real-healthy-nccl-tests-ring-24gbps-per-nic",
    "real-healthy-nccl-tests-cscs-gh200-slingshot",
]


def lines(name: str) -> list[str]:
    return (bundles.path(name) / "nccl-tests/all_reduce_perf.txt").read_text().splitlines()


@pytest.mark.parametrize(
    ("shape", "line", "says"),
    [
        ("busbw-zero", 1, "bus bandwidth is 0.00 on all 5 rows while data moved"),
        ("rank0-twice", 8, "rank 0 is listed by 2 processes"),
        ("per-host", 11, "rank 0 of a 2-rank communicator is on 2 hosts (testgpu1, testgpu2)"),
    ],
)
def test_a_copy_per_process_measured_nothing_and_did_not_pass(
    shape: str, line: int, says: str
) -> None:
    facts = parse_nccl_tests(lines(NO_MPI[shape]))
    assert facts.unmeasured is not None and says in facts.unmeasured
    assert "MPI=1" in facts.unmeasured
    assert facts.unmeasured_line == line
    assert not facts.passed


def test_rows_whose_header_was_not_captured_are_read_by_their_width() -> None:
    facts = parse_nccl_tests(lines(NO_MPI["busbw-zero"]))
    assert [r.size for r in facts.rows] == [134217728, 134217728, 536870912, 536870912, 268435456]
    assert facts.rows[0].oop_algbw == 212.41 and facts.rows[0].oop_busbw == 0.0


@pytest.mark.parametrize("name", MULTI_NODE)
def test_a_real_multi_node_run_still_measures_the_fabric(name: str) -> None:
    facts = parse_nccl_tests(lines(name))
    assert facts.unmeasured is None and facts.passed


def run_input(name: str, status: int = 0) -> RunInput:
    return RunInput("nccl-tests/recovery-1.txt", [*lines(name), f"# runbook: exit status {status}"])


@pytest.mark.parametrize("shape", sorted(NO_MPI))
def test_the_recovery_check_does_not_pass_a_copy_per_process(shape: str) -> None:
    # no rank count is expected (no nvidia-smi, no --var gpus): only the run itself can tell
    expect = Expectation(
        threshold=thresholds.Threshold(1.0, "given", None, None, None, 1), ranks=None
    )
    out = evaluate([run_input(NO_MPI[shape])], expect)
    assert not out["passed"] and out["failed"][0] == "completed"
    assert "measured nothing about the fabric" in out["criteria"]["completed"]["detail"]
    assert out["cause"] == "inconclusive"
    assert out["evidence"][0]["source"] == "nccl-tests/recovery-1.txt"


def test_a_sweep_does_not_take_a_copy_per_process_for_a_slow_node() -> None:
    # four nodes' nccl-tests facts as the node verdicts carry them (runbook.parsers.nccl_tests
    # `nccl_tests_facts`): n3's run measured nothing (its 1.7 GB/s, #182's footer, is two
    # hosts' PCIe, not the fabric), so it is no bandwidth outlier
    why = "rank 0 of a 2-rank communicator is on 2 hosts (testgpu1, testgpu2)"

    def tests(busbw: float, unmeasured: str | None = None) -> dict[str, object]:
        run = {"avg_busbw": busbw, "unmeasured": unmeasured}
        return {"nccl_tests": {"collected": True, "runs": {"a": run}}}

    results = [
        result(f"n{i}", node_verdict(f"n{i}", stages=tests(*args)))
        for i, args in enumerate([(180.0,), (182.0,), (181.0,), (1.7, why)])
    ]
    assert not [o for o in outliers(results) if o["measure"] == "busbw"]
    # the same figure from a run that did measure the fabric is an outlier
    results[3] = result("n3", node_verdict("n3", stages=tests(1.7)))
    assert ("n3", "busbw") in {(o["node"], o["measure"]) for o in outliers(results)}


def test_the_ib_ab_comparison_says_a_copy_per_process_measured_nothing() -> None:
    text = "\n".join(lines(NO_MPI["rank0-twice"]))
    case = ab.read_case("ib-enabled", text, 0)
    assert case.not_run is not None and "measured nothing about the fabric" in case.not_run
    assert not case.passed
