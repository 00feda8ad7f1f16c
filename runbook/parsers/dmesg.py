"""Kernel log (`dmesg.txt`): memory-cgroup and global OOM kills, page allocation failures,
NVIDIA driver pinning failures, Xid errors, GPUs fallen off the bus, PCIe AER errors.

Accepts `dmesg -T`, plain `dmesg` (monotonic seconds, kept in `uptime_s` and converted to wall
time when the boot time is known), `dmesg -r`/`-x`, `--time-format iso` and `journalctl -k`.
The lines of one OOM event (`invoked oom-killer` ... `Killed process`) are folded into one
record carrying the memory cgroup that hit its limit, so a runbook can tell this pod's OOM from
a neighbour's. The parser streams: memory is bounded whatever the log's size.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from runbook import signatures
from runbook.parsers import xid as xidtable
from runbook.parsers._common import (
    Counter,
    Evidence,
    TimeRef,
    clip,
    context_ref,
    is_collected,
    page_size,
    parse_kernel_prefix,
    to_epoch,
    to_jsonable,
)
from runbook.parsers.clock import boot_time, parse_clock
from runbook.parsers.registry import Files, register
from runbook.parsers.scan import Tallied, Tally, candidates

SOURCE = "dmesg.txt"
#: a limit at or above this many bytes is "unlimited" (v1 prints PAGE_COUNTER_MAX pages)
UNLIMITED = 1 << 62


@dataclass(frozen=True, kw_only=True)
class KernelEvidence(Evidence):
    """A kernel line's position; `uptime_s` is the monotonic stamp of plain `dmesg`."""

    uptime_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class OomEvent(KernelEvidence):
    """One OOM kill. The anchor is the event's first line; `kill_*` is the `Killed process`."""

    scope: Literal["memcg", "global"]
    constraint: str | None = None
    #: the cgroup whose limit was hit (`oom_memcg=`, `limit of`, or the stats header)
    memcg: str | None = None
    #: the cgroup of the killed task
    task_memcg: str | None = None
    invoked_by: str | None = None
    gfp_mask: str | None = None
    order: int | None = None
    killed_pid: int | None = None
    killed_comm: str | None = None
    uid: int | None = None
    usage_bytes: int | None = None
    limit_bytes: int | None = None
    failcnt: int | None = None
    swap_usage_bytes: int | None = None
    swap_limit_bytes: int | None = None
    kmem_usage_bytes: int | None = None
    total_vm_bytes: int | None = None
    anon_rss_bytes: int | None = None
    file_rss_bytes: int | None = None
    shmem_rss_bytes: int | None = None
    #: from the "Memory cgroup stats" block (multi-line on new kernels, one line on old)
    stat_anon_bytes: int | None = None
    stat_file_bytes: int | None = None
    stat_shmem_bytes: int | None = None
    oom_score_adj: int | None = None
    #: usage equals (or exceeds) the limit
    at_limit: bool = False
    end_line: int = 0
    kill_line: int | None = None
    kill_text: str | None = None


@dataclass(frozen=True, kw_only=True)
class PageAllocFailure(KernelEvidence):
    comm: str
    order: int | None = None
    mode: str | None = None
    #: the call trace that follows goes through the NVIDIA driver's os_lock_user_pages
    nvidia_pinning: bool = False


@dataclass(frozen=True, kw_only=True)
class PinFailure(KernelEvidence):
    """The NVIDIA driver failed to pin/map user memory."""

    kind: Literal["cannot-map", "os_lock_user_pages"]
    comm: str | None = None
    base_addr: str | None = None
    pages: int | None = None
    bytes: int | None = None


@dataclass(frozen=True, kw_only=True)
class XidEvent(KernelEvidence):
    code: int
    device: str
    pid: int | None = None
    process: str | None = None
    detail: str = ""
    meaning: str = ""
    category: str = "unknown"
    gpu_fault: bool = False
    drain: bool = False
    #: seen more than once for this GPU and code
    repeated: bool = False
    recovery_action: str | None = None
    #: the primary code a secondary Xid names (`caused by previous Xid 149`): its fault and
    #: drain judgement are the primary's
    caused_by: int | None = None


@dataclass(frozen=True, kw_only=True)
class FallenOffBus(KernelEvidence):
    device: str | None
    xid: int | None = None


@dataclass(frozen=True, kw_only=True)
class AerEvent(KernelEvidence):
    severity: Literal["corrected", "non-fatal", "fatal"]
    fatal: bool
    uncorrected: bool
    reporter: str | None = None
    device: str | None = None
    error_type: str | None = None
    vendor_device: str | None = None
    errors: tuple[str, ...] = ()
    first_error: str | None = None


