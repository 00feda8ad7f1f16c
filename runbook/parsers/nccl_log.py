"""NCCL debug output (`nccl/*.log`, and the NCCL lines inside `app/*.log`): version, network
chosen (IB or Socket), the transports each channel used across NCCL eras, `NCCL_*` settings
taken from the environment, WARN lines classified, and the `-> N` result codes.

Line prefix: `host:pid:tid [dev] [file.cc:LINE] NCCL INFO|WARN ...`. Transport lines by era:
`Ring 00 : 3[3] -> 2[2] via P2P/IPC` (<= 2.6), `Channel 00 : 0[1a000] -> 1[1b000] via P2P/IPC`
(2.7-2.13), `Channel 00/0 : 8[0] -> 15[7] via P2P/IPC/read` (2.14+), `via NET/IB/0/GDRDMA`,
`via NET/Socket/0`, `via SHM/direct/direct`.

WARN classes: ``shm`` (/dev/shm segment creation), ``ib`` (verbs: ibv_reg_mr, completion
errors), ``socket`` (connect refused/timed out, closed by peer), ``cuda-oom`` (GPU memory),
``host-alloc`` (pinned host memory: cudaHostAlloc), ``cuda`` (other CUDA failures), ``other``.
Result codes: 1 cuda (unhandled cuda error), 2 system, 3 internal, 4 invalid argument,
5 invalid usage, 6 remote, 7 in progress.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from runbook import signatures
from runbook.parsers._common import (
    Counter,
    Evidence,
    TimeRef,
    clip,
    files_under,
    find_time,
    is_collected,
    to_jsonable,
)
from runbook.parsers.registry import Files, register

RESULT_CODES = {
    0: "success",
    1: "unhandled cuda error",
    2: "unhandled system error",
    3: "internal error",
    4: "invalid argument",
    5: "invalid usage",
    6: "remote error",
    7: "in progress",
}


@dataclass(frozen=True, kw_only=True)
class NcclWarn(Evidence):
    category: str
    message: str
    host: str | None = None
    pid: int | None = None
    device: str | None = None
    location: str | None = None
    #: bytes named by the message (segment size, calloc size), when it names one
    size_bytes: int | None = None


@dataclass(frozen=True)
class NcclLogFacts:
    version: str | None
    versions: tuple[str, ...]
    #: "IB" / "Socket" / a plugin's name, from `Using network X` or the NET/ lines
    network: str | None
    ib_no_device: bool
    ib_devices: tuple[str, ...]
    socket_interfaces: tuple[str, ...]
    bootstrap_interfaces: tuple[str, ...]
    env: dict[str, str]
    #: count of channel connections per transport kind ("P2P", "SHM", "NET/IB", "NET/Socket")
    transports: dict[str, int]
    transport_examples: tuple[str, ...]
    warns: tuple[NcclWarn, ...]
    warn_categories: dict[str, int]
    result_codes: dict[str, int]
    first_result_code: int | None
    init_complete_ranks: tuple[int, ...]
    nranks: int | None
    #: nodes the communicator spans (`nNodes N`), None when no line says
    nnodes: int | None
    hosts: tuple[str, ...]
    lines: int
    nccl_lines: int
    totals: dict[str, int] = field(default_factory=dict)


_PREFIX = re.compile(
    r"(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>[^\]]*)\] "
    r"(?:(?P<loc>[\w./-]+:\d+) )?NCCL (?P<level>INFO|WARN|TRACE|ABORT) (?P<msg>.*)$"
)
_BARE = re.compile(r"(?:^|\s)(?:(?P<loc>[\w./-]+:\d+) )?NCCL (?P<level>INFO|WARN) (?P<msg>.*)$")
_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+(?:[+-][\w.]+)?)")
_USING_NET = re.compile(r"Using network (\S+)")
_IB_USING = re.compile(r"NET/IB ?: Using (.*?)(?:; OOB|$)")
_DEV_ENTRY = re.compile(r"\[\d+\]([^\s\[;]+)")
_SOCK_USING = re.compile(r"NET/Socket ?: Using (.*)$")
_BOOTSTRAP = re.compile(r"Bootstrap ?: Using (.*)$")
_ENV = re.compile(r"^(NCCL_\w+) set by environment to (.*?)\.?$")
_ENV_OLD = re.compile(r"^NCCL_(\w+) set to (\S+?)\.?$")
_TRANSPORT = re.compile(r"^(?:Ring|Channel) \d+(?:/\d+)? ?: .*? via (?P<via>\S+)")
_RESULT = re.compile(r"^[\w./-]+:\d+ -> (\d+)\b")
_INIT_COMPLETE = re.compile(r"\brank (\d+) nranks (\d+) .*Init COMPLETE")
#: `comm 0x… rank 0 nRanks 16 nNodes 2 localRanks 8 …` (2.19+) and `nranks 16 … Init START`
_NNODES = re.compile(r"\bnNodes (\d+)")
_NRANKS = re.compile(r"\bn[Rr]anks (\d+)")
_SIZE = re.compile(r"(?:size |to |calloc |alloc )(\d+)(?= bytes|\)|\s*$)")

_HOST_ALLOC = re.compile(r"host alloc|cudaHostAlloc|cudaHostRegister|cuMemHostAlloc", re.I)
#: catalog signature -> the WARN category the runbook's rules read
_WARN_CATEGORY = {
    "shm-exhausted": "shm",
    "host-alloc-failed": "host-alloc",
    "cuda-oom": "cuda-oom",
    "nccl-ib-verbs-failure": "ib",
    "nccl-ib-missing": "ib-missing",
    "socket-no-interface": "socket",
    "socket-connect-failed": "socket",
    "peer-closed": "peer",
    "store-timeout": "timeout",
    "collective-timeout": "timeout",
    "p2p-unsupported": "p2p",
    "cuda-error": "cuda",
    "cuda-uncorrectable-ecc": "gpu-hardware",
    "cuda-gpu-lost": "gpu-hardware",
    "nccl-plugin-probe": "benign",
}


def classify_warn(message: str) -> str:
    """The category of an NCCL WARN message, from the signature catalog."""
    if _HOST_ALLOC.search(message[:4096]):
        return "host-alloc"
    sig = signatures.catalog().classify(message)
    if sig is None:
        return "other"
    return _WARN_CATEGORY.get(sig.id, "other")


def _transport_kind(via: str) -> str:
    parts = via.split("/")
    if parts[0] == "NET" and len(parts) > 1:
        return f"NET/{parts[1]}"
    return parts[0]


@dataclass(frozen=True)
class _Line:
    """An NCCL line taken apart: `host:pid:tid [dev] [file.cc:LINE] NCCL LEVEL message`, or
    the bare `NCCL LEVEL message` (host, pid and device None)."""

    level: str
    msg: str
    location: str | None
    host: str | None = None
    pid: int | None = None
    device: str | None = None


def _split(raw: str) -> _Line | None:
    """The NCCL line `raw` taken apart, or None when it has neither shape."""
    prefixed = _PREFIX.search(raw)
    if prefixed:
        return _Line(
            level=prefixed.group("level"),
            msg=prefixed.group("msg").strip(),
            location=prefixed.group("loc"),
            host=prefixed.group("host"),
            pid=int(prefixed.group("pid")),
            device=prefixed.group("dev"),
        )
    bare = _BARE.search(raw)
    if bare:
        return _Line(level=bare.group("level"), msg=bare.group("msg").strip(),
                     location=bare.group("loc"))  # fmt: skip
    return None


def _add_new(known: list[str], items: Iterable[str]) -> None:
    """Append each of `items` not yet in `known`, in order."""
    for item in items:
        if item not in known:
            known.append(item)


@dataclass
class _NcclLog:
    """What parse_nccl_log has read of one log so far (the fields of NcclLogFacts)."""

    source: str
    ref: TimeRef
    counter: Counter = field(default_factory=Counter)
    versions: list[str] = field(default_factory=list)
    network: str | None = None
    ib_no_device: bool = False
    ib_devices: list[str] = field(default_factory=list)
    socket_interfaces: list[str] = field(default_factory=list)
    bootstrap_interfaces: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    transports: dict[str, int] = field(default_factory=dict)
    transport_examples: list[str] = field(default_factory=list)
    warns: list[NcclWarn] = field(default_factory=list)
    warn_categories: dict[str, int] = field(default_factory=dict)
    result_codes: dict[str, int] = field(default_factory=dict)
    first_result_code: int | None = None
    init_complete_ranks: set[int] = field(default_factory=set)
    nranks: int | None = None
    nnodes: int | None = None
    hosts: list[str] = field(default_factory=list)
    nccl_lines: int = 0

    def add_host(self, host: str | None) -> None:
        if host is not None and host not in self.hosts and len(self.hosts) < 256:
            self.hosts.append(host)

    def facts(self, lines: int) -> NcclLogFacts:
        network = self.network
        if network is None and self.socket_interfaces and not self.ib_devices:
            network = "Socket"
        return NcclLogFacts(
            version=self.versions[0] if self.versions else None,
            versions=tuple(self.versions),
            network=network,
            ib_no_device=self.ib_no_device,
            ib_devices=tuple(self.ib_devices),
            socket_interfaces=tuple(self.socket_interfaces),
            bootstrap_interfaces=tuple(self.bootstrap_interfaces),
            env=self.env,
            transports=self.transports,
            transport_examples=tuple(self.transport_examples),
            warns=tuple(self.warns),
            warn_categories=self.warn_categories,
            result_codes=self.result_codes,
            first_result_code=self.first_result_code,
            init_complete_ranks=tuple(sorted(self.init_complete_ranks)),
            nranks=self.nranks,
            nnodes=self.nnodes,
            hosts=tuple(self.hosts),
            lines=lines,
            nccl_lines=self.nccl_lines,
            totals=dict(self.counter.totals),
        )


def parse_nccl_log(
    lines: Iterable[str], *, source: str = "nccl.log", collected_at: str | None = None
) -> NcclLogFacts:
    """One log's NCCL lines (see the module docstring): the version wherever it is printed,
    each WARN classified (_warn), what the INFO lines say (_info)."""
    log = _NcclLog(source, TimeRef(collected_at))
    number = 0
    for number, raw in enumerate(lines, 1):
        if "NCCL" not in raw:
            continue
        line = _split(raw)
        if line is None:
            version = _VERSION.search(raw)  # `NCCL version …` printed without a prefix
            if version:
                _add_new(log.versions, [version.group(1)])
            continue
        log.add_host(line.host)
        log.nccl_lines += 1
        version = _VERSION.search(line.msg)
        if version:
            _add_new(log.versions, [version.group(1)])
        elif line.level == "WARN":
            _warn(log, line, number, raw)
        else:
            _info(log, line.msg)
    return log.facts(number)


def _warn(log: _NcclLog, line: _Line, number: int, raw: str) -> None:
    """A WARN line, classified by the signature catalog, with the size it names."""
    category = classify_warn(line.msg)
    log.warn_categories[category] = log.warn_categories.get(category, 0) + 1
    size = _SIZE.search(line.msg)
    warn = NcclWarn(
        source=log.source,
        line=number,
        time=find_time(raw, log.ref),
        text=clip(raw),
        category=category,
        message=clip(line.msg),
        host=line.host,
        pid=line.pid,
        device=line.device,
        location=line.location,
        size_bytes=int(size.group(1)) if size else None,
    )
    log.counter.keep("warns", log.warns, warn)
    if "NET/IB : No device found" in line.msg:
        log.ib_no_device = True


def _info(log: _NcclLog, msg: str) -> None:
    """An INFO line: a call's result code, a channel's transport, the network and its
    devices, an NCCL_* setting, or the communicator's size and init."""
    result = _RESULT.match(msg)
    if result:
        code = int(result.group(1))
        log.result_codes[str(code)] = log.result_codes.get(str(code), 0) + 1
        if log.first_result_code is None and code != 0:
            log.first_result_code = code
        return
    transport = _TRANSPORT.match(msg)
    if transport:
        via = transport.group("via")
        kind = _transport_kind(via)
        log.transports[kind] = log.transports.get(kind, 0) + 1
        examples = log.transport_examples
        if len(examples) < 8 and not any(e.endswith(via) for e in examples):
            examples.append(clip(msg))
        return
    if "NET/IB : No device found" in msg or "NET/IB: No device found" in msg:
        log.ib_no_device = True
        return
    if _network(log, msg) or _setting(log, msg):
        return
    _communicator(log, msg)


