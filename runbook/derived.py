"""Derived facts computed in Python: named, typed predicates over what the parsers read.

A stage lists them by name under `derive:` (docs/runbook-format.md)::

    derive: [multi_node, single_node, expects_ib, ib_missing_for_job, rdma_fine_because]

Each is computed after the stage's parsers, in the order listed, and is visible as
`facts.derived.<name>` to the stage's rules and every later stage, exactly as a `derive`
expression is. The runbook says *what* is checked and in which order; how a fact is decided
lives here, where it has types and tests (tests/unit/test_derived.py), and a rule's message
template only formats it.

Each function is pure: ``fn(facts, variables) -> value`` over the facts merged so far (every
parser's, and `derived`) and the run's variables; a fact the node did not give is absent, never
an error. The values are JSON (booleans and strings), recorded with the stage's facts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DerivedFact", "compute", "get", "names"]

Facts = Mapping[str, Any]
Variables = Mapping[str, Any]
DerivedFunc = Callable[[Facts, Variables], Any]


@dataclass(frozen=True)
class DerivedFact:
    name: str
    func: DerivedFunc
    summary: str


_REGISTRY: dict[str, DerivedFact] = {}


def _derived(func: DerivedFunc) -> DerivedFunc:
    """Register `func` as the derived fact of its name."""
    summary = (func.__doc__ or "").strip().split("\n\n")[0]
    _REGISTRY[func.__name__] = DerivedFact(func.__name__, func, " ".join(summary.split()))
    return func


def get(name: str) -> DerivedFact:
    """The derived fact registered as `name` (KeyError if there is none)."""
    return _REGISTRY[name]


def names() -> frozenset[str]:
    return frozenset(_REGISTRY)


def compute(name: str, facts: Facts, variables: Variables) -> Any:
    """The value of derived fact `name` over `facts` and `variables`."""
    return _REGISTRY[name].func(facts, variables)


# -- typed reading of the facts ------------------------------------------------------------------


def _section(facts: Facts, *path: str) -> Mapping[str, Any]:
    """The mapping at `path` under `facts`, or an empty one where the node gave none."""
    value: Any = facts
    for part in path:
        value = value.get(part) if isinstance(value, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _number(value: Any) -> float | None:
    """A count as the parsers and `--var` give it; anything else (a word, a boolean) is none."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value


def _nodes(variables: Variables) -> float:
    """`--var nodes=N`: how many nodes the job spans; 0 when not given (the logs decide)."""
    return _number(variables.get("nodes")) or 0


def _ranks_and_gpus(facts: Facts) -> tuple[float, float]:
    """NCCL's rank count and the node's GPU count (0 when either is not known)."""
    ranks = _number(_section(facts, "nccl_log").get("nranks")) or 0
    gpus = _number(_section(facts, "nvidia_smi").get("gpu_count")) or 0
    return ranks, gpus


# -- rank-lifecycle ------------------------------------------------------------------------------


@_derived
def job_known(facts: Facts, variables: Variables) -> bool:
    """A job is under diagnosis on this node: a pod or its cgroup was named (`--var pod`,
    `--var cgroup_dir`), the pod object was read, or the job's application or NCCL logs were
    found. Without one (a sweep or a node check of a node that runs no job), an OOM here is
    another workload's limit: context, never the verdict."""
    if any(str(variables.get(name) or "").strip() for name in ("pod", "cgroup_dir")):
        return True
    if _section(facts, "kube", "pod").get("uid"):
        return True
    applog = _section(facts, "applog")
    ranks = applog.get("ranks")
    return bool(
        applog.get("app_collected")
        or (
            isinstance(ranks, list)
            and any(
                isinstance(r, Mapping) and str(r.get("source") or "").startswith("nccl/")
                for r in ranks
            )
        )
    )


# -- rdma-socket ---------------------------------------------------------------------------------


