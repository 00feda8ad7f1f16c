"""kubelet and containerd journals (`journal-kubelet.txt`, `journal-containerd.txt`): the
lifecycle lines that reconstruct a pod's timeline after the pod object is gone.

Accepts `journalctl` short (`Mar 04 10:12:01 node kubelet[1234]: ...`), short-precise,
short-iso and short-full. Events: ``task-oom`` (containerd TaskOOM), ``task-exit`` (with the
exit status), ``shim-disconnected``, ``container-died`` (kubelet PLEG), ``killing-container``,
``oom-killed`` (a status naming OOMKilled), ``system-oom`` (kubelet's OOM watcher), ``evicted``.
Each carries the pod UID / container id it names, so lines can be matched to this pod.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from runbook.parsers._common import (
    Counter,
    Evidence,
    TimeRef,
    clip,
    is_collected,
    iso,
    parse_syslog_prefix,
    to_jsonable,
)
from runbook.parsers.registry import Files, register
from runbook.parsers.scan import candidates

SOURCES = ("journal-kubelet.txt", "journal-containerd.txt")


@dataclass(frozen=True, kw_only=True)
class JournalEvent(Evidence):
    kind: str
    unit: str | None = None
    #: a precise time the message itself carries (containerd `time=`), when it has one
    precise_time: str | None = None
    pod: str | None = None
    pod_uid: str | None = None
    container_id: str | None = None
    container_name: str | None = None
    exit_status: int | None = None


@dataclass(frozen=True)
class JournalFacts:
    events: tuple[JournalEvent, ...]
    kinds: dict[str, int]
    lines: int
    first_time: str | None
    last_time: str | None
    #: `-- No entries --`: the window held nothing (evidence, unlike a missing file)
    no_entries: bool = False
    totals: dict[str, int] = field(default_factory=dict)


_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("task-oom", re.compile(r"TaskOOM")),
    ("task-exit", re.compile(r"TaskExit event")),
    ("shim-disconnected", re.compile(r"shim disconnected")),
    ("system-oom", re.compile(r"System OOM encountered|Got sys oom event|SystemOOM")),
    ("killing-container", re.compile(r"Killing container|killing container", re.IGNORECASE)),
    ("container-died", re.compile(r"ContainerDied")),
    ("oom-killed", re.compile(r"OOMKilled")),
    ("evicted", re.compile(r"Evicted|eviction manager: (?:pods?|must evict)", re.IGNORECASE)),
)
#: a literal on every line of a kind in _KINDS (the prefilter of big journals)
KEYWORDS = (
    "TaskOOM", "TaskExit event", "shim disconnected", "System OOM encountered",
    "Got sys oom event", "SystemOOM", "illing container", "ContainerDied", "OOMKilled",
    "victed", "viction manager", "-- ",
)  # fmt: skip
_ANY_KIND = re.compile("|".join(f"(?:{p.pattern})" for _, p in _KINDS), re.IGNORECASE)
# `<POD_UID_1>`, `<CONTAINER_ID_1>`: the ids in a sanitized bundle (runbook/report/sanitize.py)
_UID = re.compile(
    r"(?:podUID=\"?|\"ID\":\"|pod)([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
    r"|<POD_UID_\d+>)"
)
_CID = re.compile(
    r"(?:containerd://|container_id:\\?\"|ContainerID:|\bid=|\"Data\":\"|containerID=\"?"
    r"(?:containerd://)?|cri-containerd-)([0-9a-f]{64}|<CONTAINER_ID_\d+>)"
)


def _pod_uid(text: str) -> str:
    """The hyphenated UID (the systemd slice spells it with `_`); a placeholder as it is."""
    return text if text.startswith("<") else text.replace("_", "-")


_POD = re.compile(r"\bpod=\"([^\"]+)\"")
_CNAME = re.compile(r"containerName=\"([^\"]+)\"")
_EXIT = re.compile(r"exit_status:(\d+)|ExitStatus:(\d+)|exitCode=(\d+)")
_CTIME = re.compile(r"\btime=\"([^\"]+)\"")


def parse_journal(
    lines: Iterable[str] | candidates, *, source: str, collected_at: str | None = None
) -> JournalFacts:
    """Journal lines, or `scan.candidates` over them (numbered lines holding KEYWORDS; the
    first/last lines and the line count then come from the scan)."""
    ref = TimeRef(collected_at)
    counter = Counter()
    events: list[JournalEvent] = []
    kinds: dict[str, int] = {}
    first: str | None = None
    last: str | None = None
    no_entries = False
    n = 0
    last_raw: str | None = None
    scanned = isinstance(lines, candidates)
    pairs: Iterable[tuple[int, str]] = (
        lines if isinstance(lines, candidates) else enumerate(lines, 1)
    )
    for n, raw in pairs:
        if raw.startswith("-- "):
            no_entries = no_entries or "No entries" in raw
            continue
        if first is None and not scanned:
            head = parse_syslog_prefix(raw, ref)
            first = head.time if head else None
        last_raw = raw
        # fast path: only lines of a kind we record get their timestamp parsed
        if not _ANY_KIND.search(raw):
            continue
        stamp = parse_syslog_prefix(raw, ref)
        msg = stamp.message if stamp else raw
        kind = next((k for k, p in _KINDS if p.search(msg)), None)
        if kind is None:
            continue
        kinds[kind] = kinds.get(kind, 0) + 1
        uid = _UID.search(msg)
        container_id = _CID.search(msg)
        pod = _POD.search(msg)
        container_name = _CNAME.search(msg)
        exited = _EXIT.search(msg)
        precise = _CTIME.search(msg)
        # containerd's own `time=` is precise and zoned; the syslog stamp is neither
        precise_time = iso(precise.group(1)) if precise else None
        counter.keep(
            "events",
            events,
            JournalEvent(
                source=source,
                line=n,
                time=precise_time or (stamp.time if stamp else None),
                text=clip(raw),
                kind=kind,
                unit=stamp.ident if stamp else None,
                precise_time=precise_time,
                pod=pod.group(1) if pod else None,
                pod_uid=_pod_uid(uid.group(1)) if uid else None,
                container_id=container_id.group(1) if container_id else None,
                container_name=container_name.group(1) if container_name else None,
                exit_status=int(next(g for g in exited.groups() if g)) if exited else None,
            ),
        )
    if isinstance(lines, candidates):
        n, last_raw = lines.total, lines.last
        head = parse_syslog_prefix(lines.first, ref) if lines.first else None
        first = head.time if head else None
        no_entries = no_entries or bool(lines.first and "No entries" in lines.first)
    if last_raw is not None:
        tail = parse_syslog_prefix(last_raw, ref)
        last = tail.time if tail else None
    return JournalFacts(
        events=tuple(events),
        kinds=kinds,
        lines=n,
        first_time=first,
        last_time=last,
        no_entries=no_entries,
        totals=dict(counter.totals),
    )


@register("journal", "journal-kubelet.txt, journal-containerd.txt: OOM and container lifecycle")
def journal_facts(files: Files, context: Mapping[str, Any]) -> dict[str, Any]:
    raw = context.get("collected_at")
    collected_at = raw if isinstance(raw, str) else None
    vars_ = context.get("vars")
    want_uid = vars_.get("pod_uid") if isinstance(vars_, dict) else None
    out: dict[str, Any] = {}
    all_events: list[dict[str, Any]] = []
    for name in SOURCES:
        res = files.get(name)
        key = name[len("journal-") :].rsplit(".", 1)[0]
        if not is_collected(res):
            out[key] = {"collected": False}
            continue
        facts = parse_journal(candidates(res, KEYWORDS), source=name, collected_at=collected_at)
        out[key] = {"collected": True, **to_jsonable(facts)}
        all_events.extend(to_jsonable(e) for e in facts.events)
    all_events.sort(key=lambda e: (e["time"] or "", e["source"], e["line"]))
    out["events"] = all_events
    out["oom_events"] = [
        e for e in all_events if e["kind"] in ("task-oom", "oom-killed", "system-oom")
    ]
    if isinstance(want_uid, str):
        out["pod_events"] = [e for e in all_events if e["pod_uid"] == want_uid]
    out["collected"] = any(out[k]["collected"] for k in ("kubelet", "containerd"))
    return out
