"""`nvidia-smi` in its several shapes: `-L`, the `--query-gpu` CSV, `-q` (ECC, retired pages,
remapped rows, recovery action), `topo -m`, `topo -p2p r|w` and `nvlink --status`; the exit
codes that mean the driver is not loaded (9) or a GPU fell off the bus (15); and, in any of its
outputs (plain `nvidia-smi` included), NVML's word that it cannot reach a GPU
("Unable to determine the device handle for GPU…: Unknown Error | GPU is lost…"), which is
often the only word of a lost GPU when no exit code or kernel log was kept.

`-q` is parsed as an indentation tree, so the ECC layout of every generation works: Volta's
`Single Bit`/`Double Bit` blocks with `Total`, Ampere+'s `SRAM/DRAM Uncorrectable`; the
`Aggregate Uncorrectable SRAM Sources` breakdown is not counted twice.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from runbook.parsers._common import (
    Evidence,
    clip,
    evidence_lines,
    is_collected,
    iter_lines,
    to_jsonable,
)
from runbook.parsers.registry import Files, register

#: the probes' files: plain `nvidia-smi` (its table), `-L`, `--query-gpu` CSV, `-q` (every
#: detail of each GPU), `topo -m`, `topo -p2p r` and `w`, `nvlink --status`
F_PLAIN = "nvidia-smi.txt"
F_LIST = "nvidia-smi-L.txt"
F_QUERY = "nvidia-smi-query.csv"
F_DETAILS = "nvidia-smi-q.txt"
F_TOPOLOGY = "nvidia-smi-topo-m.txt"
F_P2P_READ = "nvidia-smi-topo-p2p-r.txt"
F_P2P_WRITE = "nvidia-smi-topo-p2p-w.txt"
F_NVLINK = "nvidia-smi-nvlink.txt"
FILES = (F_PLAIN, F_LIST, F_QUERY, F_DETAILS, F_TOPOLOGY, F_P2P_READ, F_P2P_WRITE, F_NVLINK)

#: nvidia-smi's documented exit codes
EXIT_CODES = {
    0: "success",
    2: "invalid argument or flag",
    3: "the requested operation is not available on the target device",
    4: "the current user does not have permission to perform this operation",
    6: "a query to find an object was unsuccessful",
    8: "a device's external power cables are not properly attached",
    9: "the NVIDIA driver is not loaded",
    10: "the NVIDIA kernel detected an interrupt issue with a GPU",
    12: "the NVML shared library could not be found or loaded",
    13: "the local version of NVML does not implement this function",
    14: "the infoROM is corrupted",
    15: "the GPU has fallen off the bus or has otherwise become inaccessible",
    255: "other error or internal driver error",
}


@dataclass(frozen=True)
class ListedGpu:
    index: int
    name: str
    uuid: str | None
    mig_devices: int = 0


@dataclass(frozen=True)
class QueryGpu:
    index: int | None
    name: str | None
    uuid: str | None
    bus_id: str | None
    driver_version: str | None
    pstate: str | None
    temperature_c: int | None
    memory_used_mib: int | None
    memory_total_mib: int | None
    compute_mode: str | None


@dataclass(frozen=True)
class GpuDetails:
    """One GPU's block of `nvidia-smi -q`."""

    bus_id: str
    product_name: str | None = None
    uuid: str | None = None
    ecc_mode: str | None = None
    ecc_volatile_uncorrectable: int | None = None
    ecc_aggregate_uncorrectable: int | None = None
    ecc_volatile_correctable: int | None = None
    ecc_aggregate_correctable: int | None = None
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    recovery_action: str | None = None
    reset_required: bool | None = None
    drain_and_reset_recommended: bool | None = None
    #: the lines that show a fault (non-zero uncorrectable, pending, failure, an action)
    anomalies: tuple[Evidence, ...] = ()

    @property
    def faulty(self) -> bool:
        return bool(self.anomalies)


@dataclass(frozen=True)
class DetailsFacts:
    """`nvidia-smi -q`: the header's versions and every GPU's block."""

    driver_version: str | None
    cuda_version: str | None
    attached_gpus: int | None
    gpus: tuple[GpuDetails, ...]


