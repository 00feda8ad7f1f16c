from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runbook.parsers import registry
from runbook.parsers.clock import boot_time, parse_clock, wall_time

from .helpers import result, roundtrip, sample, sample_lines


def test_clock_txt_gives_now_uptime_and_boot_time() -> None:
    facts = parse_clock(sample_lines("clock/clock.txt"))
    assert facts.now_epoch == pytest.approx(1741083300.123456789)
    assert facts.uptime_s == 1215.34 and facts.idle_s == 18923.55
    assert facts.boot_epoch == pytest.approx(1741083300.123456789 - 1215.34)
    assert facts.now == "2025-03-04T10:15:00.123457+00:00"
    assert facts.boot_time is not None and facts.boot_time.startswith("2025-03-04T09:54:44")


def test_boot_time_and_wall_time_helpers() -> None:
    boot = boot_time(1741083300.0, 1200.0)
    assert boot == 1741082100.0
    assert wall_time(boot, 100.5) == "2025-03-04T09:56:40.500000+00:00"


def test_the_adapter_and_missing_clock() -> None:
    fn = registry.get("clock").func
    facts = roundtrip(fn({"clock.txt": result("clock.txt", sample("clock/clock.txt"))}, {}))
    assert facts["collected"] and facts["uptime_s"] == 1215.34
    assert fn({}, {}) == {"collected": False}


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(max_size=40) | st.from_regex(r"\d{9,11}\.\d{1,9}", fullmatch=True),
                max_size=5))
def test_arbitrary_text_never_raises(lines: list[str]) -> None:
    facts = parse_clock(lines)
    assert facts.boot_epoch is None or isinstance(facts.boot_epoch, float)
