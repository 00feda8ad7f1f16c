"""Kubernetes objects: `pod.json` (`kubectl get pod -o json`, a Pod or a List) and `node.json`.

Per container: restarts, current and last termination (reason `OOMKilled`/`Error`, exit code;
137 = 128 + SIGKILL, which is also what a cgroup OOM kill looks like when containerd lost the
TaskOOM event), memory request/limit in bytes; memory-backed `emptyDir` volumes (`/dev/shm`)
with their `sizeLimit`. Node: labels, memory capacity/allocatable, conditions. And the pod's
candidate memory-cgroup directories on the node (`pod_cgroup_paths`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from typing import Any

from runbook.parsers._common import containing, evidence_lines, is_collected, to_jsonable
from runbook.parsers.registry import Files, register

POD = "pod.json"
NODE = "node.json"

_SUFFIX: dict[str, int | Decimal] = {
    "Ki": 1024,
    "Mi": 1024**2,
    "Gi": 1024**3,
    "Ti": 1024**4,
    "Pi": 1024**5,
    "Ei": 1024**6,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}
_QUANTITY = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$"
)


def parse_quantity(value: Any) -> int | None:
    """A Kubernetes quantity (`640Gi`, `1.5Gi`, `500M`, `1e3`, `128974848`) in whole units
    (bytes for memory), rounded up as Kubernetes does; None if it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return math.ceil(value) if math.isfinite(value) else None
    if not isinstance(value, str):
        return None
    m = _QUANTITY.match(value.strip())
    if not m:
        return None
    try:
        number = Decimal(m.group(1)) * Decimal(_SUFFIX.get(m.group(2) or "", 1))
        return int(number.to_integral_value(rounding=ROUND_CEILING))
    except (InvalidOperation, OverflowError, ValueError):
        return None


@dataclass(frozen=True)
class Termination:
    reason: str | None
    exit_code: int | None
    signal: int | None
    started_at: str | None
    finished_at: str | None
    message: str | None = None

    @property
    def oom_killed(self) -> bool:
        return self.reason == "OOMKilled"


@dataclass(frozen=True)
class ContainerFacts:
    name: str
    init: bool
    restarts: int
    ready: bool | None
    state: str | None
    #: state.terminated, when the container is terminated now
    terminated: Termination | None
    #: lastState.terminated, the previous run's end
    last_terminated: Termination | None
    memory_request_bytes: int | None
    memory_limit_bytes: int | None
    oom_killed: bool
    #: exit 137 / SIGKILL: killed, possibly by the OOM killer even if reason says Error
    sigkilled: bool
    container_id: str | None = None
    shm_mounts: tuple[str, ...] = ()


@dataclass(frozen=True)
class VolumeFacts:
    name: str
    kind: str
    medium: str | None = None
    size_limit_bytes: int | None = None
    mounted_at: tuple[str, ...] = ()


