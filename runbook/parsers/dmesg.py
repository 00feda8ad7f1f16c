"""Kernel log (`dmesg.txt`): memory-cgroup and global OOM kills, page allocation failures,
NVIDIA driver pinning failures, Xid errors, GPUs fallen off the bus, PCIe AER errors.

Accepts `dmesg -T`, plain `dmesg` (monotonic seconds, kept in `uptime_s` and converted to wall
time when the boot time is known), `dmesg -r`/`-x`, `--time-format iso` and `journalctl -k`.
The lines of one OOM event (`invoked oom-killer` ... `Killed process`) are folded into one
record carrying the memory cgroup that hit its limit, so a runbook can tell this pod's OOM from
a neighbour's. The parser streams: memory is bounded whatever the log's size.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from runbook import signatures
from runbook.once import once
from runbook.parsers import errorlines
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
from runbook.parsers.scan import Literals, Tallied, Tally, candidates

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


#: seconds of uptime during which an IOMMU fault is the boot's (firmware handing devices over
#: to the kernel), not a job's: no job runs before the system has finished booting
BOOT_WINDOW_S = 30.0


def _at_boot(hit: KernelEvidence) -> bool:
    return hit.uptime_s is not None and hit.uptime_s < BOOT_WINDOW_S


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
    #: error lines no record or signature names (runbook.parsers.errorlines): a new driver
    #: message, which the verdict reports as `unrecognized` when it came first
    unrecognized: tuple[KernelSignature, ...] = ()

    @property
    def iommu_faults(self) -> tuple[KernelSignature, ...]:
        """IOMMU faults after boot (those of the first seconds: boot_iommu_faults)."""
        return tuple(
            h for h in self.catalog_hits if h.cause == "p2p-unavailable" and not _at_boot(h)
        )

    @property
    def boot_iommu_faults(self) -> tuple[KernelSignature, ...]:
        """IOMMU faults in the first BOOT_WINDOW_S of uptime: firmware still doing DMA when
        the kernel turned the IOMMU on (`DMAR: … Present bit in root entry is clear` at 0.36 s
        for the integrated graphics), before any job could run — no peer-to-peer failing."""
        return tuple(h for h in self.catalog_hits if h.cause == "p2p-unavailable" and _at_boot(h))

    @property
    def nvswitch_faults(self) -> tuple[KernelSignature, ...]:
        return tuple(h for h in self.catalog_hits if h.signature == "nvswitch-sxid")

    @property
    def gpu_reset_required(self) -> tuple[KernelSignature, ...]:
        """The driver's own word that a GPU needs a reset, without an Xid (GSP/RM status
        NV_ERR_RESET_REQUIRED, `RmInitAdapter failed! (0x62:…)`)."""
        return tuple(h for h in self.catalog_hits if h.signature == "nvrm-gpu-reset-required")

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
CORRECTED_AER_LITERALS = Literals((
    (b"AER: ",), (b"Multiple ", b""), (b"Correct",), (b"ed", b"able"), (b" error ",),
    (b"message ", b""), (b"received",), (b":", b" from"), (b" ",), (b"id=", b""),
))  # fmt: skip
#: the same as a regular expression: AER: (?:Multiple |)Correct(?:ed|able) error …(\S+)
CORRECTED_AER = CORRECTED_AER_LITERALS.regex()
_CORRECTED_AER = CORRECTED_AER.decode()
#: the literals a corrected report begins with (a block holding neither has none)
CORRECTED_PROBES = (b"AER: Correct", b"AER: Multiple Correct")
_CORRECTED = re.compile(_CORRECTED_AER, re.ASCII)  # \S as the bytes pattern reads it


@once
def catalog_words() -> tuple[str, ...]:
    """The keywords of the catalog's kernel signatures (runbook/data/signatures.yaml)."""
    return signatures.catalog().kernel_keywords


def keywords() -> tuple[str, ...]:
    """Every keyword of the pre-filter: the records' own, the catalog's kernel lines' and
    those of error lines nothing names (runbook.parsers.errorlines)."""
    return (*_RECORD_KEYWORDS, *catalog_words(), *errorlines.KEYWORDS)


def candidate_lines(result: Any) -> candidates:
    """The lines of a kernel log the parser needs, numbered, with corrected AER reports
    tallied (scan.Tally) instead of handed on."""
    words = (*keywords(), *errorlines.severity_keywords(_head(result)))
    return candidates(result, words, WINDOWS, tally=Tally(CORRECTED_AER_LITERALS, CORRECTED_PROBES))


