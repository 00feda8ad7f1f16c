"""The pod's memory cgroup files (`cgroup/...`), v2 or v1, as limit/usage/peak/OOM facts.

v2: `memory.max` (`max` = unlimited), `memory.current`, `memory.peak`, `memory.events`
(`low high max oom oom_kill oom_group_kill`), `memory.stat` (`anon file shmem ...`).
v1: `memory.limit_in_bytes` (9223372036854771712 = unlimited), `memory.usage_in_bytes`,
`memory.max_usage_in_bytes`, `memory.failcnt`, `memory.oom_control`, `memory.stat`
(`cache rss shmem ...` and the hierarchical `total_*`, preferred when present).

`failcnt` is v1's `memory.failcnt`, or v2's `memory.events` `max` (times usage hit the limit).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from runbook.parsers._common import evidence_lines, is_collected, iter_lines, to_jsonable
from runbook.parsers.registry import Files, register

PREFIX = "cgroup/"
UNLIMITED = 1 << 62
V2_FILES = ("memory.max", "memory.current", "memory.peak", "memory.events")
V1_FILES = (
    "memory.limit_in_bytes",
    "memory.usage_in_bytes",
    "memory.max_usage_in_bytes",
    "memory.failcnt",
    "memory.oom_control",
)


@dataclass(frozen=True)
class CgroupFacts:
    version: Literal[1, 2] | None
    limit_bytes: int | None
    usage_bytes: int | None
    peak_bytes: int | None
    failcnt: int | None
    oom_events: int | None
    oom_kills: int | None
    anon_bytes: int | None
    file_bytes: int | None
    shmem_bytes: int | None
    #: usage or peak within `slack_bytes` of the limit
    usage_at_limit: bool
    slack_bytes: int | None
    under_oom: bool | None = None
    events: dict[str, int] = field(default_factory=dict)
    stat: dict[str, int] = field(default_factory=dict)
    files: tuple[str, ...] = ()


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    s = text.strip().split("\n", 1)[0].strip()
    try:
        return int(s)
    except ValueError:
        return None


def _limit(text: str | None) -> int | None:
    if text is None or text.strip() == "max":
        return None
    value = _int(text)
    return None if value is None or value >= UNLIMITED else value


def _keyed(lines: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in lines:
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = int(parts[1])
            except ValueError:
                continue
    return out


def slack(limit: int) -> int:
    """How close to the limit counts as "at the limit": 0.5% of it, between 1 MiB and 1 GiB
    (the kernel reclaims a little below the limit before it gives up and OOM-kills)."""
    return max(1 << 20, min(limit // 200, 1 << 30))


def parse_cgroup(texts: Mapping[str, str]) -> CgroupFacts:
    """`texts` maps a cgroup file's base name (`memory.max`) to its content."""
    names = tuple(sorted(texts))
    if any(n in texts for n in V2_FILES):
        version: Literal[1, 2] | None = 2
    elif any(n in texts for n in V1_FILES):
        version = 1
    else:
        version = None
    stat = _keyed(iter_lines(texts.get("memory.stat", "")))
    events: dict[str, int] = {}
    under_oom: bool | None = None
    if version == 2:
        limit = _limit(texts.get("memory.max"))
        usage = _int(texts.get("memory.current"))
        peak = _int(texts.get("memory.peak"))
        events = _keyed(iter_lines(texts.get("memory.events", "")))
        failcnt = events.get("max")
        oom_events = events.get("oom")
        oom_kills = events.get("oom_kill")
        anon, file_, shmem = stat.get("anon"), stat.get("file"), stat.get("shmem")
    else:
        limit = _limit(texts.get("memory.limit_in_bytes"))
        if limit is None and "hierarchical_memory_limit" in stat:
            hierarchical = stat["hierarchical_memory_limit"]
            limit = None if hierarchical >= UNLIMITED else hierarchical
        usage = _int(texts.get("memory.usage_in_bytes"))
        peak = _int(texts.get("memory.max_usage_in_bytes"))
        failcnt = _int(texts.get("memory.failcnt"))
        control = _keyed(iter_lines(texts.get("memory.oom_control", "")))
        events = control
        oom_kills = control.get("oom_kill")
        oom_events = oom_kills
        under_oom = bool(control["under_oom"]) if "under_oom" in control else None

        def pick(key: str) -> int | None:
            return stat.get("total_" + key, stat.get(key))

        anon, file_, shmem = pick("rss"), pick("cache"), pick("shmem")
    s = slack(limit) if limit is not None else None
    at_limit = False
    if limit is not None and s is not None:
        for value in (usage, peak):
            if value is not None and value >= limit - s:
                at_limit = True
    return CgroupFacts(
        version=version,
        limit_bytes=limit,
        usage_bytes=usage,
        peak_bytes=peak,
        failcnt=failcnt,
        oom_events=oom_events,
        oom_kills=oom_kills,
        anon_bytes=anon,
        file_bytes=file_,
        shmem_bytes=shmem,
        usage_at_limit=at_limit,
        slack_bytes=s,
        under_oom=under_oom,
        events=events,
        stat=stat,
        files=names,
    )


@register("cgroup", "cgroup/memory.*: limit, usage, peak, failcnt, OOM kills (v1 and v2)")
def cgroup_facts(files: Files, context: Mapping[str, Any]) -> dict[str, Any]:
    texts: dict[str, str] = {}
    absent: list[str] = []
    for name, res in files.items():
        if not name.startswith(PREFIX) or not is_collected(res):
            continue
        base = name[len(PREFIX) :].rsplit("/", 1)[-1]
        if res.exited not in (0, None):
            absent.append(base)
            continue
        texts[base] = res.stdout
    if not texts:
        return {"collected": False, "present": False if absent else None}
    out: dict[str, Any] = to_jsonable(parse_cgroup(texts))
    out["collected"] = True
    out["present"] = True
    out["unreadable"] = sorted(absent)
    out["oom_killed"] = bool(out["oom_kills"])
    out["evidence"] = _evidence(texts)
    return out


#: the lines of each cgroup file that show the limit was hit: an OOM kill, a failed charge
_LIMIT_HIT = re.compile(r"(?:oom_kill|oom|max) [1-9]\d*").fullmatch
_HIT = {
    "memory.events": _LIMIT_HIT,
    "memory.oom_control": _LIMIT_HIT,
    "memory.failcnt": re.compile(r"[1-9]\d*").fullmatch,
}


def _evidence(texts: Mapping[str, str]) -> list[dict[str, Any]]:
    """The lines that show the cgroup hit its limit, as evidence (file, line, text)."""
    return [
        e
        for base, hit in _HIT.items()
        for e in evidence_lines(texts.get(base, ""), PREFIX + base, hit)
    ]
