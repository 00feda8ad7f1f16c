from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runbook.parsers import registry
from runbook.parsers.cgroup import CgroupFacts, parse_cgroup

from .helpers import SAMPLES, missing, result, roundtrip

GiB = 1024**3


def texts(name: str) -> dict[str, str]:
    d = SAMPLES / "cgroup" / name
    return {p.name: p.read_text() for p in sorted(d.iterdir())}


def files_of(name: str) -> dict[str, Any]:
    return {f"cgroup/{k}": result(f"cgroup/{k}", v) for k, v in texts(name).items()}


@pytest.mark.parametrize(
    ("sample", "version", "limit", "at_limit", "oom_kills", "failcnt"),
    [
        ("v2-at-limit", 2, 640 * GiB, True, 3, 18234),
        ("v2-unlimited", 2, None, False, 0, 0),
        ("v1-at-limit", 1, 8 * GiB, True, 2, 1923),
        ("v1-unlimited", 1, None, False, None, 0),
    ],
)
def test_limit_usage_and_oom_counters_in_both_cgroup_versions(
    sample: str, version: int, limit: int | None, at_limit: bool, oom_kills: int | None,
    failcnt: int,
) -> None:
    facts = parse_cgroup(texts(sample))
    assert facts.version == version
    assert facts.limit_bytes == limit
    assert facts.usage_at_limit is at_limit
    assert facts.oom_kills == oom_kills
    assert facts.failcnt == failcnt


def test_v2_pod_at_640_gib_reports_peak_equal_to_limit_and_memory_breakdown() -> None:
    facts = parse_cgroup(texts("v2-at-limit"))
    assert facts.peak_bytes == facts.limit_bytes == 640 * GiB
    assert facts.usage_bytes is not None and facts.usage_bytes < facts.limit_bytes
    assert facts.oom_events == 3
    assert facts.shmem_bytes == 50 * GiB
    assert facts.anon_bytes == 612361404416
    assert facts.events["oom_group_kill"] == 0


def test_v1_prefers_hierarchical_totals_and_reads_oom_control() -> None:
    facts = parse_cgroup(texts("v1-at-limit"))
    assert facts.anon_bytes == 8546426880
    assert facts.shmem_bytes == 1048576
    assert facts.file_bytes == 40960000
    assert facts.under_oom is False
    assert facts.peak_bytes == 8 * GiB


def test_v1_unlimited_magic_number_is_no_limit() -> None:
    facts = parse_cgroup(texts("v1-unlimited"))
    assert facts.limit_bytes is None and facts.slack_bytes is None
    assert facts.anon_bytes == 536870912


def test_usage_just_below_the_limit_is_at_the_limit_but_far_below_is_not() -> None:
    near = parse_cgroup({"memory.max": "1073741824\n", "memory.current": "1072693248\n"})
    assert near.usage_at_limit
    far = parse_cgroup({"memory.max": "1073741824\n", "memory.current": "536870912\n"})
    assert not far.usage_at_limit


def test_the_adapter_reads_cgroup_files_and_is_json() -> None:
    fn = registry.get("cgroup").func
    facts = roundtrip(fn(files_of("v2-at-limit"), {}))
    assert facts["collected"] and facts["present"]
    assert facts["version"] == 2 and facts["usage_at_limit"] is True and facts["oom_killed"]
    assert facts["limit_bytes"] == 640 * GiB


def test_the_adapter_without_files_or_with_missing_files() -> None:
    fn = registry.get("cgroup").func
    assert fn({}, {})["collected"] is False
    assert fn({"cgroup/memory.max": missing("cgroup/memory.max")}, {})["collected"] is False
    gone = result("cgroup/memory.max", "", rc=1,
                  stderr="cat: /sys/fs/cgroup/x/memory.max: No such file or directory")
    assert fn({"cgroup/memory.max": gone}, {}) == {"collected": False, "present": False}


def _check(facts: CgroupFacts) -> None:
    assert facts.version in (1, 2, None)
    assert isinstance(facts.usage_at_limit, bool)
    for v in (facts.limit_bytes, facts.usage_bytes, facts.peak_bytes, facts.oom_kills):
        assert v is None or isinstance(v, int)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(["memory.max", "memory.current", "memory.peak",
                                        "memory.events", "memory.stat", "memory.limit_in_bytes",
                                        "memory.usage_in_bytes", "memory.oom_control",
                                        "memory.failcnt"]), st.text(max_size=80)))
def test_arbitrary_file_contents_never_raise(contents: dict[str, str]) -> None:
    _check(parse_cgroup(contents))


@settings(max_examples=50, deadline=None)
@given(st.sampled_from(["v2-at-limit", "v1-at-limit"]), st.integers(0, 400))
def test_truncated_files_never_raise(sample: str, cut: int) -> None:
    _check(parse_cgroup({k: v[:cut] for k, v in texts(sample).items()}))