def _head(result: Any) -> str:
    """The log's first line (at most 4 KiB of it)."""
    if result.source_path is not None and not result.stdout:
        with result.open_source() as handle:
            line: bytes = handle.readline(4096)
        return line.decode("utf-8", errors="replace")
    return str(result.stdout[:4096]).split("\n", 1)[0]


@once
def _trigger() -> re.Pattern[str]:
    """Every line on which a record can start or be recorded whole matches this (the slow
    path's filter: broader than the keywords, it is only a shortcut past chatter)."""
    every = (*catalog_words(), *errorlines.KEYWORDS, *errorlines.SEVERITY_KEYWORDS)
    words = "|".join(re.escape(w) for w in every)
    return re.compile(
        r"oom-kill|Task in |: usage \d|Kill process|Killed process|Out of memory|page allocation"
        r"|os_lock_user_pages|Cannot map memory|NVRM|(?i:fallen off the bus)|AER|PCIe Bus Error"
        r"|Call Trace|" + words
    )


_INVOKED = re.compile(
    r"^(?P<comm>.+?) invoked oom-killer: gfp_mask=(?P<gfp>0x[0-9a-fA-F]+(?:\([^)]*\))?)"
    r"(?:.*?\border=(?P<order>-?\d+))?(?:.*?oom_score_adj=(?P<adj>-?\d+))?"
)
_CONSTRAINT = re.compile(r"^oom-kill:constraint=(?P<constraint>\w+)")
_CONSTRAINT_FIELDS = {
    k: re.compile(rf"[,:]{k}=([^,]*)") for k in ("oom_memcg", "task_memcg", "task", "pid", "uid")
}
_TASK_IN = re.compile(r"^Task in (?P<task>\S+) killed as a result of limit of (?P<limit>\S+)")
_COUNTER = re.compile(
    r"^(?P<kind>memory|memory\+swap|kmem|swap): usage (?P<usage>\d+)kB, limit (?P<limit>\d+)kB"
    r"(?:, failcnt (?P<failcnt>\d+))?"
)
_STATS_FOR = re.compile(r"^Memory cgroup stats for (?P<cg>[^:\s]+):?(?P<rest>.*)$")
_STAT_LINE = re.compile(r"^(anon|file|shmem) (\d+)$")
_STAT_OLD = {k: re.compile(rf"\b{k}:(\d+)KB") for k in ("rss", "cache", "shmem")}
_KILLED = re.compile(
    r"^(?P<prefix>Memory cgroup out of memory: |Out of memory: |Out of memory \([^)]*\): )?"
    r"Killed process (?P<pid>\d{1,9}) \((?P<comm>.*?)\)(?P<rest>.*)$"
)
_KILL_SACRIFICE = re.compile(
    r"^(?P<prefix>Memory cgroup out of memory|Out of memory(?: \([^)]*\))?): Kill process "
    r"(?P<pid>\d+) \((?P<comm>.*?)\) score -?\d+ or sacrifice child"
)
_NO_KILLABLE = re.compile(r"^Out of memory and no killable processes")
_KILLED_KB = {
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
    rf"^(?P<reporter>\S+ {_BUS}): AER: (?:Multiple )?"
    r"(?P<severity>Corrected|Correctable|Uncorrected|Uncorrectable)"
    r"(?: \((?P<fatal>Fatal|Non-Fatal)\))?"
    r" error (?:message )?received(?::| from) (?:id=)?(?P<dev>\S+)"
)
_AER_BUS = re.compile(
    rf"^(?P<reporter>\S+ {_BUS}): (?:AER: )?PCIe Bus Error: severity="
    r"(?P<severity>Corrected|Correctable|Uncorrected|Uncorrectable)"
    r"(?: \((?P<fatal>Fatal|Non-Fatal)\))?"
    r"(?:, type=(?P<type>[^,]+))?"
)
_AER_DEVICE = re.compile(
    r"device \[(?P<vendor_device>[0-9a-fA-F]{4}:[0-9a-fA-F]{4})\] error status/mask"
)
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
        #: OomEvent fields read so far
        self.fields: dict[str, Any] = {}
        self.end = ev.line
        self.awaiting_killed = False
        self.in_stats = False

    def build(self) -> OomEvent:
        fields = self.fields
        scope = self.scope
        if scope is None:
            scope = "memcg" if fields.get("memcg") not in (None, "/") else "global"
        usage, limit = fields.get("usage_bytes"), fields.get("limit_bytes")
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
            **fields,
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