@dataclass(frozen=True)
class TopoFacts:
    devices: tuple[str, ...]
    gpus: tuple[str, ...]
    nics: tuple[str, ...]
    #: "GPU0-GPU1" -> "NODE" (each unordered pair once)
    links: dict[str, str]
    nvlink_pairs: int
    cpu_affinity: dict[str, str] = field(default_factory=dict)
    numa_affinity: dict[str, str] = field(default_factory=dict)
    legend: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class P2PFailure(Evidence):
    a: str
    b: str
    status: str


@dataclass(frozen=True)
class P2PFacts:
    gpus: tuple[str, ...]
    all_ok: bool | None
    failing: tuple[P2PFailure, ...]
    statuses: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class NvLink:
    gpu: int
    link: int
    speed_gbps: float | None
    active: bool


@dataclass(frozen=True)
class NvLinkFacts:
    gpus: int
    links: tuple[NvLink, ...]
    active_links: int
    present: bool


@dataclass(frozen=True, kw_only=True)
class UnreachableGpu(Evidence):
    """A GPU NVML could not open: its bus id (lower case, as lspci and the kernel print it),
    NVML's reason, and whether that reason means the GPU is lost until a reset or reboot."""

    bus_id: str
    reason: str
    lost: bool


# --- a GPU NVML cannot reach -------------------------------------------------------------------

#: "Unable to determine the device handle for GPU0000:A1:00.0: Unknown Error", and the older
#: "… for GPU 0000:02:00.0: GPU is lost. …" and newer "… for GPU0: 0000:01:00.0: …" shapes
_NO_HANDLE = re.compile(
    r"Unable to determine the device handle for gpu\s*(?:\d+:\s+)?"
    # `<BUS_ID_3>`: the bus ID in a sanitized bundle (runbook/report/sanitize.py)
    r"(?P<bus>(?:[0-9a-f]{4,8}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]|<BUS_ID_\d+>)"
    r"\s*:\s*(?P<reason>.*?)\s*$",
    re.IGNORECASE,
)
#: NVML's reasons that mean the GPU is gone until a reset or a reboot: NVML_ERROR_GPU_IS_LOST,
#: NVML_ERROR_UNKNOWN (what a GPU that fell off the bus returns on most drivers) and
#: NVML_ERROR_RESET_REQUIRED; others (Insufficient Permissions, Not Found, …) say nothing of
#: the GPU's health
_LOST_REASON = re.compile(r"GPU is lost|Unknown Error|requires reset", re.IGNORECASE)
_NO_DEVICES = re.compile(r"^\s*No devices were found\s*$", re.IGNORECASE)


def _bus_id(text: str) -> str:
    """A bus ID in lower case; a sanitized bundle's placeholder as it is."""
    return text if text.startswith("<") else text.lower()


def parse_unreachable(lines: Iterable[str], *, source: str = F_PLAIN) -> tuple[UnreachableGpu, ...]:
    """Each GPU an nvidia-smi output says NVML could not get a handle for, with its line."""
    found = []
    for n, line in enumerate(lines, 1):
        m = _NO_HANDLE.search(line) if "device handle" in line else None
        if m:
            reason = m["reason"]
            found.append(
                UnreachableGpu(
                    source=source, line=n, time=None, text=clip(line), bus_id=_bus_id(m["bus"]),
                    reason=reason, lost=bool(_LOST_REASON.search(reason)),
                )
            )  # fmt: skip
    return tuple(found)


def _outputs(files: Files) -> Iterable[tuple[str, str]]:
    """(source, text) of every collected nvidia-smi probe's stdout and stderr (`NAME.err`),
    whatever its exit: a probe that failed on a lost GPU says which GPU in its output."""
    for name in sorted(files):
        result = files[name]
        if name.startswith("nvidia-smi") and is_collected(result):
            yield name, result.stdout or ""
            yield f"{name}.err", result.stderr or ""


def _unreachable_facts(files: Files) -> dict[str, Any]:
    """The GPUs NVML could not reach (any probe, plain nvidia-smi included) and the lines that
    say nvidia-smi found no device at all."""
    unreachable: list[UnreachableGpu] = []
    no_devices: list[dict[str, Any]] = []
    for source, text in _outputs(files):
        if "device handle" in text:
            unreachable.extend(parse_unreachable(iter_lines(text), source=source))
        if "No devices" in text:
            no_devices += evidence_lines(text, source, _NO_DEVICES.search, limit=5)
    return {
        "unreachable": [to_jsonable(u) for u in unreachable[:16]],
        "no_devices": no_devices,
    }


