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
_GPU_LABELS = ("nvidia.com/gpu.present", "nvidia.com/gpu.deploy.driver")


def _gpu_node(facts: Facts) -> str:
    """What says the node has NVIDIA GPUs (the PCI bus, its labels), or "" when nothing does."""
    on_pci = _number(_section(facts, "rdma").get("gpus_on_pci")) or 0
    if on_pci:
        return f"{int(on_pci)} NVIDIA GPU(s) on the PCI bus"
    labels = _section(facts, "kube", "node", "labels")
    label = next((k for k in _GPU_LABELS if str(labels.get(k, "")).lower() == "true"), None)
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