@dataclass(slots=True)
class _Trace:
    """The call trace of the last page allocation failure, which may show the NVIDIA driver
    pinning the pages (os_lock_user_pages): its record's index in `allocs` and how many lines
    of the log after it may still belong to it."""

    owner: int | None = None
    until: int = 0
    #: lines left when the last line was read (`until` minus its number)
    left: int = 0
    #: this call trace already gave its os_lock_user_pages record
    pinned: bool = False


@dataclass(slots=True)
class _Found:
    """The records found so far, each list bounded by `counter` (MAX_RECORDS kept, all
    counted)."""

    counter: Counter = field(default_factory=Counter)
    memcg: list[OomEvent] = field(default_factory=list)
    global_: list[OomEvent] = field(default_factory=list)
    allocs: list[PageAllocFailure] = field(default_factory=list)
    pins: list[PinFailure] = field(default_factory=list)
    xids: list[XidEvent] = field(default_factory=list)
    #: how many Xids of each (device, code): a repeated one may drain the node
    xid_seen: dict[tuple[str, int], int] = field(default_factory=dict)
    fallen: list[FallenOffBus] = field(default_factory=list)
    aers: list[AerEvent] = field(default_factory=list)
    catalog_hits: list[KernelSignature] = field(default_factory=list)
    unrecognized: list[KernelSignature] = field(default_factory=list)
    #: corrected AER reports per device: the scanner's tally when the lines are its
    #: candidates, else counted here in the tally's own record
    corrected: dict[str, Tallied] = field(default_factory=dict)


