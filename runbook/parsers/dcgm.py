"""NVIDIA DCGM as evidence: `dcgmi discovery -l` and `dcgmi health -c` (the diag, which is run
only when asked, is runbook.parsers.dcgm_diag).

Fleets that run DCGM beside the driver already have its host engine watching every GPU in the
background; its health check (PCIe replays, double-bit ECC, pending page retirement, NVLink,
InfoROM, thermal) is hardware evidence that no log shows. DCGM is optional on a node: a node
without `dcgmi` (exit 127) or without a running host engine (`Error: unable to establish a
connection to the specified host: localhost`) is "DCGM not available", which is a fact about
the node and never a finding.

Formats read (samples and their sources: tests/unit/parsers/samples/dcgm/README.md):

- discovery: the `GPU ID | Device Information` boxes of DCGM 2.x-4.x, with or without the
  `Device UUID` row (4.x may print `N GPUs found (Active).`);
- health: the tree of DCGM 2.x-4.x (`Overall Health`, `GPU`, `-> 3`, `-> Errors`,
  `-> Memory system | Failure` and the message rows under it), the older boxed layout of the
  user guide (`Group 1 | Overall Health: Warning`, `GPU ID: 0`, `PCIe system: Warning - …`)
  and `dcgmi health -c -j`; `Error: Health watches not enabled` means nothing was watched.

A health `Failure` on a GPU in a hardware system (memory, PCIe, NVLink, InfoROM, SM, thermal,
power, NVSwitch) is a `hardware_failure`; a `Warning` is a `warning`, which alone never
justifies a drain.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from runbook.parsers._common import clip, is_collected, iter_lines, to_jsonable
from runbook.parsers.registry import Files, register
from runbook.transports.base import CommandResult

F_DISCOVERY = "dcgmi-discovery.txt"
F_HEALTH = "dcgmi-health.txt"

#: health systems whose failure is the GPU's (or its fabric's) hardware; `Driver` and
#: ConnectX (a NIC) are not
HARDWARE_SYSTEMS = frozenset(
    {"pcie", "nvlink", "memory", "sm", "inforom", "thermal", "power", "pmu", "mcu",
     "nvswitch f", "nvswitch nf", "nvswitch"}
)  # fmt: skip
#: entity groups whose failure is a GPU's or NVSwitch's
HARDWARE_ENTITIES = frozenset({"gpu", "nvswitch", "gpu instance", "compute instance"})
HEALTH_WORDS = ("Healthy", "Warning", "Failure")

_NO_HOSTENGINE = re.compile(
    r"unable to establish a connection to the specified host|Unable to connect to host engine"
    r"|Host engine connection invalid|Couldn't connect to the host engine",
    re.IGNORECASE,
)
_NOT_WATCHED = re.compile(r"Health watches not enabled", re.IGNORECASE)


# --- availability ---------------------------------------------------------------------------


def unavailable_reason(result: CommandResult | None) -> str | None:
    """Why this `dcgmi` call says DCGM is not on the node, or None when it answered."""
    if result is None or not result.collected:
        return None
    text = f"{result.stdout}\n{result.stderr}"
    if result.exited == 127 or "command not found" in text:
        return "dcgmi is not installed"
    if _NO_HOSTENGINE.search(text):
        return "the DCGM host engine (nv-hostengine) is not running"
    return None


# --- table rows -------------------------------------------------------------------------------


def table_cells(line: str) -> tuple[str, str] | None:
    """A `| left | right |` row as (left, right): each cell with one separator blank removed
    and its padding cut, so what is left of a cell's own leading blanks is kept (the health
    tree's depth; a diag line wrapped before a blank); None for borders and plain text."""
    stripped = line.rstrip()
    if not stripped.startswith("|") or stripped.startswith("|-----"):
        return None
    parts = stripped.split("|")
    if len(parts) < 3:
        return None
    left = parts[1][1:].rstrip() if parts[1].startswith(" ") else parts[1].rstrip()
    right = "|".join(parts[2:-1]) if stripped.endswith("|") and len(parts) > 3 else parts[2]
    if right.startswith(" "):
        right = right[1:]
    return left, right.rstrip()


# --- discovery ------------------------------------------------------------------------------


@dataclass(frozen=True)
class DcgmGpu:
    id: int
    name: str | None = None
    bus_id: str | None = None
    uuid: str | None = None


