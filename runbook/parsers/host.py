"""Host memory: `/proc/meminfo` (`meminfo.txt`) and `df -B1 /dev/shm` (`df-shm.txt`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from runbook.parsers._common import is_collected, says_absent, to_jsonable
from runbook.parsers.registry import Files, register

MEMINFO = "meminfo.txt"
DF_SHM = "df-shm.txt"

_MEMINFO = re.compile(r"^([A-Za-z0-9_()]+):\s+([0-9]{1,20})(?:\s+kB)?\s*$")


@dataclass(frozen=True)
class MeminfoFacts:
    total_bytes: int | None
    available_bytes: int | None
    free_bytes: int | None
    shmem_bytes: int | None
    cached_bytes: int | None
    mlocked_bytes: int | None
    hugepages_total: int | None
    values: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class DfFacts:
    filesystem: str | None
    mount: str | None
    size_bytes: int | None
    used_bytes: int | None
    avail_bytes: int | None
    use_pct: int | None
    #: nothing left to allocate (avail 0 or 100% used)
    full: bool
    #: 90% or more used
    nearly_full: bool


def parse_meminfo(lines: Iterable[str]) -> MeminfoFacts:
    values: dict[str, int] = {}
    for line in lines:
        m = _MEMINFO.match(line.strip())
        if m:
            key, number = m.group(1), int(m.group(2))
            # sizes are in kB; counts (HugePages_*) have no unit
            values[key] = number * 1024 if line.rstrip().endswith("kB") else number
    return MeminfoFacts(
        total_bytes=values.get("MemTotal"),
        available_bytes=values.get("MemAvailable"),
        free_bytes=values.get("MemFree"),
        shmem_bytes=values.get("Shmem"),
        cached_bytes=values.get("Cached"),
        mlocked_bytes=values.get("Mlocked"),
        hugepages_total=values.get("HugePages_Total"),
        values=values,
    )


def parse_df(lines: Iterable[str]) -> DfFacts:
    """`df -B1 PATH` (or `df -k`, sizes then in KiB blocks per the header)."""
    scale = 1
    pending: list[str] = []
    for line in lines:
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "Filesystem":
            header = line.split()
            if len(header) > 1 and header[1].endswith("K-blocks"):
                scale = 1024
            continue
        pending.extend(parts)
        if len(pending) >= 6:  # a long filesystem name wraps onto its own line
            break
    if len(pending) < 6:
        return DfFacts(None, None, None, None, None, None, False, False)
    fs, size, used, avail, pct, mount = pending[:6]

    def num(s: str) -> int | None:
        return int(s) * scale if s.isdecimal() else None

    use = int(pct.rstrip("%")) if pct.rstrip("%").isdecimal() else None
    size_b, used_b, avail_b = num(size), num(used), num(avail)
    full = avail_b == 0 or (use is not None and use >= 100)
    return DfFacts(
        fs, mount, size_b, used_b, avail_b, use, full, full or (use is not None and use >= 90)
    )


@register("host", "meminfo.txt and df-shm.txt: host memory and /dev/shm usage")
def host_facts(files: Files, context: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    mem = files.get(MEMINFO)
    if is_collected(mem):
        out["meminfo"] = {"collected": True, **to_jsonable(parse_meminfo(mem.lines()))}
    else:
        out["meminfo"] = {"collected": False}
    df = files.get(DF_SHM)
    if is_collected(df):
        if says_absent(df):
            out["shm"] = {"collected": True, "present": False}
        else:
            out["shm"] = {"collected": True, "present": True, **to_jsonable(parse_df(df.lines()))}
    else:
        out["shm"] = {"collected": False}
    out["collected"] = out["meminfo"]["collected"] or out["shm"]["collected"]
    return out