def _network(log: _NcclLog, msg: str) -> bool:
    """`Using network X`, and the devices of `NET/IB : Using`, `NET/Socket : Using`,
    `Bootstrap : Using`."""
    using = _USING_NET.search(msg)
    if using:
        log.network = using.group(1)
        return True
    ib = _IB_USING.search(msg)
    if ib:
        _add_new(log.ib_devices, _DEV_ENTRY.findall(ib.group(1)))
        log.network = log.network or "IB"
        return True
    socket = _SOCK_USING.search(msg)
    if socket:
        _add_new(log.socket_interfaces, _DEV_ENTRY.findall(socket.group(1)))
        return True
    bootstrap = _BOOTSTRAP.search(msg)
    if bootstrap:
        interfaces = re.findall(r"(?:\[\d+\])?([\w.-]+:[^\s<]+<\d+>)", bootstrap.group(1))
        _add_new(log.bootstrap_interfaces, interfaces)
        return True
    return False


def _setting(log: _NcclLog, msg: str) -> bool:
    """`NCCL_X set by environment to V` (or the old `NCCL_X set to V`)."""
    setting = _ENV.match(msg)
    if setting:
        log.env[setting.group(1)] = setting.group(2)
        return True
    setting = _ENV_OLD.match(msg)
    if setting:
        log.env["NCCL_" + setting.group(1)] = setting.group(2)
        return True
    return False


