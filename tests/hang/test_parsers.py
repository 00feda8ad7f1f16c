"""The hang parsers on real-format samples (tests/hang/samples/SOURCES.md says where each comes
from) and the line-up of ranks (runbook/hang.py) on what they read."""

from __future__ import annotations

import base64
import json
import os
import pickle
from pathlib import Path
from typing import Any

import pytest

from runbook import hang
from runbook.parsers import flight_recorder, ncclras, pyspy, watchdog
from runbook.transports.base import CommandResult

SAMPLES = Path(__file__).parent / "samples"
CONTEXT = {"collected_at": "2026-12-06T01:00:00+00:00", "node": "gpu-node-03"}


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def b64(name: str) -> str:
    return base64.b64encode((SAMPLES / name).read_bytes()).decode()


def files(**named: str) -> dict[str, CommandResult]:
    return {
        k.replace("__", "/"): CommandResult(k, "cat", stdout=v, exited=0) for k, v in named.items()
    }


# ---- the flight recorder ------------------------------------------------------------------


class Evil:
    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, (f"touch {MARKER}",))


MARKER = Path("/tmp/rbk-hang-test-pickle-ran")


def test_a_pickle_that_would_run_a_command_is_refused_and_nothing_runs() -> None:
    MARKER.unlink(missing_ok=True)
    data = pickle.dumps({"version": "2.10", "entries": [Evil()]})
    with pytest.raises(flight_recorder.UnsafePickle, match=r"GLOBAL|REDUCE"):
        flight_recorder.load_plain_pickle(data)
    facts = flight_recorder.parse_dump("fr/nccl_trace_rank_0.b64", base64.b64encode(data).decode())
    assert "not a plain container" in facts["error"]
    assert not MARKER.exists()


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_every_pickle_protocol_of_a_reduce_is_refused(protocol: int) -> None:
    data = pickle.dumps(Evil(), protocol=protocol)
    with pytest.raises(flight_recorder.UnsafePickle):
        flight_recorder.load_plain_pickle(data)
    assert not MARKER.exists()


def test_sets_and_class_lookups_are_refused_even_without_a_reduce() -> None:
    for value in ({1, 2}, frozenset([1]), bytearray(b"x"), Path("/")):
        with pytest.raises(flight_recorder.UnsafePickle):
            flight_recorder.load_plain_pickle(pickle.dumps(value, protocol=5))


def test_a_truncated_pickle_is_unreadable_not_an_exception() -> None:
    data = (SAMPLES / "fr-2.13-pickle-rank0.pickle").read_bytes()[:200]
    facts = flight_recorder.parse_dump("fr/x_0.b64", base64.b64encode(data).decode())
    assert facts["error"].startswith("not a complete pickle")


def test_the_pickle_and_json_dumps_of_pytorch_2_13_read_alike() -> None:
    pickled = flight_recorder.parse_dump(
        "fr/nccl_trace_rank_0.b64", b64("fr-2.13-pickle-rank0.pickle")
    )
    as_json = flight_recorder.parse_dump(
        "fr/nccl_trace_rank_0.json", sample("fr-2.13-json-rank0.json")
    )
    for facts in (pickled, as_json):
        assert facts["rank"] == 0 and facts["version"] == "2.10"
        group = facts["groups"]["0"]
        assert group["ranks"] == [0, 1] and group["desc"] == "default_pg"
        assert group["entered"] == 4
        last = group["entries"][-1]
        assert (last["op"], last["seq"], last["input_sizes"]) == ("all_reduce", 4, [[8]])
        assert not last["completed"] and group["entries"][-2]["completed"]
        assert last["created"].startswith("20")
    # the pickle carries the Python stack of the call; JSON does not
    assert pickled["groups"]["0"]["entries"][-1]["frames"][0]["name"] == "all_reduce"
    assert as_json["groups"]["0"]["entries"][-1]["frames"] == []


