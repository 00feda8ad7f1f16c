"""NVIDIA Xid codes: what each means, whether it is the application's fault or the GPU's, and
whether it justifies draining the node.

The table is data: `runbook/data/xids.yaml` follows NVIDIA's published Xid catalog (its header
names the sources); where public GPU health checkers disagree with it, the choice made and why is
in each code's `note`.

Two separate judgements per code:

* `gpu_fault`: the code is evidence of a GPU hardware fault (the `gpu-hardware` verdict).
* `drain`: the fault justifies proposing a node drain on its own (a `node-drain` proposal).
  `drain_if_repeated` codes justify it only when seen more than once for the same GPU.

Categories: ``application`` (the job faulted the GPU: bad address, illegal instruction),
``hardware`` (the GPU, its memory, NVLink or PCIe link failed), ``secondary`` (a consequence of
an earlier Xid), ``informational`` (a recorded event, not a fault), ``unknown``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal, get_args

import yaml

from runbook.once import once

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


@once
def catalog() -> dict[int, XidInfo]:
    """NVIDIA's published Xid catalog (runbook/data/xids.yaml, with its sources)."""
    table: dict[int, XidInfo] = {}
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
