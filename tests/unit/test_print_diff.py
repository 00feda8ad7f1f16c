"""The check run's diff as the approver reads it: "no change" is said only by a check run that
passed; a failed one that printed no diff does not vouch for anything."""

from __future__ import annotations

import io

from rich.console import Console

from runbook.cli.approvals import print_diff


def _shown(diff: str, *, ok: bool) -> str:
    out = io.StringIO()
    print_diff(Console(file=out, width=200), diff, ok=ok)
    return out.getvalue()


def test_a_failed_check_run_without_a_diff_is_not_called_no_change() -> None:
    shown = _shown("", ok=False)
    assert "no change" not in shown and "the check run failed" in shown


def test_a_passed_check_run_without_a_diff_reports_no_change() -> None:
    assert "(the check run reports no change)" in _shown("", ok=True)


def test_a_diff_is_shown_line_by_line_either_way() -> None:
    diff = "--- before\n+++ after\n@@ -1 +1 @@\n-a\n+b\n"
    for ok in (True, False):
        shown = _shown(diff, ok=ok)
        assert "-a" in shown and "+b" in shown and "no change" not in shown