# --- -L -----------------------------------------------------------------------------------------

_LIST_GPU = re.compile(r"^GPU (\d+): (.*?)(?: \(UUID: ([^)]+)\))?\s*$")
_MIG = re.compile(r"^\s+MIG \S+\s+Device\s+\d+:")


def parse_list(lines: Iterable[str]) -> tuple[ListedGpu, ...]:
    gpus: list[ListedGpu] = []
    for line in lines:
        m = _LIST_GPU.match(line.rstrip())
        if m:
            gpus.append(ListedGpu(int(m.group(1)), m.group(2).strip(), m.group(3)))
        elif _MIG.match(line) and gpus:
            last = gpus[-1]
            gpus[-1] = ListedGpu(last.index, last.name, last.uuid, last.mig_devices + 1)
    return tuple(gpus)


# --- --query-gpu CSV ----------------------------------------------------------------------------


def _num(value: str | None) -> int | None:
    if value is None:
        return None
    m = re.match(r"^\s*(-?\d+)", value)
    return int(m.group(1)) if m else None


def _na(value: str | None) -> str | None:
    if value is None:
        return None
    text = value.strip()
    return None if text in ("", "N/A", "[N/A]", "[Not Supported]", "[Unknown Error]") else text


def parse_query(lines: Iterable[str]) -> tuple[QueryGpu, ...]:
    """The DESIGN §4 columns: index, name, uuid, pci.bus_id, driver_version, pstate,
    temperature.gpu, memory.used, memory.total, compute_mode (with or without a header)."""
    out: list[QueryGpu] = []
    for line in lines:
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 10 or cells[0].startswith("index"):
            continue
        if len(cells) > 10:  # a comma inside the name
            cells = [cells[0], ", ".join(cells[1 : len(cells) - 8]), *cells[-8:]]
        out.append(
            QueryGpu(
                index=_num(cells[0]),
                name=_na(cells[1]),
                uuid=_na(cells[2]),
                bus_id=_na(cells[3]),
                driver_version=_na(cells[4]),
                pstate=_na(cells[5]),
                temperature_c=_num(cells[6]),
                memory_used_mib=_num(cells[7]),
                memory_total_mib=_num(cells[8]),
                compute_mode=_na(cells[9]),
            )
        )
    return tuple(out)


# --- -q -----------------------------------------------------------------------------------------

# `<BUS_ID_3>`: a bus ID in a sanitized bundle (runbook/report/sanitize.py)
_DETAILS_GPU = re.compile(
    r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]|<BUS_ID_\d+>)\s*$"
)
_DETAILS_KV = re.compile(r"^(\s*)(\S.*?)\s+:\s?(.*)$")
_DETAILS_SECTION = re.compile(r"^(\s*)(\S.*?)\s*$")


def _yes(value: str | None) -> bool | None:
    text = _na(value)
    if text is None:
        return None
    return {"yes": True, "no": False}.get(text.lower())


class _GpuBlock:
    """One GPU's block of `-q` being read: its fields, the ECC counts, the anomalies."""

    def __init__(self, bus_id: str) -> None:
        self.bus_id = bus_id
        #: GpuDetails fields read so far
        self.values: dict[str, Any] = {}
        self.sums: dict[str, int] = {}
        self.dbe_totals: dict[str, int] = {}
        self.sbe_totals: dict[str, int] = {}
        self.anomalies: list[Evidence] = []

    def build(self) -> GpuDetails:
        values = dict(self.values)
        for scope in ("volatile", "aggregate"):
            uncorrectable = self.dbe_totals.get(scope, self.sums.get(f"{scope}_unc"))
            correctable = self.sbe_totals.get(scope, self.sums.get(f"{scope}_cor"))
            values[f"ecc_{scope}_uncorrectable"] = uncorrectable
            values[f"ecc_{scope}_correctable"] = correctable
        return GpuDetails(bus_id=self.bus_id, anomalies=tuple(self.anomalies), **values)


