"""`clock.txt`: `date +%s.%N; cat /proc/uptime` at collection time.

The node's wall clock and its uptime at the same instant give the boot time, which converts
kernel monotonic timestamps (plain `dmesg`) to wall time; `dmesg -T` does the same sum but drifts
after a suspend, so the collected pair is the better reference.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from runbook.parsers._common import epoch_to_iso, is_collected, to_jsonable
from runbook.parsers.registry import Files, register

SOURCE = "clock.txt"


@dataclass(frozen=True)
class ClockFacts:
    now_epoch: float | None
    now: str | None
    uptime_s: float | None
    idle_s: float | None
    boot_epoch: float | None
    boot_time: str | None


def boot_time(now_epoch: float, uptime_s: float) -> float:
    """Epoch seconds of boot: the wall clock minus the time since boot."""
    return now_epoch - uptime_s


def wall_time(boot_epoch: float, monotonic_s: float) -> str | None:
    """ISO wall time (UTC) of a kernel monotonic timestamp."""
    return epoch_to_iso(boot_epoch + monotonic_s)


_EPOCH = re.compile(r"^\s*(\d{9,11}(?:\.\d+)?)\s*$")
_UPTIME = re.compile(r"^\s*(\d+(?:\.\d+)?)\s+(\d+(?:\.\d+)?)\s*$")


def parse_clock(lines: Iterable[str]) -> ClockFacts:
    now: float | None = None
    up: float | None = None
    idle: float | None = None
    for line in lines:
        if now is None:
            m = _EPOCH.match(line)
            if m:
                now = float(m.group(1))
                continue
        if up is None:
            m = _UPTIME.match(line)
            if m:
                up, idle = float(m.group(1)), float(m.group(2))
    boot = boot_time(now, up) if now is not None and up is not None else None
    return ClockFacts(
        now_epoch=now,
        now=epoch_to_iso(now) if now is not None else None,
        uptime_s=up,
        idle_s=idle,
        boot_epoch=boot,
        boot_time=epoch_to_iso(boot) if boot is not None else None,
    )


@register("clock", "clock.txt: node wall clock, uptime and boot time")
def clock_facts(files: Files, context: Mapping[str, Any]) -> dict[str, Any]:
    result = files.get(SOURCE)
    if not is_collected(result):
        return {"collected": False}
    facts: dict[str, Any] = to_jsonable(parse_clock(result.lines()))
    facts["collected"] = True
    return facts