@dataclass(slots=True)
class _State:
    """One parse's state between lines: the records found, the multi-line records open, and
    the last stamp (a continuation line shares its message's time)."""

    source: str
    page_size: int
    ref: TimeRef
    boot_epoch: float | None
    #: the scanner counts the corrected AER reports (numbered lines from candidate_lines)
    tallied: bool
    found: _Found
    oom: _Oom | None = None
    aer: _Aer | None = None
    trace: _Trace = field(default_factory=_Trace)
    #: `NVRM: The NVIDIA GPU <dev>` whose `fallen off the bus` may follow: (dev, ev, line)
    pending_gpu: tuple[str, KernelEvidence, int] | None = None
    last_time: str | None = None
    last_up: float | None = None
    fmt: str = "none"
    catalog: signatures.Catalog = field(default_factory=signatures.catalog)
    words: tuple[str, ...] = field(default_factory=catalog_words)

    def idle(self, number: int) -> bool:
        """No multi-line record is open at line `number`: a line no record starts on can be
        skipped unread."""
        aer = self.aer
        return (
            self.oom is None
            and self.trace.left <= 0
            and self.pending_gpu is None
            and (aer is None or number - aer.last_line > 6)
        )

    def finish_oom(self) -> None:
        oom = self.oom
        if oom is not None:
            event = oom.build()
            found = self.found
            if event.scope == "memcg":
                found.counter.keep("memcg_ooms", found.memcg, event)
            else:
                found.counter.keep("global_ooms", found.global_, event)
            self.oom = None

    def open_oom(self, ev: KernelEvidence) -> _Oom:
        """The OOM event being assembled, or a new one from `ev` (a line that belongs to an
        event whose first line was not seen)."""
        if self.oom is None:
            self.oom = _Oom(ev)
        return self.oom

    def finish_aer(self) -> None:
        if self.aer is not None:
            self.found.counter.keep("aer", self.found.aers, self.aer.build())
            self.aer = None


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
    a big log (candidate_lines) — and everything else is taken to be chatter.

    Each line goes to the record handlers (_HANDLERS) in order until one takes it."""
    # numbered lines from candidate_lines come with their corrected AER reports tallied
    tally: Tally | None = getattr(lines, "tally", None) if numbered else None
    found = _Found(corrected=tally.found) if tally is not None else _Found()
    state = _State(source, page_size, TimeRef(collected_at), boot_epoch, tally is not None, found)
    trigger = _trigger()
    pairs: Iterable[tuple[int, str]] = (
        lines if numbered else enumerate(lines, 1)  # type: ignore[assignment,arg-type]
    )
    number = seen_lines = 0
    for number, raw in pairs:
        seen_lines += 1
        # fast path: outside any multi-line record, a line that no record can start on is
        # skipped before its timestamp is parsed (most of a big kernel log is such lines)
        if not numbered and state.idle(number) and not trigger.search(raw):
            # an unstamped line after this one must not inherit a time
            state.last_time = state.last_up = None
            continue
        if "orrect" in raw and _corrected_aer(state, number, raw):
            continue
        msg = _message(state, raw)
        if not msg:
            continue
        ev = KernelEvidence(
            source=source, line=number, time=state.last_time, text=clip(raw), uptime_s=state.last_up
        )
        for handle in _HANDLERS:
            if handle(state, msg, ev):
                break
    state.finish_oom()
    state.finish_aer()
    return _facts(state, number, seen_lines)


def _corrected_aer(state: _State, number: int, raw: str) -> bool:
    """A corrected AER report: counted under its device (by the scanner's tally when the lines
    are its candidates), never decoded into a record; it ends an open AER record."""
    match = _CORRECTED.search(raw)
    if match is None:
        return False
    if not state.tallied:
        line = (number, raw.rstrip("\r"))
        seen = state.found.corrected.setdefault(match.group(1), Tallied(0, line, line))
        seen.count += 1
        seen.last = line
    state.finish_aer()
    state.last_time = state.last_up = None
    return True


def _message(state: _State, raw: str) -> str:
    """The line's message without its stamp; a stamped line sets the time the continuation
    lines after it share, and the first one names the log's time format."""
    stamp = parse_kernel_prefix(raw, state.ref, state.boot_epoch)
    if stamp is None:
        # a continuation line of a multi-line message: it shares the message's time; a
        # stamp of a shape not known here is set aside so the message is still read
        msg = raw.strip()
        if msg.startswith("[") and 0 < msg.find("]") < 40:
            msg = msg[msg.find("]") + 1 :].strip()
        return msg
    state.last_time, state.last_up = stamp.time, stamp.uptime_s
    if state.fmt == "none":
        if raw.lstrip("<0123456789>").startswith("[") and stamp.uptime_s is not None:
            state.fmt = "monotonic"
        elif stamp.host is not None:
            state.fmt = "syslog"
        elif raw.startswith("["):
            state.fmt = "ctime"
        else:
            state.fmt = "iso"
    return stamp.message.strip()


# --- record handlers: each takes the line (True) or leaves it to the next ----------------------


def _call_trace(state: _State, msg: str, ev: KernelEvidence) -> bool:
    """os_lock_user_pages in the call trace of a page allocation failure: the NVIDIA driver
    failed to pin user memory (one record per call trace)."""
    trace = state.trace
    trace.left = trace.until - ev.line
    if msg.startswith("Call Trace") and trace.left <= 0:
        trace.pinned = False
    if "os_lock_user_pages" not in msg:
        return False
    if not trace.pinned:
        trace.pinned = True
        owner = trace.owner if trace.left > 0 else None
        allocs = state.found.allocs
        comm = None
        if owner is not None and owner < len(allocs):
            allocs[owner] = replace(allocs[owner], nvidia_pinning=True)
            comm = allocs[owner].comm
        pin = PinFailure(**_ev(ev), kind="os_lock_user_pages", comm=comm)
        state.found.counter.keep("pin_failures", state.found.pins, pin)
    return True


def _oom_line(state: _State, msg: str, ev: KernelEvidence) -> bool:
    """A line of an OOM event (`invoked oom-killer` ... `Killed process`), folded into the
    event being assembled (state.oom); the kill line or `no killable processes` ends it."""
    match = _INVOKED.match(msg)
    if match:
        return _oom_invoked(state, match, ev)
    match = _CONSTRAINT.match(msg)
    if match:
        return _oom_constraint(state, match, msg, ev)
    match = _TASK_IN.match(msg)
    if match:
        return _oom_task_in(state, match, ev)
    match = _COUNTER.match(msg)
    if match:
        return _oom_counter(state, match, ev)
    match = _STATS_FOR.match(msg)
    if match and state.oom is not None:
        return _oom_stats_header(state.oom, match, ev)
    if state.oom is not None and state.oom.in_stats and _oom_stat_line(state.oom, msg):
        return True
    match = _KILL_SACRIFICE.match(msg)
    if match:
        return _oom_sacrifice(state, match, ev)
    match = _KILLED.match(msg)
    # old kernels print a bare `Killed process N (comm) total-vm:…` (no `Out of memory:`)
    if match and (match.group("prefix") or state.oom is not None or "total-vm:" in match["rest"]):
        return _oom_killed(state, match, ev)
    if _NO_KILLABLE.match(msg):
        if state.oom is not None:
            state.oom.end = ev.line
        state.finish_oom()
        return True
    return False


