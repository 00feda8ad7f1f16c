from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runbook.parsers import registry
from runbook.parsers.applog import classify, parse_applog, rank_from_name, summarise

from .helpers import SAMPLES, result, roundtrip, sample

CTX = {"collected_at": "2025-03-04T12:00:00Z"}


def bundle(scenario: str) -> dict[str, Any]:
    d = SAMPLES / "applog" / scenario
    return {f"app/{p.name}": result(f"app/{p.name}", p.read_text()) for p in sorted(d.iterdir())}


def facts_of(scenario: str) -> dict[str, Any]:
    return roundtrip(registry.get("applog").func(bundle(scenario), CTX))


def test_the_incident_surfaces_as_nccl_comm_init_rank_unhandled_cuda_error() -> None:
    facts = facts_of("tf-incident")
    assert facts["collected"]
    surfaced = facts["surfaced"]
    assert surfaced["exception"] == "UnknownError"
    assert "ncclCommInitRank failed: unhandled cuda error" in surfaced["text"]
    assert surfaced["category"] == "nccl-init"
    assert surfaced["source"] == "app/rank-0.log"


def test_a_rank_that_logged_nothing_before_dying_is_silent() -> None:
    facts = facts_of("tf-incident")
    assert facts["silent_ranks"] == [1]
    by_rank = {r["rank"]: r for r in facts["ranks"]}
    assert by_rank[1]["first_error"] is None
    assert by_rank[0]["first_error"]["time"] == "2025-03-04T10:12:03.456789"
    assert by_rank[0]["nccl_started_before_error"] is True


def test_the_first_failed_rank_is_the_one_with_the_earliest_error() -> None:
    facts = facts_of("tf-incident")
    assert facts["first_failed_rank"] == 2
    assert "NCCL WARN Cuda failure" in facts["first_error"]["text"]
    assert facts["first_error"]["time_inferred"] is True


def test_a_plain_python_exception_before_any_init_is_an_application_exception() -> None:
    facts = facts_of("torch")
    by_rank = {(r["source"], r["rank"]): r for r in facts["ranks"]}
    r3 = by_rank[("app/torchrun.log", 3)]["first_error"]
    assert (r3["category"], r3["exception"], r3["line"]) == (
        "application-exception", "ValueError", 10
    )
    # within the torchrun log alone (the other samples are other incidents): rank 3's own
    # exception is the first error in causal order, ahead of the timed lost peers
    only = {k: v for k, v in bundle("torch").items() if k == "app/torchrun.log"}
    alone = roundtrip(registry.get("applog").func(only, CTX))
    assert alone["first_failed_rank"] == 3
    assert alone["first_error"]["exception"] == "ValueError"


@pytest.mark.parametrize(
    ("source", "rank", "category", "exception"),
    [
        ("app/torchrun.log", 0, "collective-timeout", None),
        ("app/torchrun.log", 1, "peer-connection", "DistNetworkError"),
        ("app/torchrun.log", 2, "peer-connection", "DistBackendError"),
        ("app/store-timeout-rank-0.log", 0, "store-timeout", "DistStoreError"),
        ("app/cuda-oom-rank-5.log", 5, "cuda-oom", "OutOfMemoryError"),
    ],
)
def test_pytorch_errors_are_classified(
    source: str, rank: int, category: str, exception: str | None
) -> None:
    facts = facts_of("torch")
    r = next(r for r in facts["ranks"] if r["source"] == source and r["rank"] == rank)
    assert (r["first_error"]["category"], r["first_error"]["exception"]) == (category, exception)


def test_c10d_glog_timestamps_take_the_year_from_the_context() -> None:
    facts = facts_of("torch")
    r0 = next(r for r in facts["ranks"] if r["source"] == "app/torchrun.log" and r["rank"] == 0)
    assert r0["first_error"]["time"] == "2025-03-04T10:12:31.886021"
    assert r0["first_error"]["time_inferred"] is False