@dataclass(frozen=True, kw_only=True)
class CorrectedAer:
    """Corrected PCIe AER reports received from one device: counted, not kept one by one (a
    flapping link reports hundreds of thousands; the hardware recovered from every one)."""

    device: str
    reports: int
    first: KernelEvidence
    last: KernelEvidence


@dataclass(frozen=True, kw_only=True)
class KernelSignature(KernelEvidence):
    """A kernel line the signature catalog names (IOMMU faults): role and cause from it."""

    signature: str
    role: str
    cause: str | None = None


@dataclass(frozen=True)
class DmesgFacts:
    memcg_ooms: tuple[OomEvent, ...]
    global_ooms: tuple[OomEvent, ...]
    page_alloc_failures: tuple[PageAllocFailure, ...]
    pin_failures: tuple[PinFailure, ...]
    xids: tuple[XidEvent, ...]
    fallen_off_bus: tuple[FallenOffBus, ...]
    #: uncorrected AER errors, each decoded with its detail lines
    aer: tuple[AerEvent, ...]
    lines: int
    #: how many of each record there were (lists keep the first MAX_RECORDS)
    totals: dict[str, int] = field(default_factory=dict)
    time_format: Literal["ctime", "monotonic", "syslog", "iso", "none"] = "none"
    boot_epoch: float | None = None
    #: kernel lines the signature catalog names: IOMMU faults (AMD-Vi IO_PAGE_FAULT, DMAR: DMA
    #: the IOMMU blocked, which breaks P2P), NVSwitch SXid errors
    catalog_hits: tuple[KernelSignature, ...] = ()
    #: False when the file has lines but none of them was understood (no known stamp and no
    #: record): such a file proves nothing absent
    recognized: bool = True
    #: corrected AER reports, per device in the order first reported
    aer_corrected: tuple[CorrectedAer, ...] = ()

    @property
    def iommu_faults(self) -> tuple[KernelSignature, ...]:
        return tuple(h for h in self.catalog_hits if h.cause == "p2p-unavailable")

    @property
    def nvswitch_faults(self) -> tuple[KernelSignature, ...]:
        return tuple(h for h in self.catalog_hits if h.signature == "nvswitch-sxid")

    @property
    def fatal_aer(self) -> tuple[AerEvent, ...]:
        return tuple(a for a in self.aer if a.uncorrected)

    @property
    def gpu_fault_xids(self) -> tuple[XidEvent, ...]:
        return tuple(x for x in self.xids if x.gpu_fault)

    @property
    def drain_xids(self) -> tuple[XidEvent, ...]:
        return tuple(x for x in self.xids if x.drain)


# --- patterns ------------------------------------------------------------------------------------

#: literal keywords, one of which is on every line a record starts on or is recorded whole;
#: as narrow as the records' own patterns, so ordinary driver output (`NVRM: GPU at PCI:…`,
#: `NVRM: loading …`) and corrected AER reports (see CORRECTED_AER) are not candidates
_RECORD_KEYWORDS = (
    "oom-kill", "Task in ", ": usage ", "Kill process", "Killed process", "Out of memory",
    "page allocation", "os_lock_user_pages", "Cannot map memory", "NVRM: Xid",
    "NVRM: The NVIDIA GPU", "fallen off the bus", "Fallen off the bus", "AER: Uncorrect",
    "AER: Multiple Uncorrect", "severity=Uncorrect", "Call Trace",
)  # fmt: skip
#: keywords that open a multi-line record, and how many following lines it may span
WINDOWS = {
    "Memory cgroup stats": 80, "AER: Uncorrect": 6, "AER: Multiple Uncorrect": 6,
    "severity=Uncorrect": 6, "NVRM: The NVIDIA GPU": 4,
}  # fmt: skip
#: a corrected AER report's first line; the device it names is the key it is counted under
#: (kernels 3.x–6.x: `AER: Corrected error received: 0000:18:00.0`, `… received: id=0010`,
#: `AER: Multiple Correctable error message received from 0000:00:1c.0`)
_CORRECTED_AER = (
    r"AER: (?:Multiple )?Correct(?:ed|able) error (?:message )?received(?::| from) (?:id=)?(\S+)"
)
CORRECTED_AER = _CORRECTED_AER.encode()
_CORRECTED = re.compile(_CORRECTED_AER, re.ASCII)  # \S as the bytes pattern reads it


@functools.cache
def catalog_words() -> tuple[str, ...]:
    """The keywords of the catalog's kernel signatures (runbook/data/signatures.yaml)."""
    return signatures.catalog().kernel_keywords


