from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runbook.parsers import registry
from runbook.parsers.host import parse_df, parse_meminfo

from .helpers import result, roundtrip, sample, sample_lines

GiB = 1024**3


def test_meminfo_sizes_are_bytes_and_counts_stay_counts() -> None:
    facts = parse_meminfo(sample_lines("host/meminfo.txt"))
    assert facts.total_bytes == 2113396888 * 1024
    assert facts.available_bytes == 1382712040 * 1024
    assert facts.shmem_bytes == 52430004 * 1024
    assert facts.hugepages_total == 0
    assert facts.values["Active(anon)"] == 612361404 * 1024


@pytest.mark.parametrize(
    ("path", "size", "avail", "pct", "full"),
    [
        ("host/df-shm-full.txt", 64 * GiB, 0, 100, True),
        ("host/df-shm-default-64m.txt", 64 * 1024**2, 64 * 1024**2, 0, False),
        ("host/df-shm-tmpfs-k.txt", 1056698444 * 1024, 1047186104 * 1024, 1, False),
    ],
)
def test_df_of_dev_shm(path: str, size: int, avail: int, pct: int, full: bool) -> None:
    facts = parse_df(sample_lines(path))
    assert (facts.size_bytes, facts.avail_bytes, facts.use_pct, facts.full) == (
        size, avail, pct, full
    )
    assert facts.mount == "/dev/shm"


def test_the_adapter_reports_both_files_and_absence() -> None:
    fn = registry.get("host").func
    files = {
        "meminfo.txt": result("meminfo.txt", sample("host/meminfo.txt")),
        "df-shm.txt": result("df-shm.txt", sample("host/df-shm-full.txt")),
    }
    facts = roundtrip(fn(files, {}))
    assert facts["collected"] and facts["shm"]["full"] is True
    assert facts["meminfo"]["total_bytes"] == 2113396888 * 1024
    gone = result("df-shm.txt", "", rc=1,
                  stderr="df: /dev/shm: No such file or directory")
    assert fn({"df-shm.txt": gone}, {})["shm"] == {"collected": True, "present": False}
    assert fn({}, {})["collected"] is False


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(max_size=120), max_size=20))
def test_arbitrary_text_never_raises(lines: list[str]) -> None:
    m = parse_meminfo(lines)
    assert m.total_bytes is None or isinstance(m.total_bytes, int)
    d = parse_df(lines)
    assert isinstance(d.full, bool)