@dataclass(frozen=True)
class DiscoveryFacts:
    gpus: tuple[DcgmGpu, ...]
    #: `N GPUs found.` (None when the header is absent)
    reported_count: int | None
    recognized: bool


def parse_discovery(lines: Iterable[str]) -> DiscoveryFacts:
    gpus: list[dict[str, Any]] = []
    reported: int | None = None
    recognized = False
    for line in lines:
        m = re.match(r"\s*(\d+) GPUs? found", line)
        if m:
            reported, recognized = int(m.group(1)), True
            continue
        cells = table_cells(line)
        if cells is None:
            continue
        left, right = cells
        right = right.strip()
        if left.isdigit():
            gpus.append({"id": int(left)})
            recognized = True
        if not gpus or ":" not in right:
            continue
        key, _, value = right.partition(":")
        value = value.strip()
        slot = {"Name": "name", "PCI Bus ID": "bus_id", "Device UUID": "uuid"}.get(key.strip())
        if slot:
            gpus[-1][slot] = None if value in ("", "<<<NULL>>>") else value
    return DiscoveryFacts(tuple(DcgmGpu(**g) for g in gpus), reported, recognized)


# --- health ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class HealthIncident:
    entity: str
    entity_id: int | None
    system: str
    health: str
    message: str
    source: str
    line: int
    time: str | None = None
    text: str = ""

    @property
    def hardware(self) -> bool:
        system = self.system.lower().removesuffix(" system").strip()
        return self.entity.lower() in HARDWARE_ENTITIES and system in HARDWARE_SYSTEMS


@dataclass(frozen=True)
class HealthFacts:
    #: False: `Health watches not enabled` (nothing watched, so nothing to say)
    watched: bool | None
    overall: str | None
    layout: str | None
    incidents: tuple[HealthIncident, ...] = ()
    recognized: bool = False


@dataclass
class _Incident:
    entity: str
    entity_id: int | None
    system: str
    health: str
    line: int
    parts: list[str] = field(default_factory=list)

    def done(self, source: str) -> HealthIncident:
        message = " ".join(p.strip() for p in self.parts if p.strip())
        who = f"{self.entity} {self.entity_id}" if self.entity_id is not None else self.entity
        text = clip(f"{who} {self.system}: {self.health} - {message}".rstrip(" -"))
        return HealthIncident(
            self.entity, self.entity_id, self.system, self.health, message, source, self.line,
            None, text,
        )  # fmt: skip


def _entity_id(label: str) -> int | None:
    return int(label) if label.isdigit() else None