def keywords() -> tuple[str, ...]:
    """Every keyword of the pre-filter: the records' own and the catalog's kernel lines'."""
    return (*_RECORD_KEYWORDS, *catalog_words())


def candidate_lines(result: Any) -> candidates:
    """The lines of a kernel log the parser needs, numbered, with corrected AER reports
    tallied (scan.Tally) instead of handed on."""
    return candidates(result, keywords(), WINDOWS, tally=Tally(CORRECTED_AER))


@functools.cache
def _trigger() -> re.Pattern[str]:
    """Every line on which a record can start or be recorded whole matches this (the slow
    path's filter: broader than the keywords, it is only a shortcut past chatter)."""
    return re.compile(
        r"oom-kill|Task in |: usage \d|Kill process|Killed process|Out of memory|page allocation"
        r"|os_lock_user_pages|Cannot map memory|NVRM|(?i:fallen off the bus)|AER|PCIe Bus Error"
        r"|Call Trace|" + "|".join(re.escape(w) for w in catalog_words())
    )


_INVOKED = re.compile(
    r"^(?P<comm>.+?) invoked oom-killer: gfp_mask=(?P<gfp>0x[0-9a-fA-F]+(?:\([^)]*\))?)"
    r"(?:.*?\border=(?P<order>-?\d+))?(?:.*?oom_score_adj=(?P<adj>-?\d+))?"
)
_CONSTRAINT = re.compile(r"^oom-kill:constraint=(?P<c>\w+)")
_KV = {
    k: re.compile(rf"[,:]{k}=([^,]*)") for k in ("oom_memcg", "task_memcg", "task", "pid", "uid")
}
_TASK_IN = re.compile(r"^Task in (?P<task>\S+) killed as a result of limit of (?P<limit>\S+)")
_COUNTER = re.compile(
    r"^(?P<kind>memory|memory\+swap|kmem|swap): usage (?P<u>\d+)kB, limit (?P<l>\d+)kB"
    r"(?:, failcnt (?P<f>\d+))?"
)
_STATS_FOR = re.compile(r"^Memory cgroup stats for (?P<cg>[^:\s]+):?(?P<rest>.*)$")
_STAT_LINE = re.compile(r"^(anon|file|shmem) (\d+)$")
_STAT_OLD = {k: re.compile(rf"\b{k}:(\d+)KB") for k in ("rss", "cache", "shmem")}
_KILLED = re.compile(
    r"^(?P<pfx>Memory cgroup out of memory: |Out of memory: |Out of memory \([^)]*\): )?"
    r"Killed process (?P<pid>\d{1,9}) \((?P<comm>.*?)\)(?P<rest>.*)$"
)
_KILL_SACRIFICE = re.compile(
    r"^(?P<pfx>Memory cgroup out of memory|Out of memory(?: \([^)]*\))?): Kill process "
    r"(?P<pid>\d+) \((?P<comm>.*?)\) score -?\d+ or sacrifice child"
)
_NO_KILLABLE = re.compile(r"^Out of memory and no killable processes")
_KB = {
    k: re.compile(rf"\b{k}:\s*(\d+)kB") for k in ("total-vm", "anon-rss", "file-rss", "shmem-rss")
}
_UID = re.compile(r"\bUID:?\s*(\d+)")
_ADJ = re.compile(r"oom_score_adj:(-?\d+)")