def test_the_2_5_era_format_and_the_seq_id_format_before_it_are_read() -> None:
    # key sets of FlightRecorder's "2.3"/"2.4" (PyTorch 2.5) and of the dumps before
    # collective_seq_id existed ("2.1": seq_id, pg_config as name -> rank list)
    v23 = {
        "version": "2.3",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}},
        "pg_status": {"0": {"last_enqueued_collective": 18422, "last_started_collective": 18422,
                            "last_completed_collective": 18421}},
        "entries": [
            {"record_id": 7, "pg_id": 0, "process_group": ("0", "default_pg"),
             "collective_seq_id": 18422, "p2p_seq_id": 0, "op_id": 18422,
             "profiling_name": "nccl:all_reduce", "time_created_ns": 1733400000000000000,
             "duration_ms": None, "input_sizes": [[1024]], "input_dtypes": ["Float"],
             "output_sizes": [[1024]], "output_dtypes": ["Float"], "state": "started",
             "time_discovered_started_ns": 1733400000100000000,
             "time_discovered_completed_ns": None, "retired": False, "timeout_ms": 600000,
             "is_p2p": False, "frames": [{"name": "all_reduce", "filename": "c10d.py", "line": 1}]},
        ],
    }  # fmt: skip
    v21 = {
        "version": "2.1",
        "pg_config": {"0": [0, 1]},
        "entries": [
            {"record_id": 1, "pg_id": 0, "process_group": ("0", ""), "seq_id": 12,
             "profiling_name": "nccl:broadcast", "time_created_ns": 1700000000000000000,
             "input_sizes": [[5056]], "output_sizes": [[5056]], "state": "completed",
             "retired": True, "frames": []},
        ],
    }  # fmt: skip
    a = flight_recorder.parse_dump(
        "fr/nccl_trace_rank_3.b64", base64.b64encode(pickle.dumps(v23)).decode()
    )
    b = flight_recorder.parse_dump("fr/nccl_trace_rank_1.json", json.dumps(v21))
    assert a["rank"] == 3 and a["groups"]["0"]["ranks"] == [0, 1, 2, 3]
    assert (
        a["groups"]["0"]["entries"][0]["started"]
        and not a["groups"]["0"]["entries"][0]["completed"]
    )
    assert b["groups"]["0"]["ranks"] == [0, 1]
    assert b["groups"]["0"]["entries"][0]["seq"] == 12
    assert b["groups"]["0"]["entries"][0]["completed"]


def test_a_dump_that_is_neither_json_nor_a_pickle_is_named_unreadable() -> None:
    facts = flight_recorder.flight_recorder_facts(
        {
            "fr/nccl_trace_rank_0.b64": CommandResult("a", "cat", stdout="%%%", exited=0),
            "fr/nccl_trace_rank_1.json": CommandResult("b", "cat", stdout="{not json", exited=0),
        },
        CONTEXT,
    )
    whys = {u["source"]: u["why"] for u in facts["unreadable"]}
    assert whys["fr/nccl_trace_rank_0.b64"] == "not base64"
    assert whys["fr/nccl_trace_rank_1.json"].startswith("not JSON")


# ---- py-spy -------------------------------------------------------------------------------


def test_py_spy_text_and_json_give_the_same_stack() -> None:
    text = pyspy.parse_dump("pyspy/rank-1.pid-15801.txt", sample("pyspy-0.4.3-sleeping-rank.txt"))
    js = pyspy.parse_dump("pyspy/rank-1.pid-15801.json", sample("pyspy-0.4.3-sleeping-rank.json"))
    for facts in (text, js):
        assert facts["rank"] == 1 and facts["pid"] == 15801
        assert facts["main"]["stack"][-1].startswith("wait_for_data (")
        assert facts["main"]["collective"] is None
    assert text["main"]["stack"] == js["main"]["stack"]


def test_a_rank_waiting_in_all_reduce_is_seen_in_the_collective() -> None:
    facts = pyspy.parse_dump("pyspy/rank-0.pid-1.txt", sample("pyspy-0.4.3-waiting-rank.txt"))
    assert facts["main"]["collective"] == "all_reduce"
    assert facts["main"]["stack"][-1].startswith(
        "all_reduce (torch/distributed/distributed_c10d.py:"
    )


def test_py_spy_that_could_not_attach_is_not_read_not_a_stack() -> None:
    denied = "Error: Permission denied (os error 13)\n"
    result = CommandResult("p", "py-spy", stdout="", stderr=denied, exited=1)
    facts = pyspy.pyspy_facts({"pyspy/rank-0.pid-9.txt": result}, CONTEXT)
    assert facts["dumps"] == [] and "Permission denied" in facts["not_read"][0]["why"]


# ---- watchdog lines -----------------------------------------------------------------------


def lines_of(name: str) -> dict[str, Any]:
    return watchdog.watchdog_facts(files(**{"app__" + name: sample(name)}), CONTEXT)