def parse_q(lines: Iterable[str], *, source: str = F_DETAILS) -> DetailsFacts:
    top_level: dict[str, str] = {}
    gpus: list[GpuDetails] = []
    gpu: _GpuBlock | None = None
    stack: list[tuple[int, str]] = []
    for n, raw in enumerate(lines, 1):
        line = raw.rstrip()
        if not line.strip() or line.strip().startswith("="):
            continue
        header = _DETAILS_GPU.match(line)
        if header:
            if gpu is not None:
                gpus.append(gpu.build())
            gpu, stack = _GpuBlock(header.group(1)), []
            continue
        pair = _DETAILS_KV.match(line)
        if pair:
            indent, key, value = len(pair.group(1)), pair.group(2).strip(), pair.group(3).strip()
        else:
            section = _DETAILS_SECTION.match(line)
            if not section:
                continue
            indent, key, value = len(section.group(1)), section.group(2).strip(), None
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = [s for _, s in stack]
        if value is None:
            stack.append((indent, key))
            continue
        if gpu is None:
            top_level[key] = value
            continue
        ev = Evidence(source=source, line=n, time=None, text=clip(raw))
        _q_leaf(gpu, path, key, value, ev)
    if gpu is not None:
        gpus.append(gpu.build())
    return DetailsFacts(
        driver_version=_na(top_level.get("Driver Version")),
        cuda_version=_na(top_level.get("CUDA Version")),
        attached_gpus=_num(top_level.get("Attached GPUs")),
        gpus=tuple(gpus),
    )


def _q_leaf(gpu: _GpuBlock, path: list[str], key: str, value: str, ev: Evidence) -> None:
    """One `key : value` line of a GPU's block, read by the section it is in (path[0])."""
    if not path:
        _q_gpu_line(gpu, key, value, ev)
        return
    reader = _DETAILS_SECTIONS.get(path[0])
    if reader is not None:
        reader(gpu, path, key, value, ev)


def _q_gpu_line(gpu: _GpuBlock, key: str, value: str, ev: Evidence) -> None:
    """A line of the GPU itself: its product name, UUID, recovery action."""
    if key == "Product Name":
        gpu.values["product_name"] = _na(value)
    elif key == "GPU UUID":
        gpu.values["uuid"] = _na(value)
    elif key == "GPU Recovery Action":
        action = _na(value)
        gpu.values["recovery_action"] = action
        if action and action.lower() != "none":
            gpu.anomalies.append(ev)


def _q_ecc_mode(gpu: _GpuBlock, path: list[str], key: str, value: str, ev: Evidence) -> None:
    if key == "Current":
        gpu.values["ecc_mode"] = _na(value)


def _q_ecc_errors(gpu: _GpuBlock, path: list[str], key: str, value: str, ev: Evidence) -> None:
    """`ECC Errors` > Volatile|Aggregate > …: Volta's `Double Bit`/`Single Bit` blocks (their
    `Total`), Ampere+'s `SRAM/DRAM Uncorrectable|Correctable` (summed); the `… Sources`
    breakdown repeats those and is not counted."""
    if len(path) < 2 or any("Sources" in p for p in path):
        return
    scope = path[1].lower()
    count = _num(value)
    if scope not in ("volatile", "aggregate") or count is None:
        return
    kind = " ".join([*path[2:], key])
    if "Double Bit" in kind or "Single Bit" in kind:
        if key == "Total":
            totals = gpu.dbe_totals if "Double Bit" in kind else gpu.sbe_totals
            totals[scope] = count
    elif "Uncorrectable" in kind:
        gpu.sums[f"{scope}_unc"] = gpu.sums.get(f"{scope}_unc", 0) + count
    elif "Correctable" in kind:
        gpu.sums[f"{scope}_cor"] = gpu.sums.get(f"{scope}_cor", 0) + count
    uncorrectable = "Double Bit" in kind or "Uncorrectable" in kind
    if count and uncorrectable and (key == "Total" or "Double Bit" not in kind):
        gpu.anomalies.append(ev)


def _q_retired_pages(gpu: _GpuBlock, path: list[str], key: str, value: str, ev: Evidence) -> None:
    """`Retired Pages`: single and double bit ECC pages, and pending."""
    label = " ".join([*path[1:], key])
    if label.startswith("Single Bit ECC"):
        gpu.values["retired_pages_sbe"] = _num(value)
    elif label.startswith("Double Bit ECC"):
        gpu.values["retired_pages_dbe"] = _num(value)
        if _num(value):
            gpu.anomalies.append(ev)
    elif label.startswith("Pending"):
        gpu.values["retired_pages_pending"] = _yes(value)
        if _yes(value):
            gpu.anomalies.append(ev)