@_derived
def multi_node(facts: Facts, variables: Variables) -> bool:
    """The job spans nodes: `--var nodes` above 1, or NCCL logged more than one node
    (`nNodes`), a network (`NET/…`) transport, or more ranks than the node has GPUs."""
    nccl = _section(facts, "nccl_log")
    ranks, gpus = _ranks_and_gpus(facts)
    kinds = nccl.get("transport_kinds")
    return bool(
        _nodes(variables) > 1
        or (_number(nccl.get("nnodes")) or 0) > 1
        or (isinstance(kinds, list) and any(str(k).startswith("NET/") for k in kinds))
        or (ranks and gpus and ranks > gpus)
    )


@_derived
def single_node(facts: Facts, variables: Variables) -> bool:
    """The job runs on this node alone: `--var nodes=1`, or (nothing showing it spans nodes)
    NCCL logged one node, or no more ranks than the node has GPUs."""
    if _nodes(variables) == 1:
        return True
    if multi_node(facts, variables):
        return False
    ranks, gpus = _ranks_and_gpus(facts)
    return bool(
        _number(_section(facts, "nccl_log").get("nnodes")) == 1
        or (ranks and gpus and ranks <= gpus)
    )


@_derived
def expects_ib(facts: Facts, variables: Variables) -> bool:
    """The node or the job says IB/RoCE is expected: RDMA labels on the node, or NCCL told to
    use IB (NCCL_NET=IB, an NCCL_IB_HCA, NCCL_IB_DISABLE=0)."""
    env = _section(facts, "nccl_log", "env")
    return bool(
        _section(facts, "kube", "node").get("rdma_labels")
        or env.get("NCCL_NET") == "IB"
        or env.get("NCCL_IB_HCA")
        or env.get("NCCL_IB_DISABLE") == "0"
    )


@_derived
def ib_missing_for_job(facts: Facts, variables: Variables) -> bool:
    """A job that expects IB ran on a node with no usable RDMA device, and NCCL failed: the
    RDMA tools were read, NCCL's own IB calls did not fail (that is another finding), and the
    job spans nodes or NCCL warned it found no IB device it was told to use."""
    rdma = _section(facts, "rdma")
    nccl = _section(facts, "nccl_log")
    warned = _section(facts, "nccl_log", "warn_categories")
    return bool(
        rdma.get("collected")
        and not rdma.get("usable")
        and not warned.get("ib")
        and (multi_node(facts, variables) or warned.get("ib-missing"))
        and expects_ib(facts, variables)
        and (nccl.get("warns") or nccl.get("first_result_code"))
    )


@_derived
def rdma_fine_because(facts: Facts, variables: Variables) -> str:
    """Why RDMA is not the cause, when it is not: no IB verbs failure in NCCL's logs, and what
    the absence of an RDMA device means for this job."""
    said = "no IB verbs failure " + (
        "in the NCCL logs"
        if _section(facts, "nccl_log").get("collected")
        else "(NCCL logs not collected)"
    )
    if _section(facts, "rdma").get("usable"):
        return said
    if single_node(facts, variables):
        return said + "; the node has no RDMA device, which a single-node job does not need"
    if not multi_node(facts, variables):
        return said + (
            "; the node has no RDMA device, and nothing shows this job spanning nodes "
            "(a single-node job does not need one)"
        )
    return said + "; the node has no RDMA device and NCCL did not fail for want of one"


# -- gpu-pcie ------------------------------------------------------------------------------------

#: a recovery action that asks for the node to be drained or rebooted
_DRAIN_ACTION = re.compile(r"(?i)drain|reboot", re.MULTILINE)


def _matching(items: Any, key: str, pattern: re.Pattern[str]) -> list[Any]:
    """The mappings in `items` whose `key` holds text `pattern` finds (none is no match)."""
    if not isinstance(items, list):
        return []
    return [
        item
        for item in items
        if isinstance(item, Mapping)
        and item.get(key) is not None
        and pattern.search(str(item[key])) is not None
    ]


@_derived
def gpus_missing(facts: Facts, variables: Variables) -> bool:
    """Fewer GPUs answer nvidia-smi than the PCI bus shows NVIDIA GPUs."""
    on_pci = _number(_section(facts, "rdma").get("gpus_on_pci")) or 0
    answering = _number(_section(facts, "nvidia_smi").get("gpu_count")) or 0
    return bool(on_pci and answering and answering < on_pci)