_ALLOC_FAIL = re.compile(
    r"^(?P<comm>.+?): page allocation failure[:.]?\s*"
    r"(?:order:\s*(?P<order>\d+),\s*mode:\s*(?P<mode>0x[0-9a-fA-F]+(?:\([^)]*\))?))?"
)
_CANNOT_MAP = re.compile(
    r"Cannot map memory with base addr (?P<addr>\S+) and size of (?P<pages>0x[0-9a-fA-F]+|\d+) "
    r"pages"
)
_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<dev>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.\d)?|[^)]+)\):"
    r"\s*(?P<code>\d+),\s*(?P<rest>.*)$"
)
_XID_PID = re.compile(r"^pid=(?P<pid>'?<?[^,]*?>?'?), name=(?P<name>[^,]*), (?P<rest>.*)$")
_RECOVERY = re.compile(r"recovery action changed from .*? to (0x[0-9a-fA-F]+ \([^)]*\)|\S+)")
# a bus ID, or its placeholder in a sanitized bundle (runbook/report/sanitize.py)
_BUS = r"(?:[0-9a-fA-F:.]+|<BUS_ID_\d+>)"
_FALLEN_GPU = re.compile(
    rf"NVRM: GPU (?:at )?(?:PCI:)?(?P<dev>{_BUS}):.*fallen off the bus", re.IGNORECASE
)
_NVIDIA_GPU = re.compile(
    r"NVRM: The NVIDIA GPU (?P<dev>[0-9a-fA-F]{4}:[0-9a-fA-F:.]+|<BUS_ID_\d+>)"
)
_AER_RECEIVED = re.compile(
    rf"^(?P<rep>\S+ {_BUS}): AER: (?:Multiple )?"
    r"(?P<sev>Corrected|Correctable|Uncorrected|Uncorrectable)(?: \((?P<fat>Fatal|Non-Fatal)\))?"
    r" error (?:message )?received(?::| from) (?:id=)?(?P<dev>\S+)"
)
_AER_BUS = re.compile(
    rf"^(?P<rep>\S+ {_BUS}): (?:AER: )?PCIe Bus Error: severity="
    r"(?P<sev>Corrected|Correctable|Uncorrected|Uncorrectable)(?: \((?P<fat>Fatal|Non-Fatal)\))?"
    r"(?:, type=(?P<type>[^,]+))?"
)
_AER_DEVICE = re.compile(r"device \[(?P<vd>[0-9a-fA-F]{4}:[0-9a-fA-F]{4})\] error status/mask")
_AER_BIT = re.compile(
    r"\[\s?(\d{1,2})\]\s+(?P<name>[A-Za-z][A-Za-z0-9 ]*?)\s*(?P<first>\(First\))?$"
)


def _bytes_kb(value: str) -> int | None:
    b = int(value) * 1024
    return None if b >= UNLIMITED else b


def _severity(sev: str, fat: str | None) -> Literal["corrected", "non-fatal", "fatal"]:
    if sev.startswith("Correct"):
        return "corrected"
    return "fatal" if fat == "Fatal" else "non-fatal"


class _Oom:
    """An OOM event being assembled from its lines."""

    def __init__(self, ev: KernelEvidence) -> None:
        self.ev = ev
        self.scope: Literal["memcg", "global"] | None = None
        self.f: dict[str, Any] = {}
        self.end = ev.line
        self.awaiting_killed = False
        self.in_stats = False

    def build(self) -> OomEvent:
        f = self.f
        scope = self.scope
        if scope is None:
            scope = "memcg" if f.get("memcg") not in (None, "/") else "global"
        usage, limit = f.get("usage_bytes"), f.get("limit_bytes")
        at_limit = usage is not None and limit is not None and usage >= limit
        return OomEvent(
            source=self.ev.source,
            line=self.ev.line,
            time=self.ev.time,
            text=self.ev.text,
            uptime_s=self.ev.uptime_s,
            scope=scope,
            at_limit=at_limit,
            end_line=self.end,
            **f,
        )


class _Aer:
    def __init__(
        self,
        ev: KernelEvidence,
        severity: Literal["corrected", "non-fatal", "fatal"],
        reporter: str | None,
        device: str | None,
    ) -> None:
        self.ev, self.severity, self.reporter, self.device = ev, severity, reporter, device
        self.error_type: str | None = None
        self.vendor_device: str | None = None
        self.errors: list[str] = []
        self.first: str | None = None
        self.last_line = ev.line
        self.has_bus_line = False

    def build(self) -> AerEvent:
        return AerEvent(
            source=self.ev.source,
            line=self.ev.line,
            time=self.ev.time,
            text=self.ev.text,
            uptime_s=self.ev.uptime_s,
            severity=self.severity,
            fatal=self.severity == "fatal",
            uncorrected=self.severity != "corrected",
            reporter=self.reporter,
            device=self.device,
            error_type=self.error_type,
            vendor_device=self.vendor_device,
            errors=tuple(self.errors),
            first_error=self.first,
        )


