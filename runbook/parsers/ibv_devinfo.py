"""What a multi-node collective test must hold fixed, read from its evidence (pure): the
nodes, the NICs NCCL used, the NCCL version of every rank, and each HCA port's MTU and GIDs
(`ibv_devinfo -v`)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

_HCA = re.compile(r"^\s*hca_id:\s*(\S+)")
_PORT = re.compile(r"^\s*port:\s*(\d+)")
_ACTIVE_MTU = re.compile(r"^\s*active_mtu:\s*(\d+)")
_LINK = re.compile(r"^\s*link_layer:\s*(\S+)")
_STATE = re.compile(r"^\s*state:\s*(\S+)")
_GID = re.compile(r"^\s*GID\[\s*(\d+)\]:\s*([0-9a-fA-F:.]+)(?:,\s*(.*))?$")


@dataclass(frozen=True)
class HcaPort:
    device: str
    port: int
    state: str | None = None
    active_mtu: int | None = None
    link_layer: str | None = None
    #: GID index → "address (type)"
    gids: dict[int, str] = field(default_factory=dict)


def parse_ibv_devinfo(lines: Iterable[str]) -> tuple[HcaPort, ...]:
    """`ibv_devinfo -v`: one entry per (device, port)."""
    ports: list[HcaPort] = []
    device: str | None = None
    current: dict[str, object] | None = None

    def flush() -> None:
        if current is not None and device is not None:
            ports.append(
                HcaPort(
                    device=device,
                    port=int(str(current["port"])),
                    state=current.get("state"),  # type: ignore[arg-type]
                    active_mtu=current.get("mtu"),  # type: ignore[arg-type]
                    link_layer=current.get("link"),  # type: ignore[arg-type]
                    gids=dict(current.get("gids") or {}),  # type: ignore[call-overload]
                )
            )

    for raw in lines:
        m = _HCA.match(raw)
        if m:
            flush()
            device, current = m.group(1), None
            continue
        m = _PORT.match(raw)
        if m and device is not None:
            flush()
            current = {"port": m.group(1), "gids": {}}
            continue
        if current is None:
            continue
        if m := _STATE.match(raw):
            current["state"] = m.group(1)
        elif m := _ACTIVE_MTU.match(raw):
            current["mtu"] = int(m.group(1))
        elif m := _LINK.match(raw):
            current["link"] = m.group(1)
        elif m := _GID.match(raw):
            kind = f" ({m.group(3).strip()})" if m.group(3) else ""
            gids = current["gids"]
            assert isinstance(gids, dict)
            gids[int(m.group(1))] = m.group(2) + kind
    flush()
    return tuple(ports)


def fixed_set_report(
    *,
    requested_nodes: int,
    requested_hosts: list[str],
    requested_nics: list[str],
    requested_version: str | None,
    gid_index: str | None,
    seen_hosts: list[str],
    seen_nnodes: int | None,
    ib_devices: list[str],
    versions: list[str],
    ports: tuple[HcaPort, ...],
) -> tuple[dict[str, object], list[str]]:
    """The fixed set as the report states it, and what of it the runs did not hold."""
    problems: list[str] = []
    spanned = max(len(seen_hosts), seen_nnodes or 0)
    if spanned < requested_nodes:
        problems.append(
            f"the test ran on {spanned or 1} node(s) of {requested_nodes}: single-node "
            "success does not prove cross-node health"
        )
    if requested_hosts and sorted(set(seen_hosts)) != sorted(set(requested_hosts)):
        problems.append(
            f"ranks ran on {', '.join(seen_hosts) or 'unknown hosts'}, not the fixed set "
            f"{', '.join(requested_hosts)}"
        )
    devices = sorted({d.split(":")[0] for d in ib_devices})
    if requested_nics:
        stray = [d for d in devices if d not in requested_nics]
        if stray or not devices:
            problems.append(
                f"NCCL used {', '.join(devices) or 'no IB device'}, "
                f"not the fixed NICs {', '.join(requested_nics)}"
            )
    if len(versions) > 1:
        problems.append(f"ranks ran different NCCL versions: {', '.join(versions)}")
    if requested_version and versions and any(v != requested_version for v in versions):
        problems.append(f"NCCL {', '.join(versions)}, not the fixed {requested_version}")
    used = [p for p in ports if not devices or p.device in devices]
    mtus = sorted({p.active_mtu for p in used if p.active_mtu is not None})
    if len(mtus) > 1:
        problems.append(f"the NICs' active MTUs differ: {', '.join(map(str, mtus))}")
    gids: dict[str, str] = {}
    if gid_index not in (None, ""):
        if re.fullmatch(r"[0-9]{1,6}", str(gid_index)):
            index = int(str(gid_index))
            for p in used:
                if index in p.gids:
                    gids[f"{p.device}/{p.port}"] = p.gids[index]
        else:  # `--var ib_gid_index=three`: say so, rather than fail the stage
            problems.append(f"NCCL_IB_GID_INDEX {gid_index!r} is not a GID index")
    report: dict[str, object] = {
        "nodes": requested_nodes,
        "hosts": sorted(set(seen_hosts)),
        "requested_hosts": requested_hosts,
        "nics": devices,
        "requested_nics": requested_nics,
        "nccl_versions": versions,
        "mtu": mtus,
        "gid_index": gid_index if gid_index not in (None, "") else None,
        "gids": gids,
    }
    return report, problems
