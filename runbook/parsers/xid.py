"""NVIDIA Xid codes: what each means, whether it is the application's fault or the GPU's, and
whether it justifies draining the node.

Sources: NVIDIA's Xid catalog (r535-r590) as mirrored by public GPU health checkers, which do
not all agree. Where they disagree the choice made here, and why, is in `note`.

Two separate judgements per code:

* `gpu_fault`: the code is evidence of a GPU hardware fault (the `gpu-hardware` verdict).
* `drain`: the fault justifies proposing a node drain on its own (a `node-drain` proposal).
  `drain_if_repeated` codes justify it only when seen more than once for the same GPU.

Categories: ``application`` (the job faulted the GPU: bad address, illegal instruction),
``hardware`` (the GPU, its memory, NVLink or PCIe link failed), ``secondary`` (a consequence of
an earlier Xid), ``informational`` (a recorded event, not a fault), ``unknown``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal, get_args

import yaml

Category = Literal["application", "hardware", "secondary", "informational", "unknown"]
_CATEGORIES = frozenset(get_args(Category))


@dataclass(frozen=True)
class XidInfo:
    code: int
    meaning: str
    category: Category
    gpu_fault: bool
    drain: bool
    drain_if_repeated: bool = False
    note: str = ""


def _x(
    code: int,
    meaning: str,
    category: Category,
    gpu_fault: bool = False,
    drain: bool = False,
    drain_if_repeated: bool = False,
    note: str = "",
) -> XidInfo:
    return XidInfo(code, meaning, category, gpu_fault, drain, drain_if_repeated, note)


XIDS: dict[int, XidInfo] = {
    x.code: x
    for x in (
        _x(
            8,
            "GPU stopped processing (channel timeout)",
            "application",
            note="usually a hung kernel or a driver timeout; restart the job",
        ),
        _x(
            13,
            "Graphics engine exception",
            "application",
            note="illegal instruction/address in user code; not hardware on its own",
        ),
        _x(
            31,
            "GPU memory page fault (MMU fault)",
            "application",
            note="invalid access by the job; MMU faults from UNRECOGNIZED_CLIENT on every GPU "
            "at once point at the node instead (reboot), which a single line cannot show",
        ),
        _x(
            32,
            "Invalid or corrupted push buffer stream",
            "hardware",
            note="driver, system-memory corruption or bus error; investigate, do not drain on "
            "one occurrence",
        ),
        _x(38, "Driver firmware error", "hardware", note="investigate; not a drain alone"),
        _x(
            43,
            "GPU stopped processing (reset channel)",
            "application",
            note="the job's channel was reset after a fault; not hardware",
        ),
        _x(
            44,
            "Graphics engine fault during context switch",
            "hardware",
            note="rare; investigate before draining",
        ),
        _x(
            45,
            "Preemptive cleanup due to previous errors",
            "secondary",
            note="a consequence of an earlier Xid (or a killed process); look for that one",
        ),
        _x(
            48,
            "Double-bit (uncorrectable) ECC error",
            "hardware",
            gpu_fault=True,
            drain=True,
            note="DRAM DBE: drain, reset, check retired pages / remapped rows",
        ),
        _x(56, "Display engine error", "informational"),
        _x(
            61,
            "Internal micro-controller breakpoint/warning",
            "hardware",
            gpu_fault=True,
            drain=True,
            note="conservative: tools agree it needs a reset; drained to get one",
        ),
        _x(62, "Internal micro-controller halt", "hardware", gpu_fault=True, drain=True),
        _x(
            63,
            "ECC page retirement / row remapping recording event",
            "hardware",
            note="the GPU repaired itself; schedule a reset to apply the remap, not a drain "
            "(tools disagree; remapped-row state from nvidia-smi -q decides)",
        ),
        _x(
            64,
            "ECC page retirement / row remapping recording failure",
            "hardware",
            gpu_fault=True,
            drain=True,
            note="remap failed: drain and RMA",
        ),
        _x(68, "Video processor (NVDEC/NVENC) exception", "application"),
        _x(69, "Graphics engine class error", "application"),
        _x(
            74,
            "NVLink error",
            "hardware",
            gpu_fault=True,
            drain=True,
            note="link fault; drain, reset, check nvlink status and cabling/NVSwitch",
        ),
        _x(
            79,
            "GPU has fallen off the bus",
            "hardware",
            gpu_fault=True,
            drain=True,
            note="drain and reboot; check power, thermals, PCIe seating",
        ),
        _x(
            92,
            "High single-bit ECC error rate",
            "hardware",
            gpu_fault=True,
            drain=False,
            note="counted as GPU hardware evidence (DESIGN), but corrected errors only: "
            "monitor, no drain on its own (SIGNATURES)",
        ),
        _x(
            94,
            "Contained ECC error",
            "hardware",
            gpu_fault=True,
            drain=False,
            drain_if_repeated=True,
            note="the driver contained it: restart the job; drain if it repeats on the GPU",
        ),
        _x(
            95,
            "Uncontained ECC error",
            "hardware",
            gpu_fault=True,
            drain=True,
            note="all work on the GPU is affected: drain and reset",
        ),
        _x(
            109,
            "Context switch timeout",
            "application",
            note="ambiguous (job or driver); not a drain alone",
        ),
        _x(
            119,
            "GSP RPC timeout",
            "hardware",
            gpu_fault=True,
            drain=True,
            note="GPU System Processor unresponsive: drain and reset",
        ),
        _x(120, "GSP error", "hardware", gpu_fault=True, drain=True),
        _x(121, "C2C link corrected error", "informational"),
        _x(140, "Unrecovered ECC error", "hardware", gpu_fault=True, drain=True),
        _x(143, "GPU initialization failure", "hardware", gpu_fault=True, drain=True),
        _x(
            154,
            "GPU recovery action changed",
            "informational",
            note="do what the recovery action says; a Drain/Reboot action justifies a drain",
        ),
    )
}


def _from_data(code: int, raw: Any) -> XidInfo | None:
    if not isinstance(raw, dict) or raw.get("category") not in _CATEGORIES:
        return None
    note = str(raw.get("note") or "")
    action = raw.get("action")
    if action:
        note = f"NVIDIA: {action}" + (f"; {note}" if note else "")
    return XidInfo(
        code,
        str(raw.get("meaning") or f"Xid {code}"),
        raw["category"],
        bool(raw.get("gpu_fault")),
        bool(raw.get("drain")),
        bool(raw.get("drain_if_repeated")),
        note,
    )


@functools.cache
def catalog() -> dict[int, XidInfo]:
    """NVIDIA's published Xid catalog (runbook/data/xids.yaml, with its sources), over the
    table above for any code the data lacks."""
    table = dict(XIDS)
    text = resources.files("runbook").joinpath("data/xids.yaml").read_text()
    # libyaml's loader when the platform has it: the pure-Python one takes ~0.15 s on this file
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    data = yaml.load(text, Loader=loader) or {}  # noqa: S506 (a safe loader)
    for code, raw in (data.get("xids") or {}).items():
        if isinstance(code, int):
            info = _from_data(code, raw)
            if info is not None:
                table[code] = info
    return table


def lookup(code: int) -> XidInfo:
    """The catalog entry for `code`; a code the catalog lacks is `unknown` ("unknown Xid N:
    look it up"): no fault and no drain on its own, but never taken for benign."""
    return catalog().get(
        code,
        XidInfo(
            code, f"unknown Xid {code}: look it up in NVIDIA's Xid catalog", "unknown", False, False
        ),
    )


_CAUSED_BY = re.compile(r"caused by previous Xid (\d{1,6})")


def caused_by(detail: str) -> int | None:
    """The primary code a secondary Xid names (`… caused by previous Xid 149`), if it does."""
    m = _CAUSED_BY.search(detail[:2000])
    return int(m.group(1)) if m else None


def recovery_action_drains(action: str | None) -> bool:
    """Xid 154's new recovery action asks for a drain or a reboot."""
    if not action:
        return False
    low = action.lower()
    return "drain" in low or "reboot" in low