def _health_json(text: str, source: str) -> HealthFacts:
    """`dcgmi health -c -j`: the same tree as JSON (`body` → section → `children` → …)."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):  # nested deeper than the decoder recurses
        return HealthFacts(None, None, None)
    body = doc.get("body") if isinstance(doc, dict) else None
    if not isinstance(body, dict):
        return HealthFacts(None, None, None)
    overall_node = body.get("Overall Health")
    overall = overall_node.get("value") if isinstance(overall_node, dict) else None
    incidents: list[HealthIncident] = []
    for group, node in body.items():
        if group == "Overall Health" or not isinstance(node, dict):
            continue
        for entity_key, entity in (node.get("children") or {}).items():
            errors = ((entity or {}).get("children") or {}).get("Errors") or {}
            for system, sys_node in (errors.get("children") or {}).items():
                sys_node = sys_node or {}
                overflow = sys_node.get("overflow") or []
                parts = overflow if isinstance(overflow, list) else [str(overflow)]
                incident = _Incident(
                    group,
                    _entity_id(str(entity_key)),
                    system,
                    str(sys_node.get("value") or ""),
                    1,
                    [str(p) for p in parts],
                )
                incidents.append(incident.done(source))
    return HealthFacts(True, overall if isinstance(overall, str) else None, "json",
                       tuple(incidents), isinstance(overall, str))  # fmt: skip


def parse_health(text: str, *, source: str = F_HEALTH) -> HealthFacts:
    if text.lstrip().startswith("{"):
        return _health_json(text, source)
    if _NOT_WATCHED.search(text):
        return HealthFacts(False, None, None, (), True)
    overall: str | None = None
    layout: str | None = None
    incidents: list[HealthIncident] = []
    current: _Incident | None = None
    group = "GPU"
    entity_id: int | None = None

    def close() -> None:
        nonlocal current
        if current is not None:
            incidents.append(current.done(source))
            current = None

    for n, line in enumerate(iter_lines(text), 1):
        cells = table_cells(line)
        if cells is None:
            continue
        left, right = cells
        value = right.strip()
        # legacy box: `| Group 1 | Overall Health: Warning |`
        m = re.match(r"Overall Health:\s*(\w+)", value)
        if m:
            overall, layout = m.group(1), "legacy"
            continue
        if left == "Overall Health":
            overall, layout = value.split()[0] if value else None, "tree"
            continue
        if layout == "legacy":
            m = re.match(r"(GPU|NvSwitch|Switch) ID:\s*(\d+)", left)
            if m:
                close()
                group, entity_id = m.group(1), int(m.group(2))
                continue
            m = re.match(r"(.+?): (Healthy|Warning|Failure)\s*-\s*(.*)$", value)
            if m and not left:
                close()
                current = _Incident(group, entity_id, m.group(1), m.group(2), n, [m.group(3)])
            elif current is not None and not left:
                current.parts.append(value)
            continue
        if layout != "tree":
            continue
        # tree: the left cell's `-> ` depth (3 blanks a level) says what the row is
        m = re.match(r"( *)-> (.*)$", left)
        if m is None:
            if left:  # a level-0 section: an entity group (`GPU`, `NvSwitch`)
                close()
                group, entity_id = left, None
            elif current is not None and value:
                current.parts.append(value)
            continue
        level = len(m.group(1)) // 3 + 1
        label = m.group(2).strip()
        if level == 1:
            close()
            entity_id = _entity_id(label)
        elif level >= 3:
            close()
            current = _Incident(group, entity_id, label, value, n)
    close()
    return HealthFacts(True if layout else None, overall, layout, tuple(incidents),
                       layout is not None)  # fmt: skip


# --- adapters -------------------------------------------------------------------------------


def evidence(item: Any) -> dict[str, Any]:
    """A health incident or diag result as an evidence record, with the role it may play."""
    record: dict[str, Any] = to_jsonable(item)
    failing = getattr(item, "health", None) == "Failure" or getattr(item, "result", "") in (
        "Fail", "Error")  # fmt: skip
    # only a failure of the hardware blames; a warning or a software fault is context
    record["role"] = "cause" if item.hardware and failing else "context"
    return record


def _answered(result: CommandResult | None) -> str | None:
    """The call's output when `dcgmi` ran against a host engine, else None."""
    if not is_collected(result) or unavailable_reason(result) is not None:
        return None
    return result.stdout


@register("dcgm", "dcgmi discovery -l / health -c: DCGM's GPUs and background health incidents")
def dcgm_facts(files: Files, context: Mapping[str, Any]) -> dict[str, Any]:
    """Available or not (never a finding), the GPUs DCGM sees, and its health incidents
    split into hardware failures, other failures and warnings."""
    probes = {name: files.get(name) for name in (F_DISCOVERY, F_HEALTH)}
    # `dcgmi: command not found` (exit 127) is no evidence of anything else, but it is the
    # evidence that DCGM is not there
    collected = [r for r in probes.values() if r is not None and r.collected]
    reasons = [unavailable_reason(r) for r in collected]
    out: dict[str, Any] = {
        "collected": bool(collected),
        "available": (None if not collected else not all(reasons)),
        "unavailable_reason": next((r for r in reasons if r), None)
        if collected and all(reasons) else None,
    }  # fmt: skip
    text = _answered(probes[F_DISCOVERY])
    if text is not None:
        d = parse_discovery(iter_lines(text))
        out["discovery"] = {"collected": True, **to_jsonable(d), "gpu_count": len(d.gpus)}
    else:
        out["discovery"] = {"collected": False}
    text = _answered(probes[F_HEALTH])
    health = parse_health(text) if text is not None else None
    if health is None:
        out["health"] = {"collected": False}
        incidents: tuple[HealthIncident, ...] = ()
    else:
        incidents = health.incidents
        out["health"] = {"collected": True, **to_jsonable(health)}
        out["health"].pop("incidents")
    failures = [i for i in incidents if i.health == "Failure"]
    out["incidents"] = [evidence(i) for i in incidents]
    out["hardware_failures"] = [evidence(i) for i in failures if i.hardware]
    out["other_failures"] = [evidence(i) for i in failures if not i.hardware]
    out["warnings"] = [evidence(i) for i in incidents if i.health == "Warning"]
    out["healthy"] = bool(health and health.watched and health.overall == "Healthy"
                          and not incidents)  # fmt: skip
    return out