def _oom_invoked(state: _State, match: re.Match[str], ev: KernelEvidence) -> bool:
    """`<comm> invoked oom-killer: gfp_mask=…, order=…`: a new event's first line."""
    state.finish_oom()
    oom = state.oom = _Oom(ev)
    oom.fields["invoked_by"] = match.group("comm")
    oom.fields["gfp_mask"] = match.group("gfp")
    if match.group("order"):
        oom.fields["order"] = int(match.group("order"))
    return True


def _oom_constraint(state: _State, match: re.Match[str], msg: str, ev: KernelEvidence) -> bool:
    """`oom-kill:constraint=…,oom_memcg=…,task_memcg=…,task=…,pid=…,uid=…` (new kernels)."""
    oom = state.open_oom(ev)
    constraint = match.group("constraint")
    oom.fields["constraint"] = constraint
    oom.scope = "memcg" if constraint == "CONSTRAINT_MEMCG" else "global"
    keyed = {key: pattern.search(msg) for key, pattern in _CONSTRAINT_FIELDS.items()}
    if keyed["oom_memcg"]:
        oom.fields["memcg"] = keyed["oom_memcg"].group(1)
    if keyed["task_memcg"]:
        oom.fields["task_memcg"] = keyed["task_memcg"].group(1)
    if keyed["task"]:
        oom.fields["killed_comm"] = keyed["task"].group(1)
    if keyed["pid"] and keyed["pid"].group(1).isdecimal():
        oom.fields["killed_pid"] = int(keyed["pid"].group(1))
    if keyed["uid"] and keyed["uid"].group(1).isdecimal():
        oom.fields["uid"] = int(keyed["uid"].group(1))
    oom.end = ev.line
    return True


def _oom_task_in(state: _State, match: re.Match[str], ev: KernelEvidence) -> bool:
    """`Task in <cgroup> killed as a result of limit of <cgroup>` (old kernels)."""
    oom = state.open_oom(ev)
    oom.fields["task_memcg"] = match.group("task")
    oom.fields.setdefault("memcg", match.group("limit"))
    if oom.scope is None:
        oom.scope = "memcg" if match.group("limit") != "/" else "global"
    oom.end = ev.line
    return True


def _oom_counter(state: _State, match: re.Match[str], ev: KernelEvidence) -> bool:
    """`memory: usage …kB, limit …kB, failcnt …` and the swap and kmem counters."""
    oom = state.open_oom(ev)
    kind = match.group("kind")
    usage, limit = int(match.group("usage")) * 1024, _bytes_kb(match.group("limit"))
    if kind == "memory":
        oom.fields["usage_bytes"], oom.fields["limit_bytes"] = usage, limit
        if match.group("failcnt"):
            oom.fields["failcnt"] = int(match.group("failcnt"))
    elif kind in ("swap", "memory+swap"):
        oom.fields["swap_usage_bytes"], oom.fields["swap_limit_bytes"] = usage, limit
    else:
        oom.fields["kmem_usage_bytes"] = usage
    oom.end = ev.line
    return True


def _oom_stats_header(oom: _Oom, match: re.Match[str], ev: KernelEvidence) -> bool:
    """`Memory cgroup stats for <cgroup>:`, with the stats on the same line on old kernels
    (`rss:…KB cache:…KB`) or on the lines that follow on new ones."""
    oom.fields.setdefault("memcg", match.group("cg"))
    oom.in_stats = True
    old = {k: p.search(match.group("rest")) for k, p in _STAT_OLD.items()}
    for key, name in (("rss", "anon"), ("cache", "file"), ("shmem", "shmem")):
        stat = old[key]
        if stat:
            oom.fields[f"stat_{name}_bytes"] = int(stat.group(1)) * 1024
    oom.end = ev.line
    return True