@_derived
def gpu_drain_fault(facts: Facts, variables: Variables) -> bool:
    """A GPU fault that justifies a drain: a GPU lost (nvidia-smi exit 15), uncorrectable
    volatile ECC, a failed row remap, retired pages pending, GPUs missing from nvidia-smi, or a
    recovery action that asks for a drain or a reboot."""
    smi = _section(facts, "nvidia_smi")
    return bool(
        smi.get("gpu_lost")
        or smi.get("remap_failure")
        or (_number(smi.get("uncorrectable_ecc_volatile")) or 0) > 0
        or smi.get("retired_pages_pending")
        or gpus_missing(facts, variables)
        or _matching(smi.get("recovery_actions"), "action", _DRAIN_ACTION)
    )


#: how nvidia-smi says the driver is not there to answer: (its words, or its exit code) and what
#: that means of the driver, most specific first (npd and the derived fact gpu_driver_down)
DRIVER_STATES: tuple[tuple[re.Pattern[str], int | None, str], ...] = (
    (re.compile(r"couldn't communicate with the NVIDIA driver", re.I), 9, "not loaded"),
    (re.compile(r"NVML Shared Library Not Found", re.I), 12, "missing"),
    (re.compile(r"Driver/library version mismatch", re.I), None, "broken"),
    (re.compile(r"No devices were found", re.I), 6, "sees no GPU"),
    (re.compile(r"Failed to initialize NVML", re.I), None, "broken"),
)


def driver_state(exit_code: int | None, said: str) -> str | None:
    """What nvidia-smi's exit code or words say of the driver (`not loaded`, `missing`,
    `broken`, `sees no GPU`), or None when they say nothing of it."""
    for words, code, state in DRIVER_STATES:
        if words.search(said) or (code is not None and exit_code == code):
            return state
    return None


#: labels GPU feature discovery / the GPU operator put on a GPU node
GPU_LABELS = ("nvidia.com/gpu.present", "nvidia.com/gpu.deploy.driver")


def _gpu_node(facts: Facts) -> str:
    """What says the node has NVIDIA GPUs (the PCI bus, its labels), or "" when nothing does."""
    on_pci = _number(_section(facts, "rdma").get("gpus_on_pci")) or 0
    if on_pci:
        return f"{int(on_pci)} NVIDIA GPU(s) on the PCI bus"
    labels = _section(facts, "kube", "node", "labels")
    label = next((k for k in GPU_LABELS if str(labels.get(k, "")).lower() == "true"), None)
    return f"labelled {label}" if label else ""


@_derived
def gpu_driver_down(facts: Facts, variables: Variables) -> str:
    """Why the NVIDIA driver does not answer on a node that has NVIDIA GPUs (nvidia-smi not
    installed, the driver not loaded, broken, seeing no GPU), with what says the node has
    them; "" when the driver answered, or nothing says the node has a GPU. A tool's absence
    is never a clean bill: such a node is not healthy, its GPUs' state is unknown."""
    smi = _section(facts, "nvidia_smi")
    if _number(smi.get("gpu_count")):
        return ""
    if smi.get("not_installed"):
        why = "nvidia-smi not found"
    else:
        said = " ".join(
            str(e.get("text") or "") for e in smi.get("exit_evidence") or ()
            if isinstance(e, Mapping)
        )  # fmt: skip
        code = smi.get("exit_code")
        state = driver_state(code if isinstance(code, int) else None, said)
        if state is None:
            return ""
        why = f"the driver {state} (nvidia-smi exit {code})"
    node = _gpu_node(facts)
    return f"{why}; {node}" if node else ""


# -- shm-p2p -------------------------------------------------------------------------------------

#: an NCCL WARN about peer access, peer mappings, P2P or CUDA IPC
_P2P_WARN = re.compile(r"(?i)peer access|peer mapping|P2P|cudaIpc|IPC handle", re.MULTILINE)


