"""RDMA devices on the host, as opposed to labels that claim them: `ls -la /dev/infiniband`,
`ls -la /sys/class/infiniband`, `rdma link show`, `ibdev2netdev`, and `lspci -nn` (Mellanox /
NVIDIA ConnectX adapters `[15b3:....]`, and the NVIDIA GPUs `[10de:....]` while at it).

Absence is evidence: `ls: cannot access '/dev/infiniband': No such file or directory` (exit 2)
gives `present: false`; `command not found` (127) gives nothing (`collected: false`).
`usable` = at least one port ACTIVE/LINK_UP (or `ibdev2netdev` Up) and, when `/dev/infiniband`
was listed, a `uverbs` device in it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from runbook.parsers._common import is_collected, says_absent, to_jsonable
from runbook.parsers.registry import Files, register

F_DEV = "dev-infiniband.txt"
F_SYS = "sys-class-infiniband.txt"
F_LINK = "rdma-link.txt"
F_IB2NET = "ibdev2netdev.txt"
F_LSPCI = "lspci.txt"


@dataclass(frozen=True)
class Listing:
    """`ls -la DIR`: the entry names (without `.`/`..`) and symlink targets."""

    entries: tuple[str, ...]
    targets: dict[str, str]


@dataclass(frozen=True)
class RdmaLink:
    device: str
    port: int
    state: str | None
    physical_state: str | None
    netdev: str | None
    link_layer: str | None = None

    @property
    def active(self) -> bool:
        return self.state == "ACTIVE" and self.physical_state in (None, "LINK_UP")


@dataclass(frozen=True)
class IbNetdev:
    device: str
    port: int
    netdev: str
    up: bool


@dataclass(frozen=True)
class PciDevice:
    slot: str
    cls: str
    class_id: str | None
    vendor: str
    vendor_id: str | None
    device_id: str | None
    rev: str | None = None


@dataclass(frozen=True)
class PciFacts:
    rdma_nics: tuple[PciDevice, ...]
    ethernet: tuple[PciDevice, ...]
    gpus: tuple[PciDevice, ...]


_LS = re.compile(
    r"^[-dlcbps][-rwxsStT.+@]{9,10}\s+\d+\s+\S+\s+\S+\s+(?:\d+,\s*)?\d+\s+"
    r"(?:\S+\s+\d+\s+[\d:]+|\d{4}-\d\d-\d\d\s+[\d:.]+(?:\s+[+-]\d{4})?)\s+(?P<name>.+?)"
    r"(?: -> (?P<target>.+))?$"
)


def parse_ls(lines: Iterable[str]) -> Listing:
    entries: list[str] = []
    targets: dict[str, str] = {}
    for line in lines:
        m = _LS.match(line.rstrip())
        if not m:
            continue
        name = m.group("name")
        if name in (".", ".."):
            continue
        entries.append(name)
        if m.group("target"):
            targets[name] = m.group("target")
    return Listing(tuple(entries), targets)


_LINK = re.compile(r"^(?:link|\d+/\d+:)\s*(?P<dev>[^/\s]+)/(?P<port>\d+):?\s*(?P<rest>.*)$")


def parse_rdma_link(lines: Iterable[str]) -> tuple[RdmaLink, ...]:
    out: list[RdmaLink] = []
    for line in lines:
        m = _LINK.match(line.strip())
        if not m:
            continue
        tokens = m.group("rest").split()
        kv = {tokens[i]: tokens[i + 1] for i in range(0, len(tokens) - 1)}
        out.append(
            RdmaLink(
                device=m.group("dev"),
                port=int(m.group("port")),
                state=kv.get("state"),
                physical_state=kv.get("physical_state"),
                netdev=kv.get("netdev"),
                link_layer=kv.get("link_layer"),
            )
        )
    return tuple(out)


_IB2NET = re.compile(r"^(?P<dev>\S+) port (?P<port>\d+) ==> (?P<net>\S+) \((?P<state>\w+)\)")


def parse_ibdev2netdev(lines: Iterable[str]) -> tuple[IbNetdev, ...]:
    out: list[IbNetdev] = []
    for line in lines:
        m = _IB2NET.match(line.strip())
        if m:
            out.append(
                IbNetdev(
                    m.group("dev"),
                    int(m.group("port")),
                    m.group("net"),
                    m.group("state").lower() == "up",
                )
            )
    return tuple(out)


_PCI = re.compile(
    # `<BUS_ID_3>`: a slot in a sanitized bundle (runbook/report/sanitize.py)
    r"^(?P<slot>(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]|<BUS_ID_\d+>)\s+"
    r"(?P<cls>[^\[:]+?)(?: \[(?P<cid>[0-9a-fA-F]{4})\])?: (?P<desc>.*?)"
    r"(?: \[(?P<vid>[0-9a-fA-F]{4}):(?P<did>[0-9a-fA-F]{4})\])?(?: \(rev (?P<rev>[0-9a-fA-F]+)\))?"
    r"\s*$"
)


def parse_lspci(lines: Iterable[str]) -> PciFacts:
    rdma: list[PciDevice] = []
    eth: list[PciDevice] = []
    gpus: list[PciDevice] = []
    for line in lines:
        m = _PCI.match(line.strip())
        if not m:
            continue
        dev = PciDevice(
            slot=m.group("slot"),
            cls=m.group("cls").strip(),
            class_id=m.group("cid"),
            vendor=m.group("desc"),
            vendor_id=(m.group("vid") or "").lower() or None,
            device_id=(m.group("did") or "").lower() or None,
            rev=m.group("rev"),
        )
        cls = dev.cls.lower()
        desc = dev.vendor.lower()
        mellanox = dev.vendor_id == "15b3" or "mellanox" in desc or "connectx" in desc
        if "infiniband" in cls or (mellanox and ("ethernet" in cls or "network" in cls)):
            rdma.append(dev)
        elif "ethernet" in cls or "network controller" in cls:
            eth.append(dev)
        if (dev.vendor_id == "10de" or "nvidia" in desc) and (
            "3d controller" in cls or "vga" in cls or dev.class_id in ("0300", "0302")
        ):
            gpus.append(dev)
    return PciFacts(tuple(rdma), tuple(eth), tuple(gpus))


def _ls_facts(res: Any) -> dict[str, Any]:
    if not is_collected(res):
        return {"collected": False}
    if says_absent(res):
        return {"collected": True, "present": False, "entries": []}
    if res.exited not in (0, None):
        return {"collected": True, "present": None, "entries": [], "rc": res.exited}
    listing = parse_ls(res.lines())
    return {"collected": True, "present": True, **to_jsonable(listing)}


@register("rdma", "/dev/infiniband, /sys/class/infiniband, rdma link, ibdev2netdev, lspci")
def rdma_facts(files: Files, context: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    out["dev_infiniband"] = _ls_facts(files.get(F_DEV))
    out["sys_class_infiniband"] = _ls_facts(files.get(F_SYS))
    links: tuple[RdmaLink, ...] = ()
    res = files.get(F_LINK)
    if is_collected(res) and res.exited in (0, None):
        links = parse_rdma_link(res.lines())
        out["rdma_link"] = {"collected": True, "links": to_jsonable(links)}
    else:
        out["rdma_link"] = {"collected": False}
    nets: tuple[IbNetdev, ...] = ()
    res = files.get(F_IB2NET)
    if is_collected(res) and res.exited in (0, None):
        nets = parse_ibdev2netdev(res.lines())
        out["ibdev2netdev"] = {"collected": True, "mappings": to_jsonable(nets)}
    else:
        out["ibdev2netdev"] = {"collected": False}
    pci: PciFacts | None = None
    res = files.get(F_LSPCI)
    if is_collected(res):
        # `lspci | grep` exits 1 when nothing matched: that is an empty result, not a failure
        pci = parse_lspci(res.lines()) if res.exited in (0, 1, None) else None
    out["lspci"] = {"collected": pci is not None, **(to_jsonable(pci) if pci else {})}

    devices: list[str] = list(out["sys_class_infiniband"].get("entries", []))
    for name in [link.device for link in links] + [n.device for n in nets]:
        if name not in devices:
            devices.append(name)
    out["devices"] = devices
    out["active_ports"] = [f"{link.device}/{link.port}" for link in links if link.active] + [
        f"{n.device}/{n.port}"
        for n in nets
        if n.up and not any(link.device == n.device and link.port == n.port for link in links)
    ]
    out["nics"] = [to_jsonable(d) for d in pci.rdma_nics] if pci else []
    out["gpus_on_pci"] = len(pci.gpus) if pci else None
    dev = out["dev_infiniband"]
    uverbs = any(e.startswith("uverbs") for e in dev.get("entries", []))
    out["uverbs"] = uverbs if dev.get("collected") else None
    out["usable"] = bool(out["active_ports"]) and (uverbs or not dev.get("collected"))
    out["collected"] = any(
        out[k]["collected"]
        for k in ("dev_infiniband", "sys_class_infiniband", "rdma_link", "ibdev2netdev", "lspci")
    )
    return out