def _oom_stat_line(oom: _Oom, msg: str) -> bool:
    """One `anon|file|shmem <bytes>` line of the stats block; the task list ends the block."""
    stat = _STAT_LINE.match(msg)
    if stat:
        oom.fields[f"stat_{stat.group(1)}_bytes"] = int(stat.group(2))
        return True
    if msg.startswith("Tasks state") or msg.startswith("["):
        oom.in_stats = False
    return False


def _oom_sacrifice(state: _State, match: re.Match[str], ev: KernelEvidence) -> bool:
    """`…: Kill process N (comm) score … or sacrifice child` (old kernels): the victim; the
    `Killed process` line follows."""
    oom = state.open_oom(ev)
    if oom.scope is None:
        oom.scope = "memcg" if match.group("prefix").startswith("Memory cgroup") else "global"
    oom.fields["killed_pid"] = int(match.group("pid"))
    oom.fields["killed_comm"] = match.group("comm")
    oom.awaiting_killed = True
    oom.end = ev.line
    return True


def _oom_killed(state: _State, match: re.Match[str], ev: KernelEvidence) -> bool:
    """`Killed process N (comm) total-vm:…kB, anon-rss:…`: the kill, which ends the event."""
    oom = state.open_oom(ev)
    prefix = match.group("prefix") or ""
    if oom.scope is None and prefix:
        oom.scope = "memcg" if prefix.startswith("Memory cgroup") else "global"
    rest = match.group("rest")
    oom.fields["killed_pid"] = int(match.group("pid"))
    oom.fields["killed_comm"] = match.group("comm")
    for key, pattern in _KILLED_KB.items():
        size = pattern.search(rest)
        if size:
            oom.fields[key.replace("-", "_") + "_bytes"] = int(size.group(1)) * 1024
    uid = _UID.search(rest)
    if uid:
        oom.fields["uid"] = int(uid.group(1))
    adj = _ADJ.search(rest)
    if adj:
        oom.fields["oom_score_adj"] = int(adj.group(1))
    oom.fields["kill_line"] = ev.line
    oom.fields["kill_text"] = ev.text
    oom.end = ev.line
    state.finish_oom()
    return True


def _page_alloc_failure(state: _State, msg: str, ev: KernelEvidence) -> bool:
    """`<comm>: page allocation failure: order:…, mode:…`; its call trace follows (_call_trace
    reads it for the NVIDIA driver's pinning)."""
    match = _ALLOC_FAIL.match(msg)
    if not match:
        return False
    record = PageAllocFailure(
        **_ev(ev),
        comm=match.group("comm"),
        order=int(match.group("order")) if match.group("order") else None,
        mode=match.group("mode"),
    )
    allocs = state.found.allocs
    state.found.counter.keep("page_alloc_failures", allocs, record)
    trace = state.trace
    trace.owner = len(allocs) - 1 if allocs and allocs[-1] is record else None
    trace.until, trace.left, trace.pinned = ev.line + 200, 200, False
    return True


def _cannot_map(state: _State, msg: str, ev: KernelEvidence) -> bool:
    """`NVRM: Cannot map memory with base addr … and size of … pages`: the driver failed to
    map user memory (the process is the page allocation failure's whose trace is open)."""
    match = _CANNOT_MAP.search(msg)
    if not match:
        return False
    size = match.group("pages")
    pages = int(size, 16) if size.lower().startswith("0x") else int(size)
    trace, allocs = state.trace, state.found.allocs
    comm = None
    if trace.owner is not None and trace.left > 0 and trace.owner < len(allocs):
        comm = allocs[trace.owner].comm
    pin = PinFailure(
        **_ev(ev),
        kind="cannot-map",
        comm=comm,
        base_addr=match.group("addr"),
        pages=pages,
        bytes=pages * state.page_size,
    )
    state.found.counter.keep("pin_failures", state.found.pins, pin)
    return True