@_derived
def p2p_warns(facts: Facts, variables: Variables) -> list[Any]:
    """NCCL's WARNs about GPU peer access, peer mappings, P2P or CUDA IPC (a list of them)."""
    return _matching(_section(facts, "nccl_log").get("warns"), "message", _P2P_WARN)


# -- OOM attribution (rank-lifecycle, kernel-logs) -----------------------------------------------
#
# These read lists of records (the journal's and the kernel's OOM events) item by item, the way
# the runbook's expressions did: a key an item lacks, or an item that is no mapping, is absent
# (empty text to a pattern, in no list of facts, equal to no fact); a key that holds none matches no
# pattern.

#: a key an item does not hold, or an item that is no mapping
_ABSENT: Any = object()

#: a container id as pod.json gives it (`containerd://<64 hex>`), or a sanitized placeholder
_CONTAINER_ID = re.compile(r"[0-9a-f]{64}|<CONTAINER_ID_[0-9]+>", re.MULTILINE)

#: a path less its trailing slashes (of its first line)
_LESS_TRAILING_SLASHES = re.compile(r"^.*?(?=/*$)", re.MULTILINE)


def _attr(item: Any, key: str) -> Any:
    """`item[key]`, or _ABSENT where `item` is no mapping or does not hold `key`."""
    return item.get(key, _ABSENT) if isinstance(item, Mapping) else _ABSENT


def _items(value: Any) -> list[Any]:
    """A list fact's items; none where the node gave no list."""
    return list(value) if isinstance(value, list | tuple) else []


def _found_by(value: Any, pattern: str) -> bool:
    """`pattern` finds `value` (an item's key): none never, an absent key as empty text."""
    if value is None:
        return False
    return re.search(pattern, "" if value is _ABSENT else str(value), re.MULTILINE) is not None


def _job_pids(facts: Facts) -> list[Any]:
    """The pids the job's logs name (none when they name none)."""
    return _items(_section(facts, "applog").get("pids"))


@_derived
def pod_container_ids(facts: Facts, variables: Variables) -> list[str]:
    """The ids of the pod's containers (64 hex digits, or a sanitized `<CONTAINER_ID_N>`), as
    pod.json names them; none when pod.json was not read."""
    pod = _section(facts, "kube", "pod")
    if not pod.get("uid"):
        return []
    ids: list[str] = []
    for container in _items(pod.get("containers")):
        cid = _attr(container, "container_id")
        found = _CONTAINER_ID.search("" if cid is _ABSENT else str(cid))
        if found:
            ids.append(found.group(0))
    return ids


def _journal_ooms(facts: Facts) -> tuple[Any, list[Any]]:
    """The pod's UID and containerd's/kubelet's OOM events, or (None, []) when either is
    missing."""
    uid = _section(facts, "kube", "pod").get("uid")
    events = _items(_section(facts, "journal").get("oom_events"))
    return (uid, events) if uid and events else (None, [])


@_derived
def journal_ooms_mine(facts: Facts, variables: Variables) -> list[Any]:
    """containerd's and kubelet's OOM events of this pod: those of its containers (by id), else
    those that name its UID; none when pod.json was not read."""
    uid, events = _journal_ooms(facts)
    if not events:
        return []
    ids = pod_container_ids(facts, variables)
    by_container = [e for e in events if _attr(e, "container_id") in ids]
    return by_container or [e for e in events if _attr(e, "pod_uid") == uid]


@_derived
def journal_ooms_other(facts: Facts, variables: Variables) -> list[Any]:
    """containerd's and kubelet's OOM events of other pods: neither of this pod's containers
    nor naming its UID; none when pod.json was not read."""
    uid, events = _journal_ooms(facts)
    if not events:
        return []
    ids = pod_container_ids(facts, variables)
    return [e for e in events if _attr(e, "container_id") not in ids and _attr(e, "pod_uid") != uid]