def test_the_2_0_watchdog_lines_without_numel_are_read() -> None:
    facts = lines_of("watchdog-2.0-ofa-271.log")
    assert facts["timed_out_ranks"] == [1, 2, 3, 6, 7]
    first = facts["timeouts"][0]
    assert (first["seq"], first["op"], first["numel_in"], first["ran_ms"]) == (
        469508,
        "allreduce",
        None,
        1802212,
    )


def test_the_2_4_lines_behind_torchrun_prefixes_carry_rank_time_and_pg_status() -> None:
    facts = lines_of("watchdog-2.4-llamafactory-7396.log")
    assert facts["timed_out_ranks"] == [0, 4]
    assert facts["timeouts"][0]["numel_in"] == 466119168
    assert facts["timeouts"][0]["time"] and facts["timeouts"][0]["time"].endswith("02:07:08.408271")
    status = facts["statuses"][0]
    got = (status["rank"], status["pg"], status["at"], status["enqueued"], status["completed"])
    assert got == (0, "1", 1580, 1582, 1579)


def test_the_2_6_pg_guid_form_is_read() -> None:
    status = lines_of("watchdog-2.6-basicsr-737.log")["statuses"][0]
    assert (status["rank"], status["pg"], status["completed"]) == (1, "0", 807)


def test_the_desync_report_names_the_lagging_rank() -> None:
    facts = lines_of("watchdog-2.8-desync-report-pytorch-152623.log")
    assert facts["lagging"][0]["ranks"] == [7]
    assert (facts["lagging"][0]["finished"], facts["lagging"][0]["missing"]) == (182, 183)
    states = {(s["collective"], s["op"]): s["ranks"] for s in facts["desync_states"]}
    assert states[(315, "allreduce")] == [0, 1, 2] and states[(317, "allgather_base")] == [
        3,
        4,
        5,
        6,
    ]
    assert facts["statuses"][0]["enqueued"] == 315


def test_the_detail_fingerprint_mismatch_is_read() -> None:
    record = lines_of("detail-mismatch-2.13-gloo.log")["mismatches"][0]
    assert [(p["rank"], p["op"], p["seq"]) for p in record["ranks"]] == [
        (0, "allreduce", 3), (1, "broadcast", 3),
    ]  # fmt: skip


# ---- ncclras ------------------------------------------------------------------------------


def ras(name: str) -> dict[str, Any]:
    return ncclras.ncclras_facts(files(**{"ncclras.txt": sample(name)}), CONTEXT)


def test_ncclras_names_the_missing_rank_and_the_unresponsive_process() -> None:
    facts = ras("ncclras-2.24-incomplete.txt")
    assert facts["available"] and [m["rank"] for m in facts["missing_ranks"]] == [21]
    assert facts["unresponsive_processes"][0]["pid"] == 3487984
    assert facts["unresponsive_processes"][0]["node"] == "172.16.64.213"


def test_ncclras_dead_processes_and_the_ranks_behind() -> None:
    assert ras("ncclras-2.24-dead.txt")["dead_processes"][0]["gpus"] == "5"
    behind = ras("ncclras-2.24-mismatch.txt")["behind"]
    assert [b["rank"] for b in behind] == [0, 2, 3, 4, 5, 7]
    assert {b["launched"] for b in behind} == {6649}


def test_ncclras_lists_the_smaller_group_which_may_be_ahead_not_behind() -> None:
    facts = ras("ncclras-2.26-mismatch-nccl-1911.txt")
    assert facts["nccl_version"] == "2.26.2"
    assert facts["behind"] == []
    assert [(a["rank"], a["launched"]) for a in facts["ahead"]] == [(12, 641), (13, 641)]


def test_ncclras_json_missing_ranks() -> None:
    facts = ras("ncclras-2.29-json.txt")
    assert facts["format"] == "json" and facts["missing_ranks"][0]["rank"] == 1
    assert facts["missing_ranks"][0]["unresponsive"] and not facts["dead_processes"]


def test_no_ncclras_on_the_node_is_not_available_never_a_finding() -> None:
    facts = ncclras.ncclras_facts(
        {
            "ncclras.txt": CommandResult(
                "n", "ncclras", stderr="ncclras: not installed\n", exited=127
            )
        },
        CONTEXT,
    )
    assert facts == {"collected": True, "available": False, "why": "ncclras: not installed"}


# ---- the line-up --------------------------------------------------------------------------