def _communicator(log: _NcclLog, msg: str) -> None:
    """The communicator's nodes and ranks (the largest said), and the ranks whose init
    completed."""
    nodes = _NNODES.search(msg)
    if nodes:
        log.nnodes = max(log.nnodes or 0, int(nodes.group(1)))
    ranks = _NRANKS.search(msg)
    if ranks:
        log.nranks = max(log.nranks or 0, int(ranks.group(1)))
    complete = _INIT_COMPLETE.search(msg)
    if complete:
        log.init_complete_ranks.add(int(complete.group(1)))


def merge(facts: Iterable[NcclLogFacts]) -> dict[str, Any]:
    """Several logs (one per rank/process) as one view: unions and sums, warns in file order."""
    items = list(facts)
    out: dict[str, Any] = {
        "versions": sorted({v for f in items for v in f.versions}),
        "network": next((f.network for f in items if f.network), None),
        "networks": sorted({f.network for f in items if f.network}),
        "ib_no_device": any(f.ib_no_device for f in items),
        "ib_devices": sorted({d for f in items for d in f.ib_devices}),
        "socket_interfaces": sorted({d for f in items for d in f.socket_interfaces}),
        "env": {k: v for f in items for k, v in f.env.items()},
        "warns": [to_jsonable(w) for f in items for w in f.warns],
        "init_complete_ranks": sorted({r for f in items for r in f.init_complete_ranks}),
        "nranks": max((f.nranks for f in items if f.nranks), default=None),
        "nnodes": max((f.nnodes for f in items if f.nnodes), default=None),
        "hosts": sorted({h for f in items for h in f.hosts}),
        "nccl_lines": sum(f.nccl_lines for f in items),
    }
    out["version"] = out["versions"][0] if out["versions"] else None

    def add(key: str) -> dict[str, int]:
        total: dict[str, int] = {}
        for f in items:
            for k, v in getattr(f, key).items():
                total[k] = total.get(k, 0) + v
        return total

    out["transports"] = add("transports")
    out["transport_kinds"] = sorted(out["transports"])
    out["warn_categories"] = add("warn_categories")
    out["result_codes"] = add("result_codes")
    out["first_result_code"] = next(
        (f.first_result_code for f in items if f.first_result_code is not None), None
    )
    out["first_result_meaning"] = RESULT_CODES.get(out["first_result_code"] or -1)
    out["ib_disabled"] = out["env"].get("NCCL_IB_DISABLE") == "1"
    return out


@register("nccl_log", "nccl/*.log and NCCL lines of app/*.log: version, net, transports, WARNs")
def nccl_log_facts(files: Files, context: Mapping[str, Any]) -> dict[str, Any]:
    logs = [
        (k, v)
        for k, v in files_under(files, "nccl/") + files_under(files, "app/")
        if is_collected(v)
    ]
    raw = context.get("collected_at")
    collected_at = raw if isinstance(raw, str) else None
    parsed = [parse_nccl_log(v.lines(), source=k, collected_at=collected_at) for k, v in logs]
    with_nccl = [p for p in parsed if p.nccl_lines or p.versions]
    out = merge(with_nccl)
    out["collected"] = bool(logs)
    out["sources"] = [
        k for (k, _), p in zip(logs, parsed, strict=True) if p.nccl_lines or p.versions
    ]
    return out