#: `Remapped Rows` keys -> the field, and whether `Yes` is an anomaly
_REMAPPED_ROWS = {
    "Correctable Error": ("remapped_rows_correctable", False),
    "Uncorrectable Error": ("remapped_rows_uncorrectable", False),
    "Pending": ("remap_pending", True),
    "Remapping Failure Occurred": ("remap_failure", True),
}


def _q_remapped_rows(gpu: _GpuBlock, path: list[str], key: str, value: str, ev: Evidence) -> None:
    """`Remapped Rows`: the row counts, and a pending remap or a failed one."""
    entry = _REMAPPED_ROWS.get(key)
    if len(path) != 1 or entry is None:
        return
    name, flag = entry
    if not flag:
        gpu.values[name] = _num(value)
        return
    gpu.values[name] = _yes(value)
    if _yes(value):
        gpu.anomalies.append(ev)


def _q_reset_status(gpu: _GpuBlock, path: list[str], key: str, value: str, ev: Evidence) -> None:
    """`GPU Reset Status`: a reset required, or a drain and reset recommended."""
    if key == "Reset Required":
        gpu.values["reset_required"] = _yes(value)
    elif key.startswith("Drain and Reset"):
        gpu.values["drain_and_reset_recommended"] = _yes(value)
    if _yes(value):
        gpu.anomalies.append(ev)


_DETAILS_SECTIONS = {
    "ECC Mode": _q_ecc_mode,
    "ECC Errors": _q_ecc_errors,
    "Retired Pages": _q_retired_pages,
    "Remapped Rows": _q_remapped_rows,
    "GPU Reset Status": _q_reset_status,
}


# --- topo -m ------------------------------------------------------------------------------------

_DEVICE = re.compile(r"^(GPU\d+|NIC\d+|mlx\d+_\d+|[a-z][a-z0-9]*_\d+|NVMe\d+)$")
_LEGEND = re.compile(r"^\s*(X|SYS|NODE|PHB|PXB|PIX|SOC|NV#|PSB|NIC\d+)\s*[=:]\s*(.*)$")


def parse_topo(lines: Iterable[str]) -> TopoFacts:
    header: list[str] = []
    devices: list[str] = []
    extra_cols: list[str] = []
    matrix: dict[str, list[str]] = {}
    cpu: dict[str, str] = {}
    numa: dict[str, str] = {}
    legend: dict[str, str] = {}
    nic_names: dict[str, str] = {}
    in_legend = False
    for raw in lines:
        line = raw.rstrip()
        if not line.strip():
            continue
        if line.strip().startswith(("Legend", "NIC Legend")):
            in_legend = True
            continue
        if in_legend:
            m = _LEGEND.match(line)
            if m:
                if m.group(1).startswith("NIC"):
                    nic_names[m.group(1)] = m.group(2).strip()
                else:
                    legend[m.group(1)] = m.group(2).strip()
            continue
        if not header:
            cols = [c.strip() for c in re.split(r"\t+", line.strip()) if c.strip()]
            if len(cols) == 1:
                cols = line.split()
            if cols and _DEVICE.match(cols[0]):
                header = cols
                devices = [c for c in cols if _DEVICE.match(c)]
                extra_cols = [c for c in cols if not _DEVICE.match(c)]
            continue
        tokens = line.split()
        if not tokens or tokens[0] not in devices:
            continue
        name = tokens[0]
        values = tokens[1 : 1 + len(devices)]
        matrix[name] = values
        rest = tokens[1 + len(devices) :]
        for column, value in zip(extra_cols, rest, strict=False):
            if column.startswith("CPU"):
                cpu[name] = value
            elif column.startswith("NUMA"):
                numa[name] = value
    links: dict[str, str] = {}
    for i, a in enumerate(devices):
        row = matrix.get(a, [])
        for j in range(i + 1, len(devices)):
            if j < len(row):
                links[f"{a}-{devices[j]}"] = row[j]
    gpus = tuple(d for d in devices if d.startswith("GPU"))
    nics = tuple(nic_names.get(d, d) for d in devices if not d.startswith("GPU"))
    nvlink_pairs = sum(
        1
        for pair, link in links.items()
        if link.startswith("NV") and all(end.startswith("GPU") for end in pair.split("-"))
    )
    return TopoFacts(
        devices=tuple(devices),
        gpus=gpus,
        nics=nics,
        links=links,
        nvlink_pairs=nvlink_pairs,
        cpu_affinity=cpu,
        numa_affinity=numa,
        legend=legend,
    )