@dataclass(frozen=True)
class PodFacts:
    name: str | None
    namespace: str | None
    uid: str | None
    node_name: str | None
    qos_class: str | None
    phase: str | None
    reason: str | None
    containers: tuple[ContainerFacts, ...]
    volumes: tuple[VolumeFacts, ...]
    memory_limit_bytes: int | None
    memory_request_bytes: int | None
    oom_killed: bool
    restarts: int
    cgroup_paths: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeCondition:
    type: str
    status: str
    reason: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class NodeFacts:
    name: str | None
    labels: dict[str, str]
    capacity_memory_bytes: int | None
    allocatable_memory_bytes: int | None
    conditions: tuple[NodeCondition, ...]
    memory_pressure: bool | None
    ready: bool | None
    #: extended resources (`nvidia.com/gpu`, `rdma/...`) as advertised in allocatable
    extended_resources: dict[str, str] = field(default_factory=dict)
    #: labels whose key or value mentions RDMA/InfiniBand/RoCE (metadata, not devices)
    rdma_labels: dict[str, str] = field(default_factory=dict)
    unschedulable: bool = False


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _as_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def pod_cgroup_paths(uid: str, qos: str | None) -> list[str]:
    """Candidate memory-cgroup directories of a pod on its node, most likely first:
    the systemd driver (cgroup v2 unified, then v1 memory controller) and cgroupfs (v2, v1).
    Guaranteed pods sit directly under `kubepods`; the others under their QoS class."""
    qos_class = (qos or "").lower()
    # systemd escapes the uid's dashes in a slice name
    escaped = uid.replace("-", "_")
    root = "/sys/fs/cgroup"
    if qos_class == "guaranteed":
        systemd = f"kubepods.slice/kubepods-pod{escaped}.slice"
        cgroupfs = f"kubepods/pod{uid}"
    else:
        tier = qos_class if qos_class in ("burstable", "besteffort") else "burstable"
        systemd = f"kubepods.slice/kubepods-{tier}.slice/kubepods-{tier}-pod{escaped}.slice"
        cgroupfs = f"kubepods/{tier}/pod{uid}"
    return [
        f"{root}/{systemd}",
        f"{root}/memory/{systemd}",
        f"{root}/{cgroupfs}",
        f"{root}/memory/{cgroupfs}",
    ]


def _termination(value: Any) -> Termination | None:
    t = _as_dict(value)
    if not t:
        return None
    return Termination(
        reason=_as_str(t.get("reason")),
        exit_code=_as_int(t.get("exitCode")),
        signal=_as_int(t.get("signal")),
        started_at=_as_str(t.get("startedAt")),
        finished_at=_as_str(t.get("finishedAt")),
        message=(_as_str(t.get("message")) or None) and str(t.get("message"))[:300],
    )


def _killed(t: Termination | None) -> bool:
    return t is not None and (t.exit_code == 137 or t.signal == 9)


def _pod(obj: dict[str, Any]) -> PodFacts:
    meta, spec = _as_dict(obj.get("metadata")), _as_dict(obj.get("spec"))
    status = _as_dict(obj.get("status"))
    volumes = _volumes(spec)
    in_memory = {v.name for v in volumes if v.medium == "Memory"}
    statuses = _container_statuses(status)
    containers: list[ContainerFacts] = []
    for init, key in ((False, "containers"), (True, "initContainers")):
        for item in _as_list(spec.get(key)):
            container = _as_dict(item)
            status_of = statuses.get((init, _as_str(container.get("name")) or ""), {})
            containers.append(_container(container, init, status_of, in_memory))
    main = [c for c in containers if not c.init]
    limits = [c.memory_limit_bytes for c in main]
    requests = [c.memory_request_bytes for c in main]
    uid = _as_str(meta.get("uid"))
    qos = _as_str(status.get("qosClass"))
    labels = {str(k): str(v) for k, v in _as_dict(meta.get("labels")).items()}
    return PodFacts(
        name=_as_str(meta.get("name")),
        namespace=_as_str(meta.get("namespace")),
        uid=uid,
        node_name=_as_str(spec.get("nodeName")),
        qos_class=qos,
        phase=_as_str(status.get("phase")),
        reason=_as_str(status.get("reason")),
        containers=tuple(containers),
        volumes=tuple(volumes),
        memory_limit_bytes=sum(x for x in limits if x is not None)
        if limits and all(x is not None for x in limits)
        else None,
        memory_request_bytes=sum(x for x in requests if x is not None) if requests else None,
        oom_killed=any(c.oom_killed for c in containers),
        restarts=sum(c.restarts for c in containers),
        cgroup_paths=tuple(pod_cgroup_paths(uid, qos)) if uid else (),
        labels=labels,
    )


def _container_statuses(status: dict[str, Any]) -> dict[tuple[bool, str], dict[str, Any]]:
    """The pod's container statuses by (init container, name)."""
    statuses: dict[tuple[bool, str], dict[str, Any]] = {}
    for init, key in ((False, "containerStatuses"), (True, "initContainerStatuses")):
        for item in _as_list(status.get(key)):
            container_status = _as_dict(item)
            if isinstance(container_status.get("name"), str):
                statuses[(init, container_status["name"])] = container_status
    return statuses