@pytest.mark.parametrize(
    ("line", "category"),
    [
        ("UnknownError: ncclCommInitRank failed: unhandled cuda error", "nccl-init"),
        ("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1269, unhandled cuda error",
         "nccl-init"),
        ("torch.distributed.DistStoreError: Timed out after 21 seconds waiting for clients. "
         "3/4 clients joined.", "store-timeout"),
        ("torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. Connection was likely "
         "closed.", "peer-connection"),
        ("host:1:2 [0] NCCL WARN Cuda failure 'out of memory'", "cuda-oom"),
        ("host:1:2 [0] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left "
         "on device", "shm"),
        ("ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient "
         "shared memory (shm).", "shm"),
        ("KeyError: 'labels'", "application-exception"),
        ("torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) local_rank: "
         "1 (pid: 4821) of binary: /usr/bin/python3", "killed"),
        ("MemoryError", "host-oom"),
        ("gpu-node-07:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC", None),
        ("INFO:root:epoch 1 done", None),
    ],
)
def test_error_lines_are_classified(line: str, category: str | None) -> None:
    assert classify(line) == category


@pytest.mark.parametrize(
    ("name", "rank"),
    [("app/rank-3.log", 3), ("app/rank3.log", 3), ("app/worker_12.log", 12), ("app/x.log", None)],
)
def test_rank_from_file_name(name: str, rank: int | None) -> None:
    assert rank_from_name(name) == rank


def test_no_app_logs_is_not_collected() -> None:
    assert registry.get("applog").func({}, {}) == {"collected": False, "app_collected": False}


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(max_size=160), max_size=30))
def test_arbitrary_text_never_raises(lines: list[str]) -> None:
    ranks = parse_applog(lines, source="app/rank-0.log", rank=0, collected_at="2025-03-04")
    facts = summarise(ranks)
    for r in facts.ranks:
        assert isinstance(r.error_count, int)
        if r.first_error is not None:
            assert isinstance(r.first_error.category, str) and r.first_error.line >= 1


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 3000))
def test_a_truncated_log_never_raises(cut: int) -> None:
    text = sample("applog/torch/torchrun.log")[:cut]
    summarise(parse_applog(text.splitlines(), source="app/torchrun.log"))


def test_a_rank_prefix_of_five_thousand_digits_loses_no_stage() -> None:
    # once raised ValueError (int() of a 5,000-digit string) and lost every rank's evidence
    lines = ["[rank" + "7" * 5000 + "]: boom", "[rank2]: ValueError: bad config"]
    facts = summarise(parse_applog(lines, source="app/x.log"))
    assert facts.first_error is not None and facts.first_error.rank == 2


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.text(min_size=0, max_size=5000), max_size=8), st.integers(0, 30))
def test_a_line_of_any_length_under_any_prefix_depth_never_raises(
    bodies: list[str], depth: int
) -> None:
    lines = ["[rank1]:" * depth + b for b in bodies]
    facts = summarise(parse_applog(lines, source="app/x.log"))
    assert all(isinstance(r.error_count, int) for r in facts.ranks)


def test_a_line_the_parser_chokes_on_is_counted_and_the_rest_of_the_file_still_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from runbook.parsers import applog

    real = applog.signature_of

    def choke(message: str) -> Any:
        if "poison" in message:
            raise ValueError("a parser bug")
        return real(message)

    monkeypatch.setattr(applog, "signature_of", choke)
    files = {"app/rank-1.log": result("app/rank-1.log", "poison\nValueError: bad config\n")}
    facts = roundtrip(registry.get("applog").func(files, CTX))
    assert facts["first_error"]["exception"] == "ValueError"
    assert facts["parse_errors"] == ["app/rank-1.log: 1 line(s) could not be read and were skipped"]


@pytest.mark.parametrize(
    ("line", "time"),
    [
        ("Mar 04 10:12:07 gpu-node-07 python[4711]: [rank3]: ValueError: bad config",
         "2025-03-04T10:12:07"),
        ("2025-03-04T10:12:07+0000 gpu-node-07 python[4711]: [rank3]: ValueError: bad config",
         "2025-03-04T10:12:07+00:00"),
        ("Mar 04 10:12:07.123456 gpu-node-07 python[4711]: [rank3]: ValueError: bad config",
         "2025-03-04T10:12:07.123456"),
    ],
)  # fmt: skip
def test_a_job_logging_through_journald_is_read_behind_the_journal_prefix(
    line: str, time: str
) -> None:
    facts = summarise(
        parse_applog([line], source="app/train.log", collected_at="2025-03-04T12:00:00Z")
    )
    e = facts.first_error
    assert e is not None and (e.rank, e.exception, e.time) == (3, "ValueError", time)
    assert e.pid == 4711 and e.cause == "peer-rank-exited"
