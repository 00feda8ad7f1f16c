"""Stacks and flight-recorder output in the forms public hang reports post them: Python's
faulthandler dump (the one a rank prints when PyTorch's watchdog aborts it, in its own log),
py-spy's text without its `Process` header, and the report of PyTorch's flight recorder
analyser (`fr_trace`). Samples: tests/hang/samples/SOURCES.md."""

from __future__ import annotations

from pathlib import Path

from runbook import hang
from runbook.parsers import flight_recorder, pyspy, watchdog
from runbook.parsers.hang_state import hang_facts
from runbook.transports.base import CommandResult

SAMPLES = Path(__file__).parent / "samples"
CONTEXT = {"collected_at": "2025-02-23T11:14:35+00:00", "node": "sglang-head-r1"}


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def files(named: dict[str, str]) -> dict[str, CommandResult]:
    return {k: CommandResult(k, "cat", stdout=v, exited=0) for k, v in named.items()}


# ---- faulthandler -------------------------------------------------------------------------


def test_the_faulthandler_dump_in_an_aborted_ranks_log_is_that_ranks_stack() -> None:
    facts = pyspy.pyspy_facts(files({"app/train.log": sample("faulthandler-sglang-3709.log")}), {})
    [dump] = facts["dumps"]
    # the log's only rank-tagged lines are rank 4's, so the dump is rank 4's
    assert dump["rank"] == 4 and dump["form"] == "faulthandler"
    assert [t["id"] for t in dump["threads"]] == [
        "0x00007efd936fb640", "0x00007efd93ffc640", "0x00007fdefefc5640", "0x00007fe403b964c0",
    ]  # fmt: skip
    # no thread reaches <module> here: the main thread is the last one faulthandler lists
    main = dump["main"]
    assert main["collective"] == "broadcast"
    assert main["stack"] == [
        "recv_requests (/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py:575)",
        "broadcast_pyobj (/sgl-workspace/sglang/python/sglang/srt/utils.py:693)",
        "broadcast (/usr/local/lib/python3.10/dist-packages/torch/distributed/"
        "distributed_c10d.py:2425)",
    ]
    assert main["line"] == 49  # the log line of its innermost frame


def test_the_main_thread_of_a_faulthandler_dump_is_the_one_that_reaches_module() -> None:
    # CPython 3.11's own output: the main thread is listed last as "Current thread"
    facts = pyspy.parse_dump("pyspy/rank-2.pid-77.txt", sample("faulthandler-3.11-two-threads.txt"))
    assert facts["rank"] == 2 and facts["pid"] == 77
    assert facts["main"]["stack"] == [
        "<module> (/tmp/b/fh.py:13)",
        "train_step (/tmp/b/fh.py:11)",
    ]
    assert facts["main"]["state"] == "current" and facts["main"]["collective"] is None


def test_a_python_traceback_in_a_log_is_no_stack_dump() -> None:
    log = (
        "Traceback (most recent call last):\n"
        '  File "/opt/train.py", line 12, in <module>\n'
        "    dist.all_reduce(t)\n"
        "RuntimeError: NCCL error\n"
    )
    assert pyspy.pyspy_facts(files({"app/rank-0.log": log}), {})["dumps"] == []


def test_a_log_of_several_ranks_gives_its_stacks_no_rank() -> None:
    log = "[rank0]:[E223 11:14:34] x\n[rank1]:[E223 11:14:34] y\n" + sample(
        "faulthandler-3.11-two-threads.txt"
    )
    [dump] = pyspy.pyspy_facts(files({"app/train.log": log}), {})["dumps"]
    assert "rank" not in dump and dump["main"]["stack"][0] == "<module> (/tmp/b/fh.py:13)"


# ---- py-spy without its header ------------------------------------------------------------


def test_a_py_spy_dump_posted_without_its_process_header_is_read() -> None:
    facts = pyspy.parse_dump("pyspy/96488.txt", sample("pyspy-vllm-2479-no-header.txt"))
    assert facts["pid"] == 96488 and "rank" not in facts
    assert facts["main"]["collective"] == "all_gather_into_tensor"


