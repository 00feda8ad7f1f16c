"""Inputs the hang parsers met under tests/hardening/test_properties.py that made them raise or
return a fact of the wrong type, pinned here: each gives well-typed facts, never an exception."""

from __future__ import annotations

import json

import pytest

from runbook.parsers import flight_recorder, hang_state, ncclras, pyspy
from runbook.transports.base import CommandResult

#: JSON nested deeper than the json module recurses (a cut or corrupted dump can be anything)
DEEP = "[" * 100_000 + "1" + "]" * 100_000


def one(name: str, text: str) -> dict[str, CommandResult]:
    return {name: CommandResult(name, "cat", stdout=text, exited=0)}


def test_a_flight_recorder_dump_nested_too_deep_is_unreadable_not_an_exception() -> None:
    facts = flight_recorder.flight_recorder_facts(
        one("fr/nccl_trace_rank_0.json", '{"entries": ' + DEEP + "}"), {}
    )
    assert facts["unreadable"][0]["source"] == "fr/nccl_trace_rank_0.json"
    assert facts["unreadable"][0]["why"].startswith("not JSON")
    json.dumps(facts, allow_nan=False)


def test_ncclras_json_nested_too_deep_is_not_available_not_an_exception() -> None:
    facts = ncclras.ncclras_facts(one("ncclras.txt", '{"communicators": ' + DEEP + "}"), {})
    assert facts["available"] is False
    assert facts["why"].startswith("not ncclras output")


def test_py_spy_json_nested_too_deep_is_an_unread_dump_not_an_exception() -> None:
    facts = pyspy.pyspy_facts(one("pyspy/rank-0.pid-7.txt", DEEP), {})
    assert facts["dumps"][0]["error"].startswith("not py-spy JSON")
    assert facts["dumps"][0]["threads"] == []


@pytest.mark.parametrize("value", [False, 0, 1.5, float("nan"), ["x"], {"a": 1}])
def test_a_collection_time_that_is_not_a_time_is_read_at_none(value: object) -> None:
    facts = hang_state.hang_facts({}, {"collected_at": value})
    assert facts["read_at"] is None
    json.dumps(facts, allow_nan=False)


def test_the_collection_time_is_read_at_as_iso_text() -> None:
    import datetime as dt

    when = dt.datetime(2026, 12, 6, 1, 0, tzinfo=dt.UTC)
    assert hang_state.hang_facts({}, {"collected_at": when})["read_at"] == when.isoformat()
    text = "2026-12-06T01:00:00+00:00"
    assert hang_state.hang_facts({}, {"collected_at": text})["read_at"] == text


@pytest.mark.parametrize("version", [5, 2.29, ["2.29.1"], {"v": 1}, True])
def test_an_ncclras_json_version_that_is_not_text_is_no_version(version: object) -> None:
    text = json.dumps({"nccl_version": version, "communicators": []})
    facts = ncclras.ncclras_facts(one("ncclras.txt", text), {})
    assert facts["available"] is True and facts["format"] == "json"
    assert facts["nccl_version"] is None
    assert ncclras.ncclras_facts(one("ncclras.txt", text.replace(json.dumps(version), '"2.29.1"')),
                                 {})["nccl_version"] == "2.29.1"  # fmt: skip