@_derived
def job_cgroup(facts: Facts, variables: Variables) -> str:
    """The job's memory cgroup as a pattern over the kernel's memcg paths: from `--cgroup DIR`
    (`/sys/fs/cgroup/memory/<path>` on v1 and `/sys/fs/cgroup/<path>` on v2 both mean
    `^/<path>`, or a child of it), else from pod.json's UID (`pod<uid>`, or the systemd
    `pod<uid_with_underscores>`); "" when neither is known. The path and the UID are literal
    text in the pattern (`kubepods.slice`'s dot is a dot; a `[` typed in --cgroup is no error)."""
    cgroup_dir = variables.get("cgroup_dir")
    if cgroup_dir:
        text = str(cgroup_dir)
        less = _LESS_TRAILING_SLASHES.search(text)  # it always matches
        path = (less.group(0) if less else text).replace("/sys/fs/cgroup/memory/", "/")
        return "^" + _literal(path.replace("/sys/fs/cgroup/", "/")) + "(/|$)"
    uid = _section(facts, "kube", "pod").get("uid")
    return "pod" + "[-_]".join(_literal(part) for part in str(uid).split("-")) if uid else ""


#: the characters a pattern reads as its own (outside a class): a path's dashes and slashes
#: stay as they are
_PATTERN_CHARS = re.compile(r"([.^$*+?{}\[\]\\|()])")


def _literal(text: str) -> str:
    """`text` as a pattern that matches it and only it."""
    return _PATTERN_CHARS.sub(r"\\\1", text)


def _memcg_ooms(facts: Facts) -> list[Any]:
    return _items(_section(facts, "dmesg").get("memcg_ooms"))


def _global_ooms(facts: Facts) -> list[Any]:
    return _items(_section(facts, "dmesg").get("global_ooms"))


@_derived
def job_ooms(facts: Facts, variables: Variables) -> list[Any]:
    """The kernel's memory-cgroup OOM kills that count against the job: the limit hit was the
    job's cgroup (`job_cgroup`), then those where only the killed task was in it; none when
    the job's cgroup is not known."""
    cgroup = job_cgroup(facts, variables)
    ooms = _memcg_ooms(facts)
    if not (cgroup and ooms):
        return []
    by_limit = [o for o in ooms if _found_by(_attr(o, "memcg"), cgroup)]
    by_task = [
        o
        for o in ooms
        if not _found_by(_attr(o, "memcg"), cgroup) and _found_by(_attr(o, "task_memcg"), cgroup)
    ]
    return by_limit + by_task


@_derived
def foreign_ooms(facts: Facts, variables: Variables) -> list[Any]:
    """The kernel's memory-cgroup OOM kills of other workloads: neither the limit hit nor the
    killed task in the job's cgroup; none when the job's cgroup is not known."""
    cgroup = job_cgroup(facts, variables)
    ooms = _memcg_ooms(facts)
    if not (cgroup and ooms):
        return []
    return [
        o
        for o in ooms
        if not _found_by(_attr(o, "memcg"), cgroup)
        and not _found_by(_attr(o, "task_memcg"), cgroup)
    ]


@_derived
def unattributed_ooms(facts: Facts, variables: Variables) -> list[Any]:
    """With no job cgroup known, the memory-cgroup OOM kills of a pid the job's logs do not
    name; none when the job's cgroup is known."""
    ooms = _memcg_ooms(facts)
    if job_cgroup(facts, variables) or not ooms:
        return []
    pids = _job_pids(facts)
    return [o for o in ooms if _attr(o, "killed_pid") not in pids]


@_derived
def pid_ooms(facts: Facts, variables: Variables) -> list[Any]:
    """With no job cgroup known, the OOM kills (memory-cgroup, then global) of a pid the job's
    logs name: the job's; none when the job's cgroup is known or its logs name no pid."""
    pids = _job_pids(facts)
    if job_cgroup(facts, variables) or not pids:
        return []
    ooms = _memcg_ooms(facts) + _global_ooms(facts)
    return [o for o in ooms if _attr(o, "killed_pid") in pids]