def test_a_stack_with_no_rank_is_still_in_the_node_facts() -> None:
    dump = sample("pyspy-vllm-2479-no-header.txt")
    facts = hang_facts(files({"pyspy/96488.txt": dump}), CONTEXT)
    [stack] = facts["pyspy"]["stacks"]
    assert (stack["pid"], stack["rank"], stack["collective"]) == (
        96488,
        None,
        "all_gather_into_tensor",
    )


# ---- fr_trace's report --------------------------------------------------------------------


def test_the_fr_trace_report_is_read_as_the_analysers_finding_not_an_unreadable_dump() -> None:
    facts = flight_recorder.flight_recorder_facts(
        files({"fr/fr_trace.txt": sample("fr-trace-report-pytorch-140563.txt")}), {}
    )
    assert facts["unreadable"] == [] and facts["dumps"] == [] and facts["collected"]
    [report] = facts["analyses"]
    assert (report["seq"], report["pg"], report["pg_desc"], report["op"]) == (
        39,
        "0",
        "default_pg",
        "all_reduce",
    )
    assert report["expected_ranks"] == 128 and report["state"] == "scheduled"
    assert [(c["rank"], c["error"]) for c in report["culprits"]] == [
        (22, "SIZE_OR_SYNTAX_MISMATCH"),
        (110, "SIZE_OR_SYNTAX_MISMATCH"),
    ]
    assert "found input sizes: '[[262144]]'" in report["culprits"][0]["detail"]


def test_culprits_of_another_size_in_the_fr_trace_report_are_a_desync() -> None:
    reports = flight_recorder.parse_report(
        "fr/fr_trace.txt", sample("fr-trace-report-pytorch-140563.txt")
    )
    result = hang.analyse({}, {}, fr_reports=reports)
    assert result["cause"] == "collective-desync" and result["basis"] == "fr_trace"
    assert "all_reduce #39 of pg 0 (default_pg)" in result["statement"]
    assert result["evidence"][0]["source"] == "fr/fr_trace.txt"


def test_ranks_the_fr_trace_report_finds_missing_are_the_stalled_ones() -> None:
    # the lines PyTorch 2.13's analyser logs for "case one" (torch/distributed/flight_recorder/
    # components/utils.py and types.py: MatchStateRecord log) when a rank never joined
    report = (
        "Not all ranks joining collective, sequence number: 4\n"
        "internal record id: 3\n"
        "group info: 0:default_pg\n"
        "collective: gloo:all_reduce\n"
        "missing ranks: {1}\n"
        "input sizes: [[8]]\n"
        "output sizes: [[8]]\n"
        "world size: 2\n"
        "expected ranks: {0, 1}\n"
        "collective state: scheduled\n"
    )
    result = hang.analyse({}, {}, fr_reports=flight_recorder.parse_report("fr/out.txt", report))
    assert result["cause"] == "rank-stalled"
    assert [s["rank"] for s in result["stalled_ranks"]] == [1]
    assert result["statement"].endswith("rank 1 never joined all_reduce #4 of pg 0 (default_pg)")


# ---- one rank's timeout -------------------------------------------------------------------


def test_one_ranks_own_timeout_names_no_cause() -> None:
    dog = watchdog.watchdog_facts(
        files({"app/train.log": sample("faulthandler-sglang-3709.log")}), CONTEXT
    )
    assert [t["rank"] for t in dog["timeouts"]] == [4]
    result = hang.analyse({}, dog)
    assert result["cause"] is None


# ---- a collective on autograd's thread ----------------------------------------------------


def test_a_rank_whose_backward_runs_an_all_gather_on_autograds_thread_waits_in_it() -> None:
    facts = pyspy.parse_dump("pyspy/42.txt", sample("pyspy-accelerate-3104-zero3-backward.txt"))
    main = facts["main"]
    assert main["stack"][-1] == "backward (torch/autograd/__init__.py:266)"
    assert (main["collective"], main["collective_thread"]) == ("all_gather_into_tensor", "4079")


def test_another_threads_collective_is_not_the_ranks_unless_its_main_thread_waits_on_it() -> None:
    # the same threads, the main thread in its data loader instead of in backward
    dump = sample("pyspy-accelerate-3104-zero3-backward.txt").replace(
        "    backward (torch/autograd/__init__.py:266)\n",
        "    get (queue.py:180)\n",
        1,
    )
    main = pyspy.parse_dump("pyspy/42.txt", dump)["main"]
    assert main["collective"] is None and "collective_thread" not in main