def _xid(state: _State, msg: str, ev: KernelEvidence) -> bool:
    """`NVRM: Xid (PCI:<dev>): <code>, pid=…, name=…, <detail>`, judged by the Xid catalog (a
    secondary Xid by its primary's entry); Xid 79 is also a GPU fallen off the bus."""
    match = _XID.search(msg)
    if not match:
        return False
    code, device, rest = int(match.group("code")), match.group("dev"), match.group("rest").strip()
    pid: int | None = None
    process: str | None = None
    owner = _XID_PID.match(rest)
    if owner:
        digits = owner.group("pid").strip("'")
        pid = int(digits) if digits.isdecimal() else None
        name = owner.group("name").strip()
        process = None if name in ("", "<unknown>") else name
        rest = owner.group("rest")
    info = xidtable.lookup(code)
    primary = xidtable.caused_by(rest)
    if primary is not None and primary != code:
        first = xidtable.lookup(primary)
        meaning = f"{info.meaning}, caused by Xid {primary} ({first.meaning})"
        info = replace(first, code=code, meaning=meaning)
    action = None
    if code == 154:
        recovery = _RECOVERY.search(rest)
        action = recovery.group(1) if recovery else None
    found = state.found
    seen_key = (device.lower(), code)
    found.xid_seen[seen_key] = found.xid_seen.get(seen_key, 0) + 1
    event = XidEvent(
        **_ev(ev),
        code=code,
        device=device,
        pid=pid,
        process=process,
        detail=clip(rest),
        meaning=info.meaning,
        category=info.category,
        gpu_fault=info.gpu_fault,
        drain=info.drain or xidtable.recovery_action_drains(action),
        recovery_action=action,
        caused_by=primary,
    )
    found.counter.keep("xids", found.xids, event)
    if code == 79:
        fallen = FallenOffBus(**_ev(ev), device=device, xid=79)
        found.counter.keep("fallen_off_bus", found.fallen, fallen)
    return True


def _fallen_off_bus(state: _State, msg: str, ev: KernelEvidence) -> bool:
    """A GPU fallen off the bus: `NVRM: GPU at PCI:<dev>: … fallen off the bus`, or `NVRM: The
    NVIDIA GPU <dev>` with `fallen off the bus` on it or up to four lines after it."""
    found = state.found
    match = _FALLEN_GPU.search(msg)
    if match:
        fallen = FallenOffBus(**_ev(ev), device=match.group("dev"))
        found.counter.keep("fallen_off_bus", found.fallen, fallen)
        state.pending_gpu = None
        return True
    match = _NVIDIA_GPU.search(msg)
    if match:
        if "fallen off the bus" in msg:
            fallen = FallenOffBus(**_ev(ev), device=match.group("dev"))
            found.counter.keep("fallen_off_bus", found.fallen, fallen)
        else:
            state.pending_gpu = (match.group("dev"), ev, ev.line)
        return True
    if "fallen off the bus" not in msg:
        return False
    pending = state.pending_gpu
    if pending is not None and ev.line - pending[2] <= 4:
        device, first_ev, _ = pending
        fallen = FallenOffBus(**_ev(first_ev), device=device)
    else:
        fallen = FallenOffBus(**_ev(ev), device=None)
    found.counter.keep("fallen_off_bus", found.fallen, fallen)
    state.pending_gpu = None
    return True


def _catalog_line(state: _State, msg: str, ev: KernelEvidence) -> bool:
    """A kernel line the signature catalog names: IOMMU faults (AMD-Vi, DMAR), NVSwitch SXid."""
    if not any(word in msg for word in state.words):
        return False
    sig = state.catalog.classify(msg, kernel=True)
    if sig is None:
        return False
    hit = KernelSignature(**_ev(ev), signature=sig.id, role=sig.role, cause=sig.cause)
    state.found.counter.keep("catalog_hits", state.found.catalog_hits, hit)
    return True


def _aer(state: _State, msg: str, ev: KernelEvidence) -> bool:
    """An uncorrected PCIe AER error: its `AER: … error received` and `PCIe Bus Error:
    severity=…` lines open the record (state.aer), the device and error-bit lines within six
    lines of its last one are its detail. A corrected report's lines only end an open one."""
    match = _AER_RECEIVED.match(msg)
    if match:
        state.finish_aer()
        severity = _severity(match.group("severity"), match.group("fatal"))
        if severity != "corrected":  # a corrected form _CORRECTED does not count (no reporter)
            state.aer = _Aer(ev, severity, match.group("reporter"), match.group("dev"))
        return True
    match = _AER_BUS.match(msg)
    if match:
        return _aer_bus_line(state, match, ev)
    aer = state.aer
    if aer is None or ev.line - aer.last_line > 6:
        return False
    return _aer_detail(aer, msg, ev.line)