@_derived
def job_global_ooms(facts: Facts, variables: Variables) -> list[Any]:
    """The global (whole-node) OOM kills that count against the job: those that killed a task
    in its cgroup, or, with no cgroup known, all of them when the launcher reports a rank
    SIGKILLed."""
    ooms = _global_ooms(facts)
    if not ooms:
        return []
    cgroup = job_cgroup(facts, variables)
    if cgroup:
        return [o for o in ooms if _found_by(_attr(o, "task_memcg"), cgroup)]
    return ooms if _section(facts, "applog").get("killed") else []


@_derived
def unattributed_global_ooms(facts: Facts, variables: Variables) -> list[Any]:
    """With no job cgroup known and no global OOM kill counted against the job, the global OOM
    kills of a pid the job's logs do not name."""
    ooms = _global_ooms(facts)
    if not ooms or job_cgroup(facts, variables) or job_global_ooms(facts, variables):
        return []
    pids = _job_pids(facts)
    return [o for o in ooms if _attr(o, "killed_pid") not in pids]


#: the kernel log's GPU fault records, in the order they are listed
_GPU_FAULT_RECORDS = ("drain_xids", "fallen_off_bus", "gpu_fault_xids", "nvswitch_faults")


@_derived
def gpu_faults(facts: Facts, variables: Variables) -> list[Any]:
    """Every kernel log line that shows a GPU fault (what rules gpu-hardware in or out): Xids
    that ask for a drain, a GPU fallen off the bus, GPU-fault Xids, NVSwitch faults; none when
    the kernel log was not read."""
    dmesg = _section(facts, "dmesg")
    if not dmesg.get("collected"):
        return []
    return [fault for key in _GPU_FAULT_RECORDS for fault in _items(dmesg.get(key))]


# -- selections the rules check and their messages quote -------------------------------------------


def _where(items: Any, key: str, equals: Any = None) -> list[Any]:
    """The items (mappings) whose `key` is truthy, or equal to `equals` when given: what
    Jinja's `selectattr(key)` / `selectattr(key, 'equalto', value)` selected, an absent key
    being false."""
    chosen = []
    for item in _items(items):
        value = item.get(key) if isinstance(item, Mapping) else None
        if (value == equals) if equals is not None else bool(value):
            chosen.append(item)
    return chosen


@_derived
def nccl_ib_missing_context(facts: Facts, variables: Variables) -> list[Any]:
    """The application log's context lines where NCCL said it found no IB device (it then
    uses sockets: context, not a fault, for a job on one node)."""
    return _where(_section(facts, "applog").get("context"), "signature", "nccl-ib-missing")


@_derived
def sigkilled_containers(facts: Facts, variables: Variables) -> list[Any]:
    """The pod's containers killed with SIGKILL (exit 137): an OOM kill whose TaskOOM event was
    lost looks like this."""
    return _where(_section(facts, "kube", "pod").get("containers"), "sigkilled")


@_derived
def pinning_alloc_failures(facts: Facts, variables: Variables) -> list[Any]:
    """The kernel's page allocation failures inside the NVIDIA driver's os_lock_user_pages
    (pinning host memory for the GPU)."""
    return _where(_section(facts, "dmesg").get("page_alloc_failures"), "nvidia_pinning")


@_derived
def other_alloc_failures(facts: Facts, variables: Variables) -> list[Any]:
    """The kernel's page allocation failures outside the NVIDIA driver (fragmentation or
    pressure, not attributed to the pod)."""
    pinning = pinning_alloc_failures(facts, variables)
    failures = _items(_section(facts, "dmesg").get("page_alloc_failures"))
    return [f for f in failures if not any(f is p for p in pinning)]


@_derived
def sized_pin_failures(facts: Facts, variables: Variables) -> list[Any]:
    """The NVIDIA driver's failures to pin host memory whose size it logged."""
    return _where(_section(facts, "dmesg").get("pin_failures"), "bytes")


@_derived
def application_xids(facts: Facts, variables: Variables) -> list[Any]:
    """The Xids NVIDIA classes as the application's own fault (a bad address, an illegal
    instruction): a job fault, never a reason to drain."""
    return _where(_section(facts, "dmesg").get("xids"), "category", "application")
