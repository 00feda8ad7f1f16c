"""A line cut for a summary (a sweep's finding, a job's "… reported TEXT") says it was cut."""

from __future__ import annotations

from runbook.printable import shortened


def test_a_line_within_the_width_is_kept_and_a_longer_one_ends_in_an_ellipsis() -> None:
    assert shortened("x" * 100, 100) == "x" * 100
    cut = shortened("NCCL WARN " + "y" * 200, 100)
    assert len(cut) == 100 and cut.endswith("…") and cut.startswith("NCCL WARN y")