# --- topo -p2p ----------------------------------------------------------------------------------


def parse_p2p(lines: Iterable[str], *, source: str = F_P2P_READ) -> P2PFacts:
    gpus: list[str] = []
    failing: list[P2PFailure] = []
    statuses: dict[str, int] = {}
    seen_row = False
    for n, raw in enumerate(lines, 1):
        tokens = raw.split()
        if not tokens:
            continue
        if tokens[0].startswith("Legend"):
            break
        if not gpus:
            if all(t.startswith("GPU") for t in tokens):
                gpus = tokens
            continue
        if tokens[0] not in gpus:
            continue
        seen_row = True
        a = tokens[0]
        for j, status in enumerate(tokens[1 : 1 + len(gpus)]):
            b = gpus[j]
            if a == b or status == "X":
                continue
            statuses[status] = statuses.get(status, 0) + 1
            if status != "OK":
                failing.append(
                    P2PFailure(
                        source=source, line=n, time=None, text=clip(raw), a=a, b=b, status=status
                    )
                )
    return P2PFacts(
        gpus=tuple(gpus),
        all_ok=(not failing) if seen_row else None,
        failing=tuple(failing),
        statuses=statuses,
    )


# --- nvlink --status ----------------------------------------------------------------------------

_NV_LINK = re.compile(r"^\s+Link (\d+): (.*)$")


def parse_nvlink(lines: Iterable[str]) -> NvLinkFacts:
    gpu = -1
    gpus = 0
    links: list[NvLink] = []
    for raw in lines:
        m = _LIST_GPU.match(raw.rstrip())
        if m:
            gpu, gpus = int(m.group(1)), gpus + 1
            continue
        link = _NV_LINK.match(raw)
        if link and gpu >= 0:
            value = link.group(2).strip()
            rate = re.match(r"^([\d.]+) GB/s", value)
            speed = float(rate.group(1)) if rate else None
            links.append(
                NvLink(gpu, int(link.group(1)), speed, active=speed is not None and speed > 0)
            )
    active = sum(1 for link in links if link.active)
    return NvLinkFacts(gpus=gpus, links=tuple(links), active_links=active, present=active > 0)


# --- adapter ------------------------------------------------------------------------------------


def _exit(files: Files) -> tuple[int | None, str | None]:
    """The most telling non-zero exit among the nvidia-smi files (15 > 9 > others)."""
    names = [k for k in files if k.startswith("nvidia-smi")]
    codes = [
        files[k].exited
        for k in names
        if is_collected(files[k]) and files[k].exited not in (0, None)
    ]
    if not codes:
        return None, None
    pick = 15 if 15 in codes else 9 if 9 in codes else codes[0]
    return pick, EXIT_CODES.get(pick or -1, "unknown exit code")


def _stdout(files: Files, name: str) -> str | None:
    """What a file's probe printed, when it was collected and exited 0."""
    result = files.get(name)
    return result.stdout if is_collected(result) and result.exited in (0, None) else None


def _exit_facts(files: Files) -> dict[str, Any]:
    """The telling exit code (driver not loaded, GPU lost) and where it was read."""
    code, meaning = _exit(files)
    listed_any = any(_stdout(files, n) is not None for n in (F_LIST, F_QUERY, F_DETAILS))
    return {
        # `nvidia-smi: command not found` (127): not evidence of the GPUs, but evidence that
        # the tool, and so most likely the driver, is not installed
        "not_installed": not listed_any
        and any(
            name.startswith("nvidia-smi")
            and result is not None
            and result.collected
            and result.exited == 127
            for name, result in files.items()
        ),
        "exit_code": code,
        "exit_meaning": meaning,
        "driver_loaded": False if code == 9 else (True if listed_any else None),
        "gpu_lost": code == 15,
        # where the exit code was read: the probe's `.rc` file (DESIGN §4), with what it printed
        "exit_evidence": [
            {
                "source": f"{name}.rc",
                "line": 1,
                "time": None,
                "text": f"exit {files[name].exited}: "
                + " ".join((files[name].stderr or files[name].stdout or "").split())[:200],
            }
            for name in sorted(files)
            if is_collected(files[name]) and files[name].exited == code and code is not None
        ][:5],
    }


