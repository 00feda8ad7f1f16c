from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from runbook.parsers import registry
from runbook.parsers.nccl_tests import parse_nccl_tests

from .helpers import result, roundtrip, sample, sample_lines

D = "nccl_tests/"


def test_a_modern_all_reduce_run_that_passed() -> None:
    facts = parse_nccl_tests(sample_lines(D + "baseline.txt"))
    assert facts.table == "modern" and facts.finished and facts.passed
    assert len(facts.rows) == 8
    first = facts.rows[0]
    assert (first.size, first.count, first.type, first.redop, first.root) == (
        8388608, 2097152, "float", "sum", -1
    )
    assert (first.oop_busbw, first.ip_busbw, first.oop_wrong) == (35.61, 35.73, 0)
    assert facts.rows[-1].size == 1073741824
    assert (facts.oob_values, facts.oob_ok, facts.avg_busbw) == (0, True, 42.1234)
    assert facts.wrong_total == 0 and facts.peak_busbw == 44.11
    assert facts.nranks == 8 and facts.params["nGpus"] == "8"


def test_a_truncated_run_with_wrong_values_did_not_finish_or_pass() -> None:
    facts = parse_nccl_tests(sample_lines(D + "ib-disabled-truncated.txt"))
    assert not facts.finished and not facts.passed
    assert facts.wrong_total == 3 and len(facts.rows) == 3
    assert facts.avg_busbw is None and facts.oob_ok is None


def test_the_old_table_with_error_floats_and_mpirun_prefixes() -> None:
    facts = parse_nccl_tests(sample_lines(D + "old-table-mpirun.txt"))
    assert facts.table == "old" and facts.finished and facts.passed
    assert len(facts.rows) == 5 and facts.rows[0].root is None
    assert facts.rows[0].redop == "sum" and facts.rows[0].oop_wrong == 0.0
    assert facts.max_error == 0.0 and facts.wrong_total == 0
    assert facts.avg_busbw == 54.9876 and facts.nranks == 2


def test_an_init_failure_is_recorded_with_its_line() -> None:
    facts = parse_nccl_tests(sample_lines(D + "init-failure.txt"), source="nccl-tests/x.txt")
    assert not facts.passed and facts.rows == ()
    assert facts.failures[0].line == 5 and "unhandled cuda error" in facts.failures[0].text


def test_the_adapter_keys_runs_by_file_and_reports_the_transport() -> None:
    fn = registry.get("nccl_tests").func
    files = {
        "nccl-tests/baseline.txt": result("nccl-tests/baseline.txt", sample(D + "baseline.txt")),
        "nccl-tests/ib-disabled.txt": result("nccl-tests/ib-disabled.txt",
                                             sample(D + "ib-disabled-truncated.txt")),
    }
    facts = roundtrip(fn(files, {}))
    assert facts["collected"] and not facts["all_passed"] and facts["wrong_total"] == 3
    assert facts["runs"]["baseline"]["passed"] is True
    ib = facts["runs"]["ib-disabled"]
    assert ib["finished"] is False and ib["nccl"]["ib_disabled"] is True
    assert ib["nccl"]["network"] == "Socket" and ib["nccl"]["transport_kinds"] == ["P2P", "SHM"]
    assert fn({}, {}) == {
        "collected": False, "runs": {}, "all_passed": False, "wrong_total": 0, "evidence": [],
        "unmeasured": [],
    }


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(max_size=120) | st.sampled_from(sample_lines(D + "baseline.txt")),
                max_size=30))
def test_arbitrary_text_never_raises(lines: list[str]) -> None:
    facts = parse_nccl_tests(lines)
    assert isinstance(facts.wrong_total, int) and isinstance(facts.finished, bool)


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 4000))
def test_a_truncated_output_never_raises(cut: int) -> None:
    facts = parse_nccl_tests(sample(D + "baseline.txt")[:cut].splitlines())
    assert all(isinstance(r.size, int) for r in facts.rows)


def test_a_run_whose_copy_ends_at_the_out_of_bounds_line_finished() -> None:
    # nccl-tests prints `# Out of bounds values` only after every size ran, then the average;
    # a real two-node DGX Spark all_gather (NVIDIA/dgx-spark-playbooks#25, nccl-tests 2.17.6
    # header) whose copy stops before the average line still finished, and passed
    facts = parse_nccl_tests(sample_lines(D + "dgx-spark-2node-footer-cut-after-oob.txt"))
    assert (facts.oob_values, facts.oob_ok, facts.avg_busbw) == (0, True, None)
    assert facts.finished and facts.passed
    assert facts.nranks == 2 and len(facts.rows) == 1 and facts.rows[0].ip_busbw == 20.95
