from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runbook.parsers import registry
from runbook.parsers.journal import parse_journal

from .helpers import result, roundtrip, sample, sample_lines

D = "journal/"
UID = "7c1d3a52-8e4b-4f0a-9d21-5b6c8e9f0a13"
CID = "0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b"
CTX = {"collected_at": "2025-03-04T12:00:00Z"}


def test_kubelet_lines_give_the_oom_and_the_dead_container_with_pod_uid() -> None:
    facts = parse_journal(sample_lines(D + "kubelet-short.txt"), source="journal-kubelet.txt",
                          collected_at=CTX["collected_at"])
    assert [e.kind for e in facts.events] == ["system-oom", "container-died", "killing-container"]
    oom, died, kill = facts.events
    assert oom.time == "2025-03-04T10:12:01" and oom.pod_uid == UID and oom.container_id == CID
    assert (died.pod, died.pod_uid, died.container_id) == ("ml-train/train-job-worker-0", UID, CID)
    assert kill.container_name == "trainer" and kill.line == 5 and kill.unit == "kubelet"


def test_containerd_task_oom_exit_status_and_shim_disconnect() -> None:
    facts = parse_journal(sample_lines(D + "containerd-short-iso.txt"),
                          source="journal-containerd.txt")
    assert [e.kind for e in facts.events] == ["task-oom", "task-exit", "shim-disconnected",
                                              "shim-disconnected"]
    oom, exit_, shim = facts.events[:3]
    # the event's time is containerd's own precise, zoned `time=`, not the syslog second
    assert oom.container_id == CID and oom.time == "2025-03-04T10:12:01.998765+00:00"
    assert oom.precise_time == "2025-03-04T10:12:01.998765+00:00"
    assert exit_.exit_status == 137 and shim.container_id == CID


def test_containerd_1_7_task_oom_format_and_short_precise_times() -> None:
    facts = parse_journal(sample_lines(D + "containerd-1.7-short-precise.txt"),
                          source="journal-containerd.txt", collected_at=CTX["collected_at"])
    oom = facts.events[0]
    assert oom.kind == "task-oom"
    assert oom.container_id == "77aa88bb99cc00dd11ee22ff33aa44bb55cc66dd77ee88ff99aa00bb11cc22dd"
    # containerd's own `time=` (UTC, nanoseconds cut to microseconds) beats the journal stamp
    assert oom.time == "2025-03-04T11:02:30.998765+00:00"


def test_no_entries_is_evidence_of_an_empty_window() -> None:
    facts = parse_journal(sample_lines(D + "kubelet-no-entries.txt"), source="journal-kubelet.txt")
    assert facts.no_entries and facts.events == ()


@pytest.mark.parametrize("pod_uid", [UID])
def test_the_adapter_merges_both_journals_in_time_order_and_filters_by_pod(pod_uid: str) -> None:
    fn = registry.get("journal").func
    files = {
        "journal-kubelet.txt": result("journal-kubelet.txt", sample(D + "kubelet-short.txt")),
        "journal-containerd.txt": result("journal-containerd.txt",
                                         sample(D + "containerd-short-iso.txt")),
    }
    facts = roundtrip(fn(files, {**CTX, "vars": {"pod_uid": pod_uid}}))
    assert facts["collected"] and facts["kubelet"]["collected"] and facts["containerd"]["kinds"]
    assert {e["kind"] for e in facts["oom_events"]} == {"task-oom", "system-oom"}
    assert [e["kind"] for e in facts["pod_events"]] == ["system-oom", "container-died",
                                                        "killing-container"]
    assert fn({}, {})["collected"] is False


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(max_size=150) | st.sampled_from(sample_lines(D + "kubelet-short.txt")),
                max_size=20))
def test_arbitrary_text_never_raises(lines: list[str]) -> None:
    facts = parse_journal(lines, source="journal-kubelet.txt", collected_at="2025-03-04")
    assert all(isinstance(e.kind, str) and e.line >= 1 for e in facts.events)


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 3000))
def test_a_truncated_journal_never_raises(cut: int) -> None:
    parse_journal(sample(D + "containerd-short-iso.txt")[:cut].splitlines(), source="j")