def parse_dmesg(
    lines: Iterable[str] | Iterable[tuple[int, str]],
    *,
    numbered: bool = False,
    page_size: int = 4096,
    source: str = SOURCE,
    boot_epoch: float | None = None,
    collected_at: str | None = None,
) -> DmesgFacts:
    """Parse kernel log lines into DmesgFacts (see the module docstring). With `numbered`,
    `lines` yields (line number, line) pairs — only the lines `scan.candidates` picked out of
    a big log (candidate_lines) — and everything else is taken to be chatter."""
    ref = TimeRef(collected_at)
    counter = Counter()
    memcg: list[OomEvent] = []
    global_: list[OomEvent] = []
    allocs: list[PageAllocFailure] = []
    pins: list[PinFailure] = []
    xids: list[XidEvent] = []
    fallen: list[FallenOffBus] = []
    aers: list[AerEvent] = []
    xid_seen: dict[tuple[str, int], int] = {}
    iommu: list[KernelSignature] = []
    catalog = signatures.catalog()
    words = catalog_words()
    trigger = _trigger()
    # numbered lines from candidate_lines come with their corrected AER reports tallied
    tally: Tally | None = getattr(lines, "tally", None) if numbered else None
    # the slow path counts them itself, in the tally's own record
    corrected: dict[str, Tallied] = tally.found if tally is not None else {}

    oom: _Oom | None = None
    aer: _Aer | None = None
    #: the last page allocation failure whose call trace we may be reading, lines left
    trace_owner: int | None = None
    trace_left = 0
    trace_until = 0
    trace_pinned = False
    pending_gpu: tuple[str, KernelEvidence, int] | None = None
    last_time: str | None = None
    last_up: float | None = None
    fmt: str = "none"
    n = 0

    def finish_oom() -> None:
        nonlocal oom
        if oom is not None:
            event = oom.build()
            if event.scope == "memcg":
                counter.keep("memcg_ooms", memcg, event)
            else:
                counter.keep("global_ooms", global_, event)
            oom = None

    def finish_aer() -> None:
        nonlocal aer
        if aer is not None:
            counter.keep("aer", aers, aer.build())
            aer = None

    seen_lines = 0
    pairs: Iterable[tuple[int, str]] = (
        lines if numbered else enumerate(lines, 1)  # type: ignore[assignment,arg-type]
    )
    for n, raw in pairs:
        seen_lines += 1
        # fast path: outside any multi-line record, a line that no record can start on is
        # skipped before its timestamp is parsed (most of a big kernel log is such lines)
        if (
            not numbered
            and oom is None
            and trace_left <= 0
            and pending_gpu is None
            and (aer is None or n - aer.last_line > 6)
            and not trigger.search(raw)
        ):
            last_time = last_up = None  # an unstamped line after this must not inherit a time
            continue
        # a corrected AER report: counted under its device (by the scanner's tally when the
        # lines are its candidates), never decoded into a record; it ends an open AER record
        cm = _CORRECTED.search(raw) if "orrect" in raw else None
        if cm is not None:
            if tally is None:
                line = (n, raw.rstrip("\r"))
                seen = corrected.setdefault(cm.group(1), Tallied(0, line, line))
                seen.count += 1
                seen.last = line
            finish_aer()
            last_time = last_up = None
            continue
        stamp = parse_kernel_prefix(raw, ref, boot_epoch)
        if stamp is not None:
            msg = stamp.message.strip()
            last_time, last_up = stamp.time, stamp.uptime_s
            if fmt == "none":
                if raw.lstrip("<0123456789>").startswith("[") and stamp.uptime_s is not None:
                    fmt = "monotonic"
                elif stamp.host is not None:
                    fmt = "syslog"
                elif raw.startswith("["):
                    fmt = "ctime"
                else:
                    fmt = "iso"
        else:
            # a continuation line of a multi-line message: it shares the message's time; a
            # stamp of a shape not known here is set aside so the message is still read
            msg = raw.strip()
            if msg.startswith("[") and 0 < msg.find("]") < 40:
                msg = msg[msg.find("]") + 1 :].strip()
        if not msg:
            continue
        ev = KernelEvidence(source=source, line=n, time=last_time, text=clip(raw), uptime_s=last_up)

        # ---- call traces: os_lock_user_pages in the trace of an allocation failure
        trace_left = trace_until - n
        if msg.startswith("Call Trace") and trace_left <= 0:
            trace_pinned = False
        if "os_lock_user_pages" in msg:
            if not trace_pinned:  # one record per call trace
                trace_pinned = True
                owner = trace_owner if trace_left > 0 else None
                comm = None
                if owner is not None and owner < len(allocs):
                    allocs[owner] = replace(allocs[owner], nvidia_pinning=True)
                    comm = allocs[owner].comm
                counter.keep(
                    "pin_failures",
                    pins,
                    PinFailure(**_ev(ev), kind="os_lock_user_pages", comm=comm),
                )
            continue

        # ---- OOM events
        m = _INVOKED.match(msg)
        if m:
            finish_oom()
            oom = _Oom(ev)
            oom.f["invoked_by"] = m.group("comm")
            oom.f["gfp_mask"] = m.group("gfp")
            if m.group("order"):
                oom.f["order"] = int(m.group("order"))
            continue
        m = _CONSTRAINT.match(msg)
        if m:
            if oom is None:
                oom = _Oom(ev)
            c = m.group("c")
            oom.f["constraint"] = c
            oom.scope = "memcg" if c == "CONSTRAINT_MEMCG" else "global"
            kv = {k: p.search(msg) for k, p in _KV.items()}
            if kv["oom_memcg"]:
                oom.f["memcg"] = kv["oom_memcg"].group(1)
            if kv["task_memcg"]:
                oom.f["task_memcg"] = kv["task_memcg"].group(1)
            if kv["task"]:
                oom.f["killed_comm"] = kv["task"].group(1)
            if kv["pid"] and kv["pid"].group(1).isdecimal():
                oom.f["killed_pid"] = int(kv["pid"].group(1))
            if kv["uid"] and kv["uid"].group(1).isdecimal():
                oom.f["uid"] = int(kv["uid"].group(1))
            oom.end = n
            continue
        m = _TASK_IN.match(msg)
        if m:
            if oom is None:
                oom = _Oom(ev)
            oom.f["task_memcg"] = m.group("task")
            oom.f.setdefault("memcg", m.group("limit"))
            if oom.scope is None:
                oom.scope = "memcg" if m.group("limit") != "/" else "global"
            oom.end = n
            continue
        m = _COUNTER.match(msg)
        if m:
            if oom is None:
                oom = _Oom(ev)
            kind, u, lim = m.group("kind"), int(m.group("u")) * 1024, _bytes_kb(m.group("l"))
            if kind == "memory":
                oom.f["usage_bytes"], oom.f["limit_bytes"] = u, lim
                if m.group("f"):
                    oom.f["failcnt"] = int(m.group("f"))
            elif kind in ("swap", "memory+swap"):
                oom.f["swap_usage_bytes"], oom.f["swap_limit_bytes"] = u, lim
            else:
                oom.f["kmem_usage_bytes"] = u
            oom.end = n
            continue
        m = _STATS_FOR.match(msg)
        if m and oom is not None:
            oom.f.setdefault("memcg", m.group("cg"))
            oom.in_stats = True
            old = {k: p.search(m.group("rest")) for k, p in _STAT_OLD.items()}
            for k, name in (("rss", "anon"), ("cache", "file"), ("shmem", "shmem")):
                om = old[k]
                if om:
                    oom.f[f"stat_{name}_bytes"] = int(om.group(1)) * 1024
            oom.end = n
            continue
        if oom is not None and oom.in_stats:
            sm = _STAT_LINE.match(msg)
            if sm:
                oom.f[f"stat_{sm.group(1)}_bytes"] = int(sm.group(2))
                continue
            if msg.startswith("Tasks state") or msg.startswith("["):
                oom.in_stats = False
        m = _KILL_SACRIFICE.match(msg)
        if m:
            if oom is None:
                oom = _Oom(ev)
            if oom.scope is None:
                oom.scope = "memcg" if m.group("pfx").startswith("Memory cgroup") else "global"
            oom.f["killed_pid"] = int(m.group("pid"))
            oom.f["killed_comm"] = m.group("comm")
            oom.awaiting_killed = True
            oom.end = n
            continue
        m = _KILLED.match(msg)
        # old kernels print a bare `Killed process N (comm) total-vm:…` (no `Out of memory:`)
        if m and (m.group("pfx") or oom is not None or "total-vm:" in m.group("rest")):
            if oom is None:
                oom = _Oom(ev)
            pfx = m.group("pfx") or ""
            if oom.scope is None and pfx:
                oom.scope = "memcg" if pfx.startswith("Memory cgroup") else "global"
            rest = m.group("rest")
            oom.f["killed_pid"] = int(m.group("pid"))
            oom.f["killed_comm"] = m.group("comm")
            for key, pat in _KB.items():
                km = pat.search(rest)
                if km:
                    oom.f[key.replace("-", "_") + "_bytes"] = int(km.group(1)) * 1024
            um = _UID.search(rest)
            if um:
                oom.f["uid"] = int(um.group(1))
            am = _ADJ.search(rest)
            if am:
                oom.f["oom_score_adj"] = int(am.group(1))
            oom.f["kill_line"] = n
            oom.f["kill_text"] = clip(raw)
            oom.end = n
            finish_oom()
            continue
        if _NO_KILLABLE.match(msg):
            if oom is not None:
                oom.end = n
            finish_oom()
            continue

        # ---- page allocation failures and NVIDIA pinning failures
        m = _ALLOC_FAIL.match(msg)
        if m:
            rec = PageAllocFailure(
                **_ev(ev),
                comm=m.group("comm"),
                order=int(m.group("order")) if m.group("order") else None,
                mode=m.group("mode"),
            )
            counter.keep("page_alloc_failures", allocs, rec)
            trace_owner = len(allocs) - 1 if allocs and allocs[-1] is rec else None
            trace_until, trace_left, trace_pinned = n + 200, 200, False
            continue
        m = _CANNOT_MAP.search(msg)
        if m:
            p = m.group("pages")
            pages = int(p, 16) if p.lower().startswith("0x") else int(p)
            comm = None
            if trace_owner is not None and trace_left > 0 and trace_owner < len(allocs):
                comm = allocs[trace_owner].comm
            counter.keep(
                "pin_failures",
                pins,
                PinFailure(
                    **_ev(ev),
                    kind="cannot-map",
                    comm=comm,
                    base_addr=m.group("addr"),
                    pages=pages,
                    bytes=pages * page_size,
                ),
            )
            continue

        # ---- Xid and fallen off the bus
        m = _XID.search(msg)
        if m:
            code, dev, rest = int(m.group("code")), m.group("dev"), m.group("rest").strip()
            pid: int | None = None
            proc: str | None = None
            pm = _XID_PID.match(rest)
            if pm:
                digits = pm.group("pid").strip("'")
                pid = int(digits) if digits.isdecimal() else None
                name = pm.group("name").strip()
                proc = None if name in ("", "<unknown>") else name
                rest = pm.group("rest")
            info = xidtable.lookup(code)
            primary = xidtable.caused_by(rest)
            if primary is not None and primary != code:
                first = xidtable.lookup(primary)
                info = replace(
                    first,
                    code=code,
                    meaning=f"{info.meaning}, caused by Xid {primary} ({first.meaning})",
                )
            action = None
            if code == 154:
                am2 = _RECOVERY.search(rest)
                action = am2.group(1) if am2 else None
            seen_key = (dev.lower(), code)
            xid_seen[seen_key] = xid_seen.get(seen_key, 0) + 1
            counter.keep(
                "xids",
                xids,
                XidEvent(
                    **_ev(ev),
                    code=code,
                    device=dev,
                    pid=pid,
                    process=proc,
                    detail=clip(rest),
                    meaning=info.meaning,
                    category=info.category,
                    gpu_fault=info.gpu_fault,
                    drain=info.drain or xidtable.recovery_action_drains(action),
                    recovery_action=action,
                    caused_by=primary,
                ),
            )
            if code == 79:
                counter.keep("fallen_off_bus", fallen, FallenOffBus(**_ev(ev), device=dev, xid=79))
            continue
        m = _FALLEN_GPU.search(msg)
        if m:
            counter.keep("fallen_off_bus", fallen, FallenOffBus(**_ev(ev), device=m.group("dev")))
            pending_gpu = None
            continue
        m = _NVIDIA_GPU.search(msg)
        if m:
            if "fallen off the bus" in msg:
                counter.keep(
                    "fallen_off_bus", fallen, FallenOffBus(**_ev(ev), device=m.group("dev"))
                )
            else:
                pending_gpu = (m.group("dev"), ev, n)
            continue
        if "fallen off the bus" in msg:
            if pending_gpu is not None and n - pending_gpu[2] <= 4:
                dev_name, first_ev, _ = pending_gpu
                counter.keep(
                    "fallen_off_bus", fallen, FallenOffBus(**_ev(first_ev), device=dev_name)
                )
            else:
                counter.keep("fallen_off_bus", fallen, FallenOffBus(**_ev(ev), device=None))
            pending_gpu = None
            continue

        # ---- kernel lines the catalog names (IOMMU faults)
        if any(word in msg for word in words):
            sig = catalog.classify(msg, kernel=True)
            if sig is not None:
                counter.keep(
                    "catalog_hits",
                    iommu,
                    KernelSignature(**_ev(ev), signature=sig.id, role=sig.role, cause=sig.cause),
                )
                continue

        # ---- PCIe AER
        m = _AER_RECEIVED.match(msg)
        if m and _severity(m.group("sev"), m.group("fat")) == "corrected":
            finish_aer()  # a form _CORRECTED does not count (no reporter prefix)
            continue
        if m:
            finish_aer()
            aer = _Aer(
                ev, _severity(m.group("sev"), m.group("fat")), m.group("rep"), m.group("dev")
            )
            continue
        m = _AER_BUS.match(msg)
        if m:
            sev = _severity(m.group("sev"), m.group("fat"))
            if sev == "corrected":  # the detail of a corrected report, counted by its first line
                finish_aer()
                continue
            if aer is None or aer.has_bus_line or aer.severity != sev or n - aer.last_line > 6:
                finish_aer()
                aer = _Aer(ev, sev, None, m.group("rep").split()[-1])
            aer.has_bus_line = True
            aer.error_type = (m.group("type") or "").strip() or None
            aer.device = m.group("rep").split()[-1]
            aer.last_line = n
            continue
        if aer is not None and n - aer.last_line <= 6:
            dm = _AER_DEVICE.search(msg)
            if dm:
                aer.vendor_device = dm.group("vd").lower()
                aer.last_line = n
                continue
            bm = _AER_BIT.search(msg)
            if bm:
                name = bm.group("name").strip()
                aer.errors.append(name)
                if bm.group("first"):
                    aer.first = name
                aer.last_line = n
                continue
            if "AER:" in msg:
                aer.last_line = n
                continue

    finish_oom()
    finish_aer()
    summaries = tuple(
        CorrectedAer(
            device=device,
            reports=seen.count,
            first=_stamped(seen.first, source, ref, boot_epoch),
            last=_stamped(seen.last, source, ref, boot_epoch),
        )
        for device, seen in corrected.items()
    )
    if summaries:
        counter.totals["aer_corrected"] = sum(a.reports for a in summaries)

    if any(v > 1 for v in xid_seen.values()):
        for i, x in enumerate(xids):
            if xid_seen.get((x.device.lower(), x.code), 0) > 1:
                info = xidtable.lookup(x.code)
                xids[i] = replace(x, repeated=True, drain=x.drain or info.drain_if_repeated)

    return DmesgFacts(
        memcg_ooms=tuple(memcg),
        global_ooms=tuple(global_),
        page_alloc_failures=tuple(allocs),
        pin_failures=tuple(pins),
        xids=tuple(xids),
        fallen_off_bus=tuple(fallen),
        aer=tuple(aers),
        lines=n,
        totals=dict(counter.totals),
        time_format=fmt,  # type: ignore[arg-type]
        boot_epoch=boot_epoch,
        catalog_hits=tuple(iommu),
        recognized=fmt != "none" or not seen_lines or bool(
            memcg or global_ or allocs or pins or xids or fallen or aers or iommu or summaries
        ),
        aer_corrected=summaries,
    )