def real_views() -> dict[int, hang.RankView]:
    fr = {
        "dumps": [
            flight_recorder.parse_dump(
                "fr/nccl_trace_rank_0.b64", b64("fr-2.13-pickle-rank0.pickle")
            ),
            flight_recorder.parse_dump(
                "fr/nccl_trace_rank_1.b64", b64("fr-2.13-pickle-rank1.pickle")
            ),
        ]
    }
    spy = {
        "dumps": [
            pyspy.parse_dump("pyspy/rank-0.pid-1.txt", sample("pyspy-0.4.3-waiting-rank.txt")),
            pyspy.parse_dump("pyspy/rank-1.pid-2.txt", sample("pyspy-0.4.3-sleeping-rank.txt")),
        ]
    }
    return hang.views_from_facts(fr, spy, {}, node="gpu-node-03")


def test_the_rank_behind_is_stalled_and_its_earliest_evidence_comes_first() -> None:
    result = hang.analyse(real_views(), {}, now="2026-12-06T01:00:00Z")
    assert result["cause"] == "rank-stalled" and result["behind"] == [1]
    assert result["statement"].startswith(
        "rank 1 (gpu-node-03) never entered all_reduce #4 of pg 0 (default_pg); "
        "its main thread is in"
    )
    assert result["evidence"][0]["source"] == "fr/nccl_trace_rank_1.b64"
    assert result["stalled_ranks"][0]["stack"][-1].startswith("wait_for_data (")


def test_every_rank_in_the_collective_with_the_same_sizes_is_collective_hung() -> None:
    views = real_views()
    behind = views[1].groups["0"]
    behind["entries"] = [*behind["entries"], {**views[0].groups["0"]["entries"][-1]}]
    behind["entered"] = 4
    result = hang.analyse(views, {})
    assert result["cause"] == "collective-hung"
    assert "every rank of pg 0 (default_pg) (2) entered all_reduce #4" in result["statement"]


def test_a_rank_with_no_dump_leaves_the_hang_open_on_that_node() -> None:
    views = real_views()
    del views[1]
    result = hang.analyse(views, {})
    assert result["cause"] is None and result["unseen"] == [1]
    assert "rank 1 of that group left no evidence here" in result["statement"]


def test_two_ranks_timing_out_in_different_ops_at_one_number_are_a_desync() -> None:
    result = hang.analyse({}, lines_of("watchdog-2.4-nccl-1409.log"))
    assert result["cause"] == "collective-desync"
    assert "rank 3 timed out in allreduce of 2106881 elements" in result["statement"]
    assert "rank 7 timed out in broadcast of 5056 elements" in result["statement"]


def test_the_desync_report_makes_its_lagging_rank_the_stalled_one() -> None:
    result = hang.analyse({}, lines_of("watchdog-2.8-desync-report-pytorch-152623.log"))
    assert result["cause"] == "rank-stalled"
    assert [s["rank"] for s in result["stalled_ranks"]] == [7]


def test_every_logged_rank_timing_out_alike_is_hung_at_medium_confidence() -> None:
    result = hang.analyse({}, lines_of("watchdog-2.0-ofa-271.log"))
    assert result["cause"] == "collective-hung" and result["confidence"] == "medium"


def test_a_rank_that_logged_but_never_timed_out_is_the_stalled_candidate() -> None:
    log = sample("watchdog-2.4-llamafactory-7396.log") + (
        "[80750] [rank5]:[E321 01:31:02.000000000 train.py:10] loading shard 17\n"
    )
    facts = watchdog.watchdog_facts(files(app__train_log=log), CONTEXT)
    result = hang.analyse({}, facts, now="2026-03-21T02:07:10")
    assert result["cause"] == "rank-stalled" and [s["rank"] for s in result["stalled_ranks"]] == [5]


def test_ncclras_alone_names_the_missing_rank_at_medium_confidence() -> None:
    result = hang.analyse({}, {}, ras=ras("ncclras-2.24-incomplete.txt"))
    assert result["cause"] == "rank-stalled" and result["confidence"] == "medium"
    assert [s["rank"] for s in result["stalled_ranks"]] == [21]
    assert result["statement"].startswith("NCCL RAS: rank 21 missing from the communicator")


def test_ncclras_ranks_ahead_name_no_one() -> None:
    assert hang.analyse({}, {}, ras=ras("ncclras-2.26-mismatch-nccl-1911.txt"))["cause"] is None