def _q_facts(text: str | None, driver_version: str | None) -> dict[str, Any]:
    """`-q`: every GPU's details, the ECC totals and what shows a fault."""
    if text is None:
        return {"q": {"collected": False}}
    q = parse_q(iter_lines(text))
    return {
        "q": {"collected": True, **to_jsonable(q)},
        "driver_version": driver_version or q.driver_version,
        "uncorrectable_ecc_volatile": sum(g.ecc_volatile_uncorrectable or 0 for g in q.gpus),
        "uncorrectable_ecc_aggregate": sum(g.ecc_aggregate_uncorrectable or 0 for g in q.gpus),
        "remap_pending": any(g.remap_pending for g in q.gpus),
        "remap_failure": any(g.remap_failure for g in q.gpus),
        "retired_pages_pending": any(g.retired_pages_pending for g in q.gpus),
        "recovery_actions": [
            {"bus_id": g.bus_id, "action": g.recovery_action}
            for g in q.gpus
            if g.recovery_action and g.recovery_action.lower() != "none"
        ],
        "faulty_gpus": [g.bus_id for g in q.gpus if g.faulty],
        "anomalies": [to_jsonable(e) for g in q.gpus for e in g.anomalies],
    }


def _p2p_facts(files: Files) -> dict[str, Any]:
    """`topo -p2p r` and `w`: each matrix, whether every pair is OK, the failing pairs."""
    out: dict[str, Any] = {}
    p2p: dict[str, P2PFacts] = {}
    for key, name in (("p2p_read", F_P2P_READ), ("p2p_write", F_P2P_WRITE)):
        text = _stdout(files, name)
        if text is not None:
            p2p[key] = parse_p2p(iter_lines(text), source=name)
            out[key] = {"collected": True, **to_jsonable(p2p[key])}
        else:
            out[key] = {"collected": False}
    all_ok = [f.all_ok for f in p2p.values()]
    out["p2p_all_ok"] = None if not all_ok or None in all_ok else all(all_ok)
    out["p2p_failing"] = [to_jsonable(x) for f in p2p.values() for x in f.failing]
    return out


@register(
    "nvidia_smi",
    "nvidia-smi, -L/query/-q/topo/p2p/nvlink: GPUs, lost GPUs, ECC, remaps, P2P, links",
)
def nvidia_smi_facts(files: Files, context: Mapping[str, Any]) -> dict[str, Any]:
    out = _exit_facts(files)
    out.update(_unreachable_facts(files))
    lost = [u for u in out["unreachable"] if u["lost"]]
    # a GPU is lost: nvidia-smi exited 15, or NVML said so of a GPU in any probe's output;
    # lost_evidence holds both (the .rc line, the lines naming the GPU)
    out["lost_evidence"] = (out["exit_evidence"] if out["gpu_lost"] else []) + [
        {k: u[k] for k in ("source", "line", "time", "text")} for u in lost
    ]
    out["gpu_lost"] = bool(out["gpu_lost"] or lost)
    out["plain"] = {"collected": is_collected(files.get(F_PLAIN))}
    text = _stdout(files, F_LIST)
    listed = parse_list(iter_lines(text)) if text is not None else ()
    out["list"] = {"collected": text is not None, "gpus": to_jsonable(listed)}
    text = _stdout(files, F_QUERY)
    query = parse_query(iter_lines(text)) if text is not None else ()
    out["query"] = {"collected": text is not None, "gpus": to_jsonable(query)}
    out["gpu_count"] = len(listed) if listed else (len(query) if query else None)
    out["driver_version"] = next((g.driver_version for g in query if g.driver_version), None)
    out.update(_q_facts(_stdout(files, F_DETAILS), out["driver_version"]))
    text = _stdout(files, F_TOPOLOGY)
    out["topo"] = (
        {"collected": True, **to_jsonable(parse_topo(iter_lines(text)))}
        if text is not None
        else {"collected": False}
    )
    out.update(_p2p_facts(files))
    text = _stdout(files, F_NVLINK)
    out["nvlink"] = (
        {"collected": True, **to_jsonable(parse_nvlink(iter_lines(text)))}
        if text is not None
        else {"collected": False}
    )
    out["collected"] = any(is_collected(files.get(name)) for name in FILES)
    return out