def _aer_bus_line(state: _State, match: re.Match[str], ev: KernelEvidence) -> bool:
    """`<dev>: PCIe Bus Error: severity=…, type=…`: the record's device and error type; one
    that does not continue the open record starts a new one."""
    severity = _severity(match.group("severity"), match.group("fatal"))
    if severity == "corrected":  # the detail of a corrected report, counted by its first line
        state.finish_aer()
        return True
    device = match.group("reporter").split()[-1]
    aer = state.aer
    if aer is None or aer.has_bus_line or aer.severity != severity or ev.line - aer.last_line > 6:
        state.finish_aer()
        aer = state.aer = _Aer(ev, severity, None, device)
    aer.has_bus_line = True
    aer.error_type = (match.group("type") or "").strip() or None
    aer.device = device
    aer.last_line = ev.line
    return True


def _aer_detail(aer: _Aer, msg: str, number: int) -> bool:
    """A detail line of the open AER record: `device [vvvv:dddd] error status/mask=…`, an
    error bit (`[ 0] RxErr (First)`), or any other `AER:` line."""
    device = _AER_DEVICE.search(msg)
    if device:
        aer.vendor_device = device.group("vendor_device").lower()
    else:
        bit = _AER_BIT.search(msg)
        if bit:
            name = bit.group("name").strip()
            aer.errors.append(name)
            if bit.group("first"):
                aer.first = name
        elif "AER:" not in msg:
            return False
    aer.last_line = number
    return True


#: the record handlers in the order a line is offered to them (the first that takes it wins)
def _unrecognized(state: _State, msg: str, ev: KernelEvidence) -> bool:
    """An error line no handler before took (runbook.parsers.errorlines): kept as it is."""
    if not errorlines.kernel_error(ev.text, msg):
        return False
    hit = KernelSignature(**_ev(ev), signature="unrecognized", role="local-error", cause=None)
    state.found.counter.keep("unrecognized", state.found.unrecognized, hit)
    return True


_HANDLERS = (
    _call_trace,
    _oom_line,
    _page_alloc_failure,
    _cannot_map,
    _xid,
    _fallen_off_bus,
    _catalog_line,
    _aer,
    _unrecognized,
)


def _facts(state: _State, lines: int, seen_lines: int) -> DmesgFacts:
    """The records found, with the corrected AER reports summed per device and the Xids
    seen more than once for a GPU marked repeated."""
    found, counter = state.found, state.found.counter
    summaries = tuple(
        CorrectedAer(
            device=device,
            reports=seen.count,
            first=_stamped(seen.first, state.source, state.ref, state.boot_epoch),
            last=_stamped(seen.last, state.source, state.ref, state.boot_epoch),
        )
        for device, seen in found.corrected.items()
    )
    if summaries:
        counter.totals["aer_corrected"] = sum(a.reports for a in summaries)
    xids = found.xids
    if any(v > 1 for v in found.xid_seen.values()):
        for i, x in enumerate(xids):
            if found.xid_seen.get((x.device.lower(), x.code), 0) > 1:
                info = xidtable.lookup(x.code)
                xids[i] = replace(x, repeated=True, drain=x.drain or info.drain_if_repeated)
    records = (found.memcg, found.global_, found.allocs, found.pins, xids, found.fallen,
               found.aers, found.catalog_hits, summaries)  # fmt: skip
    return DmesgFacts(
        memcg_ooms=tuple(found.memcg),
        global_ooms=tuple(found.global_),
        page_alloc_failures=tuple(found.allocs),
        pin_failures=tuple(found.pins),
        xids=tuple(xids),
        fallen_off_bus=tuple(found.fallen),
        aer=tuple(found.aers),
        lines=lines,
        totals=dict(counter.totals),
        time_format=state.fmt,  # type: ignore[arg-type]
        boot_epoch=state.boot_epoch,
        catalog_hits=tuple(found.catalog_hits),
        recognized=state.fmt != "none" or not seen_lines or any(records),
        aer_corrected=summaries,
        unrecognized=tuple(found.unrecognized),
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
    out["boot_iommu_faults"] = to_jsonable(facts.boot_iommu_faults)
    out["nvswitch_faults"] = to_jsonable(facts.nvswitch_faults)
    out["gpu_reset_required"] = to_jsonable(facts.gpu_reset_required)
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