def _volumes(spec: dict[str, Any]) -> list[VolumeFacts]:
    """The pod's volumes, each with where its containers mount it."""
    mounts: dict[str, list[str]] = {}
    for key in ("containers", "initContainers"):
        for container in _as_list(spec.get(key)):
            for item in _as_list(_as_dict(container).get("volumeMounts")):
                mount = _as_dict(item)
                if isinstance(mount.get("name"), str) and isinstance(mount.get("mountPath"), str):
                    mounts.setdefault(mount["name"], []).append(mount["mountPath"])
    volumes: list[VolumeFacts] = []
    for item in _as_list(spec.get("volumes")):
        volume = _as_dict(item)
        name = _as_str(volume.get("name")) or ""
        empty_dir = _as_dict(volume.get("emptyDir")) if "emptyDir" in volume else None
        medium = _as_str(empty_dir.get("medium")) if empty_dir is not None else None
        size_limit = parse_quantity(empty_dir.get("sizeLimit")) if empty_dir is not None else None
        volumes.append(
            VolumeFacts(
                name=name,
                kind=next((k for k in volume if k != "name"), "unknown"),
                medium=medium or None,
                size_limit_bytes=size_limit,
                mounted_at=tuple(mounts.get(name, ())),
            )
        )
    return volumes


def _container(
    spec: dict[str, Any], init: bool, status: dict[str, Any], in_memory: set[str]
) -> ContainerFacts:
    """One container: its spec's memory request and limit and /dev/shm-like mounts (of the
    volumes in memory), its status's restarts, state and terminations."""
    resources = _as_dict(spec.get("resources"))
    state = _as_dict(status.get("state"))
    terminated = _termination(state.get("terminated"))
    last = _termination(_as_dict(status.get("lastState")).get("terminated"))
    shm = tuple(
        _as_str(_as_dict(mount).get("mountPath")) or ""
        for mount in _as_list(spec.get("volumeMounts"))
        if _as_dict(mount).get("name") in in_memory
    )
    return ContainerFacts(
        name=_as_str(spec.get("name")) or "",
        init=init,
        restarts=_as_int(status.get("restartCount")) or 0,
        ready=status.get("ready") if isinstance(status.get("ready"), bool) else None,
        state=next(iter(state), None),
        terminated=terminated,
        last_terminated=last,
        memory_request_bytes=parse_quantity(_as_dict(resources.get("requests")).get("memory")),
        memory_limit_bytes=parse_quantity(_as_dict(resources.get("limits")).get("memory")),
        oom_killed=any(t is not None and t.oom_killed for t in (terminated, last)),
        sigkilled=_killed(terminated) or _killed(last),
        container_id=_as_str(status.get("containerID")),
        shm_mounts=shm,
    )


def parse_pods(text: str) -> tuple[PodFacts, ...]:
    """`kubectl get pod -o json`: a Pod, or a List of Pods. Unparseable text gives ()."""
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return ()
    obj = _as_dict(obj)
    if obj.get("kind") == "List" or "items" in obj:
        return tuple(_pod(_as_dict(i)) for i in _as_list(obj.get("items")) if _as_dict(i))
    return (_pod(obj),) if obj else ()


_RDMA_WORDS = re.compile(r"rdma|infiniband|roce|mellanox|\bib\b|hca", re.IGNORECASE)


