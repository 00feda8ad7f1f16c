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


def parse_nccl_log(
    lines: Iterable[str], *, source: str = "nccl.log", collected_at: str | None = None
) -> NcclLogFacts:
    ref = TimeRef(collected_at)
    counter = Counter()
    versions: list[str] = []
    network: str | None = None
    ib_no_device = False
    ib_devs: list[str] = []
    sock_if: list[str] = []
    boot_if: list[str] = []
    env: dict[str, str] = {}
    transports: dict[str, int] = {}
    examples: list[str] = []
    warns: list[NcclWarn] = []
    warn_cats: dict[str, int] = {}
    results: dict[str, int] = {}
    first_code: int | None = None
    ranks: set[int] = set()
    nranks: int | None = None
    nnodes: int | None = None
    hosts: list[str] = []
    n = nccl = 0
    for n, raw in enumerate(lines, 1):
        if "NCCL" not in raw:
            continue
        m = _PREFIX.search(raw)
        host = pid = dev = None
        if m:
            host, pid, dev = m.group("host"), int(m.group("pid")), m.group("dev")
            level, msg, loc = m.group("level"), m.group("msg").strip(), m.group("loc")
            if host not in hosts and len(hosts) < 256:
                hosts.append(host)
        else:
            b = _BARE.search(raw)
            if b:
                level, msg, loc = b.group("level"), b.group("msg").strip(), b.group("loc")
            else:
                vm = _VERSION.search(raw)
                if vm and vm.group(1) not in versions:
                    versions.append(vm.group(1))
                continue
        nccl += 1
        vm = _VERSION.search(msg)
        if vm:
            if vm.group(1) not in versions:
                versions.append(vm.group(1))
            continue
        if level == "WARN":
            cat = classify_warn(msg)
            warn_cats[cat] = warn_cats.get(cat, 0) + 1
            sm = _SIZE.search(msg)
            counter.keep(
                "warns",
                warns,
                NcclWarn(
                    source=source,
                    line=n,
                    time=find_time(raw, ref),
                    text=clip(raw),
                    category=cat,
                    message=clip(msg),
                    host=host,
                    pid=pid,
                    device=dev,
                    location=loc,
                    size_bytes=int(sm.group(1)) if sm else None,
                ),
            )
            if "NET/IB : No device found" in msg:
                ib_no_device = True
            continue
        rm = _RESULT.match(msg)
        if rm:
            code = int(rm.group(1))
            results[str(code)] = results.get(str(code), 0) + 1
            if first_code is None and code != 0:
                first_code = code
            continue
        tm = _TRANSPORT.match(msg)
        if tm:
            kind = _transport_kind(tm.group("via"))
            transports[kind] = transports.get(kind, 0) + 1
            if len(examples) < 8 and not any(e.endswith(tm.group("via")) for e in examples):
                examples.append(clip(msg))
            continue
        if "NET/IB : No device found" in msg or "NET/IB: No device found" in msg:
            ib_no_device = True
            continue
        um = _USING_NET.search(msg)
        if um:
            network = um.group(1)
            continue
        im = _IB_USING.search(msg)
        if im:
            for d in _DEV_ENTRY.findall(im.group(1)):
                if d not in ib_devs:
                    ib_devs.append(d)
            network = network or "IB"
            continue
        sm2 = _SOCK_USING.search(msg)
        if sm2:
            for d in _DEV_ENTRY.findall(sm2.group(1)):
                if d not in sock_if:
                    sock_if.append(d)
            continue
        bm = _BOOTSTRAP.search(msg)
        if bm:
            for d in re.findall(r"(?:\[\d+\])?([\w.-]+:[^\s<]+<\d+>)", bm.group(1)):
                if d not in boot_if:
                    boot_if.append(d)
            continue
        em = _ENV.match(msg)
        if em:
            env[em.group(1)] = em.group(2)
            continue
        em = _ENV_OLD.match(msg)
        if em:
            env["NCCL_" + em.group(1)] = em.group(2)
            continue
        nm = _NNODES.search(msg)
        if nm:
            nnodes = max(nnodes or 0, int(nm.group(1)))
        rm = _NRANKS.search(msg)
        if rm:
            nranks = max(nranks or 0, int(rm.group(1)))
        cm = _INIT_COMPLETE.search(msg)
        if cm:
            ranks.add(int(cm.group(1)))
    if network is None and sock_if and not ib_devs:
        network = "Socket"
    return NcclLogFacts(
        version=versions[0] if versions else None,
        versions=tuple(versions),
        network=network,
        ib_no_device=ib_no_device,
        ib_devices=tuple(ib_devs),
        socket_interfaces=tuple(sock_if),
        bootstrap_interfaces=tuple(boot_if),
        env=env,
        transports=transports,
        transport_examples=tuple(examples),
        warns=tuple(warns),
        warn_categories=warn_cats,
        result_codes=results,
        first_result_code=first_code,
        init_complete_ranks=tuple(sorted(ranks)),
        nranks=nranks,
        nnodes=nnodes,
        hosts=tuple(hosts),
        lines=n,
        nccl_lines=nccl,
        totals=dict(counter.totals),
    )


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