def _stamped(
    line: tuple[int, str], source: str, ref: TimeRef, boot_epoch: float | None
) -> KernelEvidence:
    """A line's evidence with the time its own stamp gives (the same on either path)."""
    number, raw = line
    stamp = parse_kernel_prefix(raw, ref, boot_epoch)
    return KernelEvidence(
        source=source,
        line=number,
        time=stamp.time if stamp else None,
        text=clip(raw),
        uptime_s=stamp.uptime_s if stamp else None,
    )


def _ev(ev: KernelEvidence) -> dict[str, Any]:
    return {
        "source": ev.source,
        "line": ev.line,
        "time": ev.time,
        "text": ev.text,
        "uptime_s": ev.uptime_s,
    }


def _boot_epoch(files: Files, context: Mapping[str, Any]) -> float | None:
    """Boot time from the context (`uptime_s` + `now`) or from a collected clock.txt."""
    up, now = context.get("uptime_s"), to_epoch(context.get("now"))
    if isinstance(up, (int, float)) and not isinstance(up, bool) and now is not None:
        return boot_time(now, float(up))
    clock = files.get("clock.txt")
    if is_collected(clock):
        facts = parse_clock(clock.lines())
        return facts.boot_epoch
    return None


def facts_dict(facts: DmesgFacts) -> dict[str, Any]:
    out: dict[str, Any] = to_jsonable(facts)
    out["fatal_aer"] = to_jsonable(facts.fatal_aer)
    out["iommu_faults"] = to_jsonable(facts.iommu_faults)
    out["nvswitch_faults"] = to_jsonable(facts.nvswitch_faults)
    out["gpu_fault_xids"] = to_jsonable(facts.gpu_fault_xids)
    out["drain_xids"] = to_jsonable(facts.drain_xids)
    out["unknown_xids"] = to_jsonable(tuple(x for x in facts.xids if x.category == "unknown"))
    return out


@register("dmesg", "dmesg.txt: OOM kills, page allocation and pinning failures, Xid, AER")
def dmesg_facts(files: Files, context: Mapping[str, Any]) -> dict[str, Any]:
    result = files.get(SOURCE)
    if not is_collected(result):
        return {"collected": False}
    ref = context_ref(context)
    collected_at = None
    if ref.year is not None:
        raw = context.get("collected_at")
        collected_at = raw if isinstance(raw, str) else str(raw)
    facts = parse_dmesg(
        candidate_lines(result),
        numbered=True,
        page_size=page_size(context),
        source=SOURCE,
        boot_epoch=_boot_epoch(files, context),
        collected_at=collected_at,
    )
    out = facts_dict(facts)
    out["collected"] = True
    return out