def parse_node(text: str) -> NodeFacts | None:
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return None
    obj = _as_dict(obj)
    if obj.get("kind") == "List":
        items = _as_list(obj.get("items"))
        obj = _as_dict(items[0]) if items else {}
    if not obj:
        return None
    meta, spec = _as_dict(obj.get("metadata")), _as_dict(obj.get("spec"))
    status = _as_dict(obj.get("status"))
    labels = {str(k): str(v) for k, v in _as_dict(meta.get("labels")).items()}
    conds = tuple(
        NodeCondition(
            type=str(c.get("type")),
            status=str(c.get("status")),
            reason=_as_str(c.get("reason")),
            message=_as_str(c.get("message")),
        )
        for c in (_as_dict(x) for x in _as_list(status.get("conditions")))
        if c.get("type")
    )

    def cond(name: str) -> bool | None:
        for c in conds:
            if c.type == name:
                return {"True": True, "False": False}.get(c.status)
        return None

    alloc = _as_dict(status.get("allocatable"))
    return NodeFacts(
        name=_as_str(meta.get("name")),
        labels=labels,
        capacity_memory_bytes=parse_quantity(_as_dict(status.get("capacity")).get("memory")),
        allocatable_memory_bytes=parse_quantity(alloc.get("memory")),
        conditions=conds,
        memory_pressure=cond("MemoryPressure"),
        ready=cond("Ready"),
        extended_resources={str(k): str(v) for k, v in alloc.items() if "/" in str(k)},
        rdma_labels={k: v for k, v in labels.items() if _RDMA_WORDS.search(k + " " + v)},
        unschedulable=spec.get("unschedulable") is True,
    )


def _terminations(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each container termination as timeline evidence (pod.json has no useful line numbers:
    `line` is None and the container and state say where)."""
    found = []
    for container in pod.get("containers") or []:
        for state in ("terminated", "last_terminated"):
            term = container.get(state)
            if not isinstance(term, Mapping) or not term.get("finished_at"):
                continue
            signal = f", signal {term['signal']}" if term.get("signal") else ""
            found.append({
                "source": POD,
                "line": None,
                "time": term["finished_at"],
                "text": f"container {container.get('name')} {state.replace('_', ' ')}: "
                        f"{term.get('reason') or '?'} (exit {term.get('exit_code')}{signal})",
            })  # fmt: skip
    return found


@register("kube", "pod.json and node.json: containers, terminations, limits, shm, node memory")
def kube_facts(files: Files, context: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    pod_res = files.get(POD)
    if is_collected(pod_res) and pod_res.exited in (0, None):
        pods = parse_pods(pod_res.stdout)
        wanted = (
            context.get("vars", {}).get("pod") if isinstance(context.get("vars"), dict) else None
        )
        chosen = next((p for p in pods if p.name == wanted), pods[0] if pods else None)
        out["pod"] = {
            "collected": True,
            "parsed": chosen is not None,
            **(to_jsonable(chosen) if chosen else {}),
        }
        out["pods"] = to_jsonable(pods)
        if chosen:
            out["pod"]["memory_emptydirs"] = [
                to_jsonable(v) for v in chosen.volumes if v.medium == "Memory"
            ]
            out["pod"]["unbounded_memory_emptydirs"] = [
                v.name
                for v in chosen.volumes
                if v.medium == "Memory" and v.size_limit_bytes is None
            ]
            out["pod"]["terminations"] = _terminations(out["pod"])
            out["pod"]["oom_evidence"] = evidence_lines(
                pod_res.stdout, POD, containing('"OOMKilled"')
            )
            out["pod"]["emptydir_evidence"] = evidence_lines(
                pod_res.stdout, POD, containing('"Memory"')
            )
    else:
        out["pod"] = {
            "collected": False,
            "present": False
            if pod_res is not None and is_collected(pod_res) and "NotFound" in pod_res.stderr
            else None,
        }
        out["pods"] = []
    node_res = files.get(NODE)
    if is_collected(node_res) and node_res.exited in (0, None):
        node = parse_node(node_res.stdout)
        out["node"] = {
            "collected": True,
            "parsed": node is not None,
            **(to_jsonable(node) if node else {}),
        }
        if node is not None and node.rdma_labels:
            out["node"]["rdma_label_evidence"] = [
                e
                for label in list(node.rdma_labels)[:5]
                for e in evidence_lines(node_res.stdout, NODE, containing(f'"{label}"'), limit=1)
            ]
    else:
        out["node"] = {"collected": False}
    out["collected"] = out["pod"]["collected"] or out["node"]["collected"]
    return out
