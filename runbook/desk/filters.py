"""The filters the desk's templates use: durations, times, a diff line's class, a value as
text, a root cause's severity. Pure."""

from __future__ import annotations

import json
import time
from typing import Any

from runbook.desk.policy import severity_of


def ago(seconds: float) -> str:
    """`45 s`, `12 min`, `3.5 h`, `2.0 d`."""
    seconds = max(seconds, 0.0)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def utc(ts: float | None) -> str:
    if not ts:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(ts))


def diff_class(line: str) -> str:
    if line.startswith("+") and not line.startswith("+++"):
        return "add"
    if line.startswith("-") and not line.startswith("---"):
        return "del"
    if line.startswith("@@"):
        return "hunk"
    return ""


def shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


FILTERS = {
    "ago": ago,
    "utc": utc,
    "diff_class": diff_class,
    "shown": shown,
    "severity": severity_of,  # of a root cause
}
